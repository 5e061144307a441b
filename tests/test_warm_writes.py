"""A complete warm-up (issue 49, item 5): after `Memory.warm()` the first writes load nothing on
first use. The attribute slots' 102 prototype sentences (`etamem.facts.slots`) were encoded by the
first write that compared a new fact with a stored one (the second add of a process: 3.3 s of its
~4 s); `warm()` encodes them now, once per encoder in the process. Checked by what reaches the
real MiniLM encoder, not by timing (figures: benchmarks/warm_adds.py, docs/reliability.md)."""
from datetime import datetime, timedelta, timezone

import numpy as np

from etamem import Config, Memory
from etamem.facts.slots import AttributeSlots, load_slots
from etamem.models.encoders import CachedEncoder

T0 = datetime(2024, 3, 1, 9, tzinfo=timezone.utc)
PROTOTYPES = {p for s in load_slots() for p in s.prototypes}
TURNS = [("I live in Chicago.", 0), ("I work at Acme as an engineer.", 1),  # two facts the rules do not link:
         ("I just started at Globex, new job!", 30), ("I drive a Prius.", 31)]  # the slots are asked


class Recording:
    """The real encoder, recording every text it is asked to encode."""

    def __init__(self, inner) -> None:
        self.inner, self.name, self.dim = inner, inner.name, inner.dim
        self.seen: list[str] = []

    def encode(self, texts: list[str]) -> np.ndarray:
        self.seen.extend(texts)
        return self.inner.encode(texts)


def _adds(mem: Memory, encoder: Recording, n: int) -> list[int]:
    """Add the first `n` TURNS one by one; per add, how many prototype sentences were encoded."""
    out = []
    for i, (text, day) in enumerate(TURNS[:n]):
        encoder.seen.clear()
        mem.add([{"role": "user", "content": text, "id": f"m{i}",
                  "timestamp": (T0 + timedelta(days=day)).isoformat()}], space="u")
        out.append(sum(t in PROTOTYPES for t in encoder.seen))
    return out


def test_without_warm_the_second_add_encodes_the_prototypes(minilm):
    """The case warm() is for: the second add compares a fact with a stored one and pays."""
    encoder = Recording(minilm)
    with Memory(None, Config(), text_encoder=CachedEncoder(encoder)) as mem:
        counts = _adds(mem, encoder, 2)
    assert counts[0] == 0 and counts[1] == len(PROTOTYPES), counts


def test_after_warm_no_add_encodes_a_prototype(minilm):
    encoder = Recording(minilm)
    with Memory(None, Config(), text_encoder=CachedEncoder(encoder)) as mem:
        mem.warm()
        assert PROTOTYPES <= set(encoder.seen)  # warm() encoded them
        counts = _adds(mem, encoder, len(TURNS))
        assert counts == [0] * len(TURNS), counts
        assert mem.list("u", status="superseded")  # the slots / rules did compare the facts


def test_the_prototypes_are_encoded_once_per_encoder_in_a_process(minilm):
    encoder = Recording(minilm)
    AttributeSlots().warm(encoder)
    AttributeSlots().warm(encoder)  # another instance (another Memory's classifier): no second encoding
    assert sorted(t for t in encoder.seen if t in PROTOTYPES) == sorted(p for s in load_slots() for p in s.prototypes)


def test_warm_is_harmless_without_the_slots(minilm):
    for cfg in (Config(supersession="off"), Config(supersession_slots=False), Config(method="fta")):
        encoder = Recording(minilm)
        with Memory(None, cfg, text_encoder=CachedEncoder(encoder)) as mem:
            assert mem.warm() is mem
        assert not PROTOTYPES & set(encoder.seen), cfg


def test_after_warm_the_first_adds_import_no_library():
    """FAISS and threadpoolctl were imported by the first add (0.1 s); warm() imports them now."""
    import subprocess
    import sys

    code = ("import sys; from etamem import Memory; m = Memory(); m.warm(); before = set(sys.modules)\n"
            "for i, t in enumerate(['I live in Chicago.', 'I work at Acme as an engineer.']):\n"
            "    m.add([{'role': 'user', 'content': t, 'timestamp': f'2024-03-0{i + 1}T09:00'}], space='u')\n"
            "print(sorted({n.split('.')[0] for n in set(sys.modules) - before if not n.startswith('etamem')}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={**__import__("os").environ, "HF_HUB_OFFLINE": "1"})
    assert out.returncode == 0 and out.stdout.strip() == "[]", (out.stdout, out.stderr[-2000:])
