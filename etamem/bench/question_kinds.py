"""Question kinds of the ETAMem paper's routing figure (Fig. 3): emotion, experience, opinion.

The paper reads its routing weights on CloneMem, whose questions come labelled with these
kinds; CloneMem is not available here, so the bench sorts any dataset's questions by a word
rule instead: a question asking how someone felt is `emotion`, one asking what someone thinks,
likes or prefers is `opinion`, any other `experience`. A proxy, not the paper's labels; the
report says so wherever it shows these kinds.
"""
from __future__ import annotations

import re

KINDS = ("emotion", "experience", "opinion")
_EMOTION = re.compile(
    r"\b(feel|feels|felt|feeling|feelings|emotion\w*|mood|happy|sad|angry|upset|excited|proud|nervous|scared|"
    r"afraid|worried|anxious|stressed|lonely|grateful|thankful|frustrat\w*|disappoint\w*|overwhelm\w*|"
    r"relieved|inspired|motivated|react\w*)\b", re.I)
_OPINION = re.compile(
    r"\b(think|thinks|thought|opinion|opinions|believe|believes|prefer|prefers|preference\w*|favou?rite|like|"
    r"likes|enjoy|enjoys|love|loves|hate|hates|dislike\w*|value|values|view|views|attitude|consider|recommend\w*|"
    r"interested|passionate|important to)\b", re.I)


def question_kind(text: str) -> str:
    """`emotion`, `opinion` or `experience` for one question (emotion words win over opinion)."""
    if _EMOTION.search(text or ""):
        return "emotion"
    if _OPINION.search(text or ""):
        return "opinion"
    return "experience"
