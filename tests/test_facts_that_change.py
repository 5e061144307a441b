"""Facts that change: `supersedes` links at write time (etamem.facts.supersession), the current fact
ranked first (etamem.facts.current_first), history, the context packet and answers, deletion restoring the
older fact; on AMUs with the real MiniLM encoder, and on FTA units."""
import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from etamem import Config, Memory
from etamem.answering import compose_answer
from etamem.facts.current_first import asks_past, asks_present, current_first, linked_order
from etamem.facts.llm_supersession import LLMSupersession
from etamem.facts.slots import SlotSupersession
from etamem.facts.supersession import Candidate, RuleSupersession, supersedes
from etamem.models.affect import VaderAffectTagger
from etamem.models.encoders import CachedEncoder
from etamem.models.llm import LLMClient
from etamem.records import AMU, Hit

T0 = datetime(2024, 3, 1, 9, tzinfo=timezone.utc)
CHANGES = [  # (old, new): each new statement replaces the old one
    ("I live in Chicago, in a small apartment near the lake.", "I moved to Milwaukee last month."),
    ("I'm pescatarian, I eat fish but no meat.", "I'm vegan now, no more fish."),
    ("I work night shifts at the hospital.", "I switched to day shifts, no more nights."),
    ("I go climbing every Saturday with my friends.", "I stopped climbing, my shoulder hurts too much."),
    ("My manager is Laura, she is very strict.", "We have a new manager, Tom."),
    ("My budget for the trip is $2000.", "My budget is now $3500."),
    ("I love horror movies.", "Honestly I can't stand horror movies anymore."),
]


def memory(minilm, path=None, **cfg) -> Memory:
    return Memory(path, Config.from_dict(cfg), text_encoder=CachedEncoder(minilm),
                  affect_tagger=VaderAffectTagger(minilm))


def said(texts_days):
    out = []
    for i, (text, day) in enumerate(texts_days):
        ts = T0 + timedelta(days=day, minutes=i)
        out += [{"role": "user", "content": text, "timestamp": ts.isoformat(), "id": f"m{i}"},
                {"role": "assistant", "content": "Got it, thanks for telling me.", "id": f"r{i}",
                 "timestamp": (ts + timedelta(seconds=30)).isoformat()}]
    return out


def classifier(mem):
    """The `supersedes` classifier of an AMU `Memory` (made on first use by its units)."""
    return mem.method.units.supersession(mem)


def unit_of(mem, space, message_id):
    return next(a for a in mem.list(space, status=None) if a.source_turn_ids == (message_id,))


@pytest.fixture(scope="module")
def changed(minilm):
    """A chat memory where every fact of CHANGES is said, then, 30 days later, changed."""
    mem = memory(minilm)
    mem.add(said([(old, 0) for old, _ in CHANGES] + [(new, 30) for _, new in CHANGES]), space="u")
    yield mem
    mem.close()


# --- the rules ------------------------------------------------------------------------------------
@pytest.mark.parametrize("old,new", [
    ("The user lives in Denver.", "The user lives in Austin, near the user's sister."),  # no change word
    ("The user's wedding is on June 12.", "The wedding got moved to July 3."),
    ("The user's rent is $1,800.", "The user's rent is $2,100."),
    ("The user drives a Prius.", "The user drives a Tesla now."),
    ("The user likes running.", "The user doesn't like running."),
    ("The user walks to work.", "The user drives to work these days."),  # a closed set of values
    ("The user eats anything, no restrictions.", "The user is doing paleo."),
    ("Java is the user's favourite language.", "Go is the user's favourite language, the user writes it daily."),
    ("The user puts $200 a month into savings.", "The user puts $350 a month into savings."),  # a new amount
    ("The user's demo day is on April 3.", "Demo day is now May 20, the sponsor asked for it."),  # "May": a month
    ("The user swims about 3 km a week.", "Swimming 5 km a week these days."),  # the same quantity, a new number
    ("The user's band has 4 members.", "The band grew to 6 members."),
    ("The user owns an old Vespa.", "The user got rid of the Vespa, the user takes the bus now."),
    ("The user always orders the pasta there.", "The salad for the user from now on, the pasta is too heavy."),
])
def test_rules_link_a_new_value_of_the_same_attribute(old, new):
    assert supersedes(new, old, 0.6, speaker="user") is not None


@pytest.mark.parametrize("old,new", [
    ("The user is allergic to peanuts.", "The user is allergic to penicillin."),  # a second allergy
    ("The user works as a nurse.", "The user works from home."),
    ("The user's brother lives in Tokyo.", "The user lives in Seattle."),  # someone else's home
    ("The user lives in Seattle.", "The user is moving to Berlin."),  # a plan, not (yet) a change
    ("The user lives in Seattle.", "Do you think the user should move to Berlin now?"),
    ("The user loves sushi.", "The user loves jazz now."),  # another subject
    ("The user lives in Denver.", "The user lives in Denver."),
    ("The user is vegan.", "The user doesn't eat pork."),  # no diet of its own
    ("The user walks to work.", "The user walks the dog after work."),
    ("The user ran 5 km on Monday.", "The user ran 8 km yesterday."),  # events, not one quantity
])
def test_rules_leave_statements_that_stay_true_alone(old, new):
    assert supersedes(new, old, 0.6, speaker="user") is None


def test_a_replacement_word_links_alike_statements_and_an_exclusive_attribute_across_values():
    # no shared word, but "switched" and a cosine of 0.6 or more
    assert supersedes("The user switched to a Kindle, tired of paper books.", "The user reads paper books.", 0.62,
                      speaker="user") is not None
    assert supersedes("The user switched to a Kindle.", "The user reads paper books.", 0.45, speaker="user") is None
    # where one lives: "relocated" across two city names far apart in the embedding
    old, new = "The user rents a flat in Leeds.", "The user relocated to Bristol for a new job."
    assert supersedes(new, old, 0.3, speaker="user") is not None
    assert supersedes("The user visited Bristol for a new job.", old, 0.3, speaker="user") is None
    assert supersedes(new, old, 0.2, speaker="user") is None  # below every floor


def test_no_false_supersession_on_the_short_statements(minilm):
    statements = json.loads((Path(__file__).parent / "data" / "short_statements.json").read_text())["statements"]
    mem = memory(minilm)
    mem.add([{"role": "user", "content": s["text"], "timestamp": (T0 + timedelta(minutes=i)).isoformat()}
             for i, s in enumerate(statements)], space="s")
    assert [l for l in mem.links("s") if l.relation == "supersedes"] == []
    assert len(mem.list("s", status="superseded")) == 0


# --- write time and history -----------------------------------------------------------------------
def test_each_change_links_the_new_unit_to_the_old_one_and_nothing_else(changed):
    links = [(l.source, l.target) for l in changed.links("u") if l.relation == "supersedes"]
    expected = [(unit_of(changed, "u", f"m{len(CHANGES) + i}").amu_id, unit_of(changed, "u", f"m{i}").amu_id)
                for i in range(len(CHANGES))]
    assert sorted(links) == sorted(expected)
    old = unit_of(changed, "u", "m0")
    assert changed.get(old.amu_id, "u").status == "superseded"  # kept, retrievable, says so
    assert {a.amu_id for a in changed.list("u", status="superseded")} == {t for _, t in expected}
    assert len(changed.list("u", status="active")) + len(changed.list("u", status="superseded")) == len(changed.list("u", status=None))
    assert changed.index_info("u")["amus"] == len(changed.list("u", status=None))  # still indexed
    history = changed.history(old.amu_id, "u")
    assert [v.text for v in history] == [old.text, unit_of(changed, "u", f"m{len(CHANGES)}").text]
    assert [v.status for v in history] == ["superseded", "active"]
    assert changed.history(history[1].amu_id, "u") == history  # from either end


# --- ranking ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("question,current", [
    ("Where does the user live now?", "Milwaukee"),
    ("What is the user's diet now?", "vegan"),
    ("Does the user work night shifts?", "day shifts"),
    ("When does the user go climbing?", "stopped climbing"),
    ("Who is the user's manager?", "Tom"),
    ("What is the user's budget for the trip?", "$3500"),
    ("Does the user like horror movies?", "can't stand"),
])
def test_the_current_fact_ranks_first_and_the_old_one_right_after(changed, question, current):
    hits = changed.search(question, space="u", top_k=3, now=T0 + timedelta(days=40))
    assert current in hits[0].amu.text, [h.amu.text for h in hits]
    assert hits[1].superseded_by == (hits[0].amu.amu_id,) and hits[0].supersedes == (hits[1].amu.amu_id,)


def test_questions_about_the_past_still_find_the_old_fact(changed):
    for question, old in [("Where did the user live before?", "Chicago"),
                          ("What diet did the user follow at first?", "pescatarian")]:
        hits = changed.search(question, space="u", top_k=5, now=T0 + timedelta(days=40))
        assert any(old in h.amu.text for h in hits), [h.amu.text for h in hits]


def test_context_and_offline_answer_lead_with_the_current_fact(changed):
    text = changed.context("Where does the user live now?", space="u", top_k=3, now=T0 + timedelta(days=40))
    lines = [l for l in text.splitlines() if l[:2] in ("1.", "2.")]
    assert "Milwaukee" in lines[0] and "(current; replaces item 2)" in lines[0]
    assert "Chicago" in lines[1] and "(no longer current: replaced by item 1)" in lines[1] and "2024" in lines[1]
    ans = changed.answer("Where does the user live now?", space="u", now=T0 + timedelta(days=40), top_k=3)
    assert ans.text.index("Milwaukee") < ans.text.index("Chicago") and "no longer current" in ans.text


def test_the_newer_fact_is_brought_in_when_only_the_old_one_was_found():
    def amu(uid, day, text):
        return AMU(uid, text, "user", T0 + timedelta(days=day), "s", (uid,))

    a, b, c, x = amu("a", 0, "lives in A"), amu("b", 10, "moved to B"), amu("c", 20, "moved to C"), amu("x", 5, "x")
    newer = {"a": ["b"], "b": ["c"]}
    hits = [Hit(a, 0.9, ("event",), ("a",)), Hit(x, 0.5, ("event",), ("x",))]
    out = linked_order(hits, newer, {u.amu_id: u for u in (a, b, c, x)})
    assert [h.amu.amu_id for h in out] == ["c", "a"] and out[0].views == ("current",)  # the count stays
    links = [("b", "a", "supersedes", 0.9), ("c", "b", "supersedes", 0.9)]
    rows = lambda ids: [r for r in links if r[0] in ids or r[1] in ids]  # noqa: E731
    done = current_first(hits, "Where does she live?", rows, lambda ids: {u: {"b": b, "c": c}[u] for u in ids})
    assert [h.amu.amu_id for h in done] == ["c", "a"] and done[1].superseded_by == ("b",)
    kept = current_first(hits, "Where did she live before?", rows, lambda ids: {})
    assert [h.amu.amu_id for h in kept] == ["a", "x"]  # the past: as the method ranked


def test_present_cues_prefer_the_latest_of_competing_facts_without_a_link(minilm):
    mem = memory(minilm, supersession="off")
    mem.add(said([("I live in Chicago, in a small apartment near the lake.", 0),
                  ("I moved to Milwaukee last month.", 30)]), space="u")
    assert mem.links("u") == []
    now = T0 + timedelta(days=40)
    assert "Milwaukee" in mem.search("Where does the user live now?", space="u", top_k=2, now=now)[0].amu.text
    plain = mem.search("Where does the user live?", space="u", top_k=2, now=now)
    assert "Chicago" in plain[0].amu.text  # tense alone is no cue: the method's order
    assert asks_present("Does the user still eat fish?") and asks_present("What does she do these days?")
    assert not asks_present("Where does the user live?") and asks_past("Where did the user live in 2023?")


def test_deleting_the_newer_unit_restores_the_older_as_current(minilm, tmp_path):
    mem = memory(minilm, tmp_path / "store")
    mem.add(said([(CHANGES[0][0], 0), ("I love horror movies.", 1), (CHANGES[0][1], 30)]), space="u")
    old, new = unit_of(mem, "u", "m0"), unit_of(mem, "u", "m2")
    assert mem.get(old.amu_id, "u").status == "superseded"
    mem.delete("u", new.amu_id)
    assert mem.get(old.amu_id, "u").status == "active" and mem.links("u") == []
    assert [v.amu_id for v in mem.history(old.amu_id, "u")] == [old.amu_id]
    hit = mem.search("Where does the user live now?", space="u", top_k=1)[0]
    assert "Chicago" in hit.amu.text and hit.superseded_by == ()
    mem.close()
    again = memory(minilm, tmp_path / "store")  # and after reopening
    assert again.get(old.amu_id, "u").status == "active"
    again.close()


def test_inspect_and_the_html_page_show_the_chains(minilm, tmp_path, capsys):
    from etamem.cli import main
    from etamem.inspection.viz import write_all

    mem = memory(minilm, tmp_path / "store")
    mem.add(said([(CHANGES[0][0], 0), (CHANGES[0][1], 30)]), space="u")
    page = write_all(mem, "u", tmp_path / "html", plots=False)[0].read_text()
    mem.close()
    assert "Facts that changed" in page and "Milwaukee" in page
    assert main(["-q", "inspect", str(tmp_path / "store"), "--space", "u", "--links", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert [l["relation"] for l in printed["links"]] == ["supersedes"]
    [chain] = printed["chains"]
    assert [s["status"] for s in chain] == ["superseded", "active"] and "Milwaukee" in chain[1]["text"]
    assert main(["-q", "inspect", str(tmp_path / "store"), "--space", "u", "--links"]) == 0
    out = capsys.readouterr().out
    assert "Facts that changed (1)" in out and "-> The user moved to Milwaukee" in out


def test_a_contradiction_supersedes_and_an_unrelated_fact_is_left_alone(changed):
    horror = unit_of(changed, "u", "m6")
    assert changed.get(horror.amu_id, "u").status == "superseded"
    newest = [changed.get(unit_of(changed, "u", f"m{len(CHANGES) + i}").amu_id, "u") for i in range(len(CHANGES))]
    assert all(a.status == "active" for a in newest)  # no change retired a fact about something else


def test_an_llm_classifier_needs_an_llm(minilm):
    with pytest.raises(ValueError, match="supersession='llm' needs an LLM"):
        _ = classifier(memory(minilm, supersession="llm"))
    assert classifier(memory(minilm, supersession="off")) is None
    default = classifier(memory(minilm))  # no LLM configured: the rules and the attribute slots
    assert isinstance(default, SlotSupersession) and isinstance(default.rules, RuleSupersession)
    assert isinstance(classifier(memory(minilm, supersession_slots=False)), RuleSupersession)  # the rules alone


def test_the_llm_answer_sees_which_memory_is_current(changed, chat_server):
    chat_server.script("Milwaukee (before that, Chicago).")
    llm = LLMClient("test-model", base_url=chat_server.base_url, max_retries=0)
    hits = changed.search("Where does the user live now?", space="u", top_k=3, now=T0 + timedelta(days=40))
    ans = compose_answer("Where does the user live now?", hits, {}, llm=llm, style="locomo", question_date=None)
    prompt = chat_server.requests[-1]["messages"][-1]["content"]
    chicago = next(l for l in prompt.splitlines() if "Chicago" in l and l.startswith("["))
    milwaukee = next(l for l in prompt.splitlines() if "Milwaukee" in l and l.startswith("["))
    assert chicago.endswith("[no longer current: a later memory replaces it]")
    assert milwaukee.endswith("[current; replaces an earlier memory]")
    assert "answer with the current" in prompt and ans.text.startswith("Milwaukee")


# --- the LLM classifier ------------------------------------------------------------------------------
def test_the_llm_classifier_asks_once_and_falls_back_to_the_rules(chat_server):
    cands = [Candidate("a", "The user lives in Chicago.", "user", T0, 0.6),
             Candidate("b", "The user loves jazz.", "user", T0, 0.3)]
    chat_server.script(json.dumps({"replaced": [{"id": "1", "confidence": "high"}]}),
                       json.dumps({"replaced": [{"id": "a"}]}), json.dumps({"replaced": [{"id": "a"}]}))
    clf = LLMSupersession(LLMClient("test-model", base_url=chat_server.base_url, max_retries=0))
    assert clf.classify("The user moved to Milwaukee.", "user", cands) == [("a", 0.9)]  # short id 1 -> a
    request = chat_server.requests[0]
    prompt = request["messages"][-1]["content"]
    assert "- 1 (said 2024-03-01): The user lives in Chicago." in prompt and "jazz" not in prompt
    assert request["response_format"]["json_schema"]["schema"]["properties"]["replaced"]["items"][
        "properties"]["id"]["enum"] == ["1"]  # only the offered ids
    rules = RuleSupersession().classify("The user moved to Milwaukee.", "user", cands[:1])
    assert clf.classify("The user moved to Milwaukee.", "user", cands) == rules and clf.stats["fallbacks"] == 1


def test_the_llm_gate_decides_which_older_facts_the_model_sees(minilm, chat_server):
    """"rules": no call for a new car beside the old one (no shared subject word, cosine 0.42);
    "slots": the old car, in the same attribute slot, and nothing else; "all": every candidate."""
    import numpy as np

    from etamem.facts.slots import AttributeSlots

    new = "The user got a Tesla Model 3 last week."
    texts = ["The user drives a Honda Civic.", "The user loves jazz.", "The user is a software engineer at a bank."]
    vecs = np.asarray(minilm.encode([new, *texts]), np.float32)
    cands = [Candidate(f"u{i}", t, "user", T0, float(vecs[0] @ vecs[i + 1]), vector=vecs[i + 1])
             for i, t in enumerate(texts)]
    chat_server.responder = lambda request: json.dumps({"replaced": []})
    llm = LLMClient("test-model", base_url=chat_server.base_url, max_retries=0)

    def shown(clf) -> list[str]:
        before = len(chat_server.requests)
        assert clf.classify(new, "user", cands, vector=vecs[0]) == []
        if len(chat_server.requests) == before:
            return []
        return [t for t in texts if t in chat_server.requests[-1]["messages"][-1]["content"]]

    assert shown(LLMSupersession(llm)) == []
    slots = LLMSupersession(llm, gate="slots", slots=AttributeSlots(), encoder=minilm)
    assert shown(slots) == texts[:1] and slots.uses_vectors and slots.min_similarity < 0.25
    assert shown(LLMSupersession(llm, gate="all")) == texts
    with pytest.raises(ValueError, match="needs the attribute slots"):
        LLMSupersession(llm, gate="slots")
    with pytest.raises(ValueError, match="expected one of"):
        LLMSupersession(llm, gate="some")
    mem = memory(minilm, supersession="llm", supersession_llm_gate="slots", llm_model="test-model",
                 llm_base_url=chat_server.base_url)
    assert classifier(mem).gate == "slots" and classifier(mem).uses_vectors
    with pytest.raises(ValueError, match="supersession_llm_gate"):
        Config.from_dict({"supersession_llm_gate": "some"})


# --- FTA units ------------------------------------------------------------------------------------
def test_fta_units_get_supersedes_links_history_and_current_first(minilm):
    mem = memory(minilm, method="fta")
    mem.add(said([("I live in Chicago, in a small apartment near the lake.", 0), ("I love horror movies.", 1),
                   ("I moved to Milwaukee last month.", 30)]), space="u")
    mem.end_session("u")
    links = [l for l in mem.links("u") if l.relation == "supersedes"]
    assert len(links) == 1
    history = mem.history(links[0].target, "u")
    assert [u.status for u in history] == ["superseded", "final"] and "Milwaukee" in history[-1].text
    hits = mem.search("Where does the user live now?", space="u", top_k=3, now=T0 + timedelta(days=40))
    assert "Milwaukee" in hits[0].amu.text and hits[0].supersedes == (links[0].target,)


def test_a_raw_turn_hit_follows_the_links_of_its_units():
    def amu(uid, day, turn):
        return AMU(uid, f"text {uid}", "user", T0 + timedelta(days=day), "s", (turn,))

    old, new = amu("t1#0", 0, "t1"), amu("t9#0", 30, "t9")
    raw = Hit(AMU("turn:t1", "I live in Chicago.", "user", old.timestamp, "s", ("t1",)), 0.9, ("raw",), ("t1",))
    other = Hit(amu("t5#0", 5, "t5"), 0.5, ("event",), ("t5",))
    links = [("t9#0", "t1#0", "supersedes", 0.8)]
    rows = lambda ids: [r for r in links if r[0] in ids or r[1] in ids]  # noqa: E731
    done = current_first([raw, other], "Where does she live?", rows, lambda ids: {"t9#0": new},
                         turn_units=lambda ts: {"t1": ["t1#0"]} if "t1" in ts else {})
    assert [h.amu.amu_id for h in done] == ["t9#0", "turn:t1"]  # the current unit first, the raw turn after
    assert done[1].superseded_by == ("t9#0",) and done[0].supersedes == ("t1#0",)  # unit ids only
    plain = current_first([raw, other], "Where does she live?", rows, lambda ids: {"t9#0": new})
    assert [h.amu.amu_id for h in plain] == ["turn:t1", "t5#0"]  # without the turn map: as ranked
