"""Answering and judging for the benchmark runner: the dataset's answer prompt over a
system's retrieved units (or the whole conversation for full context), an LLM judge with a
CORRECT / WRONG JSON verdict, token F1 and BLEU-1."""
from __future__ import annotations

import time
from datetime import datetime
from itertools import groupby
from typing import Callable

from etamem.answering import TURNS_ARE_MEMORIES, restates, says_missing
from etamem.bench.data import BenchQuestion
from etamem.bench.metrics import TOKEN, bleu1, distinct_turns, parse_verdict, token_f1
from etamem.bench.run_stores import usage_delta
from etamem.bench.systems import Unit
from etamem.ingest.timeparse import format_date, parse_timestamp
from etamem.models.llm import parse_json_strict
from etamem.models.prompt_files import render_prompt
from etamem.records import Turn

ABSTENTION_NOTE = ("This question cannot be answered from the conversation: the generated answer is CORRECT only "
                   "if it says the information is not available (or asks for it), and WRONG if it makes up an answer.")


def units_for_context(units: list[Unit], n_turns: int) -> list[Unit]:
    """The leading units that cover the first `n_turns` distinct source turns."""
    covered: list[str] = []
    out = []
    for u in units:
        if len(covered) >= n_turns:
            break
        new = [t for t in u.sources if t not in covered]
        if new:
            covered.extend(new)
            out.append(u)
    return out


def format_units(units: list[Unit], turns: dict[str, Turn] | None = None) -> str:
    """The memory lines, chronological; with `turns` (the source turns shown beside them, ETAMem's
    `answer_memory_lines` "distinct") a line that only restates them is left out, as `Memory.answer`."""
    if turns and not all(u.views == ("turn",) for u in units):
        units = [u for u in units if not restates(u.text, [turns[t] for t in u.sources if t in turns])]
        if not units:
            return "(their source turns below say them in full)"
    ordered = sorted(units, key=lambda u: (u.timestamp, u.sources))
    return "\n".join(f"[{format_date(u.timestamp)}] ({', '.join(u.views)}) {u.text}" for u in ordered) or "(none)"


def format_sources(units: list[Unit], turns: dict[str, Turn]) -> str:
    if all(u.views == ("turn",) for u in units):
        return TURNS_ARE_MEMORIES
    seen: list[str] = []
    for u in sorted(units, key=lambda u: (u.timestamp, u.sources)):
        seen.extend(t for t in u.sources if t in turns and t not in seen)
    return "\n".join(f"[{format_date(turns[t].timestamp)}] {t} {turns[t].speaker}: {turns[t].text}"
                     for t in seen) or "(none)"


def format_conversation(turns: list[Turn]) -> str:
    blocks = []
    for sid, group in groupby(turns, key=lambda t: t.session_id):
        group = list(group)
        lines = [f"## Session {sid} ({format_date(group[0].timestamp)})"]
        for t in group:
            caption = (t.extra or {}).get("blip_caption")
            lines.append(f"{t.speaker}: {t.text}" + (f" [shares a photo: {caption}]" if caption else ""))
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def _date(q: BenchQuestion, tz: str) -> str:
    if not q.now:
        return "unknown"
    try:
        when: datetime = parse_timestamp(q.now, tz)
    except ValueError:
        return q.now
    return format_date(when)


def answer_prompt(style: str, q: BenchQuestion, *, units: list[Unit] | None = None,
                  turns: dict[str, Turn] | None = None, time_summaries: str = "",
                  conversation: list[Turn] | None = None, tz: str = "UTC", memory_lines: str = "distinct") -> str:
    """The dataset's answer prompt: over retrieved units, or (conversation given) full context;
    `memory_lines` as `Config.answer_memory_lines`."""
    if conversation is not None:
        return render_prompt(f"answer_{style}_full", question=q.question, question_date=_date(q, tz),
                             conversation=format_conversation(conversation))
    return render_prompt(f"answer_{style}", question=q.question, question_date=_date(q, tz),
                         memories=format_units(units or [], turns if memory_lines == "distinct" else None),
                         source_turns=format_sources(units or [], turns or {}),
                         time_summaries=time_summaries or "(none)")


def _call(llm, prompt: str, stage: str) -> tuple[str, int, int, bool]:
    """(reply, prompt tokens, completion tokens, served from cache). A cached reply reports
    the tokens it cost when first fetched, so reruns give the same cost figures."""
    messages = [{"role": "user", "content": prompt}]
    before = llm.usage()
    text = llm.complete(messages, stage=stage)
    d = usage_delta(before, llm.usage()).get(stage, {})
    p, c, cached = d.get("prompt_tokens", 0), d.get("completion_tokens", 0), bool(d.get("cached_calls"))
    cache = getattr(llm, "_cache", None)
    if cached and cache is not None:
        row = cache.get(llm.cache_key(messages, llm.temperature, llm.max_tokens, {}))
        if row is not None:
            p, c = row[1], row[2]
    return text, p, c, cached


def answer_and_judge(prompt: str, q: BenchQuestion, llm, judge, retry: Callable[[], str] | None = None) -> dict:
    """Ask `llm`, then `judge`; the QA record (prediction, verdict, F1, BLEU-1, tokens, ms).

    `retry` (ETAMem systems with the fallback on, when retrieval did not use it): if the reply
    says the memories lack the answer (`answering.says_missing`, as `Memory.answer`), the
    prompt `retry()` builds (raw turns fused in) is asked once more and its reply is judged;
    `answer_fallback` says whether that happened, tokens and ms cover both calls."""
    t0 = time.perf_counter()
    prediction, p_tok, c_tok, cached = _call(llm, prompt, "answer")
    prediction = prediction.strip()
    context_tokens = len(TOKEN.findall(prompt))
    first = None
    if retry is not None and says_missing(prediction):
        second = retry()
        text, p2, c2, cached2 = _call(llm, second, "answer")
        first, prediction = prediction, text.strip()
        p_tok, c_tok, cached = p_tok + p2, c_tok + c2, cached and cached2
        context_tokens += len(TOKEN.findall(second))
    ms = 1000 * (time.perf_counter() - t0)
    judge_prompt = render_prompt("judge", question=q.question, gold=q.answer, prediction=prediction,
                                 category=q.category, notes=ABSTENTION_NOTE if q.abstention else "")
    text, jp, jc, _ = _call(judge, judge_prompt, "judge")
    try:
        reply = parse_json_strict(text)
    except ValueError:
        reply = text
    try:
        correct = parse_verdict(reply)
    except ValueError:
        correct = None
    rec = {"prediction": prediction, "gold": q.answer, "correct": correct,
           "f1": token_f1(prediction, q.answer), "bleu1": bleu1(prediction, q.answer),
           "prompt_tokens": p_tok, "completion_tokens": c_tok, "answer_cached": cached,
           "context_tokens": context_tokens, "judge_tokens": jp + jc, "answer_ms": ms,
           "answer_fallback": first is not None}
    if first is not None:
        rec["first_prediction"] = first
    return rec


__all__ = ["answer_prompt", "answer_and_judge", "units_for_context", "distinct_turns"]
