"""A long session in the Time view: only `Config.context_max_rows` of its units are scored with
their turn context (a neighbour lookup each), the best by unit text; below the cap nothing changes."""
from __future__ import annotations

from etamem import Config, Memory
from etamem.models.affect import VaderAffectTagger
from etamem.retrieval import fallback


def _memory(encoder, **cfg):
    mem = Memory(config=Config(supersession="off", **cfg), text_encoder=encoder,
                 affect_tagger=VaderAffectTagger(encoder))
    topics = ["cat", "guitar", "marathon", "sourdough", "Lisbon", "chess", "garden", "opera"]
    turns = [{"turn_id": f"t{i}", "session_id": "one-long-session", "speaker": "Ana",
              "text": f"I practised my {topics[i % 8]} number {i} today.", "timestamp": f"2024-03-01T10:{i % 60:02d}"}
             for i in range(240)]
    mem.add(turns, space="s")
    mem.end_session("s")
    return mem


def test_a_long_session_scores_only_the_cap_in_context(hashing_encoder, monkeypatch):
    seen: list[int] = []
    real = fallback.TurnIndex.context

    def counting(self, turn_ids, *args, **kwargs):
        seen.append(len(turn_ids))
        return real(self, turn_ids, *args, **kwargs)

    monkeypatch.setattr(fallback.TurnIndex, "context", counting)
    small = {"route_budget": 20, "flat_candidates": 0}  # each view returns at most 20 units
    capped = _memory(hashing_encoder, context_max_rows=30, **small)
    hits = capped.search("When did Ana practise the guitar?", space="s", top_k=5)
    assert hits and all("guitar" in h.amu.text for h in hits[:3])
    assert seen and max(seen) < 240  # never every member of the session
    seen.clear()
    full = _memory(hashing_encoder, context_max_rows=10_000, **small)
    assert [h.amu.amu_id for h in full.search("When did Ana practise the guitar?", space="s", top_k=5)][:3] == \
        [h.amu.amu_id for h in hits[:3]]
    assert max(seen) >= 240  # without the cap the whole session is scored in context


def test_below_the_cap_results_are_unchanged(hashing_encoder):
    a = _memory(hashing_encoder)  # default cap 16384 > 240 units
    b = _memory(hashing_encoder, context_max_rows=100_000)
    q = "What did Ana practise in the garden?"
    assert [(h.amu.amu_id, round(h.score, 6)) for h in a.search(q, space="s", top_k=10)] == \
        [(h.amu.amu_id, round(h.score, 6)) for h in b.search(q, space="s", top_k=10)]
