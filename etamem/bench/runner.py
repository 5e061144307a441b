"""The benchmark runner: systems x questions, resumable, one report per run.

    from etamem.bench import BenchOptions, run
    summary = run(BenchOptions("locomo", "locomo10-dev.json", out="bench-results/locomo"))

Results are appended to `<out>/results.jsonl` as they are produced (one record per built
space, per (system, question) retrieval and per (system, question) answer); a rerun with the
same settings skips what is there, and the LLM cache (`<out>/llm_cache.sqlite`) makes any
repeated call free. `<out>/settings.json` pins the settings the results were made with.

Two retrieval modes (`settings["mode"]`):
- "pool" (default): every system returns `pool` units (80 LoCoMo / 100 LongMemEval) and
  recall@k counts the first k distinct source turns; an ETAMem system's retrieval is called
  with top_k = pool, so the budget it routes across the views is the pool, not k;
- "budget" (`budget=K`): every system returns K units (ETAMem: `Memory.retrieve(top_k=K)` with
  `route_budget` = K, so the routed budget is exactly K, the paper's setting) and recall@k counts the distinct turns of
  those K units; the answer context defaults to K distinct turns.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from etamem.bench.data import BenchConversation, BenchQuestion, load, select
from etamem.bench.metrics import distinct, distinct_turns, evidence_recall, ndcg_any, recall_all, recall_any
from etamem.bench.run_stores import Workbench, peak_rss_mb
from etamem.bench.systems import SystemSpec, resolve_systems, sweep_specs
from etamem.config import Config
from etamem.output import atomic_write
from etamem.presets import differences

log = logging.getLogger(__name__)

LOCOMO_KS = (10, 20, 25)
PREFEVAL_KS = (1, 5, 10)
LOCOMO_PLUS_KS = (5, 10, 20)
DEFAULT_KS = {"locomo": LOCOMO_KS, "locomo-plus": LOCOMO_PLUS_KS, "prefeval": PREFEVAL_KS, "updates": PREFEVAL_KS}
RETRIEVAL_ONLY = ("locomo-plus", "updates")  # no QA: items without a reference answer / ranking metrics only
UPDATES_SYSTEMS = ["bm25-turns", "dense-turns", "hybrid-turns", "etamem", "fta"]  # default systems of `updates`
LME_SESSION_KS = (5, 10)
LME_TURN_KS = (5, 10, 50)
DEFAULT_POOL = {"locomo": 80, "locomo-plus": 80, "longmemeval": 100, "prefeval": 80, "updates": 80}


@dataclass
class BenchOptions:
    """Everything a run needs; `overrides` are Config values (e.g. {"top_k": 20})."""

    dataset: str
    file: str | None = None  # updates: default the shipped scenarios; required for the other datasets
    out: str | None = None  # default bench-results/<dataset>-<file stem>
    systems: list[str] | None = None  # keys or groups; default: all
    ks: list[int] | None = None  # LoCoMo recall@K (default 10 20 25)
    pool: int | None = None  # units each system returns before cutting at K
    budget: int | None = None  # budget mode: each system returns exactly this many units
    qa_turns: int | None = None  # distinct turns in the answer context (default: budget, else config top_k)
    overrides: dict[str, Any] = field(default_factory=dict)
    model: str | None = None  # answer / construction LLM (default: config, then $ETAMEM_LLM_MODEL)
    base_url: str | None = None
    judge_model: str | None = None  # default: the answer model
    judge_base_url: str | None = None
    no_llm: bool = False
    limit: int = 0
    conversations: list[str] | None = None
    questions: list[str] | None = None
    per_conversation: int = 0
    seed: int | None = None
    stores: str | None = None  # default <out>/stores
    progress: bool = False
    plots: bool = True
    fresh: bool = False  # discard earlier results in <out> made with other settings
    roles: bool = False  # LoCoMo: speakers as user / assistant, their names replaced (bench/roles.py)
    locomo: str | None = None  # LoCoMo-Plus: the LoCoMo file its cues are stitched into
    filler: str | None = None  # updates: PrefEval's directory or filtered_inter_turns.json
    split: str | None = None  # updates: dev (default), test or all
    filler_chats: int | None = None  # updates: filler chats per memory (default updates.FILLER_CHATS)
    filler_turns: int | None = None  # updates: each filler chat cut to its first N messages (default whole)
    preset: str = "default"  # the Config preset the run starts from (etamem/presets.py); overrides on top
    sweep: list[str] | None = None  # "NAME=V1,V2,..." query-time values tried one system each (systems.sweep_specs)
    budget_tokenizer: str | None = None  # evidence within the reader's budget, counted by this tokenizer (budget.py)
    context_tokens: int | None = None  # answer prompts cut to this many tokens of budget_tokenizer (qa_context.py)
    sample: int = 0  # a seeded sample of this many questions, stratified by category (sample.py)
    sessions: int = 0  # LoCoMo: each conversation cut to its first N sessions, questions with all evidence in them
    no_qa: bool = False  # the LLM builds the stores (extraction, links) but answers nothing: retrieval metrics only


class ResultLog:
    """Append-only JSONL of result records, indexed by (type, system or construction, id)."""

    def __init__(self, path: Path):
        self.path = path
        self.records: dict[tuple, dict] = {}
        if path.exists():
            with path.open(encoding="utf-8") as fh:
                for line in fh:
                    try:
                        rec = json.loads(line)
                    except json.JSONDecodeError:  # a line cut by an interrupted run
                        continue
                    self.records[self.key(rec)] = rec

    @staticmethod
    def key(rec: dict) -> tuple:
        if rec["type"] == "build":
            return ("build", rec["construction"], rec["space"])
        return (rec["type"], rec["system"], rec["qid"])

    def has(self, *key) -> bool:
        return tuple(key) in self.records

    def add(self, rec: dict) -> None:
        self.records[self.key(rec)] = rec
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
            fh.flush()
            os.fsync(fh.fileno())


def _preset_config(opts: BenchOptions) -> Config:
    """The run's preset, for the dataset (FTA-Mem's K), before any override."""
    from etamem.presets import preset_values

    method = str(opts.overrides.get("method", "etamem"))
    return Config.from_dict(preset_values(opts.preset, method, "locomo" if opts.dataset.startswith("locomo") else
                                          opts.dataset))


def _config(opts: BenchOptions) -> Config:
    values = {**_preset_config(opts).to_dict(), **opts.overrides}
    if opts.dataset == "longmemeval":  # the dataset's extraction and answer styles unless overridden
        values.setdefault("extraction_style", "longmemeval")
        values.setdefault("answer_style", "longmemeval")
    if opts.seed is not None:
        values["seed"] = opts.seed
    if opts.model:
        values["llm_model"] = opts.model
    if opts.base_url:
        values["llm_base_url"] = opts.base_url
    if opts.no_llm:
        values["llm_model"] = None
    return Config.from_dict(values)


def _settings(opts: BenchOptions, config: Config, ks, pool: int, qa_turns: int) -> dict:
    cfg = {k: v for k, v in config.to_dict().items() if k not in ("llm_api_key", "llm_cache_path")}
    cfg["m_max_bounds"] = list(cfg["m_max_bounds"])
    model = None if opts.no_llm else config.resolved_llm_model()
    extra = {"locomo": str(Path(opts.locomo).resolve()) if opts.locomo else None} if opts.dataset == "locomo-plus" else {}
    if opts.dataset == "updates":
        from etamem.bench.updates import is_longmemeval

        extra = {"filler": str(Path(opts.filler).resolve()) if opts.filler else None,
                 "split": None if is_longmemeval(opts.file) else opts.split or "dev",
                 "filler_chats": opts.filler_chats, "filler_turns": opts.filler_turns}
    return {**extra, "dataset": opts.dataset, "file": str(Path(opts.file).resolve()), "ks": list(ks), "pool": pool,
            "mode": "budget" if opts.budget else "pool", "budget": opts.budget,
            "qa_turns": qa_turns, "roles": opts.roles, "config": cfg, "llm_model": model,
            "preset": opts.preset, "conversations": list(opts.conversations) if opts.conversations else None,
            "preset_differences": {k: list(v) for k, v in differences(cfg, {
                **_preset_config(opts).to_dict(), "m_max_bounds": list(config.m_max_bounds)}).items()},
            "judge_model": None if model is None else (opts.judge_model or model),
            "context_tokens": opts.context_tokens,
            "context_tokenizer": opts.budget_tokenizer if opts.context_tokens else None,
            "sessions": opts.sessions or None}


def _load(opts: BenchOptions) -> list[BenchConversation]:
    if opts.locomo and opts.dataset != "locomo-plus":
        raise ValueError(f"--locomo applies to locomo-plus only, not {opts.dataset}")
    if not opts.roles:
        return load(opts.dataset, opts.file, locomo=opts.locomo, filler=opts.filler, split=opts.split,
                    filler_chats=opts.filler_chats, filler_turns=opts.filler_turns)
    if opts.dataset != "locomo":
        raise ValueError(f"--roles applies to locomo only (the speakers of {opts.dataset} are already roles)")
    from etamem.bench.roles import load_locomo_roles

    return load_locomo_roles(opts.file)


def _sizes(opts: BenchOptions, config: Config) -> tuple[int, int]:
    """(units per system, distinct turns in the answer context) for the run's mode."""
    if opts.budget is not None:
        if opts.budget < 1:
            raise ValueError(f"budget: expected a positive number of units, got {opts.budget}")
        if opts.pool is not None:
            raise ValueError("pool and budget exclude each other: --budget K makes every system return K units")
        return opts.budget, opts.qa_turns or opts.budget
    return opts.pool or DEFAULT_POOL[opts.dataset], opts.qa_turns or config.top_k


def eligible_for_retrieval(dataset: str, q: BenchQuestion) -> bool:
    if dataset != "longmemeval":  # LoCoMo, PrefEval: evidence turns
        return bool(q.gold_turns)
    return not q.abstention and bool(q.gold_sessions)


def retrieval_metrics(dataset: str, conv: BenchConversation, q: BenchQuestion, units, ks, qa_turns: int,
                      session_of: dict[str, str]) -> dict[str, float]:
    """Metric name -> value for one ranking (see metrics.py for the definitions)."""
    if dataset == "updates":  # the current (or old) fact first, before the stale one (bench/updates.py)
        from etamem.bench.updates import update_metrics

        return update_metrics(distinct(t for u in units for t in u.sources), q, ks)
    if dataset == "locomo-plus":  # any cue turn, and the cue's first turn, among the first k
        ranked = distinct(t for u in units for t in u.sources)
        return {**{f"recall_any@{k}": recall_any(ranked, q.gold_turns, k) for k in ks},
                **{f"recall_first@{k}": recall_any(ranked, q.gold_turns[:1], k) for k in ks}}
    if dataset != "longmemeval":  # LoCoMo, PrefEval: evidence turns
        ranked = distinct(t for u in units for t in u.sources)
        return {f"recall@{k}": evidence_recall(ranked, q.gold_turns, k) for k in ks}
    turns = distinct(t for u in units for t in u.sources)
    sessions = distinct(session_of[t] for t in turns if t in session_of)
    user = [t for t in turns if t in conv.user_turns]
    out = {}
    for level, ranked, gold, levels_ks in (("session", sessions, q.gold_sessions, LME_SESSION_KS),
                                           ("turn", user, q.gold_turns, LME_TURN_KS)):
        if not gold:
            continue
        for k in levels_ks:
            out[f"{level}_recall_any@{k}"] = recall_any(ranked, gold, k)
            out[f"{level}_recall_all@{k}"] = recall_all(ranked, gold, k)
            out[f"{level}_ndcg_any@{k}"] = ndcg_any(ranked, gold, k)
    return out


def context_recall(conv: BenchConversation, q: BenchQuestion, units, qa_turns: int,
                   session_of: dict[str, str]) -> float | None:
    """Evidence recall of an answer context: the share of the question's gold turns (LongMemEval
    without marked turns: gold sessions) among the first `qa_turns` distinct source turns of
    `units` (None: all turns, full context); None for an abstention question or one without
    gold evidence (as for retrieval)."""
    if q.abstention or (not q.gold_turns and not q.gold_sessions):
        return None
    if units is None:
        return 1.0
    turns = distinct(t for u in units for t in u.sources)[:qa_turns]
    if q.gold_turns:
        return evidence_recall(turns, q.gold_turns, qa_turns)
    sessions = distinct(session_of[t] for t in turns if t in session_of)
    return evidence_recall(sessions, q.gold_sessions, len(sessions))


def _make_llms(opts: BenchOptions, config: Config, out: Path):
    if opts.no_llm:
        return None, None
    from etamem.models.llm import LLMClient

    cache = str(out / "llm_cache.sqlite")
    llm = LLMClient.from_config(config, cache_path=cache)
    if llm is None:
        return None, None
    if not opts.judge_model or (opts.judge_model == llm.model and not opts.judge_base_url):
        return llm, llm
    judge_cfg = config.replace(llm_model=opts.judge_model, llm_base_url=opts.judge_base_url or config.llm_base_url)
    return llm, LLMClient.from_config(judge_cfg, cache_path=cache)


def run(opts: BenchOptions, *, text_encoder=None, affect_tagger=None) -> dict:
    """Run the benchmark; writes results.jsonl, summary.json, report.md and plots under
    `opts.out` and returns the summary dict. text_encoder / affect_tagger: injected models."""
    from etamem.bench import report

    t_start = time.perf_counter()
    if not opts.file:
        if opts.dataset != "updates":
            raise ValueError(f"file: required for {opts.dataset} (the official file)")
        from etamem.bench.updates import shipped_scenarios

        opts = replace(opts, file=shipped_scenarios())
    config = _config(opts)
    if opts.preset == "paper" and opts.budget is None and opts.pool is None:  # the paper's K units per system
        opts = replace(opts, budget=config.top_k)
    specs = [] if opts.sweep and not opts.systems else resolve_systems(
        opts.systems or (UPDATES_SYSTEMS if opts.dataset == "updates" else None))
    specs += [s for s in sweep_specs(opts.sweep, config.method) if s.key not in {x.key for x in specs}]
    ks = sorted(set(opts.ks or DEFAULT_KS.get(opts.dataset, LOCOMO_KS)))
    pool, qa_turns = _sizes(opts, config)
    if opts.budget is not None:  # route exactly K units (a search routes max(top_k, route_budget))
        config = config.replace(route_budget=opts.budget)
    if opts.context_tokens is not None and (opts.context_tokens < 1 or not opts.budget_tokenizer):
        raise ValueError("context_tokens: a positive number of tokens, counted with the reader's tokenizer "
                         "(--tokenizer MODEL|PATH|estimate)")
    if opts.sessions and opts.dataset != "locomo":
        raise ValueError(f"--sessions applies to locomo only, not {opts.dataset}")
    convs = select(_load(opts), limit=opts.limit, spaces=opts.conversations,
                   qids=opts.questions, per_conversation=opts.per_conversation, sessions=opts.sessions)
    if opts.sample:
        from etamem.bench.sample import stratified

        convs = stratified(convs, opts.sample, config.seed)
    out = Path(opts.out or Path("bench-results") / f"{opts.dataset}-{Path(opts.file).stem}")
    out.mkdir(parents=True, exist_ok=True)
    settings = _settings(opts, config, ks, pool, qa_turns)
    settings_path = out / "settings.json"
    if settings_path.exists():
        old = {"mode": "pool", "budget": None, "roles": False, "context_tokens": None, "context_tokenizer": None,
               "sessions": None,
               **({"filler_chats": None, "filler_turns": None} if opts.dataset == "updates" else {}),
               **json.loads(settings_path.read_text(encoding="utf-8"))}
        if old != settings:
            if not opts.fresh:
                diff = sorted(k for k in set(old) | set(settings) if old.get(k) != settings.get(k))
                raise ValueError(f"{out} holds results made with other settings ({', '.join(diff)} differ); "
                                 "use another --out, or --fresh to discard them")
            for name in ("results.jsonl", "stores"):
                target = out / name
                shutil.rmtree(target) if target.is_dir() else target.unlink(missing_ok=True)
    atomic_write(settings_path, json.dumps(settings, indent=1))
    results = ResultLog(out / "results.jsonl")
    llm, judge = _make_llms(opts, config, out)
    notes: list[str] = []
    if opts.roles:
        notes.append("Speakers as roles: speaker_a is `user`, speaker_b `assistant`, their first names replaced "
                     "in turns, captions and questions (nicknames kept).")
    if opts.dataset == "updates":
        notes.append("Updates: retrieval only. Now-questions: current_first = the current fact's turn is the first "
                     "distinct turn ranked, current_before_old = it ranks before the old fact's turn (an absent turn "
                     "counts as after); past-questions: old_in_5 / old_first = the old fact's turn among the first 5 "
                     "distinct turns / first; recall@k of the question's evidence turn.")
    elif opts.dataset in RETRIEVAL_ONLY:
        notes.append("LoCoMo-Plus: retrieval only (the items carry no reference answer). Each trigger is asked of "
                     "its LoCoMo conversation with the item's cue added to the memory for that question only "
                     "(session `plus-<i>`; the store's files put back as they were after); recall_any@k: a cue "
                     "turn among the first k distinct turns, recall_first@k: the cue's first turn. A time gap "
                     "without a number (\"several months later\") counts as 0 days, as in the benchmark's "
                     "build_conv.py.")
    if opts.dataset in RETRIEVAL_ONLY:
        specs = [s for s in specs if s.kind != "full_context"]
    elif llm is not None and opts.no_qa:
        notes.append("--no-qa: the LLM builds the stores (extraction, links) and answers nothing; full context "
                     "skipped.")
        specs = [s for s in specs if not s.needs_llm]
    elif llm is None:
        notes.append("No LLM configured: QA metrics (judge accuracy, F1, BLEU-1) not computed; "
                     "full context skipped. Set --model / ETAMEM_LLM_MODEL and OPENAI_BASE_URL / OPENAI_API_KEY.")
        skipped = [s for s in specs if s.needs_llm]
        if skipped:
            log.warning("skipping %s: needs an LLM (none configured)", ", ".join(s.key for s in skipped))
        specs = [s for s in specs if not s.needs_llm]
    stores = Path(opts.stores) if opts.stores else out / "stores"
    if opts.roles:  # other turn texts: never reuse a named run's stores from a shared --stores
        stores = stores / "roles"
    if opts.preset != "default":  # other construction settings: never share the default's stores
        stores = stores / f"preset-{opts.preset}"
    wb = Workbench(config, stores, pool=pool, text_encoder=text_encoder, affect_tagger=affect_tagger, llm=llm)
    builds = ResultLog(stores / "builds.jsonl")  # a store's construction cost travels with it
    for key, rec in builds.records.items():
        if key not in results.records:
            results.add(rec)
    tokens = None
    if opts.budget_tokenizer:
        from etamem.models.tokens import reader_counter

        tokens = reader_counter(opts.budget_tokenizer)
        notes.append(f"Evidence within the reader's budget counted with {tokens[0]}.")
    if opts.context_tokens:
        notes.append(f"Answer prompts: at most {opts.context_tokens} tokens each (the whole prompt, counted with "
                     f"{tokens[0]}), every system filling them in rank order, evidence first (bench/qa_context.py); "
                     "full context is not cut.")
    if opts.sessions:
        notes.append(f"Each conversation cut to its first {opts.sessions} sessions; only the questions whose "
                     "evidence turns all lie in them.")
    if opts.sample:
        notes.append(f"Questions: a sample of {opts.sample} stratified by category (seed {config.seed}; "
                     "bench/sample.py), nested: a smaller sample with the same seed is part of it.")
    bar = None
    if opts.progress:
        from tqdm import tqdm

        bar = tqdm(total=sum(len(c.questions) for c in convs) * len(specs), unit="q", desc=f"bench {opts.dataset}")
    try:
        for conv in convs:
            _run_conversation(opts.dataset, conv, specs, wb, results, builds, None if opts.no_qa else llm, judge,
                              ks, qa_turns, config,
                              tokens, opts.context_tokens, bar)
            log.info("%s: done", conv.space)
    finally:
        if bar is not None:
            bar.close()
        wb.close()
        for client in {id(c): c for c in (llm, judge) if c is not None}.values():
            client.close()
    wall = time.perf_counter() - t_start
    summary = report.summarise(opts.dataset, convs, specs, results.records, settings, wall_s=wall, notes=notes)
    write_reports(out, summary, plots=opts.plots)
    return summary


def write_reports(out: Path, summary: dict, *, plots: bool = True) -> list[Path]:
    """summary.json, report.md and (plots=True) the PNG plots; returns the paths written."""
    from etamem.bench.plots import write_plots
    from etamem.bench.report import markdown

    out = Path(out)
    paths = [out / "summary.json", out / "report.md"]
    atomic_write(paths[0], json.dumps(summary, indent=1))
    atomic_write(paths[1], markdown(summary))
    if plots:
        paths += write_plots(out, summary)
    return paths


def _run_conversation(dataset: str, conv: BenchConversation, specs: list[SystemSpec], wb: Workbench,
                      results: ResultLog, builds: ResultLog, llm, judge, ks, qa_turns: int, config: Config,
                      tokens=None, context_tokens: int | None = None, bar=None) -> None:
    """Rank (and answer) the conversation's questions with each system; `tokens`: (tokenizer
    identity, count) to record each gold turn's tokens to reach the reader (budget.py);
    `context_tokens`: every answer prompt cut to that many tokens of `tokens` (qa_context.py);
    `bar`: a progress bar advanced once per (system, question)."""
    from etamem.bench.budget import context_tag, context_text, evidence_tokens
    from etamem.bench.qa import answer_and_judge
    from etamem.bench.qa_context import qa_context

    def counted(q: BenchQuestion) -> bool:  # evidence counts asked for and possible for q
        return tokens is not None and dataset != "updates" and bool(q.gold_turns)

    def shown(units) -> int:  # distinct turns an answer context holds: all of them under a token budget
        return len(distinct(t for u in units or [] for t in u.sources)) if context_tokens else qa_turns

    def stale(q: BenchQuestion, spec: SystemSpec) -> bool:  # no record, or one without the requested evidence counts
        rec = results.records.get(("retrieval", spec.key, q.qid))
        return rec is None or (counted(q) and (rec.get("evidence_tokenizer"), rec.get("evidence_context"))
                               != (tokens[0], context_tag(spec, config)))

    session_of = {t["turn_id"]: t["session_id"] for t in conv.turns}
    encoded = False
    for spec in specs:
        todo = []
        for q in conv.questions:
            need_r = (spec.kind != "full_context" and eligible_for_retrieval(dataset, q)
                      and stale(q, spec))
            need_qa = llm is not None and dataset not in RETRIEVAL_ONLY and not results.has("qa", spec.key, q.qid)
            if need_r or need_qa:
                todo.append((q, need_r, need_qa))
        if bar is not None:
            bar.update(len(conv.questions) - len(todo))
        if not todo:
            continue
        for construction in spec.constructions:
            if not wb.is_built(construction, conv):
                log.info("building %s store for %s", construction, conv.space)
                rec = {"type": "build", **wb.build(construction, conv)}
                builds.add(rec)
                results.add(rec)
        turns = wb.turns(conv)
        if not encoded and spec.kind != "full_context":  # one batch, shared by all systems (not timed)
            wb.text_encoder.encode(wb.query_texts(conv))
            encoded = True
        turn_map = {t.turn_id: t for t in turns}
        for q, need_r, need_qa in todo:
            with wb.cue(spec, conv, q):  # LoCoMo-Plus: the question's cue is in the memory for it only
                ranking = None
                if spec.kind != "full_context":
                    t0 = time.perf_counter()
                    ranking = wb.rank(spec, conv, q)
                    ms = 1000 * (time.perf_counter() - t0)
                routing = {} if ranking is None or ranking.routing is None else {"routing": ranking.routing}
                if need_r:
                    budget = {}
                    if counted(q):
                        budget = {"evidence_tokenizer": tokens[0], "evidence_context": context_tag(spec, config),
                                  "evidence_tokens": evidence_tokens(
                            [u.sources for u in ranking.units], q.gold_turns,
                            lambda n: context_text(wb, spec, conv.space, ranking, n, turn_map), tokens[1])}
                    _, ctx = distinct_turns([(u.sources, u.text) for u in ranking.units], qa_turns)
                    results.add({"type": "retrieval", "system": spec.key, "qid": q.qid, "space": conv.space,
                                 "category": q.category, "ms": ms, "context_tokens": ctx,
                                 "metrics": retrieval_metrics(dataset, conv, q, ranking.units, ks, qa_turns, session_of),
                                 "peak_rss_mb": peak_rss_mb(), **routing, **budget})
                if need_qa:
                    qc = qa_context(wb, dataset, spec, conv, q, ranking, turns, turn_map, config, qa_turns,
                                    context_tokens, tokens[1] if context_tokens else None)
                    units = qc.units
                    rec = answer_and_judge(qc.prompt, q, llm, judge, qc.retry)
                    if context_tokens:
                        rec |= {"context_budget": context_tokens, "context_prompt_tokens": qc.tokens,
                                "context_units": None if units is None else len(units)}
                    results.add({"type": "qa", "system": spec.key, "qid": q.qid, "space": conv.space,
                                 "category": q.category, "abstention": q.abstention,
                                 "evidence_recall": context_recall(conv, q, units, shown(units), session_of),
                                 **rec, **routing})
            if bar is not None:
                bar.update(1)


__all__ = ["BenchOptions", "run", "ResultLog", "retrieval_metrics", "context_recall"]
