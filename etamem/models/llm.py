"""LLM client for any OpenAI-compatible endpoint (see docs/design.md, 'Answering and the LLM').

Retries with exponential backoff on rate limits, 5xx, timeouts and connection errors;
strict JSON parsing with one repair round; an SQLite response cache keyed by
(model, messages, params); token and call accounting per stage.

Errors: `LLMUnavailable` when no reply came (endpoint unreachable, timeouts, 408/429/5xx or a
malformed HTTP body after the retries, or a request rejected with another status);
`LLMJSONError` when a reply came but `complete_json` could not use it; `LLMError` (their base)
for a reply without text. `complete_json` caches only replies it could use.
"""
from __future__ import annotations

import contextlib
import contextvars
import email.utils
import hashlib
import json
import logging
import math
import os
import re
import sqlite3
import threading
import time
from typing import Any, Callable

from etamem.models import cache_scope
from etamem.models.tokens import MESSAGE_OVERHEAD, TokenCounter
from etamem.records import StageCost

log = logging.getLogger(__name__)

PLACEHOLDER_API_KEY = "not-needed"  # local servers (vLLM, Ollama, llama.cpp) ignore the key
_FENCE = re.compile(r"\A```[A-Za-z0-9_-]*[ \t]*\n(.*?)\n?[ \t]*```\Z", re.DOTALL)
_EXCERPT = 200


RESPONSE_FORMATS = ("json_schema", "json_object", "none")  # "auto" starts at the first and steps down


def response_format(mode: str, schema: dict, name: str) -> dict | None:
    """The `response_format` of a JSON request in `mode`: OpenAI's and vLLM's `json_schema`,
    llama-cpp-python's `json_object` with a `schema`, or None (the prompt alone)."""
    if mode == "json_schema":
        return {"type": "json_schema", "json_schema": {"name": name, "schema": schema}}
    if mode == "json_object":
        return {"type": "json_object", "schema": schema}
    return None


def _refuses_format(exc: Any) -> bool:
    """Whether an HTTP error is the server refusing the request's `response_format`."""
    return "response_format" in _body_text(exc).lower()


class LLMError(RuntimeError):
    """The endpoint failed, refused the request or returned no usable reply."""


class LLMUnavailable(LLMError):
    """No reply: the endpoint was unreachable, timed out, kept answering 408/429/5xx (or a
    malformed body) through the retries, or rejected the request (401, 400, ...). Asking again
    later may work; the reply itself says nothing about the prompt."""


class LLMJSONError(LLMError):
    """The reply was not valid JSON even after one repair attempt, or not of the expected form."""


def _excerpt(text: str, n: int = _EXCERPT) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 3] + "..."


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-standard JSON constant {name}")


def parse_json_strict(text: str) -> Any:
    """Parse `text` as JSON after stripping whitespace and one surrounding ``` fence. Anything
    that is not plain JSON raises ValueError: NaN/Infinity, numbers beyond float range, nesting
    too deep for the parser."""
    body = text.strip()
    m = _FENCE.match(body)
    if m:
        body = m.group(1).strip()
    try:
        return json.loads(body, parse_constant=_reject_constant, parse_float=_finite_float)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:40]} is out of range")
    return value


class _ResponseCache:
    """SQLite store of raw replies (WAL mode, one connection shared under a lock), each with its
    request's text and the refs (`cache_refs`) of the calls that made or reused it, so that
    deleting a space or a turn finds what was built from it (`forget_cached`)."""

    def __init__(self, path: str) -> None:
        from etamem.store.private_files import private_file

        private_file(path)  # 0600, like the store's files
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(path, check_same_thread=False, timeout=30.0)
        with self._lock:
            self._conn.execute("PRAGMA journal_mode=WAL")
            self.create(self._conn)

    @staticmethod
    def create(conn: sqlite3.Connection) -> None:
        """Tables (and the columns added since a cache was first written); deleted rows zeroed."""
        conn.execute("PRAGMA secure_delete=ON")
        conn.execute(
            "CREATE TABLE IF NOT EXISTS responses ("
            " key TEXT PRIMARY KEY, model TEXT NOT NULL, response TEXT NOT NULL,"
            " prompt_tokens INTEGER NOT NULL, completion_tokens INTEGER NOT NULL,"
            " created REAL NOT NULL, request TEXT NOT NULL DEFAULT '')"
        )
        if "request" not in {r[1] for r in conn.execute("PRAGMA table_info(responses)")}:
            conn.execute("ALTER TABLE responses ADD COLUMN request TEXT NOT NULL DEFAULT ''")
        conn.execute("CREATE TABLE IF NOT EXISTS refs (key TEXT NOT NULL, ref TEXT NOT NULL, PRIMARY KEY (ref, key))")
        conn.commit()

    def get(self, key: str) -> tuple[str, int, int] | None:
        with self._lock:
            row = self._conn.execute(
                "SELECT response, prompt_tokens, completion_tokens FROM responses WHERE key = ?",
                (key,),
            ).fetchone()
        return None if row is None else (row[0], int(row[1]), int(row[2]))

    def put(self, key: str, model: str, text: str, prompt_tokens: int, completion_tokens: int,
            request: str = "", refs: tuple[str, ...] = ()) -> None:
        with self._lock:
            self._conn.execute(
                "INSERT OR REPLACE INTO responses (key, model, response, prompt_tokens, completion_tokens, created,"
                " request) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (key, model, text, prompt_tokens, completion_tokens, time.time(), request),
            )
            self._conn.executemany("INSERT OR IGNORE INTO refs VALUES (?, ?)", [(key, r) for r in refs])
            self._conn.commit()

    def add_refs(self, key: str, refs: tuple[str, ...]) -> None:
        """Tag an entry reused by another call (e.g. the same request from another space)."""
        if refs:
            with self._lock:
                self._conn.executemany("INSERT OR IGNORE INTO refs VALUES (?, ?)", [(key, r) for r in refs])
                self._conn.commit()

    def delete(self, key: str) -> None:
        with self._lock:
            self._conn.execute("DELETE FROM responses WHERE key = ?", (key,))
            self._conn.execute("DELETE FROM refs WHERE key = ?", (key,))
            self._conn.commit()

    def close(self) -> None:
        with self._lock:
            self._conn.close()


class LLMClient:
    """Chat-completions client with retries, a disk cache and per-stage accounting.

    `calls` counts replies fetched from the endpoint (retries not included);
    `cached_calls` counts replies served from the cache, which add no tokens.
    """

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout_s: float = 60.0,
        max_retries: int = 5,
        backoff_s: float = 1.0,
        backoff_max_s: float = 30.0,
        temperature: float = 0.0,
        max_tokens: int = 1024,
        cache_path: str | None = None,
        response_format: str = "auto",
        concurrency: int | None = None,
        context_tokens: int = 0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        import openai

        if not model:
            raise ValueError("LLMClient needs a model name")
        self.model = model
        self.base_url = base_url
        self.timeout_s = float(timeout_s)
        self.max_retries = max(0, int(max_retries))
        self.backoff_s = float(backoff_s)
        self.backoff_max_s = float(backoff_max_s)
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.cache_path = cache_path
        if response_format not in ("auto", *RESPONSE_FORMATS):
            raise ValueError(f"response_format {response_format!r}: expected auto or one of {RESPONSE_FORMATS}")
        # the JSON mode asked for next; "auto" steps down when the server refuses one
        self.format_mode = RESPONSE_FORMATS[0] if response_format == "auto" else response_format
        self.format_fixed = response_format != "auto"
        self._sleep = sleep
        if api_key is None and base_url is not None and not os.environ.get("OPENAI_API_KEY"):
            api_key = PLACEHOLDER_API_KEY
        try:
            self._client = openai.OpenAI(
                api_key=api_key, base_url=base_url, timeout=self.timeout_s, max_retries=0
            )
        except openai.OpenAIError as exc:
            raise LLMError(f"cannot create the OpenAI client for model {model!r}: {exc}") from exc
        self._cache = _ResponseCache(cache_path) if cache_path else None
        self._usage_lock = threading.Lock()
        self._usage: dict[str, StageCost] = {}
        # requests in flight at once (None: unbounded); a request's timeout starts once it has a slot
        self._slots = None if concurrency is None else threading.BoundedSemaphore(max(1, int(concurrency)))
        self.context_tokens = max(0, int(context_tokens))  # 0: unknown (`prompt_budget` None)
        self.tokens = TokenCounter(base_url, model, min(self.timeout_s, 10.0))

    @classmethod
    def from_config(cls, config: Any, cache_path: str | None = None) -> "LLMClient | None":
        """Build a client from a Config (then the environment); None when no model is set."""
        model = config.resolved_llm_model()
        if not model:
            return None
        base_url = config.resolved_llm_base_url()
        api_key = config.resolved_llm_api_key()
        if api_key is None and base_url is not None:
            api_key = PLACEHOLDER_API_KEY
        return cls(
            model,
            base_url=base_url,
            api_key=api_key,
            timeout_s=config.resolved_llm_timeout_s(),
            max_retries=config.llm_max_retries,
            backoff_s=config.llm_backoff_s,
            backoff_max_s=config.llm_backoff_max_s,
            temperature=config.llm_temperature,
            max_tokens=config.llm_max_tokens,
            cache_path=config.llm_cache_path or cache_path,
            response_format=config.llm_response_format,
            concurrency=config.llm_concurrency,
            context_tokens=config.resolved_llm_context_tokens(),
        )

    def prompt_budget(self, max_tokens: int | None = None) -> int | None:
        """Most tokens a one-message prompt may hold so that `max_tokens` of reply (default the
        client's) fit the model's context; None when the context is unknown."""
        if not self.context_tokens:
            return None
        reply = self.max_tokens if max_tokens is None else max_tokens
        return self.context_tokens - int(reply) - MESSAGE_OVERHEAD

    # --- accounting -------------------------------------------------------------------
    def usage(self) -> dict[str, StageCost]:
        """Per-stage calls, cached calls and tokens so far (a copy)."""
        with self._usage_lock:
            return dict(self._usage)

    def reset_usage(self) -> None:
        with self._usage_lock:
            self._usage = {}

    def _account(self, stage: str, *, cached: bool, prompt_tokens: int = 0, completion_tokens: int = 0,
                 seconds: float = 0.0) -> None:
        with self._usage_lock:
            self._usage[stage] = self._usage.get(stage, StageCost()) + StageCost(
                calls=0 if cached else 1, cached_calls=1 if cached else 0,
                prompt_tokens=prompt_tokens, completion_tokens=completion_tokens, seconds=seconds)

    # --- completion -------------------------------------------------------------------
    def cache_key(self, messages: list[dict], temperature: Any, max_tokens: Any, params: dict) -> str:
        payload = {
            "model": self.model,
            "messages": messages,
            "temperature": temperature,
            "max_tokens": max_tokens,
            "params": params,
        }
        if cache_scope.current() is not None:  # made for a space: no other space reads it
            payload["space"] = cache_scope.current()
        blob = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()

    def complete(self, messages: list[dict], *, stage: str, **params: Any) -> str:
        """Return the reply text for `messages` (cached); `params` go to chat.completions.create.

        Raises `LLMUnavailable` when no reply came after the retries, `LLMError` for a reply
        without text."""
        text, _, entry = self._fetch(messages, stage, params)
        self._remember([entry])
        return text

    def _fetch(self, messages: list[dict], stage: str, params: dict) -> tuple[str, str | None, tuple | None]:
        """(reply text, cache key or None without a cache, cache entry to store or None on a hit):
        from the cache, else from the endpoint. The caller decides whether to store the entry."""
        params = dict(params)
        temperature = params.pop("temperature", self.temperature)
        max_tokens = params.pop("max_tokens", self.max_tokens)
        key = None
        if self._cache is not None:
            key = self.cache_key(messages, temperature, max_tokens, params)
            hit = self._cache.get(key)
            if hit is not None:
                self._account(stage, cached=True)
                self._cache.add_refs(key, current_refs())
                return hit[0], key, None
        response, seconds = self._request_with_retries(messages, temperature, max_tokens, params, stage)
        text, prompt_tokens, completion_tokens = self._read_response(response, stage)
        self._account(stage, cached=False, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                      seconds=seconds)
        request = "\n\n".join(str(m.get("content", "")) for m in messages)  # searched by `forget_cached`
        entry = None if key is None else (key, self.model, text, prompt_tokens, completion_tokens, request,
                                          current_refs())
        return text, key, entry

    def _remember(self, entries: list[tuple | None]) -> None:
        if self._cache is not None:
            for entry in entries:
                if entry is not None:
                    self._cache.put(*entry)

    @contextlib.contextmanager
    def _slot(self):
        """One of the `concurrency` request slots, held while a request is in flight."""
        if self._slots is None:
            yield
            return
        with self._slots:
            yield

    def _request_with_retries(
        self, messages: list[dict], temperature: Any, max_tokens: Any, params: dict, stage: str
    ) -> tuple[Any, float]:
        """(the endpoint's response, seconds it took over the attempts)."""
        import openai

        attempts = self.max_retries + 1
        last: Exception | None = None
        attempt = 0
        spent = 0.0  # seconds the endpoint took, over the attempts
        while attempt < attempts:
            try:
                with self._slot():
                    t0 = time.perf_counter()
                    try:
                        return self._client.chat.completions.create(
                            model=self.model,
                            messages=messages,
                            temperature=temperature,
                            max_tokens=max_tokens,
                            **params,
                        ), spent + time.perf_counter() - t0
                    finally:
                        spent += time.perf_counter() - t0
            except openai.APIStatusError as exc:
                status = exc.status_code
                if "response_format" in params and not self.format_fixed and _refuses_format(exc):
                    self._step_down(params, stage, status)  # not an attempt: the same request without it
                    continue
                if not (status == 408 or status == 429 or status >= 500):
                    raise LLMUnavailable(
                        f"LLM request rejected (stage {stage!r}, model {self.model!r}): "
                        f"HTTP {status}: {_excerpt(_body_text(exc))}"
                    ) from exc
                last, reason = exc, f"HTTP {status}"
                retry_after = _retry_after_s(exc.response)
            except openai.APIConnectionError as exc:  # includes APITimeoutError
                kind = "timeout" if isinstance(exc, openai.APITimeoutError) else "connection error"
                last, reason, retry_after = exc, kind, None
            except json.JSONDecodeError as exc:  # an HTTP 200 whose body is not JSON (proxy page, cut off)
                last, reason, retry_after = exc, "malformed response body", None
            attempt += 1
            if attempt >= attempts:
                break
            delay = min(self.backoff_s * (2 ** (attempt - 1)), self.backoff_max_s)
            if retry_after is not None:
                delay = min(max(retry_after, 0.0), self.backoff_max_s)
            log.warning(
                "LLM %s (stage %s), retry %d/%d in %.2fs", reason, stage, attempt, self.max_retries, delay
            )
            self._sleep(delay)
        raise LLMUnavailable(
            f"LLM request failed after {attempts} attempt(s) (stage {stage!r}, model {self.model!r}): "
            f"{_describe(last)}"
        ) from last

    def _step_down(self, params: dict, stage: str, status: int) -> None:
        """The server refused the JSON mode in `params`: the next mode for this and later requests."""
        refused = params["response_format"].get("type")
        schema = params["response_format"].get("json_schema", {}).get("schema") or params["response_format"].get("schema")
        modes = RESPONSE_FORMATS[RESPONSE_FORMATS.index(refused) + 1:] if refused in RESPONSE_FORMATS else ("none",)
        self.format_mode = modes[0] if modes else "none"
        log.info("LLM server refused response_format %s (HTTP %d, stage %s); asking with %s from now on",
                 refused, status, stage, self.format_mode)
        fmt = response_format(self.format_mode, schema or {}, stage)
        if fmt is None:
            params.pop("response_format")
        else:
            params["response_format"] = fmt

    def _read_response(self, response: Any, stage: str) -> tuple[str, int, int]:
        choices = getattr(response, "choices", None) or []
        if not choices:
            raise LLMError(f"LLM reply without choices (stage {stage!r}, model {self.model!r})")
        text = choices[0].message.content
        if text is None:
            raise LLMError(
                f"LLM reply without text content (stage {stage!r}, finish_reason "
                f"{choices[0].finish_reason!r})"
            )
        usage = getattr(response, "usage", None)
        prompt_tokens = int(getattr(usage, "prompt_tokens", 0) or 0)
        completion_tokens = int(getattr(usage, "completion_tokens", 0) or 0)
        return text, prompt_tokens, completion_tokens

    def complete_json(self, messages: list[dict], *, stage: str,
                      validate: Callable[[Any], Any] | None = None, schema: dict | None = None,
                      **params: Any) -> Any:
        """Complete and parse the reply as strict JSON, with one repair round.

        `schema` (a JSON schema of the expected reply): asked for through `response_format` in
        the client's JSON mode (`format_mode`), which steps down when the server refuses it.

        `validate(parsed)` returns the value to hand back, or raises ValueError when the JSON
        is not of the expected form (`LLMJSONError`, no repair round). Only usable replies are
        cached: a reply that is not JSON only together with a repair that parsed and validated;
        on `LLMJSONError` nothing is stored (and cache entries that replayed into it, e.g. left by
        an older version, are dropped), so a rerun asks again. `LLMUnavailable`: no reply came."""
        keys: list[str | None] = []
        entries: list[tuple | None] = []
        if schema is not None and "response_format" not in params:
            fmt = response_format(self.format_mode, schema, stage)
            if fmt is not None:
                params["response_format"] = fmt
        try:
            text, key, entry = self._fetch(messages, stage, params)
            keys.append(key)
            entries.append(entry)
            try:
                value = parse_json_strict(text)
            except ValueError as exc:
                error = str(exc)
                log.info("LLM reply for stage %s was not valid JSON (%s); asking for a repair", stage, error)
                repair = list(messages) + [
                    {"role": "assistant", "content": text},
                    {
                        "role": "user",
                        "content": (
                            f"Your reply was not valid JSON ({error}). "
                            "Reply with only the corrected JSON, no explanation and no code fence."
                        ),
                    },
                ]
                first, (text, key, entry) = text, self._fetch(repair, stage, params)
                keys.append(key)
                entries.append(entry)
                try:
                    value = parse_json_strict(text)
                except ValueError as exc2:
                    raise LLMJSONError(
                        f"LLM reply for stage {stage!r} is not valid JSON after one repair attempt "
                        f"({exc2}); reply began: {_excerpt(text, 120)!r}; first reply began: "
                        f"{_excerpt(first, 120)!r}"
                    ) from exc2
            if validate is not None:
                try:
                    value = validate(value)
                except ValueError as exc:
                    raise LLMJSONError(
                        f"LLM reply for stage {stage!r} is JSON but not of the expected form ({exc}); "
                        f"reply began: {_excerpt(text, 120)!r}"
                    ) from exc
        except LLMJSONError:
            if self._cache is not None:
                for key in keys:
                    if key is not None:
                        self._cache.delete(key)
            raise
        self._remember(entries)  # the pair (bad reply, repair) replays to the same value
        return value

    def close(self) -> None:
        """Close the HTTP client and the cache."""
        try:
            self._client.close()
        finally:
            if self._cache is not None:
                self._cache.close()
                self._cache = None

    def __enter__(self) -> "LLMClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _body_text(exc: Any) -> str:
    try:
        return exc.response.text
    except Exception:  # noqa: BLE001 - best effort for an error message
        return str(getattr(exc, "body", "") or exc)


def _describe(exc: Exception | None) -> str:
    if exc is None:
        return "unknown error"
    status = getattr(exc, "status_code", None)
    if status is not None:
        return f"HTTP {status}: {_excerpt(_body_text(exc))}"
    return f"{type(exc).__name__}: {_excerpt(str(exc))}"


def _retry_after_s(response: Any) -> float | None:
    """Seconds from `retry-after-ms` / `Retry-After` (seconds or HTTP date), else None."""
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    ms = headers.get("retry-after-ms")
    if ms is not None:
        try:
            seconds = float(ms) / 1000.0
            if math.isfinite(seconds):
                return seconds
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        seconds = float(value)
        return seconds if math.isfinite(seconds) else None
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - time.time())


# --- forgetting (see docs/design.md, 'Invariants'): cache entries built from deleted text --------------------------
_REFS: "contextvars.ContextVar[tuple[str, ...]]" = contextvars.ContextVar("etamem_llm_cache_refs", default=())


@contextlib.contextmanager
def cache_refs(*refs: str):
    """Tag the LLM calls made inside (this thread / task) with `refs`, e.g. `space:<name>` and
    `turn:<space>/<turn id>`, so that deleting a space or a turn finds the cache entries built
    from it (`forget_cached`)."""
    token = _REFS.set(_REFS.get() + tuple(refs))
    try:
        yield
    finally:
        _REFS.reset(token)


def current_refs() -> tuple[str, ...]:
    return _REFS.get()


def forget_cached(path: str, space: str, texts: list[str] | None, turn_ids: list[str] | None) -> int:
    """Delete the response-cache entries of `path` built from forgotten text: with `texts`
    None, every entry tagged with the space; else the extraction entries tagged with one of
    the turns, every other entry of the space (summaries and answers aggregate many texts and
    may paraphrase: they are recomputed when needed), and any entry whose request or reply
    contains one of `texts`. Deleted rows are zeroed and the WAL truncated. Returns how many
    entries went."""
    if not os.path.exists(path):
        return 0
    conn = sqlite3.connect(path, timeout=30.0)
    try:
        _ResponseCache.create(conn)
        if texts is None:
            refs = [f"space:{space}"]
        else:
            refs = [f"turn:{space}/{t}" for t in turn_ids or []]
        keys = {r[0] for ref in refs for r in conn.execute("SELECT key FROM refs WHERE ref=?", (ref,))}
        if texts is not None:  # the space's entries that are not a turn's extraction
            keys.update(r[0] for r in conn.execute(
                "SELECT key FROM refs WHERE ref=? AND key NOT IN (SELECT key FROM refs WHERE ref LIKE ? ESCAPE '\\')",
                (f"space:{space}", _like_prefix(f"turn:{space}/"))))
        for text in texts or []:
            if text:
                keys.update(r[0] for r in conn.execute(
                    "SELECT key FROM responses WHERE instr(request, ?) > 0 OR instr(response, ?) > 0", (text, text)))
        with conn:
            conn.executemany("DELETE FROM responses WHERE key=?", [(k,) for k in keys])
            conn.executemany("DELETE FROM refs WHERE key=?", [(k,) for k in keys])
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return len(keys)
    finally:
        conn.close()


def _like_prefix(prefix: str) -> str:
    """A LIKE pattern matching strings that start with `prefix` (its % and _ escaped)."""
    return prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
