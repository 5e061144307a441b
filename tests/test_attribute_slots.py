"""Attribute slots (etamem.facts.slots): slot assignment with the real MiniLM encoder, a
`supersedes` link for a change worded as the rules do not know it, none between unrelated facts,
within one chat, or with `Config.supersession_slots` off; prototypes encoded lazily, once per encoder."""
import json
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

from etamem import Config, Memory
from etamem.facts.slots import SLOT_CONFIDENCE, AttributeSlots, SlotSupersession, load_slots, slot_supersedes
from etamem.facts.supersession import RuleSupersession
from etamem.models.affect import VaderAffectTagger
from etamem.models.encoders import CachedEncoder

T0 = datetime(2024, 3, 1, 9, tzinfo=timezone.utc)
OLD, NEW = "I live in Glasgow.", "Finally unpacked everything at the new flat in Cardiff."  # cosine 0.2


def memory(minilm, **cfg) -> Memory:
    return Memory(None, Config.from_dict(cfg), text_encoder=CachedEncoder(minilm),
                  affect_tagger=VaderAffectTagger(minilm))


def supersedes_links(mem, said: list[tuple[str, timedelta]]) -> list[tuple[str, str]]:
    """Each text said by the user at T0 + its offset (one session per day); the `supersedes`
    links as (newer text, older text)."""
    mem.add([{"role": "user", "content": text, "id": f"m{i}", "session_id": f"d{offset.days}",
              "timestamp": (T0 + offset).isoformat()} for i, (text, offset) in enumerate(said)], space="u")
    text = {a.amu_id: a.text for a in mem.list("u", status=None)}
    return [(text[l.source], text[l.target]) for l in mem.links("u") if l.relation == "supersedes"]


@pytest.mark.parametrize("text,slot", [
    ("The user's phone is a Samsung Galaxy.", "phone"),
    ("The user is vegetarian.", "diet"),
    ("The user takes the bus to the office.", "commute"),
    ("The user's dentist appointment is on May 3.", "event_date"),
    ("The user got a job as a designer at an agency.", "job"),
    ("We finally finished unpacking at our new place in Cardiff.", "residence"),
    ("The weather was lovely today.", None),
])
def test_slot_assignment(minilm, text, slot):
    assert AttributeSlots().assign(minilm.encode([text]), minilm) == [slot]


@pytest.mark.parametrize("old,new,value", [(OLD, NEW, "Cardiff"),
                                            ("My car is a Volvo.", "Picked up a secondhand Audi, the old car finally died.",
                                             "Audi")])
def test_a_change_worded_unlike_the_rules_links_through_the_slots(minilm, old, new, value):
    month = timedelta(days=40)
    assert supersedes_links(memory(minilm, supersession_slots=False), [(old, timedelta()), (new, month)]) == []
    mem = memory(minilm)
    [(newer, older)] = supersedes_links(mem, [(old, timedelta()), (new, month)])
    assert value in newer and older == mem.list("u", status="superseded")[0].text
    assert mem.method.units.supersession(mem).stats["slot_links"] == 1
    assert mem.method.units.supersession(mem).stats["rule_links"] == 0


def test_no_slot_link_between_unrelated_facts_or_within_one_chat(minilm):
    # another slot, though the newer says "now"
    assert supersedes_links(memory(minilm), [(OLD, timedelta()), ("I take the bus to the office now.",
                                                                   timedelta(days=40))]) == []
    # the same slot and a change word, but minutes apart: an elaboration, not a change
    assert supersedes_links(memory(minilm), [(OLD, timedelta()), (NEW, timedelta(minutes=5))]) == []


def test_prototypes_are_encoded_lazily_once_per_encoder(minilm):
    class Counting:
        def __init__(self):
            self.calls = 0

        def encode(self, texts):
            self.calls += 1
            return minilm.encode(texts)

    slots, a, b = AttributeSlots(), Counting(), Counting()
    assert a.calls == 0
    vec = minilm.encode(["I drive a Volvo."])
    slots.assign(vec, a)
    slots.assign(vec, a)
    slots.assign(vec, b)
    assert (a.calls, b.calls) == (1, 1)
    classifier = SlotSupersession(a, RuleSupersession(), slots)
    assert classifier.classify("I drive a Volvo.", "user", [], vector=vec[0]) == [] and a.calls == 1


def test_slot_files_are_checked(tmp_path):
    assert {s.name for s in load_slots()} >= {"residence", "job", "diet", "relationship", "car", "phone", "commute",
                                              "event_date", "amount"}
    bad = tmp_path / "slots.json"
    for content in ({"slots": []}, {"slots": [{"name": "x", "prototypes": []}]},
                    {"slots": [{"name": "x", "prototypes": ["a"]}, {"name": "x", "prototypes": ["b"]}]}):
        bad.write_text(json.dumps(content))
        with pytest.raises(ValueError, match="attribute slots"):
            load_slots(str(bad))
    with pytest.raises(ValueError, match="threshold"):
        AttributeSlots(threshold=1.5)
    assert np.isfinite(AttributeSlots().threshold)


@pytest.mark.parametrize("new,linked", [
    ("The user got engaged to Alex.", True),  # a change word, the user's own fact
    ("The user's partner is Alex.", False),  # no change word: left to the rules' frames
    ("After college they went travelling together and got engaged.", False),  # someone else's story
    ("Hope you and Alex got engaged!", False),  # said to the listener
])
def test_the_slot_test_needs_a_change_of_the_speakers_own_fact(new, linked):
    slots = AttributeSlots()
    conf = slot_supersedes(new, "The user's partner is Sam.", 0.3, "relationship", "relationship", slots,
                           speaker="user", gap_days=30)
    assert (conf == SLOT_CONFIDENCE) is linked
    assert slot_supersedes(new, "The user's partner is Sam.", 0.3, "relationship", "car", slots, speaker="user",
                           gap_days=30) is None  # two slots
