"""`SearchOptions`: the knobs of `SpaceIndex.search` built from `Config` once, one field per setting."""
from dataclasses import fields

import pytest

from etamem import Config
from etamem.retrieval.options import SearchOptions

# option field -> the Config field it comes from, and a valid value other than the default
FROM_CONFIG = {
    "beam": ("beam_width", 7), "beta": ("bm25_weight", 0.37), "routing": ("routing", "mean"),
    "temperature": ("routing_temperature", 0.2), "routing_candidates": ("routing_candidates", 11),
    "time_boost": ("time_boost", 0.05), "context_share": ("context_share", 0.25),
    "context_rows": ("context_max_rows", 99), "flat": ("flat_candidates", 3), "flat_exact_max": ("flat_exact_max", 55),
    "lexical": ("bm25_norm", "ceiling"), "merge_scoring": ("merge_scoring", "rrf"), "rrf_k": ("rrf_k", 3),
}


def test_every_option_but_views_comes_from_its_config_field():
    assert {f.name for f in fields(SearchOptions)} - {"views"} == set(FROM_CONFIG)
    base = SearchOptions.from_config(Config())
    for name, (setting, value) in FROM_CONFIG.items():
        got = SearchOptions.from_config(Config().replace(**{setting: value}))
        assert getattr(got, name) == value, name
        assert got.replace(**{name: getattr(base, name)}) == base, name  # nothing else moved


def test_a_call_overrides_views_and_routing():
    opts = SearchOptions.from_config(Config(), views=("event",), routing="mean")
    assert opts.views == ("event",) and opts.routing == "mean"
    assert SearchOptions.from_config(Config()).views == ("event", "affect", "time")


def test_replace_names_a_wrong_field():
    with pytest.raises(TypeError, match="no field bogus"):
        SearchOptions().replace(bogus=1)
    with pytest.raises(Exception):  # frozen
        SearchOptions().beam = 3
