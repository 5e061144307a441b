"""VADER at a cost linear in the words it scans, and bounded per piece of text.

Stock vaderSentiment (3.3.x) replaces each emoji by its description ("grinning cat face with
smiling eyes": six words for one character), then, for every lexicon word, lower-cases the whole
word list again in `_negation_check` (up to three times) and `_special_idioms_check`, and its
`but` check looks every sentiment up with `list.index`: quadratic in the words. 2,000 emoji
characters (~12,000 words) took seconds and held a server worker (issue 46, N1).

`LinearVader` is the same analyzer with those parts made linear: the checks see only the words
around the one scored (they read at most three before and two after it), the `but` check keeps,
per value, a heap of the positions holding it (the stock loop's quirk of rescaling the first
equal value, not the current one, is kept), and the emoji are expanded with one join. Its
`polarity_scores` equals stock VADER's on every text (tests/test_vader_linear.py checks a few
hundred varied sentences).

`bounded_scores` is what the affect tagger calls: a text is scored in pieces of at most
`CHUNK_CHARS` characters (cut at whitespace, averaged by length: as before), and a piece whose
emoji expand to more than `piece_words` words is scored on a sample of `piece_words` of them
(`SAMPLE_WINDOWS` evenly spaced runs of consecutive words, averaged). Ordinary text never hits
the bound (2,000 characters hold at most 1,000 words), so its scores are unchanged; the words
scanned per character stay at most `piece_words / CHUNK_CHARS` whatever the characters.
"""
from __future__ import annotations

import heapq
from typing import Sequence

from vaderSentiment.vaderSentiment import BOOSTER_DICT, SentimentIntensityAnalyzer, SentiText

CHUNK_CHARS = 2000  # characters per piece of a long text (cut at whitespace)
PIECE_WORDS = 1000  # default: most words scanned per piece (Config.vader_piece_words)
SAMPLE_WINDOWS = 4  # runs of consecutive words a piece over the bound is scored on
_KEYS = ("neg", "neu", "pos", "compound")


class LinearVader(SentimentIntensityAnalyzer):
    """`SentimentIntensityAnalyzer` whose `polarity_scores` is linear in the words (see module doc).

    `words_scanned` counts the words of every text scored since construction (an operation count
    for tests and benchmarks).
    """

    def __init__(self) -> None:
        super().__init__()
        self.words_scanned = 0

    def expand_emoji(self, text: str) -> str:
        """The text with each emoji replaced by its description, as stock VADER does it."""
        out: list[str] = []
        prev_space = True
        emojis = self.emojis
        for ch in text:
            description = emojis.get(ch)
            if description is not None:
                if not prev_space:
                    out.append(" ")
                out.append(description)
                prev_space = False
            else:
                out.append(ch)
                prev_space = ch == " "
        return "".join(out).strip()

    def polarity_scores(self, text: str) -> dict[str, float]:
        """neg / neu / pos / compound of `text`: stock VADER's values, in linear time."""
        return self.score_expanded(self.expand_emoji(text))

    def score_expanded(self, text: str) -> dict[str, float]:
        """Stock `polarity_scores` after its emoji step, on a text already expanded."""
        sentitext = SentiText(text)
        words = sentitext.words_and_emoticons
        self.words_scanned += len(words)
        sentiments: list[float] = []
        for i, item in enumerate(words):
            lower = item.lower()
            if lower in BOOSTER_DICT or (lower == "kind" and i < len(words) - 1 and words[i + 1].lower() == "of"):
                sentiments.append(0)
                continue
            sentiments = self.sentiment_valence(0, sentitext, item, i, sentiments)
        sentiments = self._but_check(words, sentiments)
        return self.score_valence(sentiments, text)

    @staticmethod
    def _negation_check(valence, words_and_emoticons, start_i, i):
        # stock reads words i-3 .. i-1 (called only for i > start_i): the same check on those words
        lo = max(0, i - 3)
        return SentimentIntensityAnalyzer._negation_check(valence, words_and_emoticons[lo:i + 1], start_i, i - lo)

    @staticmethod
    def _special_idioms_check(valence, words_and_emoticons, i):
        # stock reads words i-3 .. i+2 (called only for i > 2); "more words follow" holds in the slice iff in the list
        lo = max(0, i - 3)
        return SentimentIntensityAnalyzer._special_idioms_check(valence, words_and_emoticons[lo:i + 3], i - lo)

    @staticmethod
    def _but_check(words_and_emoticons, sentiments):
        """Stock: for each position k in turn, the first position holding a value equal to
        sentiments[k] is halved (before the first "but") or multiplied by 1.5 (after it)."""
        lower = [str(w).lower() for w in words_and_emoticons]
        if "but" not in lower:
            return sentiments
        bi = lower.index("but")
        holding: dict[float, list[int]] = {}  # value -> heap of the positions holding it
        for idx, value in enumerate(sentiments):
            holding.setdefault(value, []).append(idx)  # ascending: already a heap
        for k in range(len(sentiments)):
            value = sentiments[k]
            heap = holding[value]
            si = heap[0]
            if si == bi:
                continue
            new = value * 0.5 if si < bi else value * 1.5
            sentiments[si] = new
            if new != value:  # (a zero stays zero)
                heapq.heappop(heap)
                heapq.heappush(holding.setdefault(new, []), si)
        return sentiments


def text_pieces(text: str, size: int) -> list[str]:
    """`text` in pieces of at most `size` characters, cut at a space in the second half of a piece."""
    if len(text) <= size:
        return [text]
    pieces, start = [], 0
    while start < len(text):
        end = min(len(text), start + size)
        cut = text.rfind(" ", start + size // 2, end) if end < len(text) else -1
        end = cut if cut > 0 else end
        pieces.append(text[start:end])
        start = end
    return pieces


def _mean(parts: Sequence[tuple[int, dict[str, float]]]) -> dict[str, float]:
    total = sum(n for n, _ in parts)
    if total <= 0:
        return dict(parts[0][1])
    return {k: sum(n * sc[k] for n, sc in parts) / total for k in _KEYS}


def _piece_scores(analyzer: LinearVader, piece: str, piece_words: int) -> dict[str, float]:
    """One piece's scores; over `piece_words` words after emoji expansion: a sample of them."""
    expanded = analyzer.expand_emoji(piece)
    tokens = expanded.split()
    if len(tokens) <= piece_words:
        return analyzer.score_expanded(expanded)
    windows = max(1, min(SAMPLE_WINDOWS, piece_words))
    width = piece_words // windows
    step = (len(tokens) - width) / max(1, windows - 1)
    parts = []
    for w in range(windows):
        start = int(round(w * step))
        run = tokens[start:start + width]
        parts.append((len(run), analyzer.score_expanded(" ".join(run))))
    return _mean(parts)


def bounded_scores(analyzer: LinearVader, text: str, piece_words: int = PIECE_WORDS) -> dict[str, float]:
    """VADER's neg / neu / pos / compound of `text`, scanning at most `piece_words` words per
    `CHUNK_CHARS` characters (see module doc); equal to `polarity_scores` on a text of at most
    `CHUNK_CHARS` characters and `piece_words` words."""
    pieces = text_pieces(text, CHUNK_CHARS)
    if len(pieces) == 1:
        return _piece_scores(analyzer, text, piece_words)
    return _mean([(len(p), _piece_scores(analyzer, p, piece_words)) for p in pieces])


__all__: Sequence[str] = ("CHUNK_CHARS", "LinearVader", "PIECE_WORDS", "SAMPLE_WINDOWS", "bounded_scores", "text_pieces")
