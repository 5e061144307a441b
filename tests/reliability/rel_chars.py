"""Texts of one character class (emoji, CJK, combining marks, right-to-left, symbols, whitespace
runs, mixed), seeded, beside ordinary text of the same length: the inputs of
`test_character_classes.py` and `benchmarks/character_classes.py` (issue 46, N1)."""
from __future__ import annotations

import json
import random
from pathlib import Path

DEMO = Path(__file__).resolve().parents[2] / "etamem" / "data" / "demo_conversation.json"

CLASSES: dict[str, tuple[str, str]] = {  # kind: (characters drawn from, separator drawn 1 time in 4; "" none)
    # emoji VADER expands to their descriptions ("grinning cat face with smiling eyes")
    "emoji": ("\U0001F638\U0001F600\U0001F622\U0001F495\u2764\U0001F44D\U0001F389\U0001F602\U0001F621\U0001F60D", ""),
    # the red team's: "grinning cat face with smiling eyes", six words per character
    "emoji_cat": ("\U0001F638", ""),
    "emoji_words": ("\U0001F638\U0001F600\U0001F622\U0001F60D good bad love ", " "),
    "cjk": ("\u4f60\u597d\u4e16\u754c\u6211\u5f88\u9ad8\u5174\u3042\u308a\u304c\u3068\u3046\ud55c\uad6d\uc5b4", ""),
    "combining": ("a\u0301e\u0300o\u0308c\u0327\u0336\u20dd\u0489", " "),
    "rtl": ("\u05e9\u05dc\u05d5\u05dd\u0645\u0631\u062d\u0628\u0627\u202e\u202b\u200f\u061f", " "),
    "symbols": ("\u2211\u221e\u2603\u2605\u00a9\u00ae\u2122\u20ac$%&*#@^~|\\+=<>", ""),
    "whitespace": (" \t\n\r\u00a0\u2003\u3000\u200b", ""),
}
KINDS = (*CLASSES, "mixed")


def ordinary(n: int, seed: int = 0) -> str:
    """`n` characters of the demo conversation's sentences, cycled, each marked "On day N," (N
    counting passes from `seed` * 1000) so no sentence repeats and no cache serves it."""
    sentences = [t["text"].strip() for t in json.loads(DEMO.read_text(encoding="utf-8"))["turns"]]
    out, size, i = [], 0, 0
    while size <= n:
        s = f"On day {seed * 1000 + i // len(sentences) + 1}, {sentences[i % len(sentences)]}"
        out.append(s)
        size += len(s) + 1
        i += 1
    return " ".join(out)[:n]


def class_text(kind: str, n: int, seed: int = 0) -> str:
    """`n` random characters of one class (seeded); "mixed": runs of 1-200 characters of every
    class and of ordinary text; "ordinary": `ordinary(n, seed)`."""
    rng = random.Random(f"{kind}-{n}-{seed}")
    if kind == "ordinary":
        return ordinary(n, seed)
    if kind == "mixed":
        out, size = [], 0
        while size < n:
            run = class_text(rng.choice(list(CLASSES) + ["ordinary"]), rng.randint(1, 200), rng.randrange(1 << 30))
            out.append(run)
            size += len(run)
        return "".join(out)[:n]
    chars, sep = CLASSES[kind]
    return "".join(sep if sep and rng.random() < 0.25 else rng.choice(chars) for _ in range(n))
