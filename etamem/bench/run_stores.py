"""Stores and rankings for a benchmark run: one store per construction (built once per
space and reused by every system and every rerun), shared models, flat indexes per space."""
from __future__ import annotations

import logging
import os
import resource
import shutil
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import groupby
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from etamem.bench.ablations import (
    CONSTRUCTIONS,
    FTA_CONSTRUCTIONS,
    FTA_SEGMENTATION,
    CachingExtractor,
    SharedAffectEncoder,
    SharedTextTagger,
    TurnExtractor,
    UnifiedTagger,
)
from etamem.bench.composite import split_retrieve
from etamem.bench.data import BenchConversation, BenchQuestion
from etamem.bench.items import CUE_SESSION_PREFIX
from etamem.bench.metrics import rrf
from etamem.bench.systems import SystemSpec, Unit
from etamem.config import Config
from etamem.kernels import topk
from etamem.records import Hit, StageCost

log = logging.getLogger(__name__)
PRISTINE_SUFFIX = ".before-cue"  # a store's files while a question's cue is in it


def hold_root(root: Path) -> int | None:
    """An exclusive, non-blocking `flock` on `<root>/workbench.lock`, held until `close`: one run
    per stores directory (a LoCoMo-Plus cue moves a store aside, which another process opening
    it would take for a stopped run's leftover). ValueError when another run holds it; None where
    `fcntl` is missing."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not on Linux/macOS
        return None
    fd = os.open(root / "workbench.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise ValueError(f"{root} is in use by another benchmark run (one run per --stores directory)") from None
    return fd


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far (MB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def hits_to_units(hits: list[Hit]) -> list[Unit]:
    return [Unit(h.source_turn_ids, h.amu.text, h.amu.timestamp, h.views) for h in hits]


def usage_delta(before: dict[str, StageCost], after: dict[str, StageCost]) -> dict[str, dict[str, float]]:
    """stage -> calls, cached calls, tokens and seconds spent between two `LLMClient.usage()`s."""
    out = {}
    for stage, cost in after.items():
        d = cost - before.get(stage, StageCost())
        if d != StageCost():
            out[stage] = {"calls": d.calls, "cached_calls": d.cached_calls, "prompt_tokens": d.prompt_tokens,
                          "completion_tokens": d.completion_tokens, "seconds": round(d.seconds, 3)}
    return out


class _KeepOpen:
    """The run's LLM client as a Memory's: closing the Memory (a store closed and reopened around
    a cue) leaves the client open; the runner closes it at the end."""

    def __init__(self, inner):
        self._inner = inner

    @classmethod
    def of(cls, llm):
        return None if llm is None else cls(llm)

    def __getattr__(self, name: str):
        return getattr(self._inner, name)

    def close(self) -> None:
        pass


@dataclass
class Ranking:
    units: list[Unit]
    hits: list[Hit] = field(default_factory=list)  # ETAMem systems: the hits behind the units
    routing: dict[str, dict] | None = None  # ETAMem systems: {"weights": {view: w}, "budgets": {view: k}}
    fallback_used: bool = False  # ETAMem systems: raw turns were fused in at retrieval


class Workbench:
    """Models, stores and per-space indexes. `root`: directory of the stores (one
    sub-directory per construction) and the embedding / extraction caches.

    text_encoder / affect_tagger / llm: injected models (default: from `config`)."""

    def __init__(self, config: Config, root: str | Path, *, pool: int = 80, text_encoder=None, affect_tagger=None,
                 llm=None):
        self.config = config
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self._lock_fd = hold_root(self.root)
        self.pool = pool
        self.llm = llm
        self._inner_encoder = text_encoder
        self._text_encoder = None
        self._affect_tagger = affect_tagger
        self._mems: dict[str, Any] = {}
        self._extraction_caches: dict[str, CachingExtractor] = {}  # one per construction, kept across reopens
        self._embed_store = None
        self._flat: dict[tuple[str, str], Any] = {}
        self._cue: tuple[str, str] | None = None  # (space, qid) whose cue turns are in the memory now
        self._recovered: set[str] = set()  # constructions checked for a copy left by a stopped run

    # --- models ------------------------------------------------------------------------
    @property
    def text_encoder(self):
        if self._text_encoder is None:
            from etamem.models.encoders import CachedEncoder, make_text_encoder
            from etamem.store.sqlite import Store

            self._embed_store = Store(self.root / "embeddings.sqlite")
            if self._inner_encoder is None:
                self._text_encoder = make_text_encoder(self.config, persist=self._embed_store)
            else:
                self._text_encoder = CachedEncoder(self._inner_encoder, persist=self._embed_store)
        return self._text_encoder

    @property
    def affect_tagger(self):
        if self._affect_tagger is None:
            from etamem.models.affect import make_affect_tagger

            self._affect_tagger = make_affect_tagger(self.config, self.text_encoder)
        return self._affect_tagger

    def _extractor(self, construction: str):
        if construction == "turn":
            return TurnExtractor()
        if construction in self._extraction_caches:
            return self._extraction_caches[construction]
        from etamem.extraction.extractors import LLMExtractor, RuleExtractor

        cfg = self.config
        rule = RuleExtractor.from_config(cfg)
        use_llm = cfg.extractor == "llm" or (cfg.extractor == "auto" and self.llm is not None)
        if use_llm and self.llm is None:
            raise ValueError("config extractor='llm' needs an LLM: pass --model or set ETAMEM_LLM_MODEL")
        inner = LLMExtractor(self.llm, style=cfg.extraction_style, fallback=rule) if use_llm else rule
        name = (f"llm:{self.llm.model}:{cfg.extraction_style}" if use_llm else f"rule:{cfg.min_amu_words}")
        cache = CachingExtractor(inner, str(self.root / "extractions.sqlite"), name)
        self._extraction_caches[construction] = cache
        return cache

    def memory(self, construction: str):
        """The Memory of one construction (`amu`, `turn`, `shared_text`, `shared_affect`,
        `unified_semantic`, `unified_affective`)."""
        if construction not in CONSTRUCTIONS:
            raise ValueError(f"construction: expected one of {CONSTRUCTIONS}, got {construction!r}")
        if construction not in self._mems:
            from etamem.memory import Memory

            self._recover(construction)
            encoder, tagger, config = self.text_encoder, self.affect_tagger, self.config
            if construction in FTA_SEGMENTATION:
                config = config.replace(method="fta", units="auto", **FTA_CONSTRUCTIONS[construction])
            elif construction == "shared_text":
                tagger = SharedTextTagger(tagger, encoder)
            elif construction == "shared_affect":
                encoder = SharedAffectEncoder(tagger)
            elif construction.startswith("unified_"):
                tagger = UnifiedTagger(tagger, "event" if construction == "unified_semantic" else "affect")
            extractor = None if construction in FTA_SEGMENTATION else self._extractor(construction)  # FTA: its own
            self._mems[construction] = Memory(self.root / construction, config, text_encoder=encoder,
                                              affect_tagger=tagger, llm=_KeepOpen.of(self.llm), extractor=extractor)
        return self._mems[construction]

    def query_texts(self, conv: BenchConversation) -> list[str]:
        """Every text the systems encode for the conversation's questions: each question and,
        where it names a speaker, the question without the names (`retrieval.query_texts`)."""
        from etamem.retrieval import named_speakers, query_texts

        speakers = {t["speaker"] for t in conv.turns}
        mix = self.config.query_name_mix
        return list(dict.fromkeys(t for q in conv.questions
                                  for t in query_texts(q.question, named_speakers(q.question, speakers), mix)))

    def is_built(self, construction: str, conv: BenchConversation) -> bool:
        path = self.root / construction / "memory.sqlite"
        if construction not in self._mems:
            self._recover(construction)
            if not path.exists():
                return False
        mem = self.memory(construction)
        return (conv.space in mem.spaces() and mem.store.count_turns(conv.space) == len(conv.turns)
                and not mem.store.open_sessions(conv.space) and not mem.store.count_pending(conv.space))

    def build(self, construction: str, conv: BenchConversation) -> dict:
        """Ingest one conversation into the construction's store (a partial space left by an
        interrupted run is deleted first); returns its construction cost. Raises `LLMUnavailable`
        when the LLM gave no reply for a turn (it stays pending: the store is not evaluated and
        the next run builds it again, extractions already made coming from the caches)."""
        mem = self.memory(construction)
        if conv.space in mem.spaces():
            mem.delete(space=conv.space)
        before = self.llm.usage() if self.llm is not None else {}
        extractor = self._extraction_caches.get(construction)
        counted = extractor.stats if extractor is not None else {}
        t0 = time.perf_counter()
        for _, session in groupby(conv.turns, key=lambda t: t["session_id"]):
            mem.add(list(session), space=conv.space)
            if construction not in FTA_SEGMENTATION:  # FTA: the session's last segment waits for the next one
                self._check_extracted(mem, construction, conv)
        mem.end_session(conv.space)
        self._check_extracted(mem, construction, conv)
        wall = time.perf_counter() - t0
        llm = usage_delta(before, self.llm.usage()) if self.llm is not None else {}
        # the extractor's counters for this build (turns the LLM extracted or the rules made, units rejected by
        # grounding); a turn found in the extraction cache counts nowhere
        extraction = {k: v - counted.get(k, 0) for k, v in extractor.stats.items()} if extractor is not None else {}
        return {"construction": construction, "space": conv.space, "wall_s": wall, "turns": len(conv.turns),
                "amus": mem.store.count_amus(conv.space), "llm": llm, "extraction": extraction,
                "peak_rss_mb": peak_rss_mb()}

    @staticmethod
    def _check_extracted(mem, construction: str, conv: BenchConversation) -> None:
        pending = mem.store.count_pending(conv.space)
        if pending:
            from etamem.models.llm import LLMUnavailable

            raise LLMUnavailable(f"{construction} store, space {conv.space}: {pending} turns not extracted, the LLM "
                                 "gave no reply (see the log); run again to resume")

    # --- per-question cues (LoCoMo-Plus) ------------------------------------------------------
    @contextmanager
    def cue(self, spec: SystemSpec, conv: BenchConversation, q: BenchQuestion) -> Iterator[None]:
        """The question's `cue_turns` in what the system ranks while the block runs: added (one
        closed session) to every store the system reads, flat turn rankings over the
        conversation's turns plus the cue's. Nothing to do for a question without cue turns.

        Afterwards each store is the plain conversation again, exactly: its files are copied
        before the cue goes in and put back after (`Memory.delete` of the cue's turns removes
        them and their units, but not what their insertion changed in the views: node splits,
        calibrated thresholds, session-end maintenance; rankings of other questions would then
        depend on the cues asked before). A run stopped inside the block leaves the copy, put
        back when the store is next opened. The stores are closed and reopened: a Memory got from
        `memory()` before the block is closed after it (ask `memory()` again)."""
        if not q.cue_turns:
            yield
            return
        if self._cue is not None:
            raise ValueError(f"cue of {self._cue[1]} still in the memory: one question's cue at a time")
        bad = [t["turn_id"] for t in q.cue_turns if not str(t.get("session_id", "")).startswith(CUE_SESSION_PREFIX)]
        if bad:
            raise ValueError(f"{q.qid}: cue turns must be in a {CUE_SESSION_PREFIX}* session ({', '.join(bad)})")
        saved = []
        self._cue = (conv.space, q.qid)
        try:
            for construction in spec.constructions:
                self._recover(construction)
                self._close(construction)
                self._save(construction)
                saved.append(construction)
                mem = self.memory(construction)
                mem.add(q.cue_turns, space=conv.space)
                mem.end_session(conv.space)
            if spec.kind in ("bm25_turns", "dense_turns", "hybrid_turns"):  # indexed here, not in the timed rank
                self._turns(conv, q)
            elif spec.kind == "flat_amus":
                self._amus(conv, q)
            yield
        finally:
            self._cue = None
            for key in [k for k in self._flat if k[0].startswith("cue-")]:
                del self._flat[key]
            for construction in saved:
                self._close(construction)
                self._restore(construction)

    def _close(self, construction: str) -> None:
        mem = self._mems.pop(construction, None)
        if mem is not None:
            mem.close()

    def _saved(self, construction: str) -> tuple[Path, Path, Path]:
        """(store directory, its copy from before a cue, the copy being written)."""
        saved = self.root / f"{construction}{PRISTINE_SUFFIX}"
        return self.root / construction, saved, saved.with_name(saved.name + ".partial")

    def _save(self, construction: str) -> None:
        """Copy the (closed) store's files aside; the copy appears whole or not at all."""
        store, saved, partial = self._saved(construction)
        shutil.rmtree(partial, ignore_errors=True)
        shutil.copytree(store, partial)
        partial.rename(saved)

    def _recover(self, construction: str) -> None:
        """Once per construction, before its store is first opened: put back the copy a run
        stopped inside `cue` left (the store as it was before that cue)."""
        if construction not in self._recovered:
            self._recovered.add(construction)
            if self._restore(construction):
                log.info("%s store: a cue left by a stopped run removed (the store put back)", construction)

    def _restore(self, construction: str) -> bool:
        """Put back the copy `_save` made, if there is one (the store must be closed)."""
        store, saved, partial = self._saved(construction)
        shutil.rmtree(partial, ignore_errors=True)  # stopped while copying: the store is untouched
        if not saved.exists():
            return False
        shutil.rmtree(store, ignore_errors=True)
        saved.rename(store)
        log.debug("%s store put back as it was before a cue", construction)
        return True

    def _with_cue(self, conv: BenchConversation, q: BenchQuestion | None) -> bool:
        """Whether a ranking for `q` must see its cue (it must then run inside `cue`)."""
        if q is None or not q.cue_turns:
            return False
        if self._cue != (conv.space, q.qid):
            raise ValueError(f"{q.qid} has cue turns: rank it inside Workbench.cue(...)")
        return True

    # --- rankings ------------------------------------------------------------------------
    def turns(self, conv: BenchConversation, q: BenchQuestion | None = None) -> list:
        """The conversation's turns as `Turn`s (normalised as `Memory.add` does; cached), with
        `q`'s cue turns last when it has some (inside `cue`)."""
        return self._turns(conv, q)[0]

    def _turns(self, conv: BenchConversation, q: BenchQuestion | None = None):
        cue = self._with_cue(conv, q)
        key = ("cue-turns" if cue else "turns", conv.space)
        if key not in self._flat:
            from etamem.ingest.inputs import normalise_turns
            from etamem.ingest.timeparse import format_date
            from etamem.retrieval import LexicalIndex, turn_text
            from etamem.retrieval.flat import FlatHybridIndex

            self._drop_other_spaces(conv.space)
            raw = conv.turns + q.cue_turns if cue else conv.turns
            turns = normalise_turns(raw, conv.space, default_tz=self.config.default_timezone)
            texts = [f"{turn_text(t)} {format_date(t.timestamp)}" for t in turns]
            vecs = self.text_encoder.encode([turn_text(t) for t in turns])
            stem = self.config.bm25_stemmer
            self._flat[key] = (turns, LexicalIndex(texts, stemmer=stem), FlatHybridIndex(vecs, texts, stemmer=stem))
        return self._flat[key]

    def _amus(self, conv: BenchConversation, q: BenchQuestion | None = None):
        key = ("cue-amus" if self._with_cue(conv, q) else "amus", conv.space)  # inside `cue`: the store has it
        if key not in self._flat:
            from etamem.retrieval import amu_search_text
            from etamem.retrieval.flat import FlatHybridIndex

            self._drop_other_spaces(conv.space)
            mem = self.memory("amu")
            amus = mem.list(conv.space)
            vecs = mem.store.amu_vectors(conv.space, "text", [a.amu_id for a in amus])
            self._flat[key] = (amus, FlatHybridIndex(vecs, [amu_search_text(a) for a in amus],
                                                     stemmer=self.config.bm25_stemmer))
        return self._flat[key]

    def _drop_other_spaces(self, space: str) -> None:
        for key in [k for k in self._flat if k[1] != space]:
            del self._flat[key]

    def rank(self, spec: SystemSpec, conv: BenchConversation, q: BenchQuestion) -> Ranking:
        """The system's ranked units for the question (at most `pool` units; an ETAMem system's
        retrieval is called with top_k = `pool`, so its routed budget is the pool)."""
        from etamem.retrieval import turn_text

        pool, question = self.pool, q.question
        if spec.kind in ("bm25_turns", "dense_turns", "hybrid_turns"):
            turns, lex, dense = self._turns(conv, q)
            if spec.kind == "bm25_turns":
                s = lex.scores_all(question)
                order = topk(s, pool).tolist()
            else:
                qv = self.text_encoder.encode([question])[0]
                by_dense = [r.index for r in dense.search(qv, question, pool if spec.kind == "dense_turns"
                                                          else len(turns), beta=0.0)]
                if spec.kind == "dense_turns":
                    order = by_dense
                else:
                    s = lex.scores_all(question)
                    by_bm25 = [int(i) for i in np.lexsort((np.arange(len(s)), -s)) if s[i] > 0]
                    order = rrf([by_bm25, by_dense], self.config.rrf_k)[:pool]
            return Ranking([Unit((turns[i].turn_id,), turn_text(turns[i]), turns[i].timestamp, ("turn",))
                            for i in order])
        if spec.kind == "flat_amus":
            amus, index = self._amus(conv, q)
            qv = self.text_encoder.encode([question])[0]
            found = index.search(qv, question, pool, beta=self.config.bm25_weight)
            return Ranking([Unit(amus[r.index].source_turn_ids, amus[r.index].text, amus[r.index].timestamp,
                                 ("flat",)) for r in found])
        if spec.kind in ("etamem", "fta"):
            self._with_cue(conv, q)  # the store must hold the cue
            mem = self.memory(spec.construction or "amu")
            base = mem.config
            cfg = base.replace(**dict(spec.overrides)) if spec.overrides else base
            if spec.time_store:
                result = split_retrieve(mem, self.memory(spec.time_store), question, conv.space, top_k=pool,
                                        now=q.now, views=spec.views, routing=spec.routing, fallback=spec.fallback,
                                        config=cfg)
            else:
                mem.config = cfg
                try:  # read at call time; the cached indexes do not depend on these settings
                    result = mem.retrieve(question, conv.space, top_k=pool, now=q.now, views=spec.views,
                                          routing=spec.routing, fallback=spec.fallback)
                finally:
                    mem.config = base
            hits = result.hits
            if spec.kind == "fta":  # one list, no routing across views
                return Ranking(hits_to_units(hits), hits)
            return Ranking(hits_to_units(hits), hits,
                           {"weights": {v: float(w) for v, w in result.weights.items()},
                            "budgets": {v: int(b) for v, b in result.budgets.items()}}, result.fallback_used)
        raise ValueError(f"system {spec.key!r} ({spec.kind}) does not rank")

    def with_raw_turns(self, spec: SystemSpec, conv: BenchConversation, q: BenchQuestion, hits: list[Hit]) -> list[Hit]:
        """`hits` with the best raw turns fused in, as `Memory.answer` does before asking again
        (the raw-turn index of the store that serves the system's Time view and fallback)."""
        mem = self.memory(spec.time_store or spec.construction or "amu")
        base = mem.config
        mem.config = base.replace(**dict(spec.overrides)) if spec.overrides else base
        try:
            return mem.with_raw_turns(q.question, hits, conv.space)
        finally:
            mem.config = base

    def fta_packet(self, spec: SystemSpec, space: str, hits: list[Hit], *, auxiliary: bool = True) -> str:
        """The FTA-Mem answer packet of `hits` (sections or flat, by the system's config; without
        the auxiliary memory when `auxiliary` is False)."""
        from etamem.fta.search import packet_for

        mem = self.memory(spec.construction)
        cfg = mem.config.replace(**dict(spec.overrides)) if spec.overrides else mem.config
        return packet_for(mem.store, space, hits, cfg, auxiliary=auxiliary)

    def time_summaries(self, spec: SystemSpec, space: str, hits: list[Hit]) -> str:
        if spec.kind != "etamem" or not hits:
            return ""
        return self.memory(spec.time_store or spec.construction or "amu").time_summaries(space, hits)

    def close(self) -> None:
        for mem in self._mems.values():
            mem.close()
        self._mems.clear()
        for cache in self._extraction_caches.values():
            cache.close()
        if self._embed_store is not None:
            self._embed_store.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = None
