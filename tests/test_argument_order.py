"""One argument order (issue 49, item 8): what a method acts on first, `space` after it, for
`get / history / delete / update` as for `add / search`; the old order of `delete(space, amu_id)`
and `update(space, turn_id, text)` still read as meant, with a DeprecationWarning."""
from __future__ import annotations

import asyncio
import inspect
import warnings

import pytest

from conftest import HashingEncoder
from etamem import AsyncMemory, Memory, UnknownIdError
from etamem.models.affect import VaderAffectTagger

TURNS = [{"turn_id": f"t{i}", "session_id": "s1", "speaker": "Ana", "text": text,
          "timestamp": "2024-03-02T10:00"}
         for i, text in enumerate(["I adopted a cat named Miso.", "I live in Porto.", "I work at Acme.",
                                   "My sister plays the cello."])]


@pytest.fixture
def mem(tmp_path):
    enc = HashingEncoder()
    m = Memory(tmp_path / "m", text_encoder=enc, affect_tagger=VaderAffectTagger(enc))
    m.add(TURNS, space="ana")
    m.add(TURNS[:2], space="bo")
    yield m
    m.close()


def unit_of(mem, space, turn_id):
    return next(u for u in mem.list(space) if turn_id in u.source_turn_ids)


def test_the_four_methods_take_the_subject_first_and_space_after():
    for name, first in (("get", "amu_id"), ("history", "unit_id"), ("delete", "amu_id"), ("update", "turn_id")):
        params = list(inspect.signature(getattr(Memory, name)).parameters)
        assert params[1] == first and "space" in params[2:4], (name, params)
        assert list(inspect.signature(getattr(AsyncMemory, name)).parameters) == params, name


def test_the_new_order_gives_no_warning(mem):
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        cat = unit_of(mem, "ana", "t0")
        assert mem.get(cat.amu_id, "ana").amu_id == cat.amu_id
        assert [u.amu_id for u in mem.history(cat.amu_id, "ana")] == [cat.amu_id]
        assert mem.delete(cat.amu_id, "ana") == 1
        assert mem.update("t1", "I live in Lisbon now.", "ana").changed
        assert mem.delete(turn_id="t2", space="ana") >= 1
        assert mem.delete(space="bo") >= 1 and "bo" not in mem.spaces()


def test_the_old_order_is_read_as_meant_with_a_deprecation_warning(mem):
    cat = unit_of(mem, "ana", "t0")
    with pytest.warns(DeprecationWarning, match=r"delete\('ana', '.*'\): the old argument order"):
        assert mem.delete("ana", cat.amu_id) == 1
    with pytest.raises(UnknownIdError):
        mem.get(cat.amu_id, "ana")
    with pytest.warns(DeprecationWarning, match=r"delete\('ana', turn_id=\.\.\.\)"):
        assert mem.delete("ana", turn_id="t2") >= 1
    assert "t2" not in {t.turn_id for t in mem.turns("ana")}
    with pytest.warns(DeprecationWarning, match=r"update\('ana', 't1', \.\.\.\)"):
        up = mem.update("ana", "t1", "I live in Lisbon now.")
    assert up.changed and "Lisbon" in " ".join(t.text for t in mem.turns("ana"))
    with pytest.warns(DeprecationWarning, match=r"delete\('bo'\).*delete\(space='bo'\)"):
        assert mem.delete("bo") >= 1
    assert "bo" not in mem.spaces()


def test_a_call_naming_nothing_in_either_order_fails_as_the_new_order(mem):
    with pytest.raises(UnknownIdError, match="no AMU 'nope' in space 'ana'"):
        mem.delete("nope", "ana")
    with pytest.raises(UnknownIdError, match="no turn 'nope' in space 'ana'"):
        mem.update("nope", "text", "ana")


def test_async_memory_takes_the_same_order(mem):
    cat = unit_of(mem, "ana", "t0")

    async def main():
        async with AsyncMemory(mem) as amem:
            with warnings.catch_warnings():
                warnings.simplefilter("error", DeprecationWarning)
                gone = await amem.delete(cat.amu_id, "ana")
                up = await amem.update("t1", "I live in Faro now.", "ana")
        return gone, up

    gone, up = asyncio.run(main())
    assert gone == 1 and up.changed


def test_an_unknown_space_on_search_warns_once_per_process_or_raises_with_strict(mem, caplog, monkeypatch):
    import logging

    from etamem import memory as memory_module
    from etamem.records import UnknownSpaceError

    monkeypatch.setattr(memory_module, "_UNKNOWN_SPACE_WARNED", set())
    with caplog.at_level(logging.DEBUG, logger="etamem.memory"):
        assert mem.search("cat?", space="anna") == []
        assert mem.search("cat?", space="anna") == [] and mem.search("cat?", space="bob") == []
    lines = [r for r in caplog.records if "no space" in r.message]
    assert [r.levelname for r in lines] == ["WARNING", "DEBUG", "DEBUG"] and "'anna'" in lines[0].message
    with pytest.raises(UnknownSpaceError):
        mem.search("cat?", space="anna", strict=True)
    with pytest.raises(UnknownSpaceError):
        asyncio.run(AsyncMemory(mem).search("cat?", space="anna", strict=True))
    assert mem.search("cat?", space="ana", strict=True)  # a stored space: hits as ever


def test_an_old_order_call_naming_a_missing_turn_names_it(mem):
    with pytest.warns(DeprecationWarning), pytest.raises(UnknownIdError, match="no turn 'zz' in space 'ana'"):
        mem.update("ana", "zz", "text")
