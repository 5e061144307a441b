"""Input limits and validation: Config types and ranges, the CLI's config errors, turn limits,
space names, and the warning when a saved space's tree parameters override the config."""
import dataclasses
import logging
import math
import subprocess
import sys
import typing
from pathlib import Path

import pytest

from etamem import Config, Memory
from etamem.extraction.extractors import RuleExtractor
from etamem.ingest.inputs import normalise_turns, validate_space
from etamem.models.affect import VaderAffectTagger

REPO = Path(__file__).resolve().parents[2]
HINTS = typing.get_type_hints(Config)
FIELDS = [f.name for f in dataclasses.fields(Config)]


def _wrong_value(hint):
    """(a value of the wrong type for the annotation, the words the error must use)."""
    if hint is int:
        return "ten", "expected an integer"
    if hint is float:
        return "x", "expected a number"
    if hint is bool:
        return 1, "expected true or false"
    if hint is str:
        return 5, "expected a string"
    if hint is tuple:
        return "x", "expected a list"
    if typing.get_args(hint) and type(None) in typing.get_args(hint):
        inner = [a for a in typing.get_args(hint) if a is not type(None)][0]
        value, words = _wrong_value(inner)
        return value, words + " or null"
    raise AssertionError(f"no wrong value for annotation {hint!r}: extend this test and Config.validate")


# --- Config types -------------------------------------------------------------------------
@pytest.mark.parametrize("name", FIELDS)
def test_config_rejects_a_wrong_type_for_every_field(name):
    value, words = _wrong_value(HINTS[name])
    with pytest.raises(ValueError, match=rf"^config {name}={value!r}: {words}"):
        Config.from_dict({name: value})
    with pytest.raises(ValueError, match=rf"^config {name}="):
        Config().replace(**{name: value})


@pytest.mark.parametrize("name", [n for n in FIELDS if HINTS[n] is int])
def test_config_int_fields_reject_bool_and_float(name):
    with pytest.raises(ValueError, match=rf"config {name}=True: expected an integer"):
        Config.from_dict({name: True})
    with pytest.raises(ValueError, match=rf"config {name}=2.5: expected an integer"):
        Config.from_dict({name: 2.5})


@pytest.mark.parametrize("name", [n for n in FIELDS if HINTS[n] is float])
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_config_float_fields_reject_nan_and_inf(name, bad):
    with pytest.raises(ValueError, match=rf"config {name}=(nan|inf|-inf): expected a finite number"):
        Config.from_dict({name: bad})


def test_config_converts_int_to_float_and_list_to_tuple():
    cfg = Config.from_dict({"bm25_weight": 0, "llm_timeout_s": 5, "m_max_bounds": [12, 24]})
    assert type(cfg.bm25_weight) is float and cfg.bm25_weight == 0.0
    assert type(cfg.llm_timeout_s) is float and cfg.m_max_bounds == (12, 24)
    assert Config.from_dict(cfg.to_dict()) == cfg == Config().replace(bm25_weight=0, llm_timeout_s=5)
    assert Config.from_dict({"llm_model": None, "llm_base_url": "http://x"}).llm_base_url == "http://x"


@pytest.mark.parametrize("name, values, words", [
    ("m_max_bounds", {"m_max_bounds": [12]}, "expected a pair of integers"),
    ("m_max_bounds", {"m_max_bounds": [12.0, 24]}, "expected a pair of integers"),
    ("calibration_ema_alpha", {"calibration_ema_alpha": 1.5}, "expected 0.0..1.0"),
    ("vader_threshold", {"vader_threshold": -0.1}, "expected 0.0..1.0"),
    ("calibration_low_pct", {"calibration_low_pct": 101}, "expected 0.0..100.0"),
    ("calibration_low_pct", {"calibration_low_pct": 95.0}, "above calibration_high_pct"),
    ("llm_timeout_s", {"llm_timeout_s": -1}, "expected > 0"),  # 0: chosen by the endpoint
    ("routing_temperature", {"routing_temperature": -1}, "expected > 0"),
    ("llm_max_retries", {"llm_max_retries": -1}, "expected >= 0"),
    ("llm_backoff_s", {"llm_backoff_s": -1}, "expected >= 0"),
    ("seed", {"seed": -1}, "expected >= 0"),
    ("max_turn_chars", {"max_turn_chars": 0}, "expected >= 1"),
    ("tau_new_init", {"tau_new_init": 1.5}, "expected -1.0..1.0"),
    ("default_timezone", {"default_timezone": "Mars/Olympus"}, "IANA time zone"),
    ("text_encoder", {"text_encoder": " "}, "non-empty"),
])
def test_config_ranges(name, values, words):
    with pytest.raises(ValueError, match=rf"config {name}=.*{words}"):
        Config.from_dict(values)


def test_config_defaults_are_valid():
    cfg = Config()
    cfg.validate()
    assert cfg == Config() and cfg.max_turn_chars == 100_000


# --- CLI ----------------------------------------------------------------------------------
def _cli(*args, cwd=REPO):
    return subprocess.run([sys.executable, "-m", "etamem", "-q", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=120)


def test_cli_bad_config_value_is_a_one_line_error(tmp_path):
    out = _cli("demo", "--set", "top_k=ten")
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines() == ["etamem: error: --set: config top_k='ten': expected an integer"]


def test_cli_missing_or_malformed_config_file(tmp_path):
    missing = tmp_path / "nope.json"
    out = _cli("demo", "--config", str(missing))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip() == f"etamem: error: config file {missing}: No such file or directory"
    bad = tmp_path / "bad.json"
    bad.write_text('{\n  "top_k": 3,\n  oops\n}\n')
    out = _cli("demo", "--config", str(bad))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.startswith(f"etamem: error: config file {bad}, line 3 column 3: not valid JSON")
    bad.write_text("[1, 2]")
    out = _cli("demo", "--config", str(bad))
    assert out.returncode == 2 and "expected a JSON object" in out.stderr and "Traceback" not in out.stderr


def test_cli_set_keeps_text_fields_as_text():
    from etamem.config import parse_overrides

    values = parse_overrides(["llm_model=7", "top_k=7", "llm_base_url=null", "m_max_bounds=[12,24]"])
    assert values == {"llm_model": "7", "top_k": 7, "llm_base_url": None, "m_max_bounds": [12, 24]}
    assert Config.from_dict(values).llm_model == "7"


# --- turns ----------------------------------------------------------------------------------
def _turn(**kw):
    return {"session_id": "s1", "speaker": "Ana", "timestamp": "2023-05-08T10:00",
            "text": "I adopted a grey cat named Miso last week.", **kw}


@pytest.fixture
def make_mem(hashing_encoder, monkeypatch):
    monkeypatch.delenv("ETAMEM_LLM_MODEL", raising=False)
    made = []

    def make(path=None, **cfg):
        mem = Memory(path, Config.from_dict(cfg), text_encoder=hashing_encoder,
                     affect_tagger=VaderAffectTagger(hashing_encoder), extractor=RuleExtractor())
        made.append(mem)
        return mem

    yield make
    for mem in made:
        mem.close()


def test_too_long_turn_is_rejected_before_anything_is_stored(make_mem):
    mem = make_mem(max_turn_chars=60)
    mem.add([_turn(turn_id="a")], space="u")
    before = mem.turns("u")
    long = "word " * 20  # 100 characters
    with pytest.raises(ValueError, match=r"^turns\[1\]\.text: 100 characters, more than max_turn_chars=60; "
                                         r"split the text into several turns or raise max_turn_chars$"):
        mem.add([_turn(turn_id="b"), _turn(turn_id="c", text=long)], space="u")
    assert mem.turns("u") == before
    with pytest.raises(ValueError, match=r"turns\[0\]\.text"):
        mem.add([_turn(text=long)], space="fresh")
    assert mem.spaces() == ["u"]


def test_default_turn_limit_and_other_field_limits():
    with pytest.raises(ValueError, match=r"turns\[0\]\.text: 100001 characters, more than max_turn_chars=100000"):
        normalise_turns([_turn(text="x" * 100_001)], "u", default_tz="UTC")
    assert normalise_turns([_turn(text="x" * 100_000)], "u", default_tz="UTC")[0].text == "x" * 100_000
    for name in ("speaker", "session_id", "turn_id"):
        with pytest.raises(ValueError, match=rf"turns\[0\]\.{name}: 201 characters, more than 200"):
            normalise_turns([_turn(**{name: "x" * 201})], "u", default_tz="UTC")
        assert normalise_turns([_turn(**{name: "x" * 200})], "u", default_tz="UTC")


def test_extra_must_be_json_and_within_the_limit():
    with pytest.raises(ValueError, match=r"turns\[0\]\.extra: not JSON-serialisable"):
        normalise_turns([_turn(extra={"photo": object()})], "u", default_tz="UTC")
    with pytest.raises(ValueError, match=r"turns\[0\]\.extra: \d+ characters as JSON, more than max_turn_chars=50"):
        normalise_turns([_turn(extra={"caption": "x" * 50})], "u", default_tz="UTC", max_turn_chars=50)
    ok = normalise_turns([_turn(extra={"caption": "a cat"})], "u", default_tz="UTC", max_turn_chars=50)
    assert ok[0].extra == {"caption": "a cat"}
    for bad in (float("nan"), float("inf"), -float("inf")):  # not JSON: other readers of the store refuse them
        with pytest.raises(ValueError, match=r"turns\[0\]\.extra: not JSON-serialisable"):
            normalise_turns([_turn(extra={"a": [bad]})], "u", default_tz="UTC")


@pytest.mark.parametrize("field", ["speaker", "session_id", "turn_id"])
@pytest.mark.parametrize("char, words", [("\x00", r"control character U\+0000 \(NUL\)"),
                                         ("\x01", r"control character U\+0001"),
                                         ("\x0b", r"control character U\+000B"),
                                         ("\x1f", r"control character U\+001F"),
                                         ("\ud800", r"lone surrogate U\+D800")])
def test_control_characters_and_lone_surrogates_are_rejected_in_names_and_ids(field, char, words):
    with pytest.raises(ValueError, match=rf"^turns\[0\]\.{field}: {words} at character 1"):
        normalise_turns([_turn(**{field: f"a{char}b"})], "u", default_tz="UTC")


def test_lone_surrogate_in_text_is_rejected():
    with pytest.raises(ValueError, match=r"^turns\[0\]\.text: lone surrogate U\+D800 at character 1"):
        normalise_turns([_turn(text="a\ud800b")], "u", default_tz="UTC")


@pytest.mark.parametrize("char", ["\x00", "\x01", "\x02", "\x0b", "\x1f"])
def test_control_characters_in_text_are_replaced(char):
    assert normalise_turns([_turn(text=f"a{char}b")], "u", default_tz="UTC")[0].text == "a\ufffdb"


def test_tab_newline_and_carriage_return_are_kept():
    text = "line one\tcol\r\nline two"
    assert normalise_turns([_turn(text=text)], "u", default_tz="UTC")[0].text == text


def test_control_characters_are_replaced_and_counted_through_memory(make_mem):
    mem = make_mem()
    mem.add([_turn(turn_id="a")], space="u")
    mem.add([_turn(turn_id="b", text="bad\x00text \x1b[31mred\x1b[0m")], space="u")  # NUL and a terminal colour
    assert [t.text for t in mem.turns("u")][1] == "bad\ufffdtext red"
    assert mem.stats("u")["input"]["control_chars_replaced"] == 3
    with pytest.raises(ValueError, match=r"turns\[0\]\.speaker: control character U\+0000"):
        mem.add([_turn(turn_id="c", speaker="bad\x00name")], space="u")
    assert [t.turn_id for t in mem.turns("u")] == ["a", "b"]


# --- space names ----------------------------------------------------------------------------
def test_space_names_are_normalised():
    assert validate_space("  alice ") == "alice"
    composed, decomposed = "caf\u00e9", "cafe\u0301"
    assert composed != decomposed and validate_space(decomposed) == validate_space(composed) == composed
    assert validate_space("x" * 128) == "x" * 128


@pytest.mark.parametrize("bad", ["", "   ", None, 3, "a/b", "a\\b", "a\x00b", "a\nb", "a\x7fb", "a\x85b",
                                 "a\ud800", "x" * 129, " " + "x" * 129])
def test_bad_space_names_are_rejected(bad):
    with pytest.raises(ValueError, match=r"^space"):
        validate_space(bad)


def test_spellings_that_normalise_equal_address_one_space(make_mem):
    mem = make_mem()
    mem.add([_turn(turn_id="a")], space="cafe\u0301")
    mem.add([_turn(turn_id="b", session_id="s1")], space=" caf\u00e9 ")
    assert mem.spaces() == ["caf\u00e9"]
    assert [t.turn_id for t in mem.turns("caf\u00e9")] == ["a", "b"]
    assert all(t.space == "caf\u00e9" for t in mem.turns("cafe\u0301"))
    # a turn that names its space in another spelling belongs to it
    mem.add([_turn(turn_id="c", space="cafe\u0301 ")], space="caf\u00e9")


PUBLIC_CALLS = {
    "add": lambda mem, s: mem.add([_turn(turn_id="z", text="I like green tea.")], space=s),
    "flush": lambda mem, s: mem.flush(s),
    "end_session": lambda mem, s: mem.end_session(s),
    "views": lambda mem, s: mem.views(s),
    "stats": lambda mem, s: mem.stats(s),
    "index_info": lambda mem, s: mem.index_info(s),
    "get": lambda mem, s: mem.get("a#0", s),
    "list": lambda mem, s: mem.list(s),
    "turns": lambda mem, s: mem.turns(s),
    "search": lambda mem, s: mem.search("cat", space=s),
    "retrieve": lambda mem, s: mem.retrieve("cat", space=s),
    "answer": lambda mem, s: mem.answer("Which pet?", space=s),
    "time_summaries": lambda mem, s: mem.time_summaries(s, []),
    "delete": lambda mem, s: mem.delete("a#0", space=s),
}


@pytest.mark.parametrize("method", sorted(PUBLIC_CALLS))
def test_every_public_method_validates_and_normalises_the_space(make_mem, method):
    mem = make_mem()
    mem.add([_turn(turn_id="a"), _turn(turn_id="b", text="My sister is visiting from Toronto in June.")],
            space="alice")
    assert mem.get("a#0", "alice")
    with pytest.raises(ValueError, match=r"^space 'ali/ce'"):
        PUBLIC_CALLS[method](mem, "ali/ce")
    PUBLIC_CALLS[method](mem, " alice ")  # the same space as "alice"
    assert mem.spaces() == ["alice"]


# --- saved tree parameters override the config ----------------------------------------------
def _built_store(make_mem, path, **cfg):
    mem = make_mem(path, **cfg)
    mem.add([_turn(turn_id=f"t{i}", text=f"I adopted cat number {i} and love it.") for i in range(6)], space="u1")
    mem.end_session("u1")
    mem.close()


def _override_warnings(caplog):
    return [r.getMessage() for r in caplog.records
            if r.levelno == logging.WARNING and "overrides config" in r.getMessage()]


def test_saved_tree_parameters_that_differ_from_the_config_are_named(make_mem, tmp_path, caplog):
    _built_store(make_mem, tmp_path / "s", b_max=6, calibration_pair_samples=32)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="etamem"):
        mem = make_mem(tmp_path / "s")  # default config: b_max 8, calibration_pair_samples 64
        mem.views("u1")
    msgs = _override_warnings(caplog)
    assert sorted(m.split(" view:")[0] for m in msgs) == ["space 'u1' affect", "space 'u1' event"]
    for m in msgs:
        assert ("saved b_max=6 overrides config b_max=8; saved pair_samples=32 overrides config "
                "calibration_pair_samples=64 (the tree was built with them)") in m
    assert mem.views("u1").event.b_max == 6  # the saved value is the one in use


def test_one_differing_parameter_and_the_time_view(make_mem, tmp_path, caplog):
    _built_store(make_mem, tmp_path / "s", summary_delta=4)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="etamem"):
        make_mem(tmp_path / "s").views("u1")
    msgs = sorted(_override_warnings(caplog))
    assert msgs == [f"space 'u1' {v} view: saved summary_delta=4 overrides config summary_delta=8 "
                    f"(the {'forest' if v == 'time' else 'tree'} was built with it)"
                    for v in ("affect", "event", "time")]


def test_no_override_warning_when_the_config_matches(make_mem, tmp_path, caplog):
    _built_store(make_mem, tmp_path / "s", b_max=6, m_max_bounds=[12, 24])
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="etamem"):
        make_mem(tmp_path / "s", b_max=6).views("u1")
    assert _override_warnings(caplog) == []
