"""LoCoMo with the speakers as roles (`etamem bench locomo FILE --roles`): the same
conversations and questions, shaped like an agent's chat.

Each sample's `speaker_a` becomes the turn speaker `user` and `speaker_b` `assistant`. Their
first names, as the sample spells them in `speaker_a` / `speaker_b`, are replaced in turn texts,
photo captions and questions: "Caroline" -> "the user", "Melanie" -> "the assistant".

- whole words only, case as spelled ("Caroline" and "Caroline's" change, "Carolines" and
  "caroline" do not; "Tim" never touches "Time");
- the possessive follows ("Caroline's" -> "the user's", also with a typographic apostrophe;
  the doubled typo "Tims's" counts as the possessive);
- at the start of a text, a line or a sentence (after ".", "!", "?", opening quotes or
  brackets allowed) the label is capitalised: "The user";
- nicknames and short forms ("Mel" for Melanie, "Caro") are left as they are, and so is
  another person who happens to share a speaker's first name;
- answers keep their text (retrieval metrics only use the evidence ids, which are unchanged).
"""
from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from etamem.bench.data import BenchConversation, load_locomo
from etamem.ingest.datasets import load_json, shape_guard

ROLES = ("user", "assistant")  # speaker_a, speaker_b
LABELS = {"user": "the user", "assistant": "the assistant"}
_OPENERS = " \t\"'“‘(["  # may stand between a sentence's end and its first word


def names_pattern(names: list[str]) -> re.Pattern:
    """Whole-word pattern of the names (longest first); a doubled possessive typo ("Tims's")
    is matched up to its apostrophe."""
    alts = "|".join(re.escape(n) for n in sorted(set(names), key=len, reverse=True))
    return re.compile(rf"(?<!\w)(?:{alts})(?:s(?=['’]s\b))?(?!\w)")


def replace_names(text: str, labels: dict[str, str]) -> str:
    """`text` with each name of `labels` (name -> label, e.g. "Caroline" -> "the user") replaced
    by its label, capitalised where a sentence starts."""
    by_name = {n: label for n, label in labels.items() if n and n.strip()}
    if not text or not by_name:
        return text

    def sub(m: re.Match) -> str:
        word = m.group(0)
        label = by_name.get(word) or by_name[word[:-1]]  # "Tims" (before "'s") -> "Tim"
        before = text[: m.start()].rstrip(_OPENERS)
        if not before or before[-1] in ".!?…\n\r":
            label = label[:1].upper() + label[1:]
        return label

    return names_pattern(list(by_name)).sub(sub, text)


def with_roles(conv: BenchConversation, speaker_a: str, speaker_b: str) -> BenchConversation:
    """A copy of the conversation with speakers `user` / `assistant` and their names replaced in
    turn texts, captions and questions. A turn by anyone else raises ValueError."""
    if not speaker_a or not speaker_b or speaker_a == speaker_b:
        raise ValueError(f"{conv.space}: --roles needs two distinct speakers, got {speaker_a!r} and {speaker_b!r}")
    role_of = {speaker_a: ROLES[0], speaker_b: ROLES[1]}
    labels = {name: LABELS[role] for name, role in role_of.items()}
    turns: list[dict[str, Any]] = []
    for t in conv.turns:
        if t["speaker"] not in role_of:
            raise ValueError(f"{conv.space}: turn {t['turn_id']} is by {t['speaker']!r}, neither speaker_a "
                             f"({speaker_a!r}) nor speaker_b ({speaker_b!r})")
        extra = dict(t.get("extra") or {})
        if extra.get("blip_caption"):
            extra["blip_caption"] = replace_names(extra["blip_caption"], labels)
        turns.append({**t, "speaker": role_of[t["speaker"]], "text": replace_names(t["text"], labels),
                      "extra": extra})
    questions = [replace(q, question=replace_names(q.question, labels)) for q in conv.questions]
    return BenchConversation(conv.space, turns, questions, set(conv.user_turns))


def speakers(path: str) -> dict[str, tuple[str, str]]:
    """sample_id -> (speaker_a, speaker_b) of a LoCoMo file."""
    out = {}
    for i, sample in enumerate(load_json(path)):
        with shape_guard(path, "sample", i):
            conv = sample["conversation"]
            out[sample["sample_id"]] = (conv["speaker_a"], conv["speaker_b"])
    return out


def load_locomo_roles(path: str) -> list[BenchConversation]:
    """`load_locomo(path)` with every conversation turned to roles (`with_roles`)."""
    names = speakers(path)
    return [with_roles(c, *names[c.space]) for c in load_locomo(path)]
