"""FTA relation links, lifecycle and history (etamem/fta/links.py)."""
from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

from etamem.fta.links import (
    Link,
    LinkDecision,
    LinkEnd,
    LLMLinkClassifier,
    Neighbour,
    RuleLinkClassifier,
    UnitGraph,
    classify_pair,
    history,
    nearest_older,
    parse_link_reply,
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
from etamem.models.llm import LLMClient, LLMUnavailable
from etamem.models.prompt_files import load_prompt, placeholders
from etamem.records import Turn
from llm_server import Reply

T0 = datetime(2023, 5, 8, 18, 0, tzinfo=timezone.utc)


def unit(uid: str, text: str, *, day: int = 0, speaker: str = "Caroline", session: str | None = None,
         ctype: str = "general_fact", orient: str = "present", label: str = "neutral", participants=None) -> FTAUnit:
    ts = T0 + timedelta(days=day)
    sid = session or f"s{day}"
    return FTAUnit(fact=FactAnchor(text, ctype, tuple(participants or (speaker,))), time=TimeAnchor(ts, orient),
                   affect=AffectAnchor(label=label), evidence=(EvidenceSpan(sid, (f"{sid}:{uid}",), ts, ts),),
                   speaker=speaker, status="final", unit_id=uid)


# --- rules -----------------------------------------------------------------------------------
@pytest.mark.parametrize("old,new,relation", [
    ("Caroline lives in Boston.", "Caroline lives in Seattle now.", "supersedes"),
    ("Caroline's favourite colour is green.", "Caroline's favourite colour is orange.", "supersedes"),
    ("Caroline has 2 dogs.", "Caroline has 3 dogs.", "supersedes"),
    ("Caroline works at a bakery.", "Caroline works at a hospital now.", "supersedes"),
    ("Caroline likes running.", "Caroline doesn't like running.", "contradicts"),
    ("Caroline loves jazz.", "Caroline hates jazz.", "contradicts"),
    ("Caroline is vegetarian.", "Caroline is not vegetarian.", "contradicts"),
    ("Caroline lives in Boston.", "Caroline lives in Boston.", None),
])
def test_rule_classification_of_state_changes_and_negation_flips(old, new, relation):
    got = classify_pair(unit("b", new, day=30), unit("a", old), 0.7)
    assert (got[0] if got else None) == relation


def test_rules_do_not_call_two_different_events_an_update():
    old = unit("a", "Caroline went to a pottery class.", ctype="event", orient="past")
    new = unit("b", "Caroline went to the beach.", day=3, ctype="event", orient="past")
    assert classify_pair(new, old, 0.7) is None


def test_a_report_of_an_earlier_plan_is_a_followup_and_a_close_same_session_unit_the_same_episode():
    plan = unit("a", "Melanie plans to go camping at the lake next month.", speaker="Melanie",
                ctype="homework_or_plan", orient="future")
    done = unit("b", "Melanie went camping at the lake with her kids.", speaker="Melanie", day=40,
                ctype="event", orient="past")
    assert classify_pair(done, plan, 0.62) == ("followup_of", 0.81)
    a = unit("c", "Melanie painted a sunset.", speaker="Melanie", ctype="event", orient="past", session="x")
    b = unit("d", "Melanie's painting shows a sunset over the lake.", speaker="Melanie", session="x")
    assert classify_pair(b, a, 0.8) == ("same_episode_as", 0.8)
    assert classify_pair(b, a, 0.6) is None
    c = unit("e", "Melanie's painting shows a sunset over the lake.", speaker="Melanie", day=9)
    assert classify_pair(c, a, 0.85)[0] == "supports"


def test_nearest_older_takes_the_top_m_above_the_floor_sharing_a_participant():
    pool = [unit("a", "x"), unit("b", "y", speaker="Jon"), unit("c", "z"), unit("d", "w")]
    rows = np.eye(4, dtype=np.float32)
    vec = np.array([0.9, 0.95, 0.6, 0.3], np.float32)
    new = unit("n", "q", day=1)
    got = nearest_older(new, vec, pool, rows, top_m=5, floor=0.5)
    assert [(n.unit.unit_id, n.similarity) for n in got] == [("a", 0.9), ("c", 0.6)]  # b: other speaker
    assert [n.unit.unit_id for n in nearest_older(new, vec, pool, rows, top_m=1, floor=0.5)] == ["a"]
    assert [n.unit.unit_id for n in nearest_older(new, vec, pool, rows, floor=0.5, same_participants=False)] == \
        ["b", "a", "c"]


# --- graph: lifecycle and history ---------------------------------------------------------------
def test_update_and_contradiction_set_statuses_and_history_runs_oldest_to_newest(minilm):
    g = UnitGraph(minilm)
    boston = unit("u1", "Caroline lives in Boston.")
    jazz = unit("u2", "Caroline loves jazz.", day=1)
    seattle = unit("u3", "Caroline lives in Seattle now.", day=60)
    denver = unit("u4", "Caroline lives in Denver now.", day=200)
    hates = unit("u5", "Caroline hates jazz.", day=201)
    g.add([boston, jazz])
    assert g.links == []
    links = g.add([seattle])
    assert [(l.source, l.target, l.relation) for l in links] == [("u3", "u1", "supersedes")]
    assert 0.5 < links[0].confidence <= 1.0
    g.add([denver, hates])
    status = {uid: u.status for uid, u in g.units.items()}
    assert status == {"u1": "superseded", "u2": "contradicted", "u3": "superseded", "u4": "final", "u5": "final"}
    assert [u.unit_id for u in g.history("u3")] == ["u1", "u3", "u4"]
    assert [u.unit_id for u in g.history("u1")] == ["u1", "u3", "u4"]
    assert [u.unit_id for u in g.history("u5")] == ["u2", "u5"]
    # stored once, read from both ends
    ends = g.links_of("u3")
    assert LinkEnd("u1", "supersedes", ends[0].confidence, True) in ends
    assert any(e.unit_id == "u4" and e.relation == "superseded_by" and not e.outgoing for e in ends)
    assert [e.relation for e in g.links_of("u2")] == ["contradicted_by"]
    assert sum(1 for l in g.links if {l.source, l.target} == {"u2", "u5"}) == 1
    with pytest.raises(ValueError, match="already stored"):
        g.add([boston])


def test_history_is_a_pure_function_over_links():
    units = {u.unit_id: u for u in (unit("a", "v1"), unit("b", "v2", day=2), unit("c", "v3", day=1),
                                    unit("d", "other", day=3))}
    links = [Link("b", "c", "updates", 0.9), Link("c", "a", "contradicts", 0.8), Link("d", "b", "supports", 0.9)]
    assert [u.unit_id for u in history("b", units, links)] == ["a", "c", "b"]
    assert [u.unit_id for u in history("d", units, links)] == ["d"]  # supports is not a version
    assert [u.unit_id for u in history("d", units, links, relations=("supports",))] == ["b", "d"]
    with pytest.raises(KeyError):
        history("zz", units, links)


def test_units_are_linked_only_to_older_units(minilm):
    g = UnitGraph(minilm)
    g.add([unit("new", "Caroline lives in Seattle now.", day=60)])
    g.add([unit("old", "Caroline lives in Boston.", day=0)])  # added later, said earlier: not a candidate source
    assert g.links == [] and g.get("new").status == "final"


def test_rule_extraction_end_to_end_across_two_sessions(minilm):
    from etamem.models.affect import VaderAffectTagger

    tagger = VaderAffectTagger(minilm)
    s1 = [Turn(f"D1:{i}", "D1", sp, text, T0 + timedelta(minutes=i)) for i, (sp, text) in enumerate([
        ("Caroline", "I live in Boston with my roommate."), ("Jon", "Cool city."),
        ("Caroline", "I love jazz, I listen to it every evening."), ("Jon", "Me too.")])]
    s2 = [Turn(f"D2:{i}", "D2", sp, text, T0 + timedelta(days=90, minutes=i)) for i, (sp, text) in enumerate([
        ("Caroline", "I live in Seattle with my sister."), ("Jon", "Big change!"),
        ("Caroline", "Honestly I don't love jazz anymore."), ("Jon", "Fair enough.")])]
    segments = [s for turns in (s1, s2) for s in segment_session(turns, mode="session").segments]
    units = construct_units(s1 + s2, segments, RuleUnitExtractor(tagger)).units
    g = UnitGraph(minilm)
    g.add([u for u in units if u.session_id == "D1"])
    g.add([u for u in units if u.session_id == "D2"])
    by_text = {u.text: u for u in g.units.values()}
    assert by_text["Caroline lives in Boston with Caroline's roommate."].status == "superseded"
    assert by_text["Caroline loves jazz, Caroline listens to it every evening."].status == "contradicted"
    seattle = by_text["Caroline lives in Seattle with Caroline's sister."]
    assert [u.text for u in g.history(seattle.unit_id)][0].startswith("Caroline lives in Boston")


# --- LLM classifier --------------------------------------------------------------------------
def test_link_prompt_renders_every_placeholder():
    assert placeholders(load_prompt("fta_link")) == {"new_id", "new_date", "new_unit", "candidates"}


def test_parse_link_reply():
    assert parse_link_reply({"links": [{"id": "a", "relation": "updates", "confidence": "high"},
                                       {"id": "b", "relation": "none"},
                                       {"id": "c", "relation": "Supports", "confidence": 0.4}]}, ["a", "b", "c"]) == \
        [LinkDecision("a", "updates", 0.9), LinkDecision("c", "supports", 0.4)]
    # the paper's form: memory_updates with lifecycle suggestions (a word outside the vocabulary: none)
    assert parse_link_reply({"memory_updates": [
        {"memory_id": "a", "relation": "followup_of", "relation_confidence": "medium",
         "lifecycle_status": "Completed", "completeness": "complete"},
        {"memory_id": "b", "relation": "unknown", "lifecycle_status": "archived"},
        {"memory_id": "c", "relation": "contradicts", "lifecycle_status": "gone", "completeness": "unknown"}]},
        ["a", "b", "c"]) == [LinkDecision("a", "followup_of", 0.6, "completed", "complete"),
                             LinkDecision("c", "contradicts", 0.5, None, "unknown")]
    for bad in ({"relations": []}, {"links": [{"relation": "updates"}]},
                {"memory_updates": [{"memory_id": "zz", "relation": "updates"}]},
                {"links": [{"id": "zz", "relation": "updates"}]},
                {"links": ["a"]}):
        with pytest.raises(ValueError):
            parse_link_reply(bad, ["a"])


def test_llm_links_one_call_per_unit_with_neighbours_and_rule_fallback(chat_server, minilm):
    chat_server.script(
        json.dumps({"links": [{"id": "c1", "relation": "supersedes", "confidence": "high"}]}),   # for u3: c1 = u1
        json.dumps({"links": []}),                                                           # for u4: no relation
        json.dumps({"links": [{"id": "nope", "relation": "contradicts"}]}),                  # for u5: bad id -> rules
    )
    llm = LLMClient("test-model", base_url=chat_server.base_url, max_retries=0)
    clf = LLMLinkClassifier(llm)
    g = UnitGraph(minilm, clf)
    g.add([unit("u1", "Caroline lives in Boston."), unit("u2", "Jon plays the drums in a band.", speaker="Jon", day=1)])
    assert llm.usage() == {}  # no older neighbours yet: no call
    g.add([unit("u3", "Caroline moved to Seattle.", day=50)])
    g.add([unit("u4", "Caroline loves jazz.", day=51), unit("u5", "Caroline hates jazz.", day=52)])
    assert llm.usage()["fta_link"].calls == 3  # u3, u4, u5 had neighbours (u2: no shared participant)
    assert clf.stats == {"units": 3, "llm_units": 2, "fallback_units": 1}
    assert g.get("u1").status == "superseded" and g.get("u4").status == "contradicted"
    prompt = chat_server.requests[0]["messages"][-1]["content"]
    assert "Caroline moved to Seattle." in prompt and "- c1 (said" in prompt and "Jon plays" not in prompt
    assert "u1" not in prompt  # the model sees short ids only


def test_llm_links_without_a_reply_raise(chat_server, minilm):
    chat_server.script(Reply(status=403))
    g = UnitGraph(minilm, LLMLinkClassifier(LLMClient("m", base_url=chat_server.base_url, max_retries=0)))
    g.add([unit("u1", "Caroline lives in Boston.")])
    with pytest.raises(LLMUnavailable):
        g.add([unit("u2", "Caroline lives in Seattle now.", day=9)])


def test_rule_classifier_skips_units_without_ids():
    new = unit("n", "Caroline lives in Seattle now.", day=5)
    old = unit("o", "Caroline lives in Boston.")
    assert RuleLinkClassifier().classify(new, [Neighbour(old, 0.7)]) == [LinkDecision("o", "supersedes", 0.85)]
    from dataclasses import replace
    assert RuleLinkClassifier().classify(new, [Neighbour(replace(old, unit_id=None), 0.7)]) == []
