"""Benchmark metric arithmetic on hand-computed cases, evidence normalisation, verdicts and
the construction ablations' wrappers."""
import math
import re

import numpy as np
import pytest

from etamem.bench.ablations import CachingExtractor, SharedAffectEncoder, SharedTextTagger, TurnExtractor
from etamem.bench.metrics import (
    bleu1,
    distinct_turns,
    evidence_recall,
    ndcg_any,
    normalise_evidence,
    parse_verdict,
    recall_all,
    recall_any,
    rrf,
    token_f1,
)
from etamem.bench.systems import DEFAULT_SYSTEMS, resolve_systems


def test_recall_any_versus_recall_all():
    ranked = ["s3", "s1", "s7", "s2"]
    assert recall_any(ranked, ["s1", "s2"], 2) == 1.0  # s1 in the top 2
    assert recall_all(ranked, ["s1", "s2"], 2) == 0.0  # s2 only at rank 4
    assert recall_all(ranked, ["s1", "s2"], 4) == 1.0
    assert recall_any(ranked, ["s9"], 4) == 0.0


def test_ndcg_any_hand_computed():
    # gold at ranks 2 and 4 of the top 5: DCG = 1/log2(3) + 1/log2(5); ideal = 1 + 1/log2(3)
    ranked = ["a", "g1", "b", "g2", "c"]
    expected = (1 / math.log2(3) + 1 / math.log2(5)) / (1 + 1 / math.log2(3))
    assert ndcg_any(ranked, ["g1", "g2"], 5) == pytest.approx(expected)
    assert ndcg_any(ranked, ["g1", "g2"], 5) == pytest.approx(0.6509, abs=1e-4)
    assert ndcg_any(["g1", "x"], ["g1"], 10) == 1.0
    assert ndcg_any(["x", "y"], ["g1"], 2) == 0.0
    # k cuts the ideal too: one gold in top 1 of 3 golds -> ideal DCG@1 = 1
    assert ndcg_any(["g1", "g2"], ["g1", "g2", "g3"], 1) == 1.0


def test_evidence_recall_counts_distinct_turns():
    units = [(("D1:1", "D1:2"), "a b"), (("D1:2",), "c"), (("D2:5",), "d e f")]
    turns, tokens = distinct_turns(units, 3)
    assert turns == ["D1:1", "D1:2", "D2:5"]
    assert tokens == 2 + 3  # the repeated unit adds nothing
    assert evidence_recall(turns, ["D1:2", "D3:1"], 2) == 0.5
    assert evidence_recall(turns, ["D2:5"], 2) == 0.0


def test_normalise_evidence_skips_and_counts():
    known = {"D8:6", "D9:17", "D11:26", "D30:5"}
    ids, skipped = normalise_evidence(["D8:6; D9:17", "D:11:26", "D30:05", "D99:1", "D8:6"], known)
    assert ids == ["D8:6", "D9:17", "D11:26", "D30:5"]
    assert skipped == 2  # D99:1 does not exist, D8:6 repeated


def test_token_f1_and_bleu1_hand_computed():
    # tokens: pred [red, bicycle, from, store], gold [red, bicycle] -> P 2/4, R 1, F1 2/3
    assert token_f1("The red bicycle from the store.", "a red bicycle") == pytest.approx(2 / 3)
    assert token_f1("Biscuit", "biscuit!") == 1.0
    assert token_f1("blue car", "red bicycle") == 0.0
    # BLEU-1: candidate longer than reference -> BP 1, precision 2/4
    assert bleu1("The red bicycle from the store.", "a red bicycle") == pytest.approx(0.5)
    # candidate [red] (c 1) vs reference [red, bicycle] (r 2): BP exp(1 - 2) x 1/1
    assert bleu1("red", "red bicycle") == pytest.approx(math.exp(-1))
    # clipping: [the, the] after normalisation is empty; [cat, cat, cat] vs [cat]: 1/3
    assert bleu1("cat cat cat", "cat") == pytest.approx(1 / 3)
    assert bleu1("", "cat") == 0.0


def test_parse_verdict():
    assert parse_verdict({"reasoning": "same dog", "label": "CORRECT"}) is True
    assert parse_verdict('{"label": "WRONG"}') is False
    assert parse_verdict("CORRECT") is True
    assert parse_verdict({"label": "incorrect"}) is False
    with pytest.raises(ValueError):
        parse_verdict({"label": "maybe"})


def test_rrf_and_system_resolution():
    # 2: 1/11 + 1/12, 0: 1/12 + 1/11 (tie, lower index first), 1: 1/13
    assert rrf([[2, 0, 1], [0, 2]], k=10) == [0, 2, 1]
    assert [s.key for s in resolve_systems(["views"])][:3] == ["event-only", "affect-only", "time-only"]
    assert [s.key for s in resolve_systems(None)] == DEFAULT_SYSTEMS
    with pytest.raises(ValueError, match="unknown system 'nope'"):
        resolve_systems(["nope"])


def test_bench_help_names_every_system_and_group():
    from etamem.bench.systems import GROUPS, SYSTEMS
    from etamem.cli.bench import EPILOG

    listed = set(re.sub(r"[(),;:]", " ", EPILOG).split())
    assert {s.key for s in SYSTEMS} <= listed and set(GROUPS) <= listed


def test_ablation_wrappers(hashing_encoder, tmp_path):
    from datetime import datetime, timezone

    from etamem.models.affect import VaderAffectTagger
    from etamem.records import Turn

    tagger = VaderAffectTagger(hashing_encoder)
    texts = ["I love my new dog", "the meeting is at noon"]
    shared = SharedTextTagger(tagger, hashing_encoder)
    batch = shared.tag(texts)
    assert batch.polarities == tagger.tag(texts).polarities
    assert np.allclose(batch.embeddings, hashing_encoder.encode(texts)) and shared.dim == hashing_encoder.dim
    enc = SharedAffectEncoder(tagger)
    assert enc.dim == tagger.dim and np.allclose(enc.encode(texts), tagger.tag(texts).embeddings)

    when = datetime(2023, 5, 8, tzinfo=timezone.utc)
    turn = Turn("D1:1", "s1", "Mel", "Look at this.", when, extra={"blip_caption": "a photo of a dog"})
    assert TurnExtractor().extract(turn) == ["Look at this. [shared photo: a photo of a dog]"]
    assert TurnExtractor().extract(Turn("D1:3", "s1", "Mel", " ", when)) == []

    class Counting:
        calls = 0

        def extract(self, turn, context=()):
            Counting.calls += 1
            return [turn.text.upper()]

    cache = CachingExtractor(Counting(), str(tmp_path / "x.sqlite"), "counting")
    assert cache.extract(turn) == ["LOOK AT THIS."]
    assert cache.extract(turn) == ["LOOK AT THIS."]
    other = Turn("D1:2", "s1", "Mel", "Another one.", when)
    cache.extract(other, [turn])
    assert Counting.calls == 2 and cache.hits == 1
    cache.close()


def test_workbench_rebuilds_a_space_left_partial(hashing_encoder, tmp_path):
    from etamem.bench.data import BenchConversation
    from etamem.bench.run_stores import Workbench
    from etamem.config import Config
    from etamem.models.affect import VaderAffectTagger

    turns = [{"turn_id": f"D{s}:{i}", "session_id": f"session_{s}", "speaker": "Ann",
              "text": f"Ann talked about topic number {s * 10 + i} with real enthusiasm today.",
              "timestamp": f"2023-05-0{s}T10:0{i}:00"} for s in (1, 2) for i in (1, 2, 3)]
    conv = BenchConversation("conv-x", turns, [])
    wb = Workbench(Config(), tmp_path, text_encoder=hashing_encoder, affect_tagger=VaderAffectTagger(hashing_encoder))
    assert not wb.is_built("amu", conv)
    mem = wb.memory("amu")
    mem.add(turns[:3], space="conv-x")  # an interrupted build: first session only
    assert not wb.is_built("amu", conv)
    rec = wb.build("amu", conv)
    assert wb.is_built("amu", conv) and rec["turns"] == 6 and rec["amus"] == mem.store.count_amus("conv-x") > 0
    assert len(mem.turns("conv-x")) == 6
    wb.close()
