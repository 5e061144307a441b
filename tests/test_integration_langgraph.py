"""The LangGraph adapter (`etamem.integrations.langgraph.EtamemStore`) against the real LangGraph:
a parity suite that runs the same cases on LangGraph's `InMemoryStore` and on ours (semantic
ranking aside), semantic search with the real MiniLM, a StateGraph that uses it as its store;
and `Memory.update` (history old -> new, forget_old, retries)."""
import asyncio
import importlib
import re
import sys
from pathlib import Path

import pytest

pytest.importorskip("langgraph", reason="LangGraph is not installed: pip install -e '.[langgraph]'")

from langgraph.store.base import GetOp, InvalidNamespaceError, Item, PutOp, SearchItem  # noqa: E402
from langgraph.store.memory import InMemoryStore  # noqa: E402

from etamem import Config, Memory, UnknownIdError, UnknownSpaceError  # noqa: E402
from etamem.integrations.langgraph import EtamemStore, TTLNotSupportedError, namespace_of, space_of  # noqa: E402
from etamem.models.affect import VaderAffectTagger  # noqa: E402
from etamem.models.encoders import CachedEncoder  # noqa: E402
from helpers import FACTS  # noqa: E402

DOCS_PAGE = Path(__file__).resolve().parents[1] / "docs" / "integrations" / "langgraph.md"


def memory(minilm, path=None) -> Memory:
    return Memory(path, Config.from_dict({}), text_encoder=CachedEncoder(minilm),
                  affect_tagger=VaderAffectTagger(minilm))


@pytest.fixture
def mem(minilm):
    m = memory(minilm)
    yield m
    m.close()


# --- parity with LangGraph's InMemoryStore ---------------------------------------------------------
def shown(result):
    """A result without what differs by design (times, scores): items as (namespace, key, value)."""
    if isinstance(result, Item):
        return (result.namespace, result.key, result.value)
    if isinstance(result, list):
        return [shown(r) for r in result]
    return result


def case_put_get(store):
    store.put(("users", "ana"), "pet", {"text": "Ana adopted a grey cat named Miso.", "kind": "fact"})
    store.put(("users", "ana"), "prefs", {"theme": "dark", "size": 3})
    store.put(("users", "ben"), "music", {"content": "Ben plays the violin.", "tags": ["music"]})
    return [store.get(("users", "ana"), "pet"), store.get(("users", "ana"), "prefs"),
            store.get(("users", "ben"), "music"), store.get(("users", "ana"), "missing")]


def case_overwrite(store):
    store.put(("a",), "k1", {"text": "Ana lives in Chicago."})
    store.put(("a",), "k2", {"text": "Ben plays the violin."})
    store.put(("a",), "k1", {"text": "Ana moved to Milwaukee.", "v": 2})
    store.put(("a",), "k2", {"note": "no text any more"})
    return [store.get(("a",), "k1"), store.get(("a",), "k2"), store.search(("a",))]


def case_delete(store):
    store.put(("a",), "k1", {"text": "Ana lives in Chicago."})
    store.put(("a",), "k2", {"x": 1})
    store.put(("a",), "k3", {"text": "Ben plays the violin."})
    store.delete(("a",), "k1")
    store.delete(("a",), "k2")
    store.delete(("a",), "never-there")
    store.put(("a",), "k1", {"text": "Ana is back."})  # after a delete: at the end again
    return [store.get(("a",), "k1"), store.get(("a",), "k2"), store.search(("a",))]


def case_list_namespaces(store):
    for ns in [("a", "b", "c"), ("a", "b", "d", "e"), ("a", "b", "d", "i"), ("a", "b", "f"), ("a", "c", "f"),
               ("x", "y"), ("users", "zoë", "notes")]:
        store.put(ns, "k", {"v": 1})
    return [store.list_namespaces(), store.list_namespaces(prefix=("a", "b")),
            store.list_namespaces(prefix=("a", "b"), max_depth=3), store.list_namespaces(suffix=("f",)),
            store.list_namespaces(prefix=("a", "*", "f")), store.list_namespaces(max_depth=1),
            store.list_namespaces(limit=2, offset=1), store.list_namespaces(prefix=("nope",))]


def case_search_listing(store):
    for i, text in enumerate(FACTS):
        ns = ("users", "ana" if "Ana" in text else "ben" if "Ben" in text else "town")
        store.put(ns, f"f{i}", {"text": text, "n": i, "who": ns[1], "meta": {"lang": "en", "i": i % 2}})
    store.put(("users", "ana"), "plain", {"n": 10, "who": "ana", "meta": {"lang": "fr"}}, index=False)
    return [store.search(("users",)), store.search(("users", "ana")), store.search(()),
            store.search(("users",), filter={"who": "ana"}), store.search(("users",), filter={"meta": {"i": 1}}),
            store.search(("users",), filter={"n": {"$gte": 3}, "who": {"$ne": "town"}}),
            store.search(("users",), limit=2), store.search(("users",), limit=3, offset=2),
            store.search(("users",), offset=20), store.search(("users", "nobody")),
            store.search(("users",), filter={"who": "ana"}, limit=1, offset=1)]


def case_batch(store):
    store.put(("a",), "k", {"v": 1})
    return store.batch([PutOp(("a",), "k", {"v": 2}), GetOp(("a",), "k"), PutOp(("a",), "j", {"v": 3}),
                        PutOp(("a",), "j", {"v": 4})]) + [store.get(("a",), "k"), store.get(("a",), "j")]


def case_async(store):
    async def run():
        await store.aput(("a", "b"), "k", {"text": "Ana plays chess on Sundays."})
        await store.aput(("a", "c"), "k", {"v": 1})
        got = await store.aget(("a", "b"), "k")
        listed = await store.asearch(("a",))
        spaces = await store.alist_namespaces(prefix=("a",))
        await store.adelete(("a", "b"), "k")
        return [got, listed, spaces, await store.aget(("a", "b"), "k")]
    return asyncio.run(run())


CASES = [case_put_get, case_overwrite, case_delete, case_list_namespaces, case_search_listing, case_batch,
         case_async]


@pytest.mark.parametrize("case", CASES, ids=[c.__name__ for c in CASES])
def test_parity_with_langgraph_in_memory_store(case, mem):
    """Every case gives the same items, in the same order, on LangGraph's own store and on ours."""
    theirs = case(InMemoryStore())
    ours = case(EtamemStore(mem))
    assert shown(ours) == shown(theirs)


def test_a_namespace_whose_items_all_went_is_not_listed(mem):
    """As LangGraph's PostgresStore (its InMemoryStore keeps listing an emptied namespace)."""
    store = EtamemStore(mem)
    store.put(("a", "b"), "k", {"text": "Ana plays chess."})
    store.put(("a", "c"), "k", {"v": 1})
    store.delete(("a", "b"), "k")
    assert store.list_namespaces() == [("a", "c")]


def test_items_carry_times_and_searches_scores(mem):
    store = EtamemStore(mem)
    store.put(("a",), "k", {"text": "Ana plays chess on Sundays."})
    first = store.get(("a",), "k")
    assert first.created_at == first.updated_at and first.created_at.tzinfo is not None
    store.put(("a",), "k", {"text": "Ana plays chess on Saturdays now."})
    second = store.get(("a",), "k")
    assert second.created_at == first.created_at and second.updated_at > first.updated_at
    [hit] = store.search(("a",), query="When does Ana play chess?")
    assert isinstance(hit, SearchItem) and isinstance(hit.score, float)
    assert [i.score for i in store.search(("a",))] == [None]  # a listing: no score


def test_a_query_with_a_search_op_passes_filter_limit_and_offset(mem):
    store = EtamemStore(mem)
    for i, text in enumerate(FACTS):
        store.put(("u",), f"f{i}", {"text": text, "odd": i % 2})
    store.put(("u",), "plain", {"odd": 1}, index=False)
    found = store.search(("u",), query="Who plays an instrument?", filter={"odd": 1}, limit=10)
    assert {i.key for i in found} == {"f1", "f3", "f5", "plain"}
    assert found[-1].key == "plain" and found[-1].score is None  # not searchable: after the ranked ones
    scores = [i.score for i in found[:-1]]
    assert scores == sorted(scores, reverse=True)
    assert [i.key for i in store.search(("u",), query="Who plays an instrument?", filter={"odd": 1}, limit=2,
                                        offset=1)] == [i.key for i in found[1:3]]


# --- semantic search with the real MiniLM --------------------------------------------------------
@pytest.mark.parametrize("query,key", [("Who plays the violin in an orchestra?", "f1"),
                                       ("Where can I buy sourdough bread?", "f3"),
                                       ("What is growing in the garden?", "f5"),
                                       ("What is the name of Ana's cat?", "f0")])
def test_semantic_search_finds_the_right_item_across_namespaces(mem, query, key):
    store = EtamemStore(mem)
    for i, text in enumerate(FACTS):
        store.put(("users", "ana" if i % 2 == 0 else "ben"), f"f{i}", {"text": text})
    store.put(("users", "ana"), "noise", {"text": "The weather was grey and rainy all week."})
    found = store.search(("users",), query=query, limit=3)
    assert found[0].key == key, [(i.key, i.score) for i in found]
    assert len(found) == 3


def test_an_update_is_searched_as_the_new_text_and_keeps_history(mem):
    store = EtamemStore(mem)
    store.put(("u",), "home", {"text": "I live in Chicago, in a small apartment near the lake."})
    store.put(("u",), "home", {"text": "I moved to Milwaukee last month."})
    [unit] = [a for a in mem.list(space_of(("u",))) if "Milwaukee" in a.text]
    history = mem.history(unit.amu_id, space_of(("u",)))
    assert ["Chicago" in a.text for a in history] == [True, False] and history[-1].amu_id == unit.amu_id
    [hit] = store.search(("u",), query="Where does the user live?")
    assert hit.value == {"text": "I moved to Milwaukee last month."}


def test_delete_removes_every_version_for_real(mem):
    store = EtamemStore(mem)
    space = space_of(("u", "ana"))
    store.put(("u", "ana"), "secret", {"text": "My PIN code is 4711."})
    store.put(("u", "ana"), "secret", {"text": "My PIN code is 9902 now."})
    store.put(("u", "ana"), "other", {"text": "Ana plays chess."})
    store.delete(("u", "ana"), "secret")
    assert store.get(("u", "ana"), "secret") is None
    texts = [t.text for t in mem.turns(space)] + [a.text for a in mem.list(space)]
    assert not [t for t in texts if "PIN" in t] and any("chess" in t for t in texts)
    assert all(i.key == "other" for i in store.search(("u",), query="What is the PIN code?"))


def test_deleting_the_space_or_the_turn_through_memory_forgets_the_value(mem):
    """The value holds the text: it goes with the space, and with its turn (delete forgets)."""
    store = EtamemStore(mem)
    store.put(("u", "ana"), "pin", {"text": "My PIN code is 4711."})
    store.put(("u", "bob"), "pin", {"text": "Bob's PIN code is 1234."})
    store.put(("u", "bob"), "plain", {"note": "no text to index"}, index=False)
    [turn] = mem.turns(space_of(("u", "ana")))
    mem.delete(space_of(("u", "ana")), turn_id=turn.turn_id)
    assert store.get(("u", "ana"), "pin") is None
    mem.delete(space_of(("u", "bob")))
    assert store.get(("u", "bob"), "pin") is None and store.get(("u", "bob"), "plain") is None
    assert store.search(("u",)) == [] and store.list_namespaces() == []
    assert not mem.store._query("SELECT * FROM space_items WHERE value LIKE '%PIN%'")


def test_a_put_after_its_turn_was_deleted_through_memory_stores_it_again(mem):
    store = EtamemStore(mem)
    store.put(("u",), "k", {"text": "Ana plays chess on Sundays."})
    [turn] = mem.turns(space_of(("u",)))
    mem.delete(space_of(("u",)), turn_id=turn.turn_id)
    store.put(("u",), "k", {"text": "Ana plays tennis on Sundays."})
    assert [t.text for t in mem.turns(space_of(("u",)))] == ["Ana plays tennis on Sundays."]
    assert store.search(("u",), query="What sport does Ana play?")[0].key == "k"


def test_a_store_on_disk_keeps_items_across_opens(minilm, tmp_path):
    with EtamemStore(memory(minilm, tmp_path / "s")) as store:
        store.put(("a", "b"), "k", {"text": "Ana plays chess on Sundays.", "n": 1})
        store.memory.close()
    with EtamemStore(memory(minilm, tmp_path / "s")) as store:
        assert store.get(("a", "b"), "k").value == {"text": "Ana plays chess on Sundays.", "n": 1}
        assert store.search(("a",), query="What game does Ana play?")[0].key == "k"
        store.memory.close()


def test_index_fields_choose_the_text(mem):
    store = EtamemStore(mem, fields=["memory"])
    store.put(("a",), "default", {"memory": "Ana keeps bees in her garden.", "text": "unrelated words"})
    store.put(("a",), "paths", {"doc": {"title": "Ben repairs old bicycles."}, "tags": ["x"]},
              index=["doc.title", "tags[*]"])
    store.put(("a",), "off", {"memory": "Ana keeps bees too."}, index=False)
    turns = {t.extra["langgraph_key"]: t.text for t in mem.turns(space_of(("a",)))}
    assert turns == {"default": "Ana keeps bees in her garden.", "paths": "Ben repairs old bicycles.\nx"}


# --- namespaces and refusals ---------------------------------------------------------------------
@pytest.mark.parametrize("ns", [("users",), ("users", "zoë"), ("a/b", "c\\d", "50%", "x y", "ü"), ("ç",) * 5])
def test_namespaces_map_to_spaces_and_back(ns):
    space = space_of(ns)
    assert "/" not in space and "\\" not in space and space.isascii()
    assert namespace_of(space) == ns


def test_bad_namespaces_ttl_and_values_are_refused(mem):
    store = EtamemStore(mem)
    with pytest.raises(InvalidNamespaceError, match="cannot name an ETAMem space"):
        store.put(("x" * 200,), "k", {"v": 1})
    with pytest.raises(InvalidNamespaceError, match="cannot name an ETAMem space"):
        space_of(("bad\ud800",))
    with pytest.raises(InvalidNamespaceError):
        store.batch([PutOp(("a.b",), "k", {"v": 1})])
    with pytest.raises(InvalidNamespaceError, match="langgraph"):
        store.batch([PutOp(("langgraph",), "k", {"v": 1})])
    with pytest.raises(TTLNotSupportedError, match="ttl=None"):
        store.batch([PutOp(("a",), "k", {"v": 1}, ttl=5.0)])
    with pytest.raises(NotImplementedError):
        store.put(("a",), "k", {"v": 1}, ttl=5.0)
    with pytest.raises(ValueError, match="unsupported operator"):
        store.search(("a",), filter={"v": {"$regex": "x"}})
    assert store.list_namespaces() == []  # nothing stored by the refused calls


def test_a_missing_langgraph_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "langgraph.store.base", None)
    monkeypatch.delitem(sys.modules, "etamem.integrations.langgraph", raising=False)
    with pytest.raises(ImportError, match=re.escape('pip install -e ".[langgraph]"')):
        importlib.import_module("etamem.integrations.langgraph")


# --- a graph that uses it --------------------------------------------------------------------------
def test_a_state_graph_writes_and_reads_memories_through_its_store(mem):
    from typing import TypedDict

    from langgraph.config import get_store
    from langgraph.graph import END, START, StateGraph

    class State(TypedDict):
        user: str
        said: str
        recalled: list

    def remember(state: State) -> dict:
        store = get_store()
        n = len(store.search(("memories", state["user"]), limit=100))
        store.put(("memories", state["user"]), f"m{n}", {"text": state["said"]})
        return {}

    def recall(state: State) -> dict:
        found = get_store().search(("memories", state["user"]), query="What pet does the user have?", limit=1)
        return {"recalled": [i.value["text"] for i in found]}

    graph = StateGraph(State)
    graph.add_node("remember", remember)
    graph.add_node("recall", recall)
    graph.add_edge(START, "remember")
    graph.add_edge("remember", "recall")
    graph.add_edge("recall", END)
    store = EtamemStore(mem)
    app = graph.compile(store=store)
    app.invoke({"user": "ana", "said": "I work as a nurse at the city hospital.", "recalled": []})
    out = app.invoke({"user": "ana", "said": "I adopted a grey cat named Miso.", "recalled": []})
    assert out["recalled"] == ["I adopted a grey cat named Miso."]
    assert [k.key for k in store.search(("memories", "ana"))] == ["m0", "m1"]
    assert mem.turns(space_of(("memories", "ana")))[1].text == "I adopted a grey cat named Miso."


# --- Memory.update ---------------------------------------------------------------------------------
def _two_turns(mem):
    mem.add([{"turn_id": "a", "session_id": "s1", "speaker": "Ana", "timestamp": "2024-01-01T10:00",
              "text": "I live in Chicago, in a small apartment near the lake."},
             {"turn_id": "b", "session_id": "s1", "speaker": "Ana", "timestamp": "2024-01-01T10:01",
              "text": "My dog is called Pixel."}], space="u")


def test_update_stores_a_new_version_that_supersedes_the_old(mem):
    _two_turns(mem)
    up = mem.update("u", "a", "I live in Denver now, in a house with a garden.")
    assert up.changed and up.superseded_ids == ("a#0",) and len(up.unit_ids) == 1
    new = mem.turns("u", [up.turn_id])[0]
    assert (new.session_id, new.speaker, new.extra) == ("s1", "Ana", {"revises": "a"})
    history = mem.history(up.unit_ids[0], "u")
    assert [(h.amu_id, h.status) for h in history] == [("a#0", "superseded"), (up.unit_ids[0], "active")]
    assert mem.get("a#0", "u").status == "superseded" and mem.turns("u", ["a"])  # the old version stays
    hits = mem.search("Where does Ana live?", "u", top_k=3)
    assert "Denver" in hits[0].amu.text
    # a correction the change rules would not link on their own: the update's links do
    other = mem.update("u", "b", "I am reading a novel about pirates.")
    assert [h.amu_id for h in mem.history(other.unit_ids[0], "u")] == ["b#0", other.unit_ids[0]]
    assert mem.get("b#0", "u").status == "superseded"


def test_update_again_is_a_no_op_and_any_version_names_the_current_one(mem):
    _two_turns(mem)
    first = mem.update("u", "a", "I live in Denver now, in a house with a garden.")
    count = len(mem.turns("u"))
    for tid in ("a", first.turn_id):
        again = mem.update("u", tid, "I live in Denver now, in a house with a garden.")
        assert not again.changed
        assert (again.turn_id, again.unit_ids, again.superseded_ids) == (first.turn_id, first.unit_ids,
                                                                         first.superseded_ids)
    assert len(mem.turns("u")) == count
    second = mem.update("u", "a", "I live in Austin.")  # the old id: updates the current version
    assert mem.turns("u", [second.turn_id])[0].extra["revises"] == first.turn_id
    assert [h.amu_id for h in mem.history(second.unit_ids[0], "u")] == ["a#0", first.unit_ids[0],
                                                                        second.unit_ids[0]]


def test_update_forget_old_removes_the_old_text_everywhere(mem):
    _two_turns(mem)
    mem.update("u", "a", "I live in Denver now.")
    up = mem.update("u", "a", "I live in Austin.", forget_old=True)
    assert up.superseded_ids == ()
    texts = [t.text for t in mem.turns("u")] + [a.text for a in mem.list("u")]
    assert not [t for t in texts if "Chicago" in t or "Denver" in t], texts
    assert any("Austin" in t for t in texts) and any("Pixel" in t for t in texts)
    assert all("Chicago" not in h.amu.text for h in mem.search("Did Ana live in Chicago?", "u", top_k=10))


def test_update_refuses_unknown_ids_and_empty_text(mem):
    _two_turns(mem)
    with pytest.raises(UnknownIdError, match="'zz'"):
        mem.update("zz", "text", "u")
    with pytest.raises(UnknownSpaceError, match="'nope'"):
        mem.update("a", "text", "nope")
    with pytest.raises(ValueError, match="text"):
        mem.update("a", "   ", "u")
    with pytest.raises(ValueError, match="timestamp"):
        mem.update("a", "I live in Oslo.", "u", timestamp="not a date")
    assert len(mem.turns("u")) == 2


# --- the docs page's example ---------------------------------------------------------------------
def test_the_docs_example_runs_as_written(tmp_path, monkeypatch, capsys):
    if not DOCS_PAGE.is_file():
        pytest.fail(f"{DOCS_PAGE} is missing")
    block = re.search(r"<!-- langgraph-example -->\s*```python\n(.*?)```", DOCS_PAGE.read_text(), re.S)
    assert block, "no <!-- langgraph-example --> python block in the docs page"
    code = block.group(1)
    assert len(code.strip().splitlines()) <= 15
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    exec(compile(code, str(DOCS_PAGE), "exec"), {"__name__": "__docs__"})
    out = capsys.readouterr().out
    assert "Miso" in out.splitlines()[0]


def test_values_in_langgraphs_own_shapes_are_indexed_by_default(mem):
    """Without `fields` or `index`, a value with no "text" / "content" is indexed whole, as
    LangGraph's stores do: `{"data": ...}` and `{"memory": ...}` values are searchable."""
    store = EtamemStore(mem)
    store.put(("u",), "a", {"data": "Ana is allergic to peanuts."})
    store.put(("u",), "b", {"memory": "Ben moved to Porto last spring.", "kind": "move"})
    store.put(("u",), "c", {"v": 1})  # no text anywhere: stored, not searched
    turns = {t.extra["langgraph_key"]: t.text for t in mem.turns(space_of(("u",)))}
    assert turns == {"a": "Ana is allergic to peanuts.", "b": "Ben moved to Porto last spring.\nmove"}
    assert store.search(("u",), query="Who moved to Porto?")[0].key == "b"
