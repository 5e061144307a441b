"""ETAMem: Event-Time-Affect long-term memory for LLM agents.

    from etamem import Memory
    with Memory("my_store") as mem:
        mem.add([{"session_id": "s1", "speaker": "Ana", "text": "I adopted a cat named Miso.",
                  "timestamp": "2023-05-08T13:56"}], space="ana")
        hits = mem.search("What pet does Ana have?", space="ana")

Nothing heavy is imported or computed here: models load on first use.
"""
from etamem.config import Config
from etamem.records import AMU, Answer, Hit, MemoryContext, StageCost, Turn, UnknownIdError, UnknownSpaceError

__version__ = "0.1.0"


def __getattr__(name):  # lazy: keep `import etamem` cheap
    if name == "Memory":
        from etamem.memory import Memory

        return Memory
    if name == "AsyncMemory":
        from etamem.async_memory import AsyncMemory

        return AsyncMemory
    if name == "Filters":
        from etamem.filters import Filters

        return Filters
    raise AttributeError(f"module 'etamem' has no attribute {name!r}")


__all__ = ["Memory", "AsyncMemory", "Filters", "Config", "Turn", "AMU", "Hit", "Answer", "MemoryContext", "StageCost", "UnknownIdError", "UnknownSpaceError", "__version__"]
