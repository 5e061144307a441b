"""FTA-Mem longitudinal memory: speaker profiles and support notes (etamem/fta/profiles.py)."""
from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest

from etamem.fta.profiles import (
    ProfileCaps,
    SpeakerProfile,
    forget_units,
    profiles_from_json,
    profiles_to_json,
    render_profiles,
    update_profiles,
)
from etamem.fta.segmentation import segment_session
from etamem.fta.units import (
    AffectAnchor,
    EvidenceSpan,
    FactAnchor,
    FTAUnit,
    RuleUnitExtractor,
    TimeAnchor,
    construct_units,
)
from etamem.records import Turn

T0 = datetime(2023, 5, 8, 18, 0, tzinfo=timezone.utc)  # a Monday

SESSION_1 = [
    ("Maya", "I feel so anxious about the new job these days."),
    ("Leo", "That sounds hard. You should take a short walk before work."),
    ("Maya", "My sister Ana says the same thing."),
    ("Leo", "Is your dog Biscuit still limping?"),
    ("Maya", "Yes, the vet said he needs ten days of rest."),
    ("Maya", "I live in Lisbon with my partner Tom."),
    ("Maya", "I love jazz and old films."),
    ("Leo", "My boss has been really supportive lately."),
]
SESSION_2 = [
    ("Maya", "The walks really helped me, I feel much calmer about the new job now."),
    ("Leo", "I'm proud of you!"),
    ("Maya", "Tom and I are going to visit my parents next month."),
    ("Leo", "I'm worried about my exam on Friday."),
    ("Maya", "Don't worry, you could study with your friend Sara."),
]


@pytest.fixture(scope="module")
def vader():
    from conftest import HashingEncoder
    from etamem.models.affect import VaderAffectTagger

    return VaderAffectTagger(HashingEncoder())


def session_units(lines, session, start, tagger) -> list[FTAUnit]:
    turns = [Turn(f"{session}:{i}", session, sp, text, start + timedelta(minutes=i))
             for i, (sp, text) in enumerate(lines)]
    segments = segment_session(turns, mode="session").segments
    return construct_units(turns, segments, RuleUnitExtractor(tagger)).units


@pytest.fixture(scope="module")
def sessions(vader):
    return (session_units(SESSION_1, "s1", T0, vader),
            session_units(SESSION_2, "s2", T0 + timedelta(days=7), vader))


def unit(uid, speaker, text, ctype="current_state", day=0, *, status="final", emotions=(), label="neutral",
         participants=None, orientation="present") -> FTAUnit:
    """A hand-made final unit said `day` days after T0."""
    t = T0 + timedelta(days=day)
    return FTAUnit(FactAnchor(text, ctype, participants or (speaker,)), TimeAnchor(t, orientation),
                   AffectAnchor(label, emotions=tuple(emotions)), (EvidenceSpan(f"s{day}", (f"{uid}:0",), t, t),),
                   speaker, status=status, unit_id=uid)


def id_of(units, needle) -> str:
    found = [u.unit_id for u in units if needle in u.text]
    assert len(found) == 1, (needle, [u.text for u in units])
    return found[0]


# --- the two-session dialogue ------------------------------------------------------------------
def test_two_sessions_build_profiles_with_states_relationships_facts_and_support(sessions):
    s1, s2 = sessions
    after1 = update_profiles({}, s1)
    maya1 = after1["Maya"]
    assert [s.text for s in maya1.current_states] == ["Maya feels so anxious about the new job these days."]
    assert maya1.current_states[0].unit_ids == (id_of(s1, "anxious"),)
    assert maya1.current_states[0].date.startswith("2023-05-08") and maya1.current_states[0].topic == ("job",)

    profiles = update_profiles(after1, s2)
    assert list(profiles) == ["Leo", "Maya"]
    maya, leo = profiles["Maya"], profiles["Leo"]
    # the newer state on the same topic (the new job) replaced the older one
    assert [(s.text, s.unit_ids) for s in maya.current_states] == [
        ("The walks really helped Maya, Maya feels much calmer about the new job now.", (id_of(s2, "calmer"),))]
    assert maya.current_states[0].emotions == ("calmer",) and maya.current_states[0].label == "positive"
    assert [s.text for s in leo.current_states] == ["Leo is worried about Leo's exam on Friday."]

    rels = {(r.relation, r.name, r.kind) for r in maya.relationships}
    assert rels == {("sister", "Ana", "family"), ("dog", "Biscuit", "pet"), ("partner", "Tom", "partner"),
                    ("parents", "", "family")}
    sister = next(r for r in maya.relationships if r.name == "Ana")
    assert sister.unit_ids == (id_of(s1, "sister Ana"),) and sister.date.startswith("2023-05-08")
    assert {(r.relation, r.name, r.kind) for r in leo.relationships} == {("boss", "", "colleague"),
                                                                         ("friend", "Sara", "friend")}

    assert [f.text for f in maya.stable_facts] == ["Maya loves jazz and old films.",
                                                   "Maya lives in Lisbon with Maya's partner Tom."]
    assert {f.content_type for f in maya.stable_facts} == {"belief_candidate", "general_fact"}
    assert not leo.stable_facts

    notes = [(n.kind, n.helper, n.helped, n.date[:10]) for n in maya.support_notes]
    assert notes == [("helped", "", "Maya", "2023-05-15"), ("advice", "Leo", "Maya", "2023-05-08")]
    assert maya.support_notes[1].unit_ids == (id_of(s1, "short walk"),)
    assert [(n.kind, n.helper, n.helped) for n in leo.support_notes] == [("advice", "Maya", "Leo")]
    every_id = {u.unit_id for u in s1 + s2}
    assert all(p.unit_ids() <= every_id for p in profiles.values())


def test_update_is_pure_deterministic_and_idempotent(sessions):
    s1, s2 = sessions
    before = update_profiles({}, s1)
    snapshot = profiles_to_json(before)
    profiles = update_profiles(before, s2)
    assert profiles_to_json(before) == snapshot  # the input is not changed
    assert update_profiles({}, list(reversed(s1 + s2))) == update_profiles({}, s1 + s2)
    assert update_profiles(profiles, s2) == profiles  # a session read twice adds nothing
    assert update_profiles(profiles, []) == profiles


def test_json_round_trip_and_version(sessions):
    profiles = update_profiles({}, sessions[0] + sessions[1])
    text = profiles_to_json(profiles)
    data = json.loads(text)
    assert data["version"] == 1 and set(data["profiles"]) == {"Leo", "Maya"}
    assert data["profiles"]["Maya"]["relationships"][0]["sources"][0].keys() == {"unit_id", "date"}
    back = profiles_from_json(text)
    assert back == profiles and all(isinstance(p, SpeakerProfile) for p in back.values())
    assert profiles_to_json(back) == text
    assert profiles_from_json(profiles_to_json({})) == {}
    for bad in ('{"version": 99, "profiles": {}}', "[1, 2]", "not json", '{"version": 1}',
                '{"version": 1, "profiles": {"A": {"stable_facts": [{"text": "x"}]}}}'):
        with pytest.raises(ValueError):
            profiles_from_json(bad)


def test_forget_units_removes_every_trace(sessions):
    s1, s2 = sessions
    profiles = update_profiles(update_profiles({}, s1), s2)
    sister, advice = id_of(s1, "sister Ana"), id_of(s1, "short walk")
    assert "Ana" in profiles_to_json(profiles) and "short walk" in profiles_to_json(profiles)
    left = forget_units(profiles, [sister, advice])
    text = profiles_to_json(left)
    for gone in ("Ana", "short walk", sister, advice):
        assert gone not in text
    assert left["Maya"].relationships and left["Maya"].support_notes  # the other items stay
    assert forget_units(profiles, [u.unit_id for u in s1 + s2]) == {}  # nothing left, not even a name
    assert forget_units(profiles, []) == profiles


def test_forget_keeps_a_shared_item_with_its_remaining_source():
    a = unit("u1", "Maya", "Maya went hiking with Maya's sister Ana.", "event", 0, orientation="past")
    b = unit("u2", "Maya", "Maya's sister Ana called Maya.", "event", 3, orientation="past")
    profiles = update_profiles({}, [a, b])
    (rel,) = profiles["Maya"].relationships
    assert rel.unit_ids == ("u1", "u2") and rel.date.startswith("2023-05-11")
    (rel,) = forget_units(profiles, ["u2"])["Maya"].relationships
    assert rel.unit_ids == ("u1",) and rel.date.startswith("2023-05-08")
    assert "u2" not in profiles_to_json(forget_units(profiles, ["u2"]))


def test_render_mentions_each_speaker_with_dates(sessions):
    profiles = update_profiles({}, sessions[0] + sessions[1])
    text = render_profiles(profiles)
    assert "Maya:" in text and "Leo:" in text
    assert "- state [15 May 2023] Leo is worried about Leo's exam on Friday. (worried)" in text
    assert "- relationship [8 May 2023] sister Ana (family)" in text
    assert "- support [8 May 2023] Leo -> Maya (advice): Leo said: Maya should take a short walk" in text
    assert all(len(line) <= 200 for line in text.splitlines())
    only = render_profiles(profiles, speakers=["Leo"])
    assert "Leo:" in only and "Maya:" not in only
    assert render_profiles({}) == "(none)" and render_profiles(profiles, speakers=[]) == "(none)"


# --- hand-made units -----------------------------------------------------------------------------
def test_a_newer_state_replaces_an_older_one_on_the_same_topic_only():
    old = unit("s-old", "Ann", "Ann is stressed about the house move.", emotions=("stressed",), label="negative")
    other = unit("s-sleep", "Ann", "Ann is struggling with sleep.", day=1)
    mood = unit("s-mood", "Ann", "Ann feels lonely.", day=1, emotions=("lonely",))
    new = unit("s-new", "Ann", "Ann feels relieved about the move now.", day=2, emotions=("relieved",))
    mood2 = unit("s-mood2", "Ann", "Ann feels hopeful.", day=3, emotions=("hopeful",))
    states = update_profiles({}, [old, other, mood, new, mood2])["Ann"].current_states
    assert [s.unit_ids[0] for s in states] == ["s-mood2", "s-new", "s-sleep"]  # newest first
    # an older state arriving later does not displace the newer one on its topic
    late = update_profiles(update_profiles({}, [new]), [old])["Ann"].current_states
    assert [s.unit_ids[0] for s in late] == ["s-new"]


def test_superseded_or_contradicted_units_are_never_current():
    old = unit("a", "Ann", "Ann is stressed about the house move.", emotions=("stressed",))
    fact = unit("f", "Ann", "Ann lives in Oslo.", "general_fact")
    for status in ("superseded", "contradicted"):
        gone = update_profiles({}, [replace(old, status=status), replace(fact, status=status)])
        assert "Ann" not in gone or not (gone["Ann"].current_states or gone["Ann"].stable_facts)
    profiles = update_profiles({}, [old, fact])
    assert profiles["Ann"].current_states and profiles["Ann"].stable_facts
    # a later session's links superseded them: passing them again with that status retires them
    later = update_profiles(profiles, [replace(old, status="superseded"), replace(fact, status="contradicted")])
    assert "Ann" not in later
    # carried units (no id yet) are skipped
    assert update_profiles({}, [FTAUnit(old.fact, old.time, old.affect, old.evidence, "Ann")]) == {}


def test_support_note_kinds_and_who_helped_whom():
    units = [
        unit("n1", "Leo", "Leo said: Maya should try breathing exercises.", "support_interaction",
             participants=("Leo", "Maya")),
        unit("n2", "Leo", "Leo said: Leo is here for Maya.", "support_interaction", 1, participants=("Leo", "Maya")),
        unit("n3", "Maya", "Maya helped Leo move Leo's piano.", "event", 2, participants=("Maya", "Leo"),
             orientation="past"),
        unit("n4", "Maya", "The breathing exercises did not help Maya at all.", "event", 3, orientation="past"),
        unit("n5", "Maya", "Talking to Leo helped Maya a lot.", "event", 4, participants=("Maya", "Leo"),
             orientation="past"),
        unit("n6", "Maya", "Leo asked: Did the bath help? Maya: Maya has not tried yet.", "event", 5,
             participants=("Maya", "Leo")),
    ]
    profiles = update_profiles({}, units)
    maya = [(n.unit_ids[0], n.kind, n.helper, n.helped) for n in profiles["Maya"].support_notes]
    assert maya == [("n5", "helped", "Leo", "Maya"), ("n4", "did_not_help", "", "Maya"),
                    ("n2", "encouragement", "Leo", "Maya"), ("n1", "advice", "Leo", "Maya")]
    assert [(n.kind, n.helper, n.helped) for n in profiles["Leo"].support_notes] == [("help", "Maya", "Leo")]


def test_caps_keep_the_newest_items():
    topics = "garden kitchen piano violin tennis chess budget thesis football painting cooking knitting".split()
    units = []
    for d, topic in enumerate(topics):
        units += [unit(f"st{d}", "Ann", f"Ann feels tired from the {topic}.", day=d, emotions=("tired",)),
                  unit(f"fa{d}", "Ann", f"Ann owns {d + 2} bicycles of model {d}.", "general_fact", d),
                  unit(f"re{d}", "Ann", f"Ann met Ann's cousin {'ABCDEFGHIJKL'[d]}ob yesterday.", "event", d,
                       orientation="past"),
                  unit(f"su{d}", "Bo", f"Bo said: Ann should try plan {d}.", "support_interaction", d,
                       participants=("Bo", "Ann"))]
    ann = update_profiles({}, units)["Ann"]
    assert [len(ann.current_states), len(ann.relationships), len(ann.stable_facts), len(ann.support_notes)] == \
        [5, 8, 8, 5]
    assert ann.current_states[0].unit_ids == ("st11",) and ann.stable_facts[-1].unit_ids == ("fa4",)
    small = update_profiles({}, units, caps=ProfileCaps(1, 2, 0, 1))["Ann"]
    assert [len(small.current_states), len(small.relationships), len(small.stable_facts),
            len(small.support_notes)] == [1, 2, 0, 1]
    assert small.relationships[0].name == "Lob" and small.support_notes[0].unit_ids == ("su11",)
