"""FTA-Mem through `Memory` (Config(method="fta") and units="fta"): construction online with the
provisional segment pending, stored fields and links, lifecycle and history, deletes, reopening,
search and answers offline and through a local LLM endpoint (calls counted per stage)."""
from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from etamem import Memory
from etamem.models.affect import VaderAffectTagger
from etamem.records import UnknownIdError

T0 = datetime(2023, 5, 1, 18, 0, tzinfo=timezone.utc)
CAT = "Caroline"
MEL = "Melanie"

SESSION_1 = [
    (CAT, "Hi Melanie! I live in Boston now, I moved in March."),
    (MEL, "Oh nice, how do you like Boston so far?"),
    (CAT, "I love it, the harbour walks are lovely and my new job at the museum is great."),
    (MEL, "That sounds wonderful. I am planning to go camping at the lake with my kids next month."),
    (CAT, "Camping sounds fun! Where is the lake?"),
    (MEL, "It is up north, about two hours from home. The kids are so excited about the tent."),
    (CAT, "By the way, I adopted a grey cat last week. Her name is Pixel."),
    (MEL, "Aww, Pixel is a cute name! Do you have a photo?"),
    (CAT, "Yes, I will send you one tonight. She sleeps on my keyboard all day."),
    (MEL, "Haha, cats love keyboards. I really like jazz, by the way, I play the saxophone."),
]
SESSION_2 = [
    (MEL, "Hey Caroline! We went camping at the lake last weekend, the kids loved the tent."),
    (CAT, "That is great! How was the weather?"),
    (MEL, "Sunny and warm, we swam every day."),
    (CAT, "I have news: I live in Seattle now, the museum moved me to their new branch."),
    (MEL, "Wow, Seattle! Do you miss Boston?"),
    (CAT, "A little, but Pixel likes the new flat with big windows."),
    (MEL, "Honestly I do not like jazz anymore, I switched to classical piano."),
    (CAT, "Classical piano sounds relaxing."),
]


def turns(rows, session: str, day: int) -> list[dict]:
    return [{"turn_id": f"{session}:{i}", "session_id": session, "speaker": spk, "text": text,
             "timestamp": (T0 + timedelta(days=day, minutes=i)).isoformat()} for i, (spk, text) in enumerate(rows)]


@pytest.fixture
def fta_mem(tmp_path, minilm):
    def make(path=None, **config):
        cfg = {"method": "fta", "fta_window": 6, **config}
        return Memory(path or tmp_path / "store", cfg, text_encoder=minilm, affect_tagger=VaderAffectTagger(minilm))
    return make


def test_online_construction_keeps_the_provisional_segment_pending_until_the_session_ends(fta_mem):
    mem = fta_mem()
    mem.add(turns(SESSION_1, "s1", 0))
    stats = mem.stats()
    assert 0 < stats["extraction"]["pending_turns"] < len(SESSION_1)  # the last segment waits for more turns
    assert mem.retrieve("Where does Caroline live?").pending_turns == stats["extraction"]["pending_turns"]
    mem.end_session()
    assert mem.stats()["extraction"]["pending_turns"] == 0
    units = mem.list()
    assert 0.3 * len(SESSION_1) <= len(units) <= len(SESSION_1)
    covered = {t for u in units for t in u.source_turn_ids}
    assert "s1:6" in covered  # the cat's name
    hits = mem.search("What is the name of Caroline's cat?", top_k=3)
    assert hits and hits[0].views == ("fta",) and "s1:6" in hits[0].source_turn_ids
    assert "Pixel" in hits[0].amu.text  # the short sentence that names the cat is kept
    assert mem.search("What is the name of Caroline's cat?", top_k=1)[0].amu.amu_id == hits[0].amu.amu_id
    mem.close()


def test_a_new_session_finalises_the_previous_one_and_links_updates_and_contradictions(fta_mem, tmp_path):
    mem = fta_mem()
    mem.add(turns(SESSION_1, "s1", 0))
    mem.add(turns(SESSION_2, "s2", 40))  # the new session completes session 1 first
    mem.end_session()
    links = mem.links()
    relations = {(l.relation) for l in links}
    assert {"supersedes", "contradicts"} <= relations, links
    by_id = {u.amu_id: u for u in mem.list()}
    moved = next(l for l in links if l.relation == "supersedes" and "Seattle" in by_id[l.source].text)
    assert "Boston" in by_id[moved.target].text
    chain = mem.history(moved.target)
    assert [u.unit_id for u in chain][-2:] == [moved.target, moved.source]
    assert chain[-2].status == "superseded" and chain[-1].status == "final"
    jazz = next(l for l in links if l.relation == "contradicts")
    assert mem.history(jazz.source)[0].status == "contradicted"
    # the superseded unit stays retrievable, ranked right after the unit that replaced it
    hits = mem.search("Where does Caroline live?", top_k=10)
    ids = [h.amu.amu_id for h in hits]
    assert moved.target in ids
    if moved.source in ids[:10]:
        assert ids.index(moved.target) == ids.index(moved.source) + 1
    mem.close()
    # everything is in the store: a new Memory sees the same units, links and lifecycle
    again = fta_mem(tmp_path / "store")
    assert {(l.source, l.target, l.relation) for l in again.links()} == {(l.source, l.target, l.relation) for l in links}
    assert again.history(moved.target)[-2].status == "superseded"
    assert [h.amu.amu_id for h in again.search("Where does Caroline live?", top_k=10)] == ids
    again.close()


def test_deleting_the_newer_unit_restores_the_older_one_and_forgets_its_text(fta_mem):
    mem = fta_mem()
    mem.add(turns(SESSION_1, "s1", 0))
    mem.add(turns(SESSION_2, "s2", 40))
    mem.end_session()
    moved = next(l for l in mem.links() if l.relation == "supersedes")
    newer_text = mem.get(moved.source).text
    before = next(u for u in mem.history(moved.target) if u.unit_id == moved.target)
    assert before.lifecycle.status == "archived" and before.lifecycle.updated_at is not None  # the paper's record
    mem.delete(amu_id=moved.source)
    assert all(moved.source not in (l.source, l.target) for l in mem.links())
    older = mem.history(moved.target)[-1]
    assert older.status == "final"
    # the paper lifecycle is back as the remaining links give it: none of them archives it
    assert older.lifecycle.status != "archived" and older.lifecycle.updated_at != before.lifecycle.updated_at
    with pytest.raises(UnknownIdError):
        mem.history(moved.source)
    dump = json.dumps([mem.store.get_space_meta("default", k) for k in ("fta_profiles", "fta_carried")])
    assert newer_text not in dump
    for fields in mem.store.unit_fields("default").values():
        assert newer_text not in fields[1]
    mem.close()


def test_one_space_holds_one_kind_of_unit(fta_mem, tmp_path, minilm):
    mem = fta_mem()
    mem.add(turns(SESSION_1[:4], "s1", 0))
    mem.close()
    amu = Memory(tmp_path / "store", {"method": "etamem", "units": "amu"}, text_encoder=minilm,
                 affect_tagger=VaderAffectTagger(minilm))
    with pytest.raises(ValueError, match="holds fta units"):
        amu.add(turns(SESSION_1[4:], "s9", 0))
    assert amu.store.count_turns("default") == 4  # nothing of the refused call was stored
    with pytest.raises(ValueError, match="method='fta'"):  # nor read by another method by mistake
        amu.search("Boston")
    amu.add(turns(SESSION_1, "s1", 0), space="other")
    amu.close()
    fta = fta_mem(tmp_path / "store")
    with pytest.raises(ValueError, match="holds AMUs"):
        fta.search("Boston", space="other")
    fta.close()


def test_etamem_views_over_fta_units(fta_mem):
    mem = fta_mem(method="etamem", units="fta")
    mem.add(turns(SESSION_1, "s1", 0))
    mem.end_session()
    stats = mem.stats()
    n = len(mem.list())
    assert stats["amus"] == n and stats["views"]["time"]["amus"] == n
    assert mem.store.unit_fields("default")  # structured fields stored beside the AMUs
    hits = mem.search("What is the name of Caroline's cat?", top_k=5)
    assert hits and set(hits[0].views) <= {"event", "affect", "time", "raw"}
    assert any("Pixel" in h.amu.text for h in hits)
    mem.close()


def test_offline_answer_names_the_evidence(fta_mem):
    mem = fta_mem()
    mem.add(turns(SESSION_1, "s1", 0))
    mem.end_session()
    ans = mem.answer("What is the name of Caroline's cat?")
    assert not ans.llm_used and "s1:6" in ans.hits[0].source_turn_ids
    assert "grey cat" in ans.text and "Pixel" in ans.text
    mem.close()



def test_bm25_brings_units_the_cosine_pool_misses(hashing_encoder):
    """S = (1 - beta) R + beta BM25n over the cosine pool and the BM25 pool: with a pool of 4 the
    word-hash cosine never reaches the one unit naming the rare word; BM25 does."""
    rows = [(CAT, f"Caroline keeps the {x} in the kitchen drawer near the window.") for x in
            ("spoons", "keys", "candles", "batteries", "scissors", "stamps", "receipts", "charger")]
    rows.insert(4, (MEL, "My neighbour has a stuffed quokka77 toy on a shelf."))
    query = "Where does Caroline keep the quokka77 in the kitchen?"
    found = {}
    for beta in (0.0, 1.0):
        mem = Memory(None, {"method": "fta", "fta_segmentation": "session", "candidate_pool": 1, "fta_tau": -1,
                            "fta_bm25_weight": beta},
                     text_encoder=hashing_encoder, affect_tagger=VaderAffectTagger(hashing_encoder))
        mem.add(turns(rows, "s1", 0))
        mem.end_session()
        result = mem.retrieve(query, top_k=1, trace=True)
        found[beta] = [h.source_turn_ids for h in result.hits if h.views == ("fta",)]
        assert result.traces["fta"][0]["bm25n"] == (1.0 if beta else 0.0)
        mem.close()
    assert found[0.0] != [("s1:4",)] and found[1.0] == [("s1:4",)]

# --- one LLM path end to end, through a local OpenAI-compatible endpoint -------------------------
PLAN_SESSION = [
    (MEL, "I am planning to go camping at the lake with my kids next month."),
    (CAT, "Camping sounds fun! Where is the lake?"),
    (MEL, "Up north, two hours from home."),
    (CAT, "I live in Boston now, by the way."),
    (MEL, "Boston is lovely in spring."),
    (CAT, "It is! The harbour walks are great."),
    (MEL, "We went camping at the lake last weekend, the kids loved the tent."),
    (CAT, "That is great to hear."),
    (MEL, "Thanks! See you soon."),
]
LATER_SESSION = [(CAT, "Big news: I live in Seattle now."), (MEL, "Wow, congratulations on the move!")]


def _units(*units: dict) -> str:
    return json.dumps({"memory_units": list(units)})


def scripted_llm(request: dict) -> str:
    """Replies by prompt: segments of three turns, units by what the segment says (the plan
    completed two segments later names P1), links by the candidates' texts, a rewrite, an answer."""
    import re

    prompt = request["messages"][-1]["content"]
    if prompt.startswith("You cut the raw turns"):
        b, e = map(int, re.search(r"Turns (\d+) to (\d+)", prompt).groups())
        return json.dumps({"segments": [{"turn_span": [i, min(i + 2, e)], "boundary_trigger": "topic_shift"}
                                         for i in range(b, e + 1, 3)]})
    if prompt.startswith("You are the memory-unit builder"):
        b, e = map(int, re.search(r"this segment, turns (\d+) to (\d+)", prompt).groups())
        segment = prompt.split("this segment, turns", 1)[1]
        base = {"summary": "unknown", "event_time": "unknown", "emotion_or_state": "unknown",
                "intention_or_plan": "unknown", "evidence_turn_span": [b, e], "completes": None}
        if "planning to go camping" in segment:
            return _units({**base, "text": "Melanie plans to go camping at the lake with her kids next month.",
                           "content_type": "homework_or_plan", "time_orientation": "future",
                           "participants": ["Melanie"], "status": "pending"})
        if "went camping" in segment:
            return _units({**base, "text": "Melanie went camping at the lake; the kids loved the tent.",
                           "content_type": "event", "time_orientation": "past", "participants": ["Melanie"],
                           "status": "complete", "completes": "P1" if "P1:" in prompt else None})
        if "Seattle" in segment:
            return _units({**base, "text": "Caroline lives in Seattle now.", "content_type": "current_state",
                           "time_orientation": "present", "participants": ["Caroline"], "status": "complete"})
        if "Boston now" in segment:
            return _units({**base, "text": "Caroline lives in Boston.", "content_type": "current_state",
                           "time_orientation": "present", "participants": ["Caroline"], "status": "complete"})
        return _units()
    if prompt.startswith("You maintain the relations"):
        new = prompt.split("Candidate older units", 1)[0]
        links = []
        for uid, text in re.findall(r"^- (\S+) \(said [^)]*\): (.*)$", prompt.split("Candidate older units", 1)[1], re.M):
            if "Seattle" in new and "Boston" in text:
                links.append({"id": uid, "relation": "supersedes", "confidence": "high"})
            else:
                links.append({"id": uid, "relation": "none", "confidence": "low"})
        return json.dumps({"links": links})
    if prompt.startswith("You turn a question into an evidence-oriented search query"):
        return "Caroline home city where she lives"
    return "Seattle."


def test_llm_path_end_to_end_counts_calls_per_stage(tmp_path, minilm, chat_server):
    chat_server.responder = scripted_llm
    cfg = {"method": "fta", "fta_window": 6, "llm_model": "test-model", "llm_base_url": chat_server.base_url,
           "llm_api_key": "test", "llm_max_retries": 0}
    mem = Memory(tmp_path / "store", cfg, text_encoder=minilm, affect_tagger=VaderAffectTagger(minilm))
    mem.add(turns(PLAN_SESSION, "s1", 0))
    mem.add(turns(LATER_SESSION, "s2", 30))
    mem.end_session()
    usage = mem.llm.usage()
    # 9 + 2 turns, window 6: BWS windows over session 1 (the provisional segment restarts them), one
    # over session 2; one extraction call per segment; one link call per unit with candidates
    assert usage["fta_segment"].calls >= 3
    assert usage["fta_extract"].calls == 4  # segments 0-2, 3-5, 6-8 and session 2's
    units = {u.text: u for u in mem.list()}
    camping = next(u for t, u in units.items() if "camping" in t)  # the plan, fused with its outcome
    assert camping.source_turn_ids[:1] == ("s1:0",) and "s1:6" in camping.source_turn_ids
    assert "went camping" in camping.text and len([t for t in units if "camping" in t]) == 1
    fields = mem.history(camping.amu_id)[-1]
    assert fields.completeness == "complete" and len(fields.evidence) == 2
    assert usage["fta_link"].calls >= 1
    moved = [l for l in mem.links() if l.relation == "supersedes"]
    assert len(moved) == 1 and mem.get(moved[0].target).text == "Caroline lives in Boston."
    assert [u.status for u in mem.history(moved[0].source)] == ["superseded", "final"]
    # construction at the paper's temperature 0.7 (fta_construction_temperature), rewrite and answer at 0
    fta_prompts = ("You cut the raw turns", "You are the memory-unit builder", "You maintain the relations")
    construction = [r for r in chat_server.requests if r["messages"][-1]["content"].startswith(fta_prompts)]
    assert len(construction) >= 8 and {r.get("temperature") for r in construction} == {0.7}
    before = len(chat_server.requests)
    ans = mem.answer("Where does Caroline live now?", now="2023-07-01")
    after = mem.llm.usage()
    assert ans.llm_used and ans.text == "Seattle."
    assert after["fta_rewrite"].calls == 1 and after["answer"].calls == 1
    assert len(chat_server.requests) - before == 2  # the rewrite and the answer, nothing else
    assert [r.get("temperature") for r in chat_server.requests[before:]] == [0.0, 0.0]
    packet = chat_server.requests[-1]["messages"][-1]["content"]
    assert "Caroline lives in Seattle now." in packet and "Caroline lives in Boston." in packet
    assert "SUPERSEDED" in packet and "I live in Seattle now." in packet  # lifecycle and the source span
    mem.close()


def test_inspect_shows_links_on_the_command_line_and_the_html_page(fta_mem, tmp_path, capsys, monkeypatch):
    from etamem.cli import main
    from etamem.inspection.viz import write_all

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    mem = fta_mem()
    mem.add(turns(SESSION_1, "s1", 0))
    mem.add(turns(SESSION_2, "s2", 40))
    mem.end_session()
    links = mem.links()
    page = write_all(mem, "default", tmp_path / "html", plots=False)[0].read_text()
    mem.close()
    assert "Relation links" in page and all(l.source in page and l.target in page for l in links)
    assert main(["-q", "inspect", str(tmp_path / "store"), "--links", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    shown = printed["links"]
    assert [(i["source"], i["target"], i["relation"]) for i in shown] == [(l.source, l.target, l.relation)
                                                                         for l in links]
    updated = next(i for i in shown if i["relation"] == "supersedes")
    assert updated["target_status"] == "superseded" and "Boston" in updated["target_text"]
    chain = next(c for c in printed["chains"] if any(s["unit_id"] == updated["target"] for s in c))
    assert chain[0]["status"] == "superseded" and chain[-1]["status"] != "superseded"  # oldest first, current last
    assert main(["-q", "inspect", str(tmp_path / "store"), "--links", "--amu", updated["target"]]) == 0
    out = capsys.readouterr().out
    assert "supersedes" in out and "1 relation links" in out


def test_answer_packet_gives_up_the_auxiliary_memory_before_any_unit(tmp_path, minilm, chat_server):
    """A model context that holds every unit but not the auxiliary memory beside them: the packet
    keeps the units (fta.search.fitted_packet), as ETAMem's answer gives up its Time context first."""
    chat_server.responder = scripted_llm
    chat_server.tokenizer = True
    cfg = {"method": "fta", "fta_window": 6, "llm_model": "test-model", "llm_base_url": chat_server.base_url,
           "llm_api_key": "test", "llm_max_retries": 0}
    with Memory(tmp_path / "store", cfg, text_encoder=minilm, affect_tagger=VaderAffectTagger(minilm)) as mem:
        mem.add(turns(SESSION_1, "s1", 0))
        mem.add(turns(SESSION_2, "s2", 40))
        mem.end_session()
        mem.answer("Where does Caroline live now?", now="2023-07-01")
    full = chat_server.requests[-1]["messages"][-1]["content"]
    head, aux = full.split("# Auxiliary memory", 1)
    aux = aux.split("\n# ", 1)[0].strip()
    assert len(aux.split()) >= 10
    cut = len(full.split()) - len(aux.split()) // 2
    small = {**cfg, "llm_context_tokens": cut + 100 + 16, "llm_max_tokens": 100}
    with Memory(tmp_path / "store", small, text_encoder=minilm, affect_tagger=VaderAffectTagger(minilm)) as mem:
        mem.answer("Where does Caroline live now?", now="2023-07-01")
    prompt = chat_server.requests[-1]["messages"][-1]["content"]
    assert len(prompt.split()) <= cut and aux not in prompt
    assert prompt.split("# Auxiliary memory", 1)[0] == head  # every unit and span kept
