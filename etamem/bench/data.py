"""Benchmark items read from the official files (unchanged): conversations with their
questions, gold evidence and the date each question is asked."""
from __future__ import annotations

from etamem.bench.items import BenchConversation, BenchQuestion
from etamem.bench.metrics import normalise_evidence
from etamem.ingest.datasets import read_locomo, read_longmemeval, shape_guard

__all__ = ["DATASETS", "LOCOMO_CATEGORIES", "LONGMEMEVAL_TYPES", "BenchConversation", "BenchQuestion", "load",
           "first_sessions", "load_locomo", "load_longmemeval", "select"]

DATASETS = ("locomo", "locomo-plus", "longmemeval", "prefeval", "updates")
LOCOMO_CATEGORIES = (1, 2, 3, 4)  # 5 (adversarial) is excluded from the usual score
LONGMEMEVAL_TYPES = ("single-session-user", "single-session-assistant", "single-session-preference",
                     "temporal-reasoning", "knowledge-update", "multi-session")


def load_locomo(path: str) -> list[BenchConversation]:
    """LoCoMo samples; question ids `<sample_id>:q<index in qa>`; category 5 dropped; gold
    evidence normalised (unresolvable ids counted in `skipped_evidence`)."""
    out = []
    for conv in read_locomo(path):
        known = {t["turn_id"] for t in conv.turns}
        now = conv.turns[-1]["timestamp"] if conv.turns else None  # asked after the last session
        questions = []
        for i, qa in enumerate(conv.questions):
            with shape_guard(path, f"{conv.space} question", i):
                if qa.get("category") == 5:
                    continue
                gold, skipped = normalise_evidence(qa.get("evidence"), known)
                questions.append(BenchQuestion(qid=f"{conv.space}:q{i}", space=conv.space, question=qa["question"],
                                               answer=str(qa.get("answer", "")), category=str(qa.get("category")),
                                               now=now, gold_turns=gold, skipped_evidence=skipped))
        out.append(BenchConversation(conv.space, conv.turns, questions))
    return out


def load_longmemeval(path: str) -> list[BenchConversation]:
    """LongMemEval: one space per question (its own haystack). Gold sessions are
    `answer_session_ids`; gold turns the user turns with `has_answer`."""
    out = []
    for conv in read_longmemeval(path):
        with shape_guard(path, f"{conv.space} question", 0):
            out.append(_longmemeval_question(conv))
    return out


def _longmemeval_question(conv) -> BenchConversation:
    q = conv.questions[0]
    user_turns = {t["turn_id"] for t in conv.turns if t["speaker"] == "user"}
    gold_turns = [t["turn_id"] for t in conv.turns
                  if t["speaker"] == "user" and t.get("extra", {}).get("has_answer")]
    qid = str(q["question_id"])
    bq = BenchQuestion(qid=qid, space=conv.space, question=q["question"], answer=str(q.get("answer", "")),
                       category=str(q.get("question_type")), now=conv.question_date, gold_turns=gold_turns,
                       gold_sessions=[str(s) for s in q.get("answer_session_ids") or []],
                       abstention=qid.endswith("_abs"))
    return BenchConversation(conv.space, conv.turns, [bq], user_turns)


def load(dataset: str, path: str | None, *, locomo: str | None = None, filler: str | None = None,
         split: str | None = None, filler_chats: int | None = None,
         filler_turns: int | None = None) -> list[BenchConversation]:
    """The dataset's items; `locomo`: the LoCoMo file LoCoMo-Plus items are stitched into;
    `filler` / `split` / `filler_chats` / `filler_turns`: updates only (etamem/bench/updates.py;
    `path` None: the shipped scenarios)."""
    if dataset not in DATASETS:
        raise ValueError(f"dataset: expected one of {DATASETS}, got {dataset!r}")
    if dataset == "updates":
        from etamem.bench.updates import load_updates

        return load_updates(path, filler, split, filler_chats=filler_chats, filler_turns=filler_turns)
    if filler or split or filler_chats is not None or filler_turns is not None:
        raise ValueError(f"--filler, --split, --filler-chats and --filler-turns apply to updates only, not {dataset}")
    if not path:
        raise ValueError(f"file: required for {dataset} (the official file)")
    if dataset == "locomo-plus":  # etamem/bench/locomo_plus.py
        from etamem.bench.locomo_plus import load_locomo_plus

        return load_locomo_plus(path, locomo)
    if dataset == "prefeval":  # a directory (etamem/bench/prefeval.py)
        from etamem.bench.prefeval import load_prefeval

        return load_prefeval(path)
    return load_locomo(path) if dataset == "locomo" else load_longmemeval(path)


def select(conversations: list[BenchConversation], *, limit: int = 0, spaces: list[str] | None = None,
           qids: list[str] | None = None, per_conversation: int = 0, sessions: int = 0) -> list[BenchConversation]:
    """Subset: named spaces, the first `limit` conversations, each cut to its first `sessions`
    sessions (in turn order) with only the questions whose evidence turns all lie in them, named
    question ids, the first `per_conversation` questions of each; conversations left without
    questions are dropped."""
    if sessions < 0:
        raise ValueError(f"sessions: expected a positive number of sessions, got {sessions}")
    convs = [c for c in conversations if not spaces or c.space in spaces]
    if spaces:
        missing = sorted(set(spaces) - {c.space for c in convs})
        if missing:
            raise ValueError(f"--conversations: unknown id(s) {', '.join(missing)}")
    convs = convs[: limit or None]
    out = []
    for c in convs:
        if sessions:
            c = first_sessions(c, sessions)
        qs = [q for q in c.questions if not qids or q.qid in qids]
        qs = qs[: per_conversation or None]
        if qs:
            out.append(BenchConversation(c.space, c.turns, qs, c.user_turns))
    if qids and not out:
        raise ValueError("--questions: none of the given question ids was found")
    return out


def first_sessions(conv: BenchConversation, n: int) -> BenchConversation:
    """`conv` cut to its first `n` sessions (in turn order) and the questions whose gold turns all
    lie in them (a question without gold turns is dropped: nothing says it is answerable there)."""
    kept: list[str] = []
    for t in conv.turns:
        if t["session_id"] not in kept:
            if len(kept) == n:
                break
            kept.append(t["session_id"])
    turns = [t for t in conv.turns if t["session_id"] in kept]
    ids = {t["turn_id"] for t in turns}
    qs = [q for q in conv.questions if q.gold_turns and set(q.gold_turns) <= ids]
    return BenchConversation(conv.space, turns, qs, conv.user_turns & ids)
