"""VADER at linear cost (etamem/models/vader_linear.py, issue 46 N1): the same scores as stock
vaderSentiment on ordinary text and work linear in the words (the bound on words scanned per
character, whatever the characters, is tested in tests/reliability/test_character_classes.py).

Cost is counted, not timed, where it can be: every visit of VADER's word list (its iteration,
each item or slice read) goes through a counting list put in `SentiText`; the "but" rule's
comparisons of sentiment values through a float that counts them."""
from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from vaderSentiment import vaderSentiment as vs

from conftest import LOCOMO_DEV, HashingEncoder
from etamem.models.affect import VaderAffectTagger
from etamem.models.vader_linear import CHUNK_CHARS, LinearVader, bounded_scores, text_pieces

DEMO = Path(__file__).resolve().parents[1] / "etamem" / "data" / "demo_conversation.json"
STOCK = vs.SentimentIntensityAnalyzer()

# Words that VADER's rules look at (negations, boosters, "but", "kind of", "least", idioms,
# "no", "never so", "without doubt"), lexicon words (several with equal valences, which the "but"
# rule's lookup by value confuses), caps, punctuation, emoticons and emoji.
VOCAB = ("good great bad terrible love hate happy sad nice awful fine okay ok wonderful horrible "
         "not never no nor isn't don't can't without doubt least at very so this extremely kinda "
         "kind of sort barely hardly really quite the shit bomb bad ass badass yeah right kiss death "
         "to die for beating heart bus stop cut mustard hand mouth but BUT GOOD BAD Great NOT I you "
         "we it was is the a movie food day friend party work :) :( :D <3 lol haha !!! ?? ! ? , . "
         "\U0001F638 \U0001F600 \U0001F622 \U0001F621 \U0001F495 \u2764 \U0001F44D").split()
VADER_EXAMPLES = [
    "VADER is smart, handsome, and funny.", "VADER is VERY SMART, uber handsome, and FRIGGIN FUNNY!!!",
    "VADER is not smart, handsome, nor funny.", "At least it isn't a horrible book.",
    "The book was only kind of good.",
    "The plot was good, but the characters are uncompelling and the dialog is not great.",
    "Today only kinda sux! But I'll get by, lol", "Make sure you :) or :D today!",
    "Catch utf-8 emoji such as \U0001F498 and \U0001F48B and \U0001F601", "Not bad at all",
    "Sentiment analysis has never been this good!", "With VADER, sentiment analysis is the shit!",
    "On the other hand, VADER is quite bad ass", "Without a doubt, excellent idea.",
    "Roger Dodger is one of the least compelling variations on this theme.", "no no no good",
    "good but good but bad", "",
]


def _random_sentences(n: int, seed: int = 46) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        words = [rng.choice(VOCAB) for _ in range(rng.randint(1, 40))]
        joins = [rng.choice(("", " ", " ", " ", "  ")) for _ in words]
        out.append("".join(w + j for w, j in zip(words, joins)))
    return out


def _ordinary_texts() -> list[str]:
    texts = [t["text"] for t in json.loads(DEMO.read_text(encoding="utf-8"))["turns"]]
    return VADER_EXAMPLES + texts + _random_sentences(400)


def test_same_scores_as_stock_vader_on_ordinary_text():
    linear = LinearVader()
    texts = _ordinary_texts()
    assert len(texts) >= 400
    differ = [t for t in texts if linear.polarity_scores(t) != STOCK.polarity_scores(t)]
    assert not differ, f"{len(differ)} of {len(texts)} texts score differently, e.g. {differ[:3]}"


def test_same_scores_as_stock_vader_on_locomo_dev():
    if not LOCOMO_DEV.is_file():
        pytest.skip(f"LoCoMo dev file not available at {LOCOMO_DEV}")
    texts = [turn["text"] for conv in json.loads(LOCOMO_DEV.read_text(encoding="utf-8"))
             for key, session in conv["conversation"].items() if key.startswith("session_") and isinstance(session, list)
             for turn in session]
    linear = LinearVader()
    assert len(texts) > 1000
    differ = [t for t in texts if linear.polarity_scores(t) != STOCK.polarity_scores(t)]
    assert not differ, f"{len(differ)} of {len(texts)} LoCoMo turns score differently, e.g. {differ[:3]}"


def test_tagger_tags_ordinary_text_as_stock_vader_did():
    """Texts up to 2,000 characters: stock scores; longer: the length-weighted mean of stock
    scores of the same 2,000-character pieces (the tagger's behaviour before this change)."""
    tagger = VaderAffectTagger(HashingEncoder())
    long_text = " ".join(t["text"] for t in json.loads(DEMO.read_text(encoding="utf-8"))["turns"]) * 3
    texts = _ordinary_texts()[:200] + [long_text]
    for text in texts:
        pieces = text_pieces(text, CHUNK_CHARS)
        parts = [(len(p), STOCK.polarity_scores(p)) for p in pieces]
        want = parts[0][1] if len(parts) == 1 else {
            k: sum(n * s[k] for n, s in parts) / sum(n for n, _ in parts) for k in ("neg", "neu", "pos", "compound")}
        assert bounded_scores(tagger.analyzer, text) == pytest.approx(want, abs=0), text[:80]
    batch = tagger.tag(texts)
    want_polarity = [tagger.polarity(STOCK.polarity_scores(t)["compound"]) for t in texts[:-1]]
    assert batch.polarities[:-1] == want_polarity


class _Visits(list):
    """VADER's word list, counting each visit: every item iterated or read, slices by length."""

    count = 0

    def __iter__(self):
        for item in list.__iter__(self):
            _Visits.count += 1
            yield item

    def __getitem__(self, key):
        got = list.__getitem__(self, key)
        _Visits.count += len(got) if isinstance(key, slice) else 1
        return got


@pytest.fixture
def visits(monkeypatch):
    words = vs.SentiText._words_and_emoticons
    monkeypatch.setattr(vs.SentiText, "_words_and_emoticons", lambda self: _Visits(words(self)))
    _Visits.count = 0

    def count(fn, text) -> int:
        _Visits.count = 0
        fn(text)
        return _Visits.count
    return count


def test_word_visits_grow_linearly_with_emoji(visits):
    """Ten times the emoji, at most ~10x the visits of VADER's word list (stock: ~100x)."""
    linear = LinearVader()
    cat = "\U0001F638"  # "grinning cat face with smiling eyes"
    small, large = visits(linear.polarity_scores, cat * 100), visits(linear.polarity_scores, cat * 1000)
    assert small > 0
    assert large <= 12 * small, f"{small:,} visits for 100 emoji, {large:,} for 1,000"


class _Compared(float):
    """A sentiment value counting the comparisons made with it (list.index, dict lookups)."""

    count = 0

    def __eq__(self, other):
        _Compared.count += 1
        return float(self) == float(other)

    __hash__ = float.__hash__


def test_but_rule_compares_linearly_many_values():
    """The 'but' rule looked each sentiment up by value (`list.index`): 'but good good ...' made
    it quadratic. Comparisons counted for 1,000 and 10,000 words after 'but'; the result equals
    stock's (its first-equal-value quirk included)."""
    def compared(n: int, rule) -> tuple[int, list[float]]:
        words = ["but"] + ["good", "great", "bad"] * (n // 3)
        sentiments = [_Compared(0.0)] + [_Compared(v) for _ in range(n // 3) for v in (1.9, 3.1, -2.5)]
        _Compared.count = 0
        out = rule(words, sentiments)
        return _Compared.count, [float(v) for v in out]

    small, got_small = compared(1_000, LinearVader._but_check)
    large, got_large = compared(10_000, LinearVader._but_check)
    assert large <= 12 * max(small, 1), f"{small:,} comparisons after 1,000 words, {large:,} after 10,000"
    assert got_small == compared(1_000, vs.SentimentIntensityAnalyzer._but_check)[1]
    words = "good but good good bad good great good".split()
    values = [1.9, 0, 1.9, 0.95, -2.5, 1.9, 3.1, 2.85]  # 1.9 * 1.5 = 2.85 already held: the quirk
    assert LinearVader._but_check(words, list(values)) == vs.SentimentIntensityAnalyzer._but_check(words, list(values))
