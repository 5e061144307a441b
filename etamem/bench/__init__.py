"""Benchmark runner for LoCoMo and LongMemEval-S (`etamem bench`, `python -m benchmarks`):
retrieval metrics without an LLM, QA metrics with any OpenAI-compatible endpoint, ablations,
cost, resumable results and reports with plots. Nothing here is imported by the engine."""
from etamem.bench.runner import BenchOptions, run
from etamem.bench.systems import SYSTEMS, resolve_systems

__all__ = ["BenchOptions", "run", "SYSTEMS", "resolve_systems"]
