"""Prompt length against the model's context (see docs/llm.md, 'Prompts that fit').

An overflowing prompt is an HTTP 400 that no retry cures, so the callers that build long prompts
(`Memory.answer`, LLM extraction) measure theirs first and keep what fits: fewer evidence items,
fewer context turns, or, for a turn that alone does not fit, the rule extractor. Tokens are
counted by the server's own tokenizer where it offers one (llama-cpp-python's
`POST /extras/tokenize/count`); elsewhere by an upper estimate, the UTF-8 bytes / 3 (English BPE
vocabularies average about 4 bytes a token), so a trimmed prompt errs short.
"""
from __future__ import annotations

import logging
import math
import threading
from typing import Callable

log = logging.getLogger(__name__)

BYTES_PER_TOKEN = 3.0  # the estimate's divisor (an upper bound on tokens for English text)
MESSAGE_OVERHEAD = 16  # tokens a chat template adds around one message (role markers, BOS)


def estimate_tokens(text: str) -> int:
    """An upper estimate of `text`'s tokens without a tokenizer."""
    return math.ceil(len(text.encode("utf-8", "replace")) / BYTES_PER_TOKEN)


class TokenCounter:
    """Counts tokens with the endpoint's tokenizer when it has one (asked once; a server without
    the route is estimated for good), else `estimate_tokens`.

    Args:
        base_url: The OpenAI-compatible base URL (`.../v1`); the tokenizer route is beside it.
        model: The model name sent with each count.
        timeout_s: Seconds per count request.
    """

    def __init__(self, base_url: str | None, model: str, timeout_s: float = 10.0):
        root = (base_url or "").rstrip("/")
        self.url = (root[:-3] if root.endswith("/v1") else root) + "/extras/tokenize/count" if root else None
        self.model = model
        self.timeout_s = timeout_s
        self.exact: bool | None = None if self.url else False  # None: not asked yet
        self._lock = threading.Lock()

    def count(self, text: str) -> int:
        """Tokens of `text` (exact from the server's tokenizer, or the upper estimate)."""
        if self.exact is not False:
            n = self._ask(text)
            if n is not None:
                return n
        return estimate_tokens(text)

    def _ask(self, text: str) -> int | None:
        import httpx

        try:
            r = httpx.post(self.url, json={"input": text, "model": self.model}, timeout=self.timeout_s)
        except httpx.HTTPError as exc:  # the server busy or down: estimate this once, ask next time
            log.debug("token count: %s (%s); estimating", self.url, exc)
            return None
        if r.status_code != 200 or not isinstance(r.json(), dict) or not isinstance(r.json().get("count"), int):
            with self._lock:
                if self.exact is None:
                    log.info("token count: %s answered %s; estimating from the text's bytes from now on",
                             self.url, r.status_code)
                self.exact = False
            return None
        self.exact = True
        return int(r.json()["count"])


def fit(render: Callable[[int], str], n: int, budget: int, count: Callable[[str], int]) -> tuple[str, int]:
    """The prompt `render(k)` for the largest k in 0..n whose tokens (`count`) are within `budget`
    (binary search: `render(k)` must grow with k), and that k; `render(0)` when none fits.

    Args:
        render: k -> prompt text holding the first k items.
        n: Items available.
        budget: Most prompt tokens.
        count: text -> tokens.
    """
    prompt = render(n)
    if count(prompt) <= budget:
        return prompt, n
    lo, hi = 0, n - 1  # the answer lies in lo..hi
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count(render(mid)) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return render(lo), lo


def pack(render: Callable[[int, str], str], n: int, supplement: list[str], budget: int,
         count: Callable[[str], int]) -> tuple[str, int, int]:
    """Evidence first, supplements after: the prompt `render(k, text)` holding the most evidence
    items k (0..n) that fit `budget` without any supplement, then the longest prefix of the
    `supplement` lines (e.g. ETAMem's Time context) that still fits beside them. A supplement
    never pushes evidence out (docs/benchmarks.md, 'Evidence within the reader's budget').

    Args:
        render: (k, supplement text) -> prompt with the first k items and that text.
        n: Evidence items available.
        supplement: Lines, most useful first, added while they fit.
        budget: Most prompt tokens.
        count: text -> tokens.

    Returns:
        (prompt, items kept, supplement lines kept).
    """
    full = render(n, "\n".join(supplement))
    if count(full) <= budget:
        return full, n, len(supplement)
    _, k = fit(lambda j: render(j, ""), n, budget, count)
    text, lines = fit(lambda j: render(k, "\n".join(supplement[:j])), len(supplement), budget, count)
    return text, k, lines


def reader_counter(spec: str) -> tuple[str, Callable[[str], int]]:
    """(identity, count) of a reader's tokenizer: a known model's name (`etamem llm fetch`) or a
    `.gguf` path, its vocabulary loaded alone through llama-cpp-python (extra `local-llm`; no
    weights read), or "estimate" (`estimate_tokens`, no tokenizer).

    The identity names the file and the first 12 hex digits of its sha256 (a known model: the
    pinned digest), so a record says which tokenizer counted it."""
    if spec == "estimate":
        return f"estimate (UTF-8 bytes / {BYTES_PER_TOKEN:g})", estimate_tokens
    from etamem.install_hints import install_hint
    from etamem.models.local_llm import KNOWN_MODELS, resolve_model, sha256_of

    try:
        from llama_cpp import Llama
    except ImportError as exc:
        raise ImportError("counting tokens with a GGUF vocabulary needs llama-cpp-python: "
                          + install_hint("local-llm")) from exc
    path = resolve_model(spec)
    known = KNOWN_MODELS.get(path.stem)
    digest = known.sha256 if known is not None and path.stat().st_size == known.size else sha256_of(path)
    vocab = Llama(model_path=str(path), vocab_only=True, verbose=False)
    lock = threading.Lock()

    def count(text: str) -> int:
        with lock:
            return len(vocab.tokenize(text.encode("utf-8"), add_bos=False, special=False))
    return f"{path.name} sha256:{digest[:12]}", count
