"""A seeded sample of questions stratified by category, nested across sizes.

The bench used to take the first N questions of each conversation (`--per-conversation`), which
follows the order a dataset lists its questions in (LoCoMo lists them roughly by category, so the
first N are mostly one kind). `order` instead ranks every question once: each category's questions
are shuffled with a seeded generator and interleaved so that any prefix holds each category in
proportion to its size (the j-th question of a category of n sits at (j + 0.5) / n, ties broken
by the seeded draw). `stratified(convs, N)` keeps the first N of that order, so the sample of 60
is part of the sample of 120 made with the same seed: systems run on fewer questions stay paired
with those run on more.
"""
from __future__ import annotations

import random
from typing import Sequence

from etamem.bench.items import BenchConversation, BenchQuestion


def order(questions: Sequence[BenchQuestion], seed: int = 0) -> list[BenchQuestion]:
    """Every question once, ranked so that each prefix is stratified by `category`.

    Args:
        questions: The pool (question ids unique).
        seed: The generator's seed; the same pool and seed give the same order.

    Returns:
        The questions, a category's share of any prefix within one question of proportional.
    """
    by_cat: dict[str, list[BenchQuestion]] = {}
    for q in questions:
        by_cat.setdefault(str(q.category), []).append(q)
    keyed = []
    for cat in sorted(by_cat):
        group = sorted(by_cat[cat], key=lambda q: q.qid)
        rng = random.Random(f"bench-sample:{seed}:{cat}")
        rng.shuffle(group)
        keyed += [((j + 0.5) / len(group), rng.random(), q.qid, q) for j, q in enumerate(group)]
    return [k[-1] for k in sorted(keyed, key=lambda k: k[:3])]


def stratified(conversations: Sequence[BenchConversation], n: int, seed: int = 0) -> list[BenchConversation]:
    """The conversations with only the first `n` questions of `order` over all of theirs (each
    conversation's kept questions in their own order; conversations left without any dropped).

    Raises:
        ValueError: `n` < 1.
    """
    if n < 1:
        raise ValueError(f"sample: need at least 1 question, got {n}")
    chosen = {q.qid for q in order([q for c in conversations for q in c.questions], seed)[:n]}
    out = []
    for c in conversations:
        qs = [q for q in c.questions if q.qid in chosen]
        if qs:
            out.append(BenchConversation(c.space, c.turns, qs, c.user_turns))
    return out


__all__ = ["order", "stratified"]
