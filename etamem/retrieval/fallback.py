"""Fallback to the raw conversation: an incremental turn-level dense + BM25 index over the
stored turns, the retrieval confidence that gates it and the fusion of its turns with the hits
(see docs/design.md, 'Raw-turn fallback')."""
from __future__ import annotations

import bisect
import json
import logging
from pathlib import Path

import numpy as np

from etamem.extraction.extractors import turn_text as content_text
from etamem.ingest.timeparse import format_date
from etamem.records import AMU, Hit, Turn
from etamem.retrieval.flat import FlatHybridIndex

log = logging.getLogger(__name__)


def turn_text(turn: Turn) -> str:
    """A turn's searchable content: `speaker: ` + the text with any photo caption, as the
    extractor sees it (turns are first person, so the speaker's name is what links them to
    questions about people)."""
    return f"{turn.speaker}: {content_text(turn)}"


LINKS_FILE = "links.npy"


def _saved_links(path: Path, n: int) -> np.ndarray | None:
    """The session links `TurnIndex.save` wrote for n slots, or None when the file is absent (files
    of an earlier version: the order is sorted again) or not links of n slots (each link within
    the slots and answered by its neighbour's)."""
    if not path.is_file():
        return None
    links = np.load(path, allow_pickle=False)
    ok = links.shape == (n, 2) and links.dtype == np.int64 and not (len(links) and (links.min() < -1 or links.max() >= n))
    if ok:
        before, after = links[:, 0], links[:, 1]
        slots = np.arange(n)
        ok = (np.array_equal(links[before[before >= 0], 1], slots[before >= 0])
              and np.array_equal(links[after[after >= 0], 0], slots[after >= 0]))
    if not ok:
        log.warning("%s: not the session links of %d turn slots; the turns are sorted again", path, n)
    return links if ok else None


class TurnIndex:
    """Exact hybrid search over the raw turns of one space, updated in place: a
    `FlatHybridIndex` over the turns' `turn_text` vectors (encoded once, at add) and
    `turn_text` + date, plus the slot -> turn map. Score = (1 - beta) * cos + beta * BM25n over
    the union of the dense top `pool` and the BM25 top `pool`, ties by arrival order. `exact_max`:
    above that many turns the dense pool comes from an HNSW graph (`Config.raw_exact_max`).
    """

    def __init__(self, dim: int, turns: list[Turn] = (), vectors: np.ndarray | None = None, *,
                 stemmer: str = "english", exact_max: int | None = None):
        self.dim = int(dim)
        self.index = FlatHybridIndex(np.zeros((0, self.dim), np.float32), [], dim=self.dim, stemmer=stemmer,
                                     exact_max=exact_max)
        self.turns: list[Turn | None] = []  # slot -> turn (None once removed)
        self.slot_of: dict[str, int] = {}
        self.arrival: dict[str, int] = {}  # turn id -> arrival rank: ties go to the earlier turn, also
        # for a turn rewritten after a deletion (it keeps its rank, not its new slot)
        self.sessions: dict[str, list[tuple[float, int, str]]] = {}  # session -> (time, arrival, turn id), sorted
        self.order_key: dict[str, tuple[str, tuple[float, int, str]]] = {}  # live turn id -> (session, its key)
        self.links = np.full((0, 2), -1, np.int64)  # slot -> (slot before, slot after) in its session; -1: none
        self._unordered: list[Turn] | None = None  # loaded turns whose `sessions` are built at the first write
        if len(turns):
            self.add(list(turns), vectors)

    def __len__(self) -> int:
        return len(self.slot_of)

    def set_device(self, device: str, min_rows: int = 20_000) -> None:
        """Where the turns' dense search runs (`VectorIndex.set_device`)."""
        self.index.set_device(device, min_rows)

    def add(self, turns: list[Turn], vectors: np.ndarray) -> None:
        """Append turns with their `turn_text` vectors ((n, d) float32 unit rows)."""
        if not turns:
            return
        self._order()
        slots = self.index.add(vectors, [f"{turn_text(t)} {format_date(t.timestamp)}" for t in turns])
        for t, s in zip(turns, slots.tolist()):
            self.turns.append(t)
            self.slot_of[t.turn_id] = s
            self.arrival.setdefault(t.turn_id, len(self.arrival))
            self._place(t)

    def turn(self, turn_id: str) -> Turn | None:
        """The live turn `turn_id`, or None."""
        slot = self.slot_of.get(turn_id)
        return None if slot is None else self.turns[slot]

    def _place(self, turn: Turn) -> None:
        """Put a live turn in its session's order (time, then arrival) and link it to its neighbours."""
        key = (turn.timestamp.timestamp(), self.arrival[turn.turn_id], turn.turn_id)
        order = self.sessions.setdefault(turn.session_id, [])
        i = bisect.bisect_left(order, key)
        order.insert(i, key)
        self.order_key[turn.turn_id] = (turn.session_id, key)
        slot = self.slot_of[turn.turn_id]
        if len(self.links) <= slot:  # grown geometrically: amortised O(1) per turn
            grown = np.full((max(slot + 1, 2 * len(self.links), 64), 2), -1, np.int64)
            grown[: len(self.links)] = self.links
            self.links = grown
        before = self.slot_of[order[i - 1][2]] if i > 0 else -1
        after = self.slot_of[order[i + 1][2]] if i + 1 < len(order) else -1
        self._link(before, slot)
        self._link(slot, after)

    def _link(self, before: int, after: int) -> None:
        """Make slot `before` the one right before slot `after` in their session (-1: none)."""
        if before >= 0:
            self.links[before, 1] = after
        if after >= 0:
            self.links[after, 0] = before

    def neighbour(self, turn_id: str, step: int) -> str | None:
        """The live turn right before (`step` -1) or after (+1) `turn_id` in its session, or None."""
        if step not in (-1, 1):
            raise ValueError(f"step: expected -1 or 1, got {step!r}")
        slot = self.slot_of.get(turn_id)
        other = -1 if slot is None else int(self.links[slot, 0 if step < 0 else 1])
        return None if other < 0 else self.turns[other].turn_id

    def neighbour_slots(self, slots: np.ndarray, step: int) -> np.ndarray:
        """`neighbour` over turn slots at once: (n,) int64 slots (-1 for none, and for slot -1)."""
        slots = np.asarray(slots, np.int64)
        known = slots >= 0
        out = np.full(len(slots), -1, np.int64)
        out[known] = self.links[slots[known], 0 if step < 0 else 1]
        return out

    def context(self, turn_ids: list[str], q_vec: np.ndarray, query_ids: np.ndarray, *, prev: float,
                after: float, lexical_prev: float, impute: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """A turn in its dialogue context, for each of `turn_ids` (unknown ones score 0):
        dense cos(q, t) + prev * cos(q, t-1) + after * cos(q, t+1) and raw BM25 bm(t) +
        lexical_prev * bm(t-1), where t-1 / t+1 are its neighbours in its session. Two
        (len(turn_ids),) float32 arrays; q_vec: (d,) float32 unit; query_ids: the turn
        vocabulary's ids of the query (`query_ids`). `impute`: a neighbour that does not exist
        counts as the turn itself (its weight times the turn's own score), so a turn alone in its
        session is not scored below one with neighbours."""
        get = self.slot_of.get
        own = np.fromiter((get(t, -1) for t in turn_ids), np.int64, len(turn_ids))
        before = self.neighbour_slots(own, -1)
        later = self.neighbour_slots(own, 1) if after else np.full(len(own), -1, np.int64)
        need = np.unique(np.concatenate([own, before, later]))
        need = need[need >= 0]
        if not len(need):
            zeros = np.zeros(len(turn_ids), np.float32)
            return zeros, zeros.copy()
        cos = np.append(self.index.vectors(need.tolist()) @ np.asarray(q_vec, np.float32), np.float32(0))
        bm = np.append(self.index.bm25_for(need, query_ids), np.float32(0))
        # position in `need`, or -1 (the 0 appended) for no turn
        pick = lambda slots: np.where(slots >= 0, np.searchsorted(need, slots), -1)
        own_i, before_i, later_i = pick(own), pick(before), pick(later)
        dense = cos[own_i] + prev * cos[before_i] + after * cos[later_i]
        lexical = bm[own_i] + lexical_prev * bm[before_i]
        if impute:  # a missing neighbour counts as the turn itself
            no_before, no_later = before_i < 0, later_i < 0
            dense = dense + (prev * no_before + after * no_later) * cos[own_i]
            lexical = lexical + lexical_prev * no_before * bm[own_i]
        return dense.astype(np.float32), lexical.astype(np.float32)

    def query_ids(self, query: str) -> np.ndarray:
        """The query's token ids in the turns' BM25 vocabulary."""
        return self.index.lexical.query_ids(query)

    def lexical_ceiling(self, query_ids: np.ndarray) -> float:
        """The turns' BM25 ceiling for these query ids (`LexicalIndex.ceiling`)."""
        return self.index.lexical.ceiling(query_ids)

    def remove(self, turn_ids: list[str], *, keep_rank: bool = False) -> None:
        """Tombstone turns; `keep_rank`: they come back rewritten and keep their arrival rank."""
        self._order()
        slots = [self.slot_of.pop(t) for t in turn_ids if t in self.slot_of]
        if not keep_rank:
            for t in turn_ids:
                self.arrival.pop(t, None)
        for s in slots:
            gone = self.turns[s]
            placed = self.order_key.pop(gone.turn_id, None)
            if placed is not None:
                order = self.sessions[placed[0]]
                del order[bisect.bisect_left(order, placed[1])]
                self._link(int(self.links[s, 0]), int(self.links[s, 1]))
                self.links[s] = -1
            self.turns[s] = None
        self.index.remove(slots)

    def save(self, directory) -> None:
        """The hybrid index, the slot -> turn id list (JSON) and the session links (links.npy,
        (slots, 2) int64), so that a load need not sort the turns again."""
        d = Path(directory)
        self.index.save(d)
        (d / "slots.json").write_text(json.dumps({"dim": self.dim, "turn_ids": [
            None if t is None else t.turn_id for t in self.turns]}))
        np.save(d / LINKS_FILE, self.links[: len(self.turns)], allow_pickle=False)  # every slot was placed or loaded

    def _order(self) -> None:
        """Build each session's sorted order (what writes need) from the turns a load left."""
        if self._unordered is None:
            return
        turns, self._unordered = self._unordered, None
        for i, t in enumerate(turns):  # as `_place` each, sorted once per session
            key = (t.timestamp.timestamp(), i, t.turn_id)
            self.sessions.setdefault(t.session_id, []).append(key)
            self.order_key[t.turn_id] = (t.session_id, key)
        for order in self.sessions.values():
            order.sort()

    @classmethod
    def load(cls, directory, turns: list[Turn], *, stemmer: str = "english",
             exact_max: int | None = None) -> "TurnIndex":
        """The index `save` wrote, for exactly these (extracted) turns and BM25 stemmer, with the
        exact/HNSW threshold `exact_max` (applied from the next write on); ValueError
        otherwise."""
        d = Path(directory)
        meta = json.loads((d / "slots.json").read_text())
        by_id = {t.turn_id: t for t in turns}
        ids = meta["turn_ids"]
        live = [t for t in ids if t is not None]
        if len(live) != len(by_id) or any(t not in by_id for t in live):
            raise ValueError("saved turn slots do not match the stored turns")
        self = cls(meta["dim"], stemmer=stemmer)
        self.index = FlatHybridIndex.load(d, self.dim)
        self.index.set_exact_max(exact_max)
        if self.index.lexical.stemmer != stemmer:
            raise ValueError(f"saved BM25 over turns was stemmed with {self.index.lexical.stemmer!r}, not {stemmer!r}")
        if self.index.lexical.n != len(ids):
            raise ValueError("saved turn index sizes do not match its slots")
        self.turns = [None if t is None else by_id[t] for t in ids]
        self.slot_of = {t: s for s, t in enumerate(ids) if t is not None}
        self.arrival = {t.turn_id: i for i, t in enumerate(turns)}  # `turns` come in arrival order
        self._unordered = list(turns)
        saved = _saved_links(d / LINKS_FILE, len(ids))
        if saved is not None:  # the order as saved: nothing sorted until the first write
            self.links = saved
            return self
        self._order()
        self.links = np.full((max(len(ids), 64), 2), -1, np.int64)
        for order in self.sessions.values():
            chain = np.fromiter((self.slot_of[key[2]] for key in order), np.int64, len(order))
            self.links[chain[1:], 0] = chain[:-1]
            self.links[chain[:-1], 1] = chain[1:]
        return self

    def search(self, qvec: np.ndarray, query: str, k: int, *, beta: float, pool: int = 200,
               allowed: np.ndarray | None = None) -> list[tuple[Turn, float]]:
        """Top-k (turn, score), best first. qvec: (d,) float32 unit. `allowed`: a bool mask over
        the turn slots (`turns`): only those, each scored exactly (a filter, `etamem.filters`)."""
        found = [(self.turns[r.index], r.score)
                 for r in self.index.search(qvec, query, k, beta=beta, pool=pool, allowed=allowed)]
        return sorted(found, key=lambda ts: (-ts[1], self.arrival[ts[0].turn_id]))


def confidence(hits: list[Hit], turns: TurnIndex, query: str, q_text: np.ndarray, cfg,
               allowed: np.ndarray | None = None) -> tuple[float, list | None]:
    """Retrieval confidence in [-1, 1] (`cfg.fallback_confidence`) and, for "agreement", the raw
    turns it looked at (reused by the fallback). No hits -> -1.

    "score": the best hit's score. "agreement": |A ∩ R| / m with m = `fallback_agreement_k`,
    A the first m distinct source turns of the hits and R the raw-turn index's top m: two
    independent retrievers that agree make the memory's answer trustworthy. `allowed`: the
    raw turns a filter lets through (a mask over turn slots, `TurnIndex.search`).
    """
    if not hits:
        return -1.0, None
    if cfg.fallback_confidence == "score":
        return float(hits[0].score), None
    m = cfg.fallback_agreement_k
    found = turns.search(q_text, query, max(m, cfg.fallback_turns), beta=cfg.bm25_weight, allowed=allowed)
    mine: list[str] = []
    for h in hits:
        mine.extend(t for t in h.source_turn_ids if t not in mine)
        if len(mine) >= m:
            break
    raw = {turn.turn_id for turn, _ in found[:m]}
    return len(raw.intersection(mine[:m])) / m, found


def with_fallback(hits: list[Hit], turns: TurnIndex, query: str, q_text: np.ndarray, k: int, cfg, space: str,
                  found: list | None = None, allowed: np.ndarray | None = None) -> list[Hit]:
    """Bring in the best `fallback_turns` raw turns (`found`, searched if not given; among the
    `allowed` turn slots when given): fused with the hits by reciprocal rank (`fallback_fusion="rrf"`:
    a turn already covered by a hit strengthens that hit) or merged by score (`"score"`: only
    uncovered turns are added)."""
    if found is None:
        found = turns.search(q_text, query, cfg.fallback_turns, beta=cfg.bm25_weight, allowed=allowed)
    found = found[:cfg.fallback_turns]
    by_id = {turn.turn_id: (turn, score) for turn, score in found}

    def raw_hit(turn: Turn, score: float) -> Hit:
        amu = AMU(amu_id=f"turn:{turn.turn_id}", text=turn.text, speaker=turn.speaker, timestamp=turn.timestamp,
                  session_id=turn.session_id, source_turn_ids=(turn.turn_id,), space=space)
        return Hit(amu=amu, score=score, views=("raw",), source_turn_ids=(turn.turn_id,))

    if cfg.fallback_fusion == "rrf":
        fused = rrf_fuse([h.source_turn_ids for h in hits], [t.turn_id for t, _ in found], cfg.rrf_k)
        out = [Hit(hits[key].amu, score, hits[key].views, hits[key].source_turn_ids) if isinstance(key, int)
               else raw_hit(by_id[key][0], score) for key, score in fused]
        return out[:max(k, len(hits))]
    covered = {t for h in hits for t in h.source_turn_ids}
    extra = [raw_hit(turn, score) for turn, score in found if turn.turn_id not in covered]
    return sorted(hits + extra, key=lambda h: -h.score)[:max(k, len(extra))]


def rrf_fuse(hit_sources: list[tuple[str, ...]], turn_ids: list[str], k: int = 10) -> list[tuple[object, float]]:
    """Reciprocal-rank fusion of ranked hits (given by their source turns) with ranked raw turns.

    Hit i at rank r gets 1/(k + r + 1); raw turn t at rank r gives 1/(k + r + 1) to the best
    ranked hit whose sources contain t, or, if no hit covers t, becomes an entry of its own.
    Returns (hit index | turn id, fused score), best first (ties: hits before turns, then rank).
    """
    scores: dict[object, float] = {i: 1.0 / (k + i + 1) for i in range(len(hit_sources))}
    first_hit: dict[str, int] = {}
    for i, sources in enumerate(hit_sources):
        for t in sources:
            first_hit.setdefault(t, i)
    for r, t in enumerate(turn_ids):
        key = first_hit.get(t, t)
        scores[key] = scores.get(key, 0.0) + 1.0 / (k + r + 1)
    rank_of = {key: (0, key) if isinstance(key, int) else (1, turn_ids.index(key)) for key in scores}
    return sorted(scores.items(), key=lambda kv: (-kv[1], rank_of[kv[0]]))
