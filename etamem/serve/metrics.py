"""Per-operation counters and timings, rendered in the Prometheus text format (`/metrics`).

Operations are named after the OpenTelemetry `gen_ai.memory.*` conventions where one applies
(`search_memory`, `update_memory`, `delete_memory`); the others keep the engine's names.
"""
from __future__ import annotations

import bisect
import contextlib
import threading
from collections import defaultdict

BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
OPERATION = {"add": "update_memory", "search": "search_memory", "delete": "delete_memory"}


class Metrics:
    """Thread-safe counters of requests (route, method, status) and histograms of engine seconds
    per operation."""

    def __init__(self):
        self._lock = threading.Lock()
        self._requests: dict[tuple[str, str, int], int] = defaultdict(int)
        self._refused: dict[int, int] = defaultdict(int)  # status (401, 403, 429) -> count
        self._hist: dict[str, list[int]] = {}
        self._sum: dict[str, float] = defaultdict(float)

    def count(self, route: str, method: str, status: int) -> None:
        with self._lock:
            self._requests[(route, method, int(status))] += 1

    def count_refusal(self, status: int) -> None:
        """Refusals (401/403, 429 beyond a key's read bounds) counted apart, by status only (paths name spaces)."""
        with self._lock:
            self._refused[int(status)] += 1

    def observe(self, operation: str, seconds: float) -> None:
        name = OPERATION.get(operation, operation)
        with self._lock:
            counts = self._hist.setdefault(name, [0] * (len(BUCKETS_S) + 1))
            counts[bisect.bisect_left(BUCKETS_S, seconds)] += 1
            self._sum[name] += seconds

    def snapshot(self) -> dict:
        with self._lock:
            return {"requests": dict(self._requests), "refused": dict(self._refused),
                    "operations": {k: (list(v), self._sum[k]) for k, v in self._hist.items()}}

    def prometheus(self) -> str:
        snap = self.snapshot()
        lines = ["# HELP etamem_requests_total HTTP requests by route template, method and status.",
                 "# TYPE etamem_requests_total counter"]
        for (route, method, status), n in sorted(snap["requests"].items()):
            lines.append(f'etamem_requests_total{{route="{_esc(route)}",method="{method}",status="{status}"}} {n}')
        lines += ["# HELP etamem_refused_total Requests refused for a missing or invalid key (401), a space "
                  "outside the key's (403) or a key over its read bounds (429).", "# TYPE etamem_refused_total counter"]
        for status, n in sorted(snap["refused"].items()):
            lines.append(f'etamem_refused_total{{status="{status}"}} {n}')
        lines += ["# HELP etamem_operation_seconds Engine time per operation (gen_ai.memory.* names).",
                  "# TYPE etamem_operation_seconds histogram"]
        for name, (counts, total) in sorted(snap["operations"].items()):
            running = 0
            for le, c in zip(BUCKETS_S, counts):
                running += c
                lines.append(f'etamem_operation_seconds_bucket{{operation="{name}",le="{le}"}} {running}')
            running += counts[-1]
            lines.append(f'etamem_operation_seconds_bucket{{operation="{name}",le="+Inf"}} {running}')
            lines.append(f'etamem_operation_seconds_sum{{operation="{name}"}} {total:.6f}')
            lines.append(f'etamem_operation_seconds_count{{operation="{name}"}} {running}')
        return "\n".join(lines) + "\n"

    @staticmethod
    def llm_lines(queued_turns: int, queue: dict | None, usage: dict) -> str:
        """The LLM half in the Prometheus text format: the store's queued turns, the background
        queue's counters (`LLMQueue.stats()`, None without a queue) and the client's cost per stage
        (`LLMClient.usage()`: stage -> StageCost). No space is named."""
        lines = ["# HELP etamem_llm_queued_turns Turns whose LLM extraction is queued (rule units in place).",
                 "# TYPE etamem_llm_queued_turns gauge", f"etamem_llm_queued_turns {int(queued_turns)}"]
        if queue is not None:
            lines += ["# HELP etamem_llm_queue_turns_total Queued turns done by this process, by outcome.",
                      "# TYPE etamem_llm_queue_turns_total counter"]
            for outcome in ("landed", "kept_rules", "gone"):
                lines.append(f'etamem_llm_queue_turns_total{{outcome="{outcome}"}} {int(queue[outcome])}')
            lines += ["# HELP etamem_llm_queue_unavailable_total Times the LLM gave no reply and the queue paused.",
                      "# TYPE etamem_llm_queue_unavailable_total counter",
                      f"etamem_llm_queue_unavailable_total {int(queue['unavailable'])}",
                      "# HELP etamem_llm_queue_retry_in_seconds Seconds until a paused queue asks the LLM again.",
                      "# TYPE etamem_llm_queue_retry_in_seconds gauge",
                      f"etamem_llm_queue_retry_in_seconds {float(queue['retry_in_s']):.3f}"]
        families = (("calls_total", "LLM calls sent to the endpoint", lambda c: c.calls),
                    ("cached_calls_total", "LLM calls answered from the response cache", lambda c: c.cached_calls),
                    ("prompt_tokens_total", "Prompt tokens", lambda c: c.prompt_tokens),
                    ("completion_tokens_total", "Completion tokens", lambda c: c.completion_tokens),
                    ("seconds_total", "Seconds the endpoint took to answer", lambda c: round(c.seconds, 6)))
        for name, text, get in families:
            lines += [f"# HELP etamem_llm_{name} {text}, by stage.", f"# TYPE etamem_llm_{name} counter"]
            for stage, cost in sorted(usage.items()):
                lines.append(f'etamem_llm_{name}{{stage="{_esc(stage)}"}} {get(cost)}')
        return "\n".join(lines) + "\n"


def _esc(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def span(operation: str):
    """An OpenTelemetry span named after the operation (`search_memory`, ...) with
    `gen_ai.operation.name` set, when `opentelemetry` is installed (its API is a no-op until an
    SDK and exporter are configured by the host); else a null context. No space names or texts
    go into spans."""
    try:
        from opentelemetry import trace
    except ImportError:
        return contextlib.nullcontext()
    name = OPERATION.get(operation, operation)
    return trace.get_tracer("etamem").start_as_current_span(
        name, attributes={"gen_ai.operation.name": name, "gen_ai.system": "etamem"})
