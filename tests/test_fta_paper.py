"""FTA-Mem as its paper describes it: the fixed-window variant with the detector, neighbours right
after their hit (eq. 10), the paper's lifecycle beside `superseded`, the question / answer veto
on the offline detector only, link candidates by similarity, and the paper's prompts' reply
forms. Real MiniLM; the LLM is the local test server or a stub that depends on the prompt."""
from __future__ import annotations

import contextlib
import json
import re
from datetime import datetime, timedelta, timezone

import pytest

from etamem import Memory
from etamem.config import Config
from etamem.fta.builder import FTABuilder
from etamem.fta.codec import unit_from_json, unit_to_dict
from etamem.fta.links import LinkDecision, UnitGraph, lifecycle_update
from etamem.fta.search import place_neighbours
from etamem.fta.units import AffectAnchor, EvidenceSpan, FactAnchor, FTAUnit, Lifecycle, TimeAnchor
from etamem.models.affect import VaderAffectTagger
from etamem.records import AMU, Hit, Turn

T0 = datetime(2023, 5, 1, 18, 0, tzinfo=timezone.utc)


def unit(uid: str, text: str, *, day: int = 0, speaker: str = "Melanie", ctype: str = "general_fact",
         orient: str = "present", completeness: str = "complete", event_day: int | None = None) -> FTAUnit:
    ts = T0 + timedelta(days=day)
    start = None if event_day is None else T0 + timedelta(days=event_day)
    return FTAUnit(fact=FactAnchor(text, ctype, (speaker,)), time=TimeAnchor(ts, orient, start),
                   affect=AffectAnchor(), evidence=(EvidenceSpan(f"s{day}", (f"s{day}:{uid}",), ts, ts),),
                   speaker=speaker, completeness=completeness, status="final", unit_id=uid)


def rows(texts, session: str, day: int, speakers=("Caroline", "Melanie")) -> list[dict]:
    return [{"turn_id": f"{session}:{i}", "session_id": session, "speaker": speakers[i % 2], "text": text,
             "timestamp": (T0 + timedelta(days=day, minutes=i)).isoformat()} for i, text in enumerate(texts)]


def fta_memory(path, minilm, **config) -> Memory:
    return Memory(path, {"method": "fta", **config}, text_encoder=minilm, affect_tagger=VaderAffectTagger(minilm))


STATEMENTS = ["I repainted the kitchen a pale green last week.", "Green kitchens look fresh and calm.",
              "The painter also fixed the old cupboard doors.", "Old cupboards are hard to repair well.",
              "My brother starts a new job at the bank on Monday.", "A bank job sounds stable for him.",
              "He is nervous about the long commute by train.", "Trains are fine once you get a routine.",
              "We adopted a black kitten called Miso yesterday.", "Miso is such a sweet name for a kitten."]


# --- 1. the paper's fixed-window variant ----------------------------------------------------------
def test_fixed_detect_is_a_config_choice_and_the_fixed_window_system_builds_with_it(tmp_path, minilm):
    from etamem.bench.ablations import FTA_CONSTRUCTIONS
    from etamem.bench.systems import BY_KEY

    assert FTA_CONSTRUCTIONS[BY_KEY["fta-fixed-window"].construction] == {"fta_segmentation": "fixed-detect"}
    assert FTA_CONSTRUCTIONS[BY_KEY["fta-plain-windows"].construction] == {"fta_segmentation": "fixed"}
    with pytest.raises(ValueError, match="fta_segmentation"):
        Config.from_dict({"fta_segmentation": "windows"})
    mem = fta_memory(tmp_path / "s", minilm, fta_segmentation="fixed-detect", fta_window=4)
    windows = []

    class Spy:  # records the windows the detector is shown
        name = "spy"

        def __init__(self, inner):
            self.inner = inner

        def detect(self, turns, start, end):
            windows.append((start, end))
            return self.inner.detect(turns, start, end)

    builder = mem.method.units.builder(mem)
    builder.detector = Spy(builder.detector)
    mem.add(rows(STATEMENTS, "s1", 0))
    mem.end_session()
    # fixed stride W = 4 from the session start, no restart at the last segment (BWS would restart)
    assert windows[:3] == [(0, 3), (4, 7), (8, 9)]
    assert mem.list()
    mem.close()


# --- 4. the question / answer veto: offline detector only ----------------------------------------
class CutAfterQuestions:
    """An LLM stub for the segmentation call: one segment starts at every turn that answers a
    question (so every cut separates a question from its reply)."""

    def complete_json(self, messages, stage, validate, **params):
        lines = re.findall(r"^\[(\d+)\] \([^)]*\) [^:]+: (.*)$", messages[-1]["content"], re.M)
        idx = [int(i) for i, _ in lines]
        starts = [idx[0]] + [i for (i, _), (_, prev) in zip(lines[1:], lines) for i in [int(i)]
                             if prev.rstrip().endswith("?")]
        spans = [{"turn_span": [b, (starts[j + 1] - 1) if j + 1 < len(starts) else idx[-1]],
                  "boundary_trigger": "topic_change"} for j, b in enumerate(starts)]
        return validate({"segments": spans})


QA_TEXTS = ["I went to the lake on Saturday.", "Who did you go with?", "With my two kids and my sister.",
            "That sounds lovely.", "We swam and had a picnic.", "What did you eat?", "Sandwiches and cherries.",
            "Yum, cherries are the best."]


@pytest.mark.parametrize("veto,kept", [("offline", True), ("all", False)])
def test_the_qa_veto_spares_the_llm_detectors_cuts(minilm, veto, kept):
    cfg = Config(method="fta", extractor="rule", fta_detector="llm", fta_qa_veto=veto)
    builder = FTABuilder(cfg, minilm, VaderAffectTagger(minilm), llm=CutAfterQuestions())
    turns = [Turn(**{**r, "timestamp": datetime.fromisoformat(r["timestamp"])}) for r in rows(QA_TEXTS, "s1", 0)]
    batch = builder.build(turns, True, [], lambda stage: contextlib.nullcontext())
    starts = sorted({int(u.evidence[0].turn_ids[0].split(":")[1]) for u in batch.units})
    assert (2 in starts) is kept  # the reply "With my two kids ..." opens a segment of its own
    assert FTABuilder(Config(method="fta"), minilm, None).keep_qa  # the offline detector keeps the veto
    assert not FTABuilder(Config(method="fta", fta_qa_veto="none"), minilm, None).keep_qa


# --- 5. link candidates by similarity ------------------------------------------------------------
@pytest.mark.parametrize("candidates,offered", [("similarity", True), ("shared-participant", False)])
def test_link_candidates_need_not_share_a_participant(tmp_path, minilm, candidates, offered):
    mem = fta_memory(tmp_path / "s", minilm, fta_link_candidates=candidates, fta_link_floor=0.3)
    seen = []

    class Spy:
        def classify(self, new, neighbours):
            seen.extend((new.speaker, nb.unit.speaker) for nb in neighbours)
            return []

    mem.method.units.builder(mem).classifier = Spy()
    mem.add(rows(["Jon plays the drums in a jazz band every Friday night."], "s1", 0, speakers=("Jon",)))
    mem.add(rows(["Gina plays the drums in a jazz band every Friday night too."], "s2", 5, speakers=("Gina",)))
    mem.end_session()
    assert (("Gina", "Jon") in seen) is offered
    mem.close()


# --- 2. neighbours right after their hit ---------------------------------------------------------
def _hit(uid: str, score: float = 1.0, views=("fta",)) -> Hit:
    amu = AMU(amu_id=uid, text=uid, speaker="a", timestamp=T0, session_id="s", source_turn_ids=(uid,))
    return Hit(amu, score, views, amu.source_turn_ids)


def test_place_neighbours_puts_each_right_after_its_hit_or_appends():
    hits = [_hit("a", 0.9), _hit("b", 0.8), _hit("c", 0.7)]
    amus = {u: _hit(u).amu for u in "abcxyz"}
    chosen = {"a": "x", "c": "z", "b": "gone"}  # "gone" is not a live unit
    after = place_neighbours(hits, chosen, amus, None)
    assert [h.amu.amu_id for h in after] == ["a", "x", "b", "c", "z"]
    assert [h.views for h in after][1] == ("fta-link",) and after[1].similarity == 0.0
    assert [h.score for h in after] == [0.9, 0.9, 0.8, 0.7, 0.7]  # a neighbour ranks, and scores, as its hit
    assert [h.amu.amu_id for h in place_neighbours(hits, chosen, amus, None, "appended")] == ["a", "b", "c", "x", "z"]
    assert [h.amu.amu_id for h in place_neighbours(hits, chosen, amus, {"a", "b", "c", "x"})] == ["a", "x", "b", "c"]


SESSION_1 = ["Hi Melanie! I live in Boston now, I moved in March.", "Oh nice, how do you like Boston so far?",
             "I love it, the harbour walks are lovely and my new job at the museum is great.",
             "That sounds wonderful. I am planning to go camping at the lake with my kids next month.",
             "Camping sounds fun! Where is the lake?", "It is up north, about two hours from home.",
             "By the way, I adopted a grey cat last week. Her name is Pixel.", "Aww, Pixel is a cute name!"]
SESSION_2 = ["Hey Caroline! We went camping at the lake last weekend, the kids loved the tent.",
             "That is great! How was the weather?", "Sunny and warm, we swam every day.",
             "I have news: I live in Seattle now, the museum moved me to their new branch.",
             "Wow, Seattle! Do you miss Boston?", "A little, but Pixel likes the new flat with big windows."]


def test_in_memory_search_each_neighbour_sits_beside_the_hit_it_is_linked_to(tmp_path, minilm):
    mem = fta_memory(tmp_path / "s", minilm, fta_window=6, fta_tau=-1.0, current_first=False)
    mem.add(rows(SESSION_1, "s1", 0))
    mem.add(rows(SESSION_2, "s2", 40, speakers=("Melanie", "Caroline")))
    mem.end_session()
    links = {frozenset((link.source, link.target)) for link in mem.links()}
    assert links
    query = "Where does Caroline live and did Melanie go camping?"
    hits = mem.retrieve(query, top_k=6).hits
    linked = [i for i, h in enumerate(hits) if h.views == ("fta-link",)]
    assert linked and linked[0] < len(hits) - 1  # at least one neighbour, not only at the end
    for i in linked:  # right after the primary hit that brought it
        assert hits[i - 1].views != ("fta-link",)
        assert frozenset((hits[i - 1].amu.amu_id, hits[i].amu.amu_id)) in links
    # with the facts-that-change order on (the default), a neighbour that replaces its hit comes
    # right before it (the current version first): still beside it
    mem.config = mem.config.replace(current_first=True)
    hits = mem.retrieve(query, top_k=6).hits
    for i in (i for i, h in enumerate(hits) if h.views == ("fta-link",)):
        assert any(frozenset((hits[j].amu.amu_id, hits[i].amu.amu_id)) in links for j in (i - 1, i + 1)
                   if 0 <= j < len(hits))
    mem.close()


# --- 3. the paper's lifecycle ----------------------------------------------------------------------
def test_lifecycle_rules_and_suggestions():
    plan = unit("p", "Melanie plans to go camping next month.", ctype="homework_or_plan", orient="future",
                completeness="pending")
    plan = plan.__class__(**{**plan.__dict__, "lifecycle": Lifecycle("pending", "unknown")})
    done = unit("d", "Melanie went camping at the lake.", day=40, ctype="event", orient="past", event_day=35)
    life = lifecycle_update("followup_of", done, plan)
    assert life == Lifecycle("completed", "complete", T0 + timedelta(days=35))  # the new unit's event time
    assert lifecycle_update("contradicts", done, plan).status == "contradicted"
    assert lifecycle_update("supersedes", done, plan).status == "archived"
    assert lifecycle_update("supports", done, plan) is None
    # the LLM's suggestion wins; "unknown" changes nothing
    assert lifecycle_update("supports", done, plan, status="archived", completeness="partial") == \
        Lifecycle("archived", "partial", T0 + timedelta(days=35))
    assert lifecycle_update("supports", done, plan, status="unknown", completeness="unknown") is None
    # a graph: the stored plan starts pending and the report completes it; superseded stays separate
    g = UnitGraph(_FakeEncoder(), _Fixed({"d": [LinkDecision("p", "followup_of", 0.9)]}))
    g.add([unit("p", "Melanie plans to go camping next month.", ctype="homework_or_plan", orient="future",
                completeness="pending")])
    assert g.get("p").lifecycle.status == "pending"
    g.add([done])
    assert g.get("p").lifecycle == Lifecycle("completed", "complete", T0 + timedelta(days=35))
    assert g.get("p").status == "final"


def test_units_stored_before_the_lifecycle_read_as_unknown():
    d = unit_to_dict(unit("a", "Melanie paints."))
    assert d["lifecycle"] == {"status": "unknown", "completeness": "unknown", "updated_at": None}
    del d["lifecycle"]
    assert unit_from_json(json.dumps(d)).lifecycle == Lifecycle()


class _FakeEncoder:
    """Text-dependent vectors: a few topic words, normalised (all units look alike enough)."""

    dim = 3

    def encode(self, texts):
        import numpy as np

        out = np.array([[1.0, "camp" in t.lower(), "paint" in t.lower()] for t in texts], np.float32)
        return out / np.linalg.norm(out, axis=1, keepdims=True)


class _Fixed:
    def __init__(self, decisions):
        self.decisions = decisions

    def classify(self, new, neighbours):
        return self.decisions.get(new.unit_id, [])


def link_responder(request):
    """The local LLM for the FTA calls: one segment per window, one unit per turn, the paper's link
    updates (a report of camping completes the plan; Seattle supersedes Boston)."""
    prompt = request["messages"][-1]["content"]
    turns = re.findall(r"^\[(\d+)\] \([^)]*\) ([^:]+): (.*)$", prompt, re.M)
    if '"segments"' in prompt:
        return json.dumps({"segments": [{"turn_span": [int(turns[0][0]), int(turns[-1][0])],
                                         "boundary_trigger": "topic_change"}]})
    if '"memory_units"' in prompt:
        units = [{"summary": "x", "time_orientation": "future" if "planning" in text else "past",
                  "content_type": "homework_or_plan" if "planning" in text else "event", "event_time": "unknown",
                  "content": {"text": f"{name} said: {text}", "participants": [name], "emotion_or_state": "unknown",
                              "intention_or_plan": "unknown"},
                  "evidence_turn_span": [int(i), int(i)], "status": "pending" if "planning" in text else "complete"}
                 for i, name, text in turns]
        return json.dumps({"memory_units": units})
    if '"memory_updates"' in prompt:
        new = prompt.split("New memory unit", 1)[1].split("Candidate older units", 1)[0]
        out = []
        for uid, line in re.findall(r"^- (\S+) \(said [^)]*\): (.*)$", prompt, re.M):
            if "went camping" in new and "planning to go camping" in line:
                out.append({"memory_id": uid, "relation": "followup_of", "relation_confidence": "high",
                            "lifecycle_status": "completed", "completeness": "complete"})
            elif "Seattle now" in new and "Boston now" in line:
                out.append({"memory_id": uid, "relation": "supersedes", "relation_confidence": "high",
                            "lifecycle_status": "archived", "completeness": "complete"})
        return json.dumps({"memory_updates": out})
    return "ok"


def test_llm_link_maintenance_sets_the_lifecycle_of_stored_units_beside_superseded(tmp_path, minilm, chat_server):
    chat_server.responder = link_responder
    cfg = {"llm_model": "test-model", "llm_base_url": chat_server.base_url, "llm_max_retries": 0, "fta_window": 8,
           "fta_link_floor": 0.2}
    mem = fta_memory(tmp_path / "s", minilm, **cfg)
    mem.add(rows(SESSION_1, "s1", 0))
    mem.end_session()  # session 1 stored; session 2 links to its stored units
    mem.add(rows(SESSION_2, "s2", 40, speakers=("Melanie", "Caroline")))
    mem.end_session()
    mem.close()
    mem = fta_memory(tmp_path / "s", minilm, **cfg)  # the fields were written to the store
    by_text = {a.text: a.amu_id for a in mem.list()}
    plan = next(uid for text, uid in by_text.items() if "planning to go camping" in text)
    boston = next(uid for text, uid in by_text.items() if "Boston now" in text)
    history = mem.history(plan)
    old = next(u for u in history if u.unit_id == plan)
    assert old.lifecycle.status == "completed" and old.lifecycle.completeness == "complete"
    report = next(u for u in history if "went camping" in u.text)
    assert old.lifecycle.updated_at == report.time.event_start  # "last weekend" of the report
    assert report.time.event_start is not None and report.time.event_start < report.dialogue_time
    assert old.status == "final"  # followed up, not replaced
    moved = next(u for u in mem.history(boston) if u.unit_id == boston)
    assert moved.status == "superseded" and moved.lifecycle.status == "archived"  # both kept, side by side
    from etamem.fta.inspection import link_infos

    infos = {i.target: i for i in link_infos(mem, "default")}
    assert infos[plan].target_lifecycle == "lifecycle: completed, complete, updated 3 June 2023"
    mem.close()
