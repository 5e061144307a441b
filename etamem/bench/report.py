"""Summaries of a run's result records and their Markdown report (the runner writes them with
the PNG plots of `plots.py`)."""
from __future__ import annotations

from etamem.bench import budget, paired
from etamem.bench.data import LOCOMO_CATEGORIES, LONGMEMEVAL_TYPES, BenchConversation
from etamem.bench.metrics import bootstrap_interval, mean
from etamem.bench.question_kinds import KINDS, question_kind
from etamem.bench.systems import SystemSpec

VIEWS = ("event", "affect", "time")
RELATION_TYPES = ("causal", "state", "goal", "value")  # LoCoMo-Plus categories
BUCKETS = ("0", "(0,1)", "1")  # evidence recall of the answer context
LME_COLUMNS = ("session_recall_any@5", "session_recall_all@5", "session_recall_all@10", "session_ndcg_any@10",
               "turn_recall_any@10", "turn_recall_all@10", "turn_recall_all@50", "turn_ndcg_any@10")


def categories(dataset: str, convs: list[BenchConversation]) -> list[str]:
    seen = {q.category for c in convs for q in c.questions}
    order = {"locomo": [str(c) for c in LOCOMO_CATEGORIES], "locomo-plus": list(RELATION_TYPES)}.get(
        dataset, list(LONGMEMEVAL_TYPES))
    return [c for c in order if c in seen] + sorted(seen - set(order))


def _grouped(recs: list[dict], value) -> dict[str, list[float]]:
    """`value(record)` of the records per category and over all ("all"), None values left out."""
    groups: dict[str, list[float]] = {}
    for r in recs:
        v = value(r)
        if v is None:
            continue
        groups.setdefault(r["category"], []).append(v)
        groups.setdefault("all", []).append(v)
    return groups


def _by_category(recs: list[dict], value) -> dict[str, float]:
    return {c: mean(vs) for c, vs in _grouped(recs, value).items()}


def _intervals_by_category(recs: list[dict], value) -> dict[str, list[float]]:
    """95% bootstrap interval [low, high] of the mean per category and over all (questions
    resampled, seeded: the same records give the same interval)."""
    return {c: list(bootstrap_interval(vs)) for c, vs in _grouped(recs, value).items()}


def routing_summary(recs: list[dict]) -> dict | None:
    """Mean routing weight and budget per view, per category and over all (`recs` with a
    "routing" entry, one per question); None when there is none."""
    recs = [r for r in recs if r.get("routing")]
    if not recs:
        return None
    out: dict = {"questions": len(recs)}
    for part in ("weights", "budgets"):
        groups: dict[str, dict[str, list[float]]] = {}
        for r in recs:
            for cat in (r["category"], "all"):
                for view, x in r["routing"][part].items():
                    groups.setdefault(cat, {}).setdefault(view, []).append(float(x))
        out[part] = {cat: {v: mean(by[v]) for v in sorted(by, key=_view_order)} for cat, by in groups.items()}
    return out


def _view_order(view: str) -> tuple[int, str]:
    return (VIEWS.index(view) if view in VIEWS else len(VIEWS), view)


def recall_bucket(recall: float) -> str:
    """"0", "(0,1)" or "1" for an evidence recall in [0, 1]."""
    if recall <= 1e-9:
        return "0"
    return "1" if recall >= 1.0 - 1e-9 else "(0,1)"


def error_analysis(qa: list[dict]) -> dict | None:
    """Judged answers by evidence recall of their context (0, (0,1), 1) x correct / wrong: a
    wrong answer with full recall is a reasoning error, with less a retrieval error. None when
    no judged answer has gold evidence."""
    rows = [r for r in qa if r.get("correct") is not None and r.get("evidence_recall") is not None]
    if not rows:
        return None
    counts = {b: {"correct": 0, "wrong": 0} for b in BUCKETS}
    for r in rows:
        counts[recall_bucket(r["evidence_recall"])]["correct" if r["correct"] else "wrong"] += 1
    wrong = sum(c["wrong"] for c in counts.values())
    return {"questions": len(rows), "counts": counts, "wrong": wrong,
            "retrieval_errors_of_wrong": (counts["0"]["wrong"] + counts["(0,1)"]["wrong"]) / wrong if wrong else None,
            "reasoning_errors_of_wrong": counts["1"]["wrong"] / wrong if wrong else None,
            "reasoning_errors_of_all": counts["1"]["wrong"] / len(rows)}


def summarise(dataset: str, convs: list[BenchConversation], specs: list[SystemSpec], records: dict,
              settings: dict, *, wall_s: float, notes: list[str]) -> dict:
    """Per-system metrics over the selected questions (records of other questions ignored)."""
    questions = [q for c in convs for q in c.questions]
    spaces = [c.space for c in convs]
    systems = {}
    for spec in specs:
        rr = [records[k] for q in questions if (k := ("retrieval", spec.key, q.qid)) in records]
        qa = [records[k] for q in questions if (k := ("qa", spec.key, q.qid)) in records]
        names = sorted({m for r in rr for m in r["metrics"]})
        builds = [records[k] for s in spaces for c in spec.constructions if (k := ("build", c, s)) in records]
        by_q = {r["qid"]: r for r in qa if r.get("routing")} | {r["qid"]: r for r in rr if r.get("routing")}
        llm, extraction = {}, {}
        for b in builds:
            for name, n in b.get("extraction", {}).items():
                extraction[name] = extraction.get(name, 0) + n
            for stage, cost in b.get("llm", {}).items():
                tot = llm.setdefault(stage, {"calls": 0, "cached_calls": 0, "prompt_tokens": 0, "completion_tokens": 0})
                for f in tot:
                    tot[f] += cost.get(f, 0)
        systems[spec.key] = {
            "label": spec.label, "construction": "+".join(spec.constructions) or None,
            "routing": routing_summary(list(by_q.values())),
            "retrieval": {"questions": len(rr),
                          "metrics": {m: _by_category(rr, lambda r, m=m: r["metrics"].get(m)) for m in names},
                          "intervals": {m: _intervals_by_category(rr, lambda r, m=m: r["metrics"].get(m))
                                        for m in names},
                          "ms_per_query": mean(r["ms"] for r in rr),
                          "context_tokens": mean(r["context_tokens"] for r in rr)},
            "qa": None if not qa else {
                "questions": len(qa), "judged": sum(r["correct"] is not None for r in qa),
                "accuracy": _by_category(qa, lambda r: None if r["correct"] is None else float(r["correct"])),
                "f1": _by_category(qa, lambda r: r["f1"]), "bleu1": _by_category(qa, lambda r: r["bleu1"]),
                "intervals": {"accuracy": _intervals_by_category(
                    qa, lambda r: None if r["correct"] is None else float(r["correct"])),
                    "f1": _intervals_by_category(qa, lambda r: r["f1"]),
                    "bleu1": _intervals_by_category(qa, lambda r: r["bleu1"])},
                "answer_tokens_per_question": mean(r["prompt_tokens"] + r["completion_tokens"] for r in qa),
                "judge_tokens_per_question": mean(r["judge_tokens"] for r in qa),
                "ms_per_answer": mean(r["answer_ms"] for r in qa),
                "answer_fallbacks": sum(bool(r.get("answer_fallback")) for r in qa),
                "errors": error_analysis(qa)},
            "cost": {"build_spaces": len(builds), "build_wall_s": sum(b["wall_s"] for b in builds) if builds else None,
                     "build_llm": llm, "build_extraction": extraction, "build_amus": sum(b["amus"] for b in builds) if builds else None,
                     "build_turns": sum(b["turns"] for b in builds) if builds else None,
                     "peak_rss_mb": max([r.get("peak_rss_mb", 0) for r in rr] + [b["peak_rss_mb"] for b in builds],
                                        default=None)},
        }
    qids, spaces_set = {q.qid for q in questions}, set(spaces)
    used = {c for s in specs for c in s.constructions}
    work = sum(r["wall_s"] for k, r in records.items() if k[0] == "build" and k[1] in used and k[2] in spaces_set)
    work += sum(r.get("ms", 0.0) + r.get("answer_ms", 0.0) for k, r in records.items()
                if k[0] != "build" and k[2] in qids and k[1] in systems) / 1000.0
    info = {"questions": len(questions), "conversations": len(convs),
            "skipped_evidence_ids": sum(q.skipped_evidence for q in questions)}
    if dataset == "updates":
        info["now_questions"] = sum(q.category.startswith("now:") for q in questions)
        info["past_questions"] = sum(q.category.startswith("past:") for q in questions)
    if dataset != "longmemeval":
        info["questions_without_evidence"] = sum(not q.gold_turns for q in questions)
    else:
        info["abstention_questions"] = sum(q.abstention for q in questions)
    kinds = {q.qid: question_kind(q.question) for q in questions}
    for spec in specs:
        recs = [records[k] for q in questions if (k := ("retrieval", spec.key, q.qid)) in records]
        systems[spec.key]["routing_by_kind"] = routing_summary(
            [{**r, "category": kinds[r["qid"]]} for r in recs if r.get("routing")])
    info["question_kinds"] = {k: sum(v == k for v in kinds.values()) for k in KINDS}
    info["conversation_ids"] = spaces
    metric = paired.main_metric(dataset, settings["ks"])
    for spec in specs:
        ci = paired.clustered(records, spec.key, metric)
        systems[spec.key]["retrieval"]["clustered"] = {metric: list(ci)} if ci else {}
    steps = [s.key for s in specs if s.key.startswith("ladder-")]
    picked = {k: r for k, r in records.items() if k[0] == "retrieval" and k[2] in qids}
    return {"budget": budget.summarise(picked, [s.key for s in specs]), "dataset": dataset, "file": settings["file"], "settings": settings, "data": info,
            "categories": categories(dataset, convs), "systems": systems, "wall_s": wall_s, "work_s": work,
            "notes": notes, "main_metric": metric,
            "ladder": paired.ladder(records, steps, {s.key: s.label for s in specs}, metric) if steps else [],
            "qa_paired": paired.qa_against(records, [s.key for s in specs], sorted(qids)),
            "sweep": [{"system": s.key, "field": s.overrides[0][0], "value": s.overrides[0][1]}
                      for s in specs if s.key.startswith("sweep:")]}


def _f(v, digits: int = 3) -> str:
    return "–" if v is None else f"{v:.{digits}f}"


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in rows]


def main_k(summary: dict) -> int:
    ks = summary["settings"]["ks"]
    return 20 if 20 in ks else max(ks)


def _fi(retrieval: dict, name: str, cat: str) -> str:
    """A mean with its 95% bootstrap interval, "0.450 [0.383, 0.517]" (the mean alone when the
    summary has no interval, e.g. one written before intervals were added)."""
    value = retrieval["metrics"].get(name, {}).get(cat)
    ci = retrieval.get("intervals", {}).get(name, {}).get(cat)
    if value is None or not ci:
        return _f(value)
    return f"{value:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]"


def retrieval_table(summary: dict) -> list[str]:
    """Retrieval figures, each with its 95% bootstrap interval (questions resampled)."""
    cats, systems = summary["categories"], summary["systems"]
    if summary["dataset"] == "prefeval":  # the overall figures, then one table per k by topic
        ks = summary["settings"]["ks"]
        lines = _table(["system"] + [f"R@{x} all" for x in ks] + ["ctx tokens", "ms/q"],
                       [[s["label"]] + [_fi(s["retrieval"], f"recall@{x}", "all") for x in ks]
                        + [_f(s["retrieval"]["context_tokens"], 0), _f(s["retrieval"]["ms_per_query"], 1)]
                        for s in systems.values()])
        for x in ks:
            lines += ["", f"Recall@{x} of the preference turn per topic:", ""]
            lines += _table(["topic"] + [s["label"] for s in systems.values()],
                            [[c] + [_fi(s["retrieval"], f"recall@{x}", c) for s in systems.values()] for c in cats])
        return lines
    if summary["dataset"] == "updates":
        return updates_table(summary)
    if summary["dataset"] == "locomo-plus":  # any cue turn / the first cue turn, then one table per k by type
        ks = summary["settings"]["ks"]
        lines = _table(["system"] + [f"R_any@{x} all" for x in ks] + [f"R_first@{x} all" for x in ks]
                       + ["ctx tokens", "ms/q"],
                       [[s["label"]] + [_fi(s["retrieval"], f"recall_any@{x}", "all") for x in ks]
                        + [_fi(s["retrieval"], f"recall_first@{x}", "all") for x in ks]
                        + [_f(s["retrieval"]["context_tokens"], 0), _f(s["retrieval"]["ms_per_query"], 1)]
                        for s in systems.values()])
        for x in ks:
            lines += ["", f"recall_any@{x} of the cue per relation type:", ""]
            lines += _table(["relation"] + [s["label"] for s in systems.values()],
                            [[c] + [_fi(s["retrieval"], f"recall_any@{x}", c) for s in systems.values()]
                             for c in cats])
        return lines
    if summary["dataset"] == "locomo":
        ks, k = summary["settings"]["ks"], main_k(summary)
        head = (["system"] + [f"R@{x} all" for x in ks if x < k] + [f"R@{k} cat {c}" for c in cats]
                + [f"R@{x} all" for x in ks if x >= k] + ["ctx tokens", "ms/q"])
        rows = []
        for s in systems.values():
            r = s["retrieval"]
            rows.append([s["label"]] + [_fi(r, f"recall@{x}", "all") for x in ks if x < k]
                        + [_fi(r, f"recall@{k}", c) for c in cats] + [_fi(r, f"recall@{x}", "all") for x in ks if x >= k]
                        + [_f(r["context_tokens"], 0), _f(r["ms_per_query"], 1)])
        return _table(head, rows)
    head = ["system"] + [c.replace("session_", "S ").replace("turn_", "T ").replace("_any", "").replace("recall", "R")
                         for c in LME_COLUMNS] + ["ms/q"]
    rows = [[s["label"]] + [_fi(s["retrieval"], c, "all") for c in LME_COLUMNS]
            + [_f(s["retrieval"]["ms_per_query"], 1)] for s in systems.values()]
    lines = _table(head, rows)
    lines += ["", "Session recall_all@10 per question type:", ""]
    lines += _table(["system"] + cats, [[s["label"]] + [_fi(s["retrieval"], "session_recall_all@10", c) for c in cats]
                                        for s in systems.values()])
    return lines


UPDATE_METRICS = (("current_first", "now"), ("current_before_old", "now"), ("old_in_5", "past"), ("old_first", "past"))


def updates_table(summary: dict) -> list[str]:
    """Updates: the overall figures (each metric over the questions it applies to), then one
    table per metric by kind."""
    cats, systems, ks = summary["categories"], summary["systems"], summary["settings"]["ks"]
    names = [m for m, _ in UPDATE_METRICS if any(m in s["retrieval"]["metrics"] for s in systems.values())]
    lines = _table(["system"] + [f"{m} all" for m in names] + [f"R@{x} all" for x in ks] + ["ctx tokens", "ms/q"],
                   [[s["label"]] + [_fi(s["retrieval"], m, "all") for m in names]
                    + [_fi(s["retrieval"], f"recall@{x}", "all") for x in ks]
                    + [_f(s["retrieval"]["context_tokens"], 0), _f(s["retrieval"]["ms_per_query"], 1)]
                    for s in systems.values()])
    for m, side in UPDATE_METRICS:
        if m not in names:
            continue
        kinds = [c.split(":", 1)[1] for c in cats if c.startswith(f"{side}:")]
        lines += ["", f"{m} per kind ({side}-questions):", ""]
        lines += _table(["kind"] + [s["label"] for s in systems.values()],
                        [[k] + [_fi(s["retrieval"], m, f"{side}:{k}") for s in systems.values()] for k in kinds])
    return lines


def _qi(qa: dict, name: str) -> str:
    """An answer metric over all questions with its 95% bootstrap interval (the mean alone for a
    summary written before answer intervals)."""
    value, ci = qa[name].get("all"), qa.get("intervals", {}).get(name, {}).get("all")
    return _f(value) if value is None or not ci else f"{value:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]"


def qa_table(summary: dict) -> list[str]:
    cats = summary["categories"]
    rows = []
    for s in summary["systems"].values():
        qa = s["qa"]
        if qa is None:
            continue
        rows.append([s["label"]] + [_f(qa["accuracy"].get(c)) for c in cats]
                    + [_qi(qa, "accuracy"), _qi(qa, "f1"), _qi(qa, "bleu1"),
                       _f(_category_mean(qa["f1"], cats)), _f(_category_mean(qa["bleu1"], cats)),
                       _f(qa["answer_tokens_per_question"], 0), _f(qa["judge_tokens_per_question"], 0),
                       str(qa["questions"] - qa["judged"]), str(qa.get("answer_fallbacks", 0))])
    if not rows:
        return []
    head = (["system"] + [f"J {c}" for c in cats]
            + ["J all", "F1", "BLEU-1", "F1 cat-mean", "BLEU-1 cat-mean", "answer tok/q", "judge tok/q", "no verdict", "answer fallbacks"])
    return _table(head, rows)


def routing_kind_table(summary: dict) -> list[str]:
    """Mean routing weight per view by question kind (the ETAMem paper's Fig. 3; kinds by a word rule)."""
    cols = list(KINDS) + ["all"]
    rows = []
    for s in summary["systems"].values():
        r = s.get("routing_by_kind")
        if not r:
            continue
        views = sorted({v for by in r["weights"].values() for v in by}, key=_view_order)
        rows += [[s["label"], v] + [_f(r["weights"].get(c, {}).get(v)) for c in cols] for v in views]
    if not rows:
        return []
    n = summary["data"].get("question_kinds", {})
    return ["", "Mean routing weight per view by question kind (the ETAMem paper's Fig. 3 reads CloneMem's "
            "emotion / experience / opinion questions; CloneMem is not available here, so questions are sorted by "
            "a word rule, etamem/bench/question_kinds.py: a proxy, not the paper's labels; "
            + ", ".join(f"{k} {n.get(k, 0)}" for k in KINDS) + " questions):", ""] + _table(
        ["system", "view"] + cols, rows)


def routing_tables(summary: dict) -> list[str]:
    """Mean routing weight (and budget) per view, by category, for the ETAMem systems."""
    cats = summary["categories"] + ["all"]
    lines = []
    for part, digits, title in (("weights", 3, "Mean routing weight"), ("budgets", 1, "Mean routed budget (units)")):
        rows = []
        for s in summary["systems"].values():
            r = s.get("routing")
            if not r:
                continue
            views = sorted({v for by in r[part].values() for v in by}, key=_view_order)
            rows += [[s["label"], v] + [_f(r[part].get(c, {}).get(v), digits) for c in cats] for v in views]
        if rows:
            lines += ["", f"{title} per view and category:", ""] + _table(["system", "view"] + cats, rows)
    return lines


def error_table(summary: dict) -> list[str]:
    rows = []
    for s in summary["systems"].values():
        e = (s["qa"] or {}).get("errors")
        if not e:
            continue
        c = e["counts"]
        rows.append([s["label"]] + [str(c[b][x]) for b in BUCKETS for x in ("correct", "wrong")]
                    + [_f(e["retrieval_errors_of_wrong"]), _f(e["reasoning_errors_of_wrong"]),
                       _f(e["reasoning_errors_of_all"])])
    if not rows:
        return []
    head = (["system"] + [f"R={b} {x}" for b in BUCKETS for x in ("correct", "wrong")]
            + ["retrieval errors / wrong", "reasoning errors / wrong", "reasoning errors / all"])
    return _table(head, rows)


def _category_mean(values: dict, cats: list[str]) -> float | None:
    """The unweighted mean over the categories (the paper's LoCoMo average), None if one is missing."""
    got = [values.get(c) for c in cats]
    return None if not got or any(v is None for v in got) else sum(got) / len(got)


def cost_table(summary: dict) -> list[str]:
    rows = []
    for s in summary["systems"].values():
        c, llm = s["cost"], s["cost"]["build_llm"]
        calls = sum(v["calls"] + v["cached_calls"] for v in llm.values())
        tokens = sum(v["prompt_tokens"] + v["completion_tokens"] for v in llm.values())
        qa = s["qa"] or {}
        units = c.get("build_amus")
        per_turn = units / c["build_turns"] if units is not None and c.get("build_turns") else None
        rows.append([s["label"], s["construction"] or "–", str(units) if units is not None else "–",
                     _f(per_turn, 2), _f(c["build_wall_s"], 1),
                     str(calls) if c["build_spaces"] else "–", str(tokens) if c["build_spaces"] else "–",
                     _f(s["retrieval"]["ms_per_query"], 1), _f(qa.get("answer_tokens_per_question"), 0),
                     _f(qa.get("ms_per_answer"), 0), _f(c["peak_rss_mb"], 0), _extraction_cell(c)])
    return _table(["system", "store", "units", "units/turn", "build s", "build LLM calls", "build LLM tokens", "ms/query",
                   "answer tok/q", "ms/answer", "peak RSS MB", "LLM / rule turns, rejected units"], rows)


def _extraction_cell(cost: dict) -> str:
    """"LLM turns / rule-fallback turns, units rejected by grounding" of an LLM extractor's builds, else "–"."""
    ex = cost.get("build_extraction") or {}
    if "llm_units" not in ex:
        return "–"
    return f"{ex['turns'] - ex['fallback_turns']} / {ex['fallback_turns']}, {ex.get('rejected_units', 0)}"


def mode_line(settings: dict) -> str:
    if settings.get("mode") == "budget":
        return (f"Retrieval mode: budget, K = {settings['budget']} units per system (an ETAMem system routes "
                "exactly K units across its views, the paper's setting); recall@k counts the distinct source turns "
                "of those K units.")
    return (f"Retrieval mode: pool, {settings['pool']} units per system; recall@k counts the first k distinct "
            f"source turns (an ETAMem system routes the pool, not k, across its views; `--budget K` for the "
            f"paper's setting).")


def _data_line(summary: dict) -> str:
    d = summary["data"]
    if summary["dataset"] == "prefeval":
        return (f"{d['questions']} questions in {d['conversations']} trial(s), one memory each (the chats and one "
                f"preference per topic; {len(summary['categories'])} topics); the evidence of a question is its "
                "topic's preference turn")
    if summary["dataset"] == "updates":
        return (f"{d['questions']} questions ({d['now_questions']} about now, {d['past_questions']} about the past) "
                f"in {d['conversations']} memories (split {summary['settings'].get('split') or 'none'}); the evidence "
                "of a now-question is the current fact's turn, of a past-question the old fact's turn")
    if summary["dataset"] == "locomo-plus":
        return (f"{d['questions']} cue/trigger items in {d['conversations']} LoCoMo conversation(s) (one memory "
                "each; an item's cue is added for its trigger only); the evidence of a trigger is its cue's turns")
    return (f"{d['questions']} questions in {d['conversations']} conversation(s)"
            + (f" (category 5 excluded; {d['questions_without_evidence']} without resolvable evidence skipped for "
               f"retrieval; {d['skipped_evidence_ids']} evidence ids did not resolve)" if summary["dataset"] == "locomo"
               else f" ({d['abstention_questions']} abstention questions skipped for retrieval)"))


def preset_lines(settings: dict) -> list[str]:
    """The preset a run started from and every setting that differs from it."""
    diff = settings.get("preset_differences") or {}
    shown_diff = ", ".join(f"{k} {v[1]!r} (preset {v[0]!r})" for k, v in sorted(diff.items()))
    return [f"Preset: {settings.get('preset', 'default')} (docs/presets.md); settings that differ from it: "
            + (shown_diff or "none") + "."]


def ladder_table(summary: dict) -> list[str]:
    """From the paper's query-time settings to the run's, one addition at a time, each step's gain."""
    metric = summary.get("main_metric")
    rows = [[r["label"], f"{r['mean']:.3f}"] + paired.step_cell(r.get("step")) for r in summary.get("ladder") or []]
    if not rows:
        return []
    return ["", "## From the paper to the default, one addition at a time", "",
            f"{metric}, all questions. Each step switches on one of the project's query-time additions "
            "(etamem/presets.py `ADDITIONS`, docs/presets.md) on top of the step above; gain in points with its "
            "95% paired bootstrap interval over questions / clustered by conversation, and the two-sided "
            "sign-flip p-value flipping single questions / whole conversations (with c conversations the "
            "smallest p by conversation is 2 / 2^c).", ""] + _table(
        ["step", metric, "gain", "95% interval (questions / conversations)", "p (questions / conversations)",
         "questions up / down"], rows)


def clustered_table(summary: dict) -> list[str]:
    metric = summary.get("main_metric")
    rows = [[s["label"], _fi(s["retrieval"], metric, "all"),
             "[{:.3f}, {:.3f}]".format(*s["retrieval"]["clustered"][metric])]
            for s in summary["systems"].values() if (s["retrieval"].get("clustered") or {}).get(metric)]
    if not rows:
        return []
    return ["", f"{metric} with its interval over questions and, clustered, over conversations (whole "
            f"conversations resampled; {summary['data']['conversations']} of them here):", ""] + _table(
        ["system", f"{metric} [questions]", "[conversations]"], rows)


def qa_paired_table(summary: dict) -> list[str]:
    head = ["system", "judge diff", "[95%] questions / clustered", "p", "up / down", "F1 diff",
            "[95%] questions / clustered", "p", "up / down", "questions"]
    rows = []
    for key, cell in summary["qa_paired"].items():
        judge, f1 = cell["judge"], cell["f1"]
        rows.append([summary["systems"][key]["label"]] + paired.step_cell(judge) + paired.step_cell(f1)
                    + [str(judge.get("questions", 0))])
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in rows]


def markdown(summary: dict) -> str:
    st = summary["settings"]
    cfg = st["config"]
    lines = [f"# Benchmark: {summary['dataset']} — {summary['file']}", "",
             _data_line(summary)
             + f". Wall time of this run: {summary['wall_s']:.1f} s; time spent on these results over all runs "
             f"(store builds + retrieval + answers, from the records): {summary['work_s']:.0f} s.", "",
             mode_line(st), "",
             "Settings: " + (f"answer prompts of at most {st['context_tokens']} tokens"
                             if st.get("context_tokens") else f"K (answer context, distinct turns) {st['qa_turns']}")
             + f", beam B {cfg['beam_width']}, "
             f"beta {cfg['bm25_weight']}, pool {st['pool']}, extractor {cfg['extractor']}, text encoder "
             f"{cfg['text_encoder']}, affect {cfg['affect_backend']}, LLM {st['llm_model'] or 'none'}"
             + (f", judge {st['judge_model']}" if st["llm_model"] else "") + f", seed {cfg['seed']}.", ""]
    lines += preset_lines(st) + ["", "Conversations: " + ", ".join(summary["data"].get("conversation_ids", [])) + ".", "",
                                 "## Retrieval (no LLM)", "",
                                 "Each figure is a mean over questions with its 95% bootstrap interval [low, high] "
                                 "(percentile, questions resampled with replacement, 2000 resamples, seeded).", ""]
    lines += retrieval_table(summary) + clustered_table(summary) + ladder_table(summary)
    if summary.get("budget"):
        lines += ["", "## Evidence within the reader's budget", "",
                  "Share of questions (%) with an evidence turn in the answer context cut at B tokens (counted "
                  "with the reader's tokenizer: the context as the answer prompt shows it, filled in rank order; "
                  "ETAMem's Time context and FTA-Mem's auxiliary memory fill what the evidence leaves, as "
                  "`Memory.answer` fits a context, and are not counted), "
                  "its 95% interval over questions; the paired difference against "
                  f"{summary['budget']['baseline']} on the same questions; the share with every evidence turn in; "
                  "the median tokens to the first evidence turn over the questions whose pool holds one "
                  "(etamem/bench/budget.py).", ""]
        lines += budget.table(summary["budget"], {k: s["label"] for k, s in summary["systems"].items()})
    routing = routing_tables(summary) + routing_kind_table(summary)
    if routing:
        lines += ["", "## Routing (ETAMem systems)"] + routing
    qa = qa_table(summary)
    if qa:
        lines += ["", "## Answers (LLM): judge accuracy per category, token F1, BLEU-1", "",
                  "Over all questions each with its 95% bootstrap interval (questions resampled).", "",
                  "answer fallbacks: answers asked again with raw turns fused in because the first reply said the "
                  "memories lack the answer (as `Memory.answer`; ETAMem systems with the fallback on, when "
                  "retrieval had not fused raw turns already).", ""] + qa
    if summary.get("qa_paired"):
        lines += ["", "## Answers against flat hybrid, paired", "",
                  "Each system minus flat hybrid (turns) on the questions both answered: judge accuracy and token "
                  "F1 in points, 95% bootstrap interval over questions / clustered by conversation, sign-flip "
                  "p-value over questions / conversations, questions up / down.", ""]
        lines += qa_paired_table(summary)
    errors = error_table(summary)
    if errors:
        lines += ["", "## Error analysis", "",
                  "Judged answers by the evidence recall of their context (R: share of the gold evidence among the "
                  + (f"turns of the first answer's context, cut at {st['context_tokens']} prompt tokens; "
                     if st.get("context_tokens") else
                     f"first {st['qa_turns']} distinct source turns of the first answer's context; ") + "full context: 1) "
                  "and verdict. Wrong with R=1: a reasoning error; wrong with R<1: a retrieval error.", ""] + errors
    lines += ["", "## Cost", "", "Build figures are per store (shared by every system on that store) and summed over "
              "the selected conversations; a store built by an earlier run keeps its recorded cost; stores built later "
              "reuse the embedding and extraction caches filled by earlier ones, so their build time is lower. "
              "ms/query excludes question encoding (each conversation's questions are encoded once, in a batch, "
              "for all systems). Peak RSS is the process peak when the system's results were recorded (systems "
              "run in one process).", ""]
    lines += cost_table(summary)
    if summary["notes"]:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in summary["notes"]]
    return "\n".join(lines) + "\n"

