"""The answer prompt each system gives the reader, with or without a token budget.

Without a budget (`--context-tokens` unset) a system's context is its first `qa_turns` distinct
source turns, as before. With a budget every system fills the same number of prompt tokens
(counted with the reader's tokenizer, the whole prompt: instructions, question and context) in
rank order, evidence first (`etamem.models.tokens.pack`, as `Memory.answer` fits a model's
context): ETAMem takes its best units with their source turns, then the Time context of the
sessions shown while it fits; FTA-Mem its best hits' packet, then the auxiliary memory if it fits;
flat baselines their best turns. Full context is never cut (it is the reader's ceiling, where it
fits). See docs/benchmarks.md, 'Answers with a local reader'.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from etamem.bench.data import BenchConversation, BenchQuestion
from etamem.bench.run_stores import Ranking, Workbench, hits_to_units
from etamem.bench.systems import SystemSpec, Unit
from etamem.config import Config
from etamem.ingest.timeparse import parse_timestamp
from etamem.models.tokens import fit, pack


@dataclass
class QAContext:
    """One system's answer prompt for one question.

    prompt: the text sent to the reader; units: the units in it (None: full context);
    retry: builds the prompt asked again with raw turns fused in (ETAMem with the fallback on,
    when retrieval had not fused them), else None; tokens: the prompt's tokens with the budget's
    tokenizer (None without a budget)."""

    prompt: str
    units: list[Unit] | None
    retry: Callable[[], str] | None = None
    tokens: int | None = None


def question_date(q: BenchQuestion, tz: str):
    """The question's date as a datetime (None when absent or unreadable)."""
    try:
        return parse_timestamp(q.now, tz) if q.now else None
    except ValueError:
        return None


def answer_style(dataset: str, config: Config) -> str:
    """The answer prompt's style for every system of a run: "short" when the config asks for it
    (`Config.answer_style`), else the dataset's own."""
    return "short" if config.answer_style == "short" else dataset


def _style_prompt(dataset: str, q: BenchQuestion, units: list[Unit], turn_map, config: Config, time_text: str) -> str:
    from etamem.bench.qa import answer_prompt

    style = answer_style(dataset, config)
    return answer_prompt(style, q, units=units, turns=turn_map, tz=config.default_timezone,
                         # the short prompt has no source-turn section: every line is shown
                         memory_lines="all" if style == "short" else config.answer_memory_lines,
                         time_summaries=time_text)


def _fitted(render: Callable[[int, str], str], n: int, time_lines: Callable[[int], list[str]], budget: int,
            count: Callable[[str], int]) -> tuple[str, int]:
    """The most units (0..n) whose prompt fits `budget`, then the Time lines of those units that
    still fit (lines of the sessions shown only); (prompt, units kept)."""
    _, k = fit(lambda j: render(j, ""), n, budget, count)
    prompt, _, _ = pack(render, k, time_lines(k), budget, count)
    return prompt, k


def _within(prompt: str, budget: int, count: Callable[[str], int]) -> int:
    """The prompt's tokens; ValueError when even the prompt without any memory exceeds `budget`."""
    n = count(prompt)
    if n > budget:
        raise ValueError(f"context_tokens: {budget} tokens do not hold the answer prompt's own instructions and "
                         f"question ({n} tokens with no memory); give a larger budget")
    return n


def as_turns(units: list[Unit], turn_map: dict) -> list[Unit]:
    """The source turns of `units` in rank order, each once, as the flat systems' turn units
    (`speaker: text`, view "turn"): a system with `packet="turns"`."""
    from etamem.retrieval import turn_text

    seen: dict[str, Unit] = {}
    for u in units:
        for t in u.sources:
            if t in turn_map and t not in seen:
                seen[t] = Unit((t,), turn_text(turn_map[t]), turn_map[t].timestamp, ("turn",))
    return list(seen.values())


def _leading(ranking: Ranking, qa_turns: int) -> tuple[list[Unit], list]:
    """The leading units covering the first `qa_turns` distinct source turns, and their hits."""
    from etamem.bench.qa import units_for_context

    units = units_for_context(ranking.units, qa_turns)
    chosen = set(units)
    return units, [h for h, u in zip(ranking.hits, ranking.units) if u in chosen]


def qa_context(wb: Workbench, dataset: str, spec: SystemSpec, conv: BenchConversation, q: BenchQuestion,
               ranking: Ranking | None, turns: list, turn_map: dict, config: Config, qa_turns: int,
               budget: int | None = None, count: Callable[[str], int] | None = None) -> QAContext:
    """The answer prompt of `spec` for `q` over `ranking` (None: full context over `turns`).

    Args:
        budget: Most prompt tokens (None: the first `qa_turns` distinct turns, no token cut).
        count: text -> tokens, the reader's tokenizer (required with `budget`).
    """
    from etamem.bench.qa import answer_prompt

    if ranking is None:
        prompt = answer_prompt(dataset, q, conversation=turns, tz=config.default_timezone)
        return QAContext(prompt, None, tokens=count(prompt) if budget is not None else None)
    if budget is not None and count is None:
        raise ValueError("qa_context: a token budget needs the reader's tokenizer (count)")
    if spec.kind == "fta":  # the method's own packet and prompt
        from etamem.fta.packet import answer_prompt as fta_prompt

        when = question_date(q, config.default_timezone)

        def packet_prompt(hits: list, aux: bool) -> str:
            packet = wb.fta_packet(spec, conv.space, hits, auxiliary=aux)
            return fta_prompt(q.question, packet, question_date=when, style=answer_style(dataset, config))

        if budget is None:
            units, hits = _leading(ranking, qa_turns)
            return QAContext(packet_prompt(hits, True), units)
        prompt, k, _ = pack(lambda k, aux: packet_prompt(ranking.hits[:k], bool(aux)), len(ranking.hits),
                            ["auxiliary"], budget, count)
        return QAContext(prompt, ranking.units[:k], tokens=_within(prompt, budget, count))

    turns_only = spec.turns_only(config)

    def render(units: list[Unit]) -> Callable[[int, str], str]:
        return lambda k, time_text: _style_prompt(dataset, q, units[:k], turn_map, config, time_text)

    def time_text(hits: list) -> str:
        return "" if turns_only else wb.time_summaries(spec, conv.space, hits)

    def time_lines(hits: list) -> Callable[[int], list[str]]:
        return lambda k: time_text(hits[:k]).splitlines()

    def shown(units: list[Unit]) -> list[Unit]:
        return as_turns(units, turn_map) if turns_only else units

    if budget is None:
        units, hits = _leading(ranking, qa_turns)
        units = shown(units)
        prompt = _style_prompt(dataset, q, units, turn_map, config, time_text(hits))
    else:
        units, hits = shown(ranking.units), ranking.hits
        prompt, k = _fitted(render(units), len(units), time_lines(hits), budget, count)
        units = units[:k]
        ids = {t for u in units for t in u.sources}
        hits = [h for h, u in zip(hits, ranking.units) if ids & set(u.sources)] if turns_only else hits[:k]
    retry = None
    if spec.kind == "etamem" and spec.fallback and not ranking.fallback_used:
        def retry() -> str:  # the answer-time fallback of `Memory.answer`: raw turns fused in
            fused = wb.with_raw_turns(spec, conv, q, hits)
            fused_units = shown(hits_to_units(fused))
            if budget is None:
                return _style_prompt(dataset, q, fused_units, turn_map, config, time_text(fused))
            return _fitted(render(fused_units), len(fused_units), time_lines(fused), budget, count)[0]
    return QAContext(prompt, units, retry, tokens=_within(prompt, budget, count) if budget is not None else None)


__all__ = ["QAContext", "as_turns", "qa_context", "question_date"]
