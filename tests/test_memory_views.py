"""The views inside `Memory`: routing, persistence, deletion, stats and construction cost."""
import json
import re

import pytest

from etamem import Config, Memory
from etamem.extraction.extractors import LLMExtractor, RuleExtractor
from etamem.models.affect import VaderAffectTagger
from etamem.models.encoders import CachedEncoder
from etamem.models.llm import LLMClient

TURNS = [
    ("s1", "2023-05-08T13:00", "Ana", "I adopted a grey cat named Miso. I love her so much!"),
    ("s1", "2023-05-08T13:01", "Ben", "I started a new job as a nurse in Lyon. The commute is awful."),
    ("s1", "2023-05-08T13:02", "Ana", "My sister lives in Toronto and works as an architect."),
    ("s2", "2023-05-20T10:00", "Ben", "I passed the nursing exam yesterday, I am thrilled."),
    ("s2", "2023-05-20T10:02", "Ana", "I repainted the kitchen blue last weekend."),
    ("s2", "2023-05-20T10:03", "Ben", "My car broke down on the highway, which was terrible."),
    ("s3", "2023-06-02T09:00", "Ana", "Miso the cat learned to open the fridge door."),
    ("s3", "2023-06-02T09:05", "Ben", "I booked a train ticket to Marseille for July."),
]


def turns(rows=TURNS):
    return [{"turn_id": f"t{i}", "session_id": s, "timestamp": ts, "speaker": sp, "text": tx}
            for i, (s, ts, sp, tx) in enumerate(rows)]


def memory(minilm, path=None, **kw):
    return Memory(path, Config(), text_encoder=CachedEncoder(minilm), affect_tagger=VaderAffectTagger(minilm), **kw)


def test_amus_are_routed_to_views(minilm):
    mem = memory(minilm)
    mem.add(turns(), space="u")
    mem.end_session("u")
    amus = mem.list("u")
    views = mem.views("u")
    assert sorted(views.event.row_of) == sorted(a.amu_id for a in amus if a.polarity == "neutral")
    assert sorted(views.affect.row_of) == sorted(a.amu_id for a in amus if a.polarity != "neutral")
    assert sorted(views.time.amu_session) == sorted(a.amu_id for a in amus)
    assert views.event.row_of and views.affect.row_of
    # 8 May (Mon), 20 May (Sat, Monday 15 May), 2 June (Fri, Monday 29 May): each day under its own month
    assert views.time.counts() == {"month": 2, "week": 3, "day": 3, "session": 3}
    # the affect tree is keyed by affective embeddings, the event tree by text embeddings
    assert views.affect.dim == minilm.dim + 5 and views.event.dim == minilm.dim


def test_views_persist_and_reload_identically(minilm, tmp_path):
    with memory(minilm, tmp_path / "m") as mem:
        mem.add(turns(), space="u")
        mem.end_session("u")
        before = {v: mem.views("u").tree(v).snapshot() for v in ("event", "affect")}
        time_before = mem.views("u").time.snapshot()
        shape = mem.stats("u")["views"]
    with memory(minilm, tmp_path / "m") as mem2:
        assert {v: mem2.views("u").tree(v).snapshot() for v in ("event", "affect")} == before
        assert mem2.views("u").time.snapshot() == time_before
        assert mem2.stats("u")["views"] == shape


def test_missing_view_rows_are_rebuilt_on_load(minilm, tmp_path):
    with memory(minilm, tmp_path / "m") as mem:
        mem.add(turns(), space="u")
        n = len(mem.list("u"))
        mem.store._conn.execute("DELETE FROM nodes")  # as if the view write never happened
        mem.store._conn.execute("DELETE FROM view_state")
    with memory(minilm, tmp_path / "m") as mem2:
        views = mem2.views("u")
        assert views.event.active_rows + views.affect.active_rows == n == len(views.time.amu_session)


def test_delete_removes_amu_from_every_view(minilm, tmp_path):
    with memory(minilm, tmp_path / "m") as mem:
        mem.add(turns(), space="u")
        victim = mem.list("u")[0]
        mem.delete(space="u", amu_id=victim.amu_id)
        views = mem.views("u")
        assert views.view_of(victim.amu_id) is None and victim.amu_id not in views.time.amu_session
    with memory(minilm, tmp_path / "m") as mem2:
        views = mem2.views("u")
        assert views.view_of(victim.amu_id) is None and victim.amu_id not in views.time.amu_session


def test_cli_stats_matches_library(minilm, tmp_path, capsys):
    from etamem.cli import main

    store = tmp_path / "m"
    with memory(minilm, store) as mem:
        mem.add(turns(), space="u")
        mem.end_session("u")
        expected = mem.stats("u")
    assert main(["-q", "stats", str(store), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got == [json.loads(json.dumps(expected))]
    assert main(["-q", "stats", str(store)]) == 0
    out = capsys.readouterr().out
    assert "event" in out and "affect" in out and "sessions 3" in out and "tau_new" in out


def test_construction_cost_follows_the_model(minilm, chat_server, tmp_path):
    """LLM calls: one extraction per turn (T), first summaries of internal nodes (J) and
    refreshes bounded by pending updates / delta (U / delta)."""

    def responder(body):
        prompt = body["messages"][-1]["content"]
        if "Turn to process" in prompt:
            text = re.search(r"Turn to process \([^)]*\):\n(.*?)\n\nRules:", prompt, re.S).group(1)
            return json.dumps({"facts": [s.strip() for s in re.split(r"(?<=[.!?])\s+", text) if s.strip()]})
        return "A summary of the children."

    chat_server.responder = responder
    llm = LLMClient("m", base_url=chat_server.base_url, api_key="k", cache_path=str(tmp_path / "cache.sqlite"))
    cfg = Config(b_max=2, summary_delta=2)  # small trees still get internal nodes
    mem = Memory(None, cfg, text_encoder=CachedEncoder(minilm), affect_tagger=VaderAffectTagger(minilm), llm=llm,
                 extractor=LLMExtractor(llm, fallback=RuleExtractor()))
    mem.add(turns(), space="u")
    mem.end_session("u")
    mem.flush("u")  # the LLM's extraction and summaries run behind the writes (Config.llm_background)
    usage = llm.usage()
    cost = mem.stats("u")["construction"]
    assert usage["extract"].calls == len(TURNS) == cost["turns"]
    summaries = cost["summaries_first"] + cost["summaries_refresh"]
    stage = usage["summarise"]
    assert cost["summaries_first"] > 0 and stage.calls + stage.cached_calls == summaries
    assert cost["summaries_refresh"] <= cost["pending_updates"] / cfg.summary_delta
    nodes = mem.views("u").time.nodes
    assert all(n.summary == "A summary of the children." for n in nodes.values() if n.level != "session")


def test_llm_summaries_off_makes_no_summary_calls(minilm, chat_server):
    """`llm_summaries=False`: extraction still asks the LLM, node summaries stay extractive."""
    chat_server.responder = lambda body: (json.dumps({"facts": []}) if "Turn to process" in
                                          body["messages"][-1]["content"] else "A summary of the children.")
    llm = LLMClient("m", base_url=chat_server.base_url, api_key="k")
    mem = Memory(None, Config(b_max=2, summary_delta=2, llm_summaries=False), text_encoder=CachedEncoder(minilm),
                 affect_tagger=VaderAffectTagger(minilm), llm=llm, extractor=RuleExtractor())
    mem.add(turns(), space="u")
    mem.end_session("u")
    assert "summarise" not in llm.usage()
    assert all(n.summary != "A summary of the children." for n in mem.views("u").time.nodes.values())


def test_retrieve_returns_routing_and_views(minilm):
    mem = memory(minilm)
    mem.add(turns(), space="u")
    res = mem.retrieve("Which pet does Ana have?", space="u", top_k=6, fallback=False)
    # the routed budget is the config's, whatever top_k asks for (the hits are its first top_k)
    assert sum(res.budgets.values()) == mem.config.route_budget and set(res.weights) == {"event", "affect", "time"}
    assert abs(sum(res.weights.values()) - 1) < 1e-9
    assert res.hits and all(set(h.views) <= {"event", "affect", "time"} for h in res.hits)
    assert any("time" in h.views and len(h.views) > 1 for h in res.hits)  # every AMU is also in Time
    assert res.hits[0].source_turn_ids == ("t0",)
    mean = mem.retrieve("Which pet does Ana have?", space="u", top_k=6, routing="mean")
    assert sum(mean.budgets.values()) == mem.config.route_budget
    assert max(mean.budgets.values()) - min(mean.budgets.values()) <= 1
    with pytest.raises(ValueError, match="views"):
        mem.retrieve("x", space="u", views=("event", "mood"))


def test_fallback_adds_raw_turns_when_confidence_is_low(minilm):
    # fallback_turns covers every turn: the 4 units found leave some turn uncovered, which comes back raw
    always = Memory(None, Config(fallback_confidence="score", fallback_threshold=2.0, fallback_turns=len(TURNS),
                                 fallback_fusion="score", route_budget=4, context_share=0.0,
                                 bm25_weight=0.1, flat_candidates=0), text_encoder=CachedEncoder(minilm),
                    affect_tagger=VaderAffectTagger(minilm))
    always.add(turns(), space="u")
    res = always.retrieve("Where does Ben work as a nurse?", space="u", top_k=4)
    raw = [h for h in res.hits if h.views == ("raw",)]
    assert res.fallback_used and raw and raw[0].amu.amu_id.startswith("turn:")
    covered = {t for h in res.hits if h.views != ("raw",) for t in h.source_turn_ids}
    assert all(h.source_turn_ids[0] not in covered for h in raw)
    never = Memory(None, Config(fallback_confidence="score", fallback_threshold=-2.0), text_encoder=CachedEncoder(minilm),
                   affect_tagger=VaderAffectTagger(minilm))
    never.add(turns(), space="u")
    res = never.retrieve("Where does Ben work as a nurse?", space="u", top_k=4)
    assert not res.fallback_used and all(h.views != ("raw",) for h in res.hits)


@pytest.mark.parametrize("threshold", [-1.0, 0.5, 1.01])
def test_agreement_confidence_is_the_overlap_with_the_raw_turn_index(minilm, threshold):
    m = 3
    cfg = Config(fallback_confidence="agreement", fallback_agreement_k=m, fallback_threshold=threshold,
                 fallback_turns=5, fallback_fusion="rrf")
    mem = Memory(None, cfg, text_encoder=CachedEncoder(minilm), affect_tagger=VaderAffectTagger(minilm))
    mem.add(turns(), space="u")
    q = "Where does Ben work as a nurse?"
    plain = mem.retrieve(q, space="u", top_k=4, fallback=False)
    res = mem.retrieve(q, space="u", top_k=4)
    assert plain.confidence is None and not plain.fallback_used
    # by hand: first m distinct source turns of the memory's hits vs the raw-turn index's top m
    mine = list(dict.fromkeys(t for h in plain.hits for t in h.source_turn_ids))[:m]
    raw = [t.turn_id for t, _ in mem.live_space("u").turns.search(minilm.encode([q])[0], q, m, beta=cfg.bm25_weight)]
    assert res.confidence == pytest.approx(len(set(mine) & set(raw)) / m)
    assert res.fallback_used == (res.confidence < threshold)
    if res.fallback_used:  # fused: every raw top-m turn is covered by the fused hits
        assert set(raw) <= {t for h in res.hits for t in h.source_turn_ids}
    else:
        assert [h.amu.amu_id for h in res.hits] == [h.amu.amu_id for h in plain.hits]


def test_temporal_window_favours_amus_in_range(minilm):
    mem = memory(minilm)
    mem.add(turns(), space="u")
    res = mem.retrieve("What happened in June 2023?", space="u", top_k=4, now="2023-07-01")
    assert res.window is not None and res.window[0].month == 6
    assert res.hits[0].amu.session_id == "s3"
