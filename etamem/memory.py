"""`Memory`: the one entry class (DESIGN §1, §4, §11).

    mem = Memory("store_dir")            # or Memory() for an in-memory store
    mem.add(turns, space="user-42")      # raw turns stored first, then AMUs extracted
    hits = mem.search("question", space="user-42")
    ans = mem.answer("question", space="user-42", now="2023-06-01")

Models (text encoder, affect tagger, LLM) load lazily on first use and can be injected.
All public methods are thread-safe (one re-entrant lock per Memory).
"""
from __future__ import annotations

import logging
import os
import threading
from datetime import datetime
from itertools import groupby
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np

from .config import Config
from .encoders import make_text_encoder
from .inputs import normalise_turns, validate_space
from .store import Store
from .timeparse import parse_timestamp
from .types import AMU, Answer, Hit, SearchResult, StageCost, Turn
from .views import LLMSummariser, SpaceViews

log = logging.getLogger(__name__)

STORE_FILE = "memory.sqlite"
LLM_CACHE_FILE = "llm_cache.sqlite"


class Memory:
    """Long-term memory of multi-session conversations, partitioned by `space`.

    path: a directory holding `memory.sqlite` (and the LLM cache); None = in memory.
    config: a `Config` or a dict for `Config.from_dict`. text_encoder / affect_tagger /
    llm / extractor: optional injected components (tests, custom models).
    """

    def __init__(self, path: str | os.PathLike | None = None, config: Config | Mapping[str, Any] | None = None,
                 *, text_encoder=None, affect_tagger=None, llm=None, extractor=None):
        self.config = config if isinstance(config, Config) else Config.from_dict(config)
        self.path = None if path is None else Path(path)
        if self.path is not None and self.path.exists() and not self.path.is_dir():
            raise ValueError(f"path: {self.path} exists and is not a directory")
        self.store = Store(None if self.path is None else self.path / STORE_FILE)
        self._lock = threading.RLock()
        self._text_encoder = text_encoder
        self._affect_tagger = affect_tagger
        self._llm = llm
        self._llm_resolved = llm is not None
        self._extractor = extractor
        self._indexes: dict = {}  # space -> retrieval.SpaceIndex (derived; rebuilt after changes)
        self._turn_indexes: dict = {}  # space -> retrieval.TurnIndex over raw turns
        self._views: dict[str, SpaceViews] = {}
        self.extraction_stats = {"turns": 0, "amus": 0}  # LLM fallbacks: LLMExtractor.stats

    # --- lazily built components ----------------------------------------------------------
    @property
    def text_encoder(self):
        with self._lock:
            if self._text_encoder is None:
                self._text_encoder = make_text_encoder(self.config, persist=self.store)
            return self._text_encoder

    @property
    def affect_tagger(self):
        with self._lock:
            if self._affect_tagger is None:
                from .affect import make_affect_tagger

                self._affect_tagger = make_affect_tagger(self.config, self.text_encoder)
            return self._affect_tagger

    @property
    def llm(self):
        """The LLM client, or None when no model is configured (the embedded default)."""
        with self._lock:
            if not self._llm_resolved:
                from .llm import LLMClient

                cache = None if self.path is None else str(self.path / LLM_CACHE_FILE)
                self._llm = LLMClient.from_config(self.config, cache_path=cache)
                self._llm_resolved = True
            return self._llm

    @property
    def extractor(self):
        with self._lock:
            if self._extractor is None:
                from .extraction import LLMExtractor, RuleExtractor

                rule = RuleExtractor(min_words=self.config.min_amu_words)
                use_llm = self.config.extractor == "llm" or (self.config.extractor == "auto" and self.llm is not None)
                if use_llm:
                    if self.llm is None:
                        raise ValueError("config extractor='llm' needs an LLM: set llm_model or ETAMEM_LLM_MODEL")
                    self._extractor = LLMExtractor(self.llm, style=self.config.extraction_style, fallback=rule)
                else:
                    self._extractor = rule
                log.info("AMU extractor: %s", type(self._extractor).__name__)
            return self._extractor

    # --- writing --------------------------------------------------------------------------
    def add(self, turns: Iterable[Turn | Mapping[str, Any]] | Turn | Mapping[str, Any],
            space: str = "default") -> list[AMU]:
        """Store turns, then extract, tag and index their AMUs; returns the new AMUs.

        Bad input raises ValueError naming the field (e.g. `turns[2].timestamp`) and stores
        nothing from the call. Raw turns are durable before extraction: if a model fails,
        they stay pending and are processed by the next `add`/`flush`.
        A new session id ends the space's open sessions.
        """
        with self._lock:
            space = validate_space(space)
            items = [turns] if isinstance(turns, (Turn, Mapping)) else list(turns)
            if not items:
                return []
            ids = [it.turn_id if isinstance(it, Turn) else it.get("turn_id") for it in items]
            ids = [str(i) for i in ids if i is not None]
            existing = self.store.existing_turn_ids(space, ids)
            next_seq = self.store.next_turn_seq(space)
            clean = normalise_turns(items, space, default_tz=self.config.default_timezone,
                                    existing_ids=existing, next_seq=next_seq)
            self.store.insert_turns(clean, first_seq=next_seq)
            return self._process_pending(space)

    def flush(self, space: str = "default") -> list[AMU]:
        """Process any pending turns of the space (e.g. after a model failure)."""
        with self._lock:
            return self._process_pending(self._known_space(space))

    def end_session(self, space: str = "default") -> list[str]:
        """Close the space's open sessions (session-end maintenance); returns their ids."""
        with self._lock:
            space = self._known_space(space)
            self._process_pending(space)
            open_ids = self.store.open_sessions(space)
            self._end_sessions(space, open_ids)
            return open_ids

    def _end_sessions(self, space: str, session_ids: list[str]) -> None:
        """Mark sessions ended and run session-end maintenance (trees, calibration, summaries)."""
        if session_ids:
            views = self.views(space)
            report = views.maintain(self._summariser())
            views.save(self.store, space)
            self._indexes.pop(space, None)
            self.store.mark_sessions_ended(space, session_ids)
            log.debug("space %s: ended sessions %s; maintenance %s", space, session_ids, report)

    def _summariser(self):
        return None if self.llm is None else LLMSummariser(self.llm)

    def views(self, space: str = "default") -> SpaceViews:
        """The Event / Affect / Time views of a space (loaded from the store on first use)."""
        with self._lock:
            space = validate_space(space)
            if space not in self._views:
                text_dim = self.store.get_space_meta(space, "text_dim")
                affect_dim = self.store.get_space_meta(space, "affect_dim")
                text_dim = int(text_dim) if text_dim else self.text_encoder.dim
                affect_dim = int(affect_dim) if affect_dim else self.affect_tagger.dim
                amus = self.store.amus(space)
                ids = [a.amu_id for a in amus]
                empty_t, empty_a = np.zeros((0, text_dim), np.float32), np.zeros((0, affect_dim), np.float32)
                self._views[space] = SpaceViews.load(
                    self.store, space, self.config, amus,
                    self.store.amu_vectors(space, "text", ids) if ids else empty_t,
                    self.store.amu_vectors(space, "affect", ids) if ids else empty_a, text_dim, affect_dim)
            return self._views[space]

    def _process_pending(self, space: str) -> list[AMU]:
        pending = self.store.turns(space, pending_only=True)
        groups = [(sid, list(g)) for sid, g in groupby(pending, key=lambda t: t.session_id)]
        new: list[AMU] = []
        for i, (session_id, group) in enumerate(groups):
            # a session ends when a new one arrives and none of its turns are still to come
            still_pending = {sid for sid, _ in groups[i:]}
            self._end_sessions(space, [s for s in self.store.open_sessions(space) if s not in still_pending])
            new.extend(self._extract_and_store(space, group))
        if new:
            self._indexes.pop(space, None)
        if pending:
            self._turn_indexes.pop(space, None)
        return new

    def _extract_and_store(self, space: str, turns: list[Turn]) -> list[AMU]:
        extractor = self.extractor
        drafts: list[tuple[Turn, int, str]] = []
        for i, turn in enumerate(turns):
            context = turns[max(0, i - 4):i]
            for k, text in enumerate(extractor.extract(turn, context)):
                drafts.append((turn, k, text))
        texts = [d[2] for d in drafts]
        text_vecs = self.text_encoder.encode(texts)
        affect = self.affect_tagger.tag(texts)
        amus = [
            AMU(amu_id=f"{turn.turn_id}#{k}", text=text, speaker=turn.speaker, timestamp=turn.timestamp,
                session_id=turn.session_id, source_turn_ids=(turn.turn_id,), polarity=affect.polarities[j],
                polarity_scores=tuple(float(s) for s in affect.scores[j]), space=space)
            for j, (turn, k, text) in enumerate(drafts)
        ]
        views = self.views(space)
        self.store.write_amus(space, amus, text_vecs, affect.embeddings, [t.turn_id for t in turns],
                              dims={"text_dim": views.event.dim, "affect_dim": views.affect.dim})
        views.add(amus, text_vecs, affect.embeddings)
        views.save(self.store, space)
        self.extraction_stats["turns"] += len(turns)
        self.extraction_stats["amus"] += len(amus)
        return amus

    # --- reading --------------------------------------------------------------------------
    def spaces(self) -> list[str]:
        with self._lock:
            return self.store.spaces()

    def _known_space(self, space: str) -> str:
        space = validate_space(space)
        if space not in self.store.spaces():
            raise ValueError(f"space: unknown space {space!r} (known: {self.store.spaces()})")
        return space

    def stats(self, space: str = "default") -> dict:
        """Per-view shape of a space: AMUs, nodes, leaves, depth, fan-out, thresholds (event,
        affect), months/weeks/days/sessions (time), plus turn and AMU counts."""
        with self._lock:
            space = self._known_space(space)
            views = self.views(space)
            counters = [views.event.stats, views.affect.stats, views.time.stats]
            construction = {
                "turns": self.store.count_turns(space),
                "summaries_first": sum(c["summaries_first"] for c in counters),
                "summaries_refresh": sum(c["summaries_refresh"] for c in counters),
                "pending_updates": sum(c.get("pending_updates", 0) for c in counters),
                "summary_delta": self.config.summary_delta,
            }
            return {"space": space, "turns": construction["turns"], "amus": self.store.count_amus(space),
                    "views": views.shape(), "construction": construction}

    def get(self, amu_id: str, space: str = "default") -> AMU:
        """One AMU by id (any status); KeyError if absent."""
        with self._lock:
            found = self.store.amus(self._known_space(space), status=None, amu_ids=[amu_id])
            if not found:
                raise KeyError(f"no AMU {amu_id!r} in space {space!r}")
            return found[0]

    def list(self, space: str = "default", status: str | None = "active") -> list[AMU]:
        """AMUs of a space in insertion order (status=None: all statuses)."""
        with self._lock:
            return self.store.amus(self._known_space(space), status=status)

    def turns(self, space: str = "default", turn_ids: list[str] | None = None) -> list[Turn]:
        """Raw stored turns of a space in arrival order."""
        with self._lock:
            return self.store.turns(self._known_space(space), turn_ids=turn_ids)

    def delete(self, space: str = "default", amu_id: str | None = None) -> int:
        """Delete one AMU (marked deleted, vectors dropped) or, with amu_id=None, everything
        stored for the space (turns, AMUs, vectors, sessions). Returns how many AMUs went."""
        with self._lock:
            space = self._known_space(space)
            self._indexes.pop(space, None)
            self._turn_indexes.pop(space, None)
            if amu_id is None:
                n = self.store.count_amus(space)
                self.store.delete_space(space)
                self._views.pop(space, None)
                return n
            if not self.store.amus(space, status=None, amu_ids=[amu_id]):
                raise KeyError(f"no AMU {amu_id!r} in space {space!r}")
            removed = int(self.store.delete_amu(space, amu_id))
            views = self.views(space)
            views.remove(amu_id)
            views.save(self.store, space)
            return removed

    # --- search and answers ----------------------------------------------------------------
    def _index(self, space: str):
        from .retrieval import SpaceIndex

        if space not in self._indexes:
            views = self.views(space)
            amus = self.store.amus(space)
            ids = [a.amu_id for a in amus]
            text = self.store.amu_vectors(space, "text", ids) if ids else np.zeros((0, views.event.dim), np.float32)
            affect = self.store.amu_vectors(space, "affect", ids) if ids else np.zeros((0, views.affect.dim), np.float32)
            self._indexes[space] = SpaceIndex(views, amus, text, affect, exact_max=self.config.routing_exact_max)
        return self._indexes[space]

    def _turn_index(self, space: str):
        from .retrieval import TurnIndex, turn_text

        if space not in self._turn_indexes:
            turns = self.store.turns(space)
            vecs = self.text_encoder.encode([turn_text(t) for t in turns]) if turns else np.zeros(
                (0, self.text_encoder.dim), np.float32)
            self._turn_indexes[space] = TurnIndex(turns, vecs)
        return self._turn_indexes[space]

    def search(self, query: str, space: str = "default", top_k: int | None = None,
               now: datetime | str | None = None) -> list[Hit]:
        """Best AMUs of the space for the query, best first (see `retrieve`)."""
        return self.retrieve(query, space, top_k=top_k, now=now).hits

    def retrieve(self, query: str, space: str = "default", *, top_k: int | None = None,
                 now: datetime | str | None = None, views: tuple[str, ...] = ("event", "affect", "time"),
                 routing: str | None = None, fallback: bool = True, trace: bool = False) -> SearchResult:
        """Entropy-routed hierarchical retrieval with its routing weights (DESIGN §8).

        `top_k` AMUs are shared across `views` by `routing` ("entropy" | "mean", default from
        the config), found by beam search (width `beam_width`, score (1 - beta) * cos + beta
        * BM25n), merged and ranked. `now` is the question date for temporal expressions.
        When `fallback` is on and the retrieval confidence (`fallback_confidence`: best score or
        agreement with the raw-turn index) is below `fallback_threshold`, or nothing is found,
        the best raw turns are added as hits with `views == ("raw",)` (or fused, see
        `fallback_fusion`).
        """
        if not isinstance(query, str) or not query.strip():
            raise ValueError(f"query: expected a non-empty string, got {query!r}")
        k = self.config.top_k if top_k is None else int(top_k)
        if k < 1:
            raise ValueError(f"top_k: expected >= 1, got {top_k!r}")
        bad = [v for v in views if v not in ("event", "affect", "time")]
        if bad or not views:
            raise ValueError(f"views: expected a non-empty subset of event, affect, time; got {views!r}")
        when = None if now is None else parse_timestamp(now, self.config.default_timezone)
        cfg = self.config
        with self._lock:
            space = self._known_space(space)
            self._process_pending(space)
            index = self._index(space)
            q_text = self.text_encoder.encode([query])[0]
            q_affect = self.affect_tagger.tag([query]).embeddings[0] if "affect" in views else q_text
            result = index.search(query, q_text, q_affect, k, beam=cfg.beam_width, beta=cfg.bm25_weight,
                                  routing=routing or cfg.routing, temperature=cfg.routing_temperature, now=when,
                                  views=views, time_boost=cfg.time_boost,
                                  routing_candidates=cfg.routing_candidates, trace=trace)
            by_id = {a.amu_id: a for a in index.amus}
            hits = [Hit(amu=by_id[a], score=s, views=v, source_turn_ids=by_id[a].source_turn_ids)
                    for a, s, v in result.ranked[:k]]
            used, confidence = False, None
            if fallback:
                confidence, found = self._confidence(space, query, q_text, hits)
                used = confidence < cfg.fallback_threshold
                if used:
                    hits = self._with_fallback(space, query, q_text, hits, k, found)
        window = None if result.window is None else (result.window.start, result.window.end)
        return SearchResult(hits=hits, weights=result.routing.weights, budgets=result.routing.budgets,
                            entropies=result.routing.entropies, window=window, fallback_used=used,
                            confidence=confidence,
                            traces=result.traces)

    def _confidence(self, space: str, query: str, q_text: np.ndarray, hits: list[Hit]) -> tuple[float, list | None]:
        """Retrieval confidence in [-1, 1] (`fallback_confidence`) and, for "agreement", the raw
        turns it looked at (reused by the fallback). No hits -> -1.

        "score": the best hit's score. "agreement": |A ∩ R| / m with m = `fallback_agreement_k`,
        A the first m distinct source turns of the hits and R the raw-turn index's top m: two
        independent retrievers that agree make the memory's answer trustworthy.
        """
        cfg = self.config
        if not hits:
            return -1.0, None
        if cfg.fallback_confidence == "score":
            return float(hits[0].score), None
        m = cfg.fallback_agreement_k
        found = self._turn_index(space).search(q_text, query, max(m, cfg.fallback_turns), beta=cfg.bm25_weight)
        mine: list[str] = []
        for h in hits:
            mine.extend(t for t in h.source_turn_ids if t not in mine)
            if len(mine) >= m:
                break
        raw = {turn.turn_id for turn, _ in found[:m]}
        return len(raw.intersection(mine[:m])) / m, found

    def _with_fallback(self, space: str, query: str, q_text: np.ndarray, hits: list[Hit], k: int,
                       found: list | None = None) -> list[Hit]:
        """Bring in the best `fallback_turns` raw turns (`found`, searched if not given): fused
        with the hits by reciprocal rank (`fallback_fusion="rrf"`: a turn already covered by a
        hit strengthens that hit) or merged by score (`"score"`: only uncovered turns are added)."""
        from .retrieval import rrf_fuse

        cfg = self.config
        if found is None:
            found = self._turn_index(space).search(q_text, query, cfg.fallback_turns, beta=cfg.bm25_weight)
        found = found[:cfg.fallback_turns]
        by_id = {turn.turn_id: (turn, score) for turn, score in found}

        def raw_hit(turn, score: float) -> Hit:
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

    def answer(self, question: str, space: str = "default", now: datetime | str | None = None,
               top_k: int | None = None) -> Answer:
        """Answer from memory: an LLM answer grounded in a context packet (evidence AMUs with
        dates and views, their source turns, Time summaries) when an LLM is configured, else
        the best evidence sentences with a note saying no LLM is configured. If the LLM says
        the memories lack the answer, it is asked once more with raw turns added."""
        from .answering import says_missing

        when = None if now is None else parse_timestamp(now, self.config.default_timezone)
        result = self.retrieve(question, space=space, top_k=top_k, now=when)
        with self._lock:
            ans = self._compose(question, space, result.hits, when)
            if ans.llm_used and says_missing(ans.text) and not result.fallback_used:
                q_text = self.text_encoder.encode([question])[0]
                hits = self._with_fallback(space, question, q_text, result.hits, len(result.hits))
                retry = self._compose(question, space, hits, when)
                cost = {k: ans.cost.get(k, StageCost()) + retry.cost.get(k, StageCost())
                        for k in set(ans.cost) | set(retry.cost)}
                ans = Answer(retry.text, retry.hits, True, "asked again with raw turns (fallback)", cost)
            return ans

    def _compose(self, question: str, space: str, hits: list[Hit], when: datetime | None) -> Answer:
        from .answering import compose_answer

        turn_ids = sorted({s for h in hits for s in h.source_turn_ids})
        sources = {t.turn_id: t for t in self.store.turns(space, turn_ids=turn_ids)}
        return compose_answer(question, hits, sources, llm=self.llm, style=self.config.answer_style,
                              question_date=when, n_sentences=self.config.answer_evidence_sentences,
                              time_summaries=self.time_summaries(space, hits))

    def time_summaries(self, space: str, hits: list[Hit]) -> str:
        """Summaries of the day and week nodes the hits' sessions hang under, oldest first (the
        Time view's part of an answer prompt)."""
        forest = self.views(space).time
        keys: list[str] = []
        for h in sorted(hits, key=lambda h: h.amu.timestamp):
            node = f"S:{h.amu.session_id}"
            if node not in forest.nodes:
                continue
            for up in forest.path(node)[1:3]:  # day, week
                if up not in keys:
                    keys.append(up)
        lines = [f"{k[2:]}: {forest.nodes[k].summary}" for k in keys if forest.nodes[k].summary]
        return "\n".join(lines)

    # --- lifecycle ----------------------------------------------------------------------------
    def close(self) -> None:
        with self._lock:
            if self._llm is not None and hasattr(self._llm, "close"):
                self._llm.close()
            self.store.close()

    def __enter__(self) -> "Memory":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
