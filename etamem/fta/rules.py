"""Word rules shared by the offline FTA extractor and link classifier: time orientation,
content type, emotion words, plan intentions and second-person rewrite (topic stems:
`etamem.extraction.stems`).

Everything here is a pure function of its arguments (no model, deterministic).
"""
from __future__ import annotations

import re
from datetime import datetime

from etamem.retrieval.temporal import TimeWindow, parse_time_window

CONTENT_TYPES = ("event", "current_state", "relationship_event", "belief_candidate", "homework_or_plan",
                 "support_interaction", "risk_signal", "general_fact")
ORIENTATIONS = ("past", "present", "future", "mixed", "unknown")

_FUTURE = re.compile(
    r"\b(?:will|won'?t|going to|gonna|plan(?:s|ning)? (?:to|on)|intend(?:s|ing)? to|hope to|hoping to"
    r"|want(?:s)? to|would like to|'d like to|thinking (?:of|about) \w+ing|about to|tomorrow|soon|someday"
    r"|upcoming|later (?:this|today|tonight)|this coming|next (?:week|weekend|month|year|time|spring|summer"
    r"|autumn|fall|winter|monday|tuesday|wednesday|thursday|friday|saturday|sunday)"
    r"|in (?:a|an|one|two|three|four|five|six|\d+|a few|a couple of) (?:days?|weeks?|months?|years?))\b"
    r"|\b\w+'ll\b", re.IGNORECASE)
_PAST_WORDS = re.compile(
    r"\b(?:yesterday|ago|last (?:night|week|weekend|month|year|time|spring|summer|autumn|fall|winter|monday"
    r"|tuesday|wednesday|thursday|friday|saturday|sunday)|was|were|did|didn'?t|had|went|came|got|made|took"
    r"|saw|met|told|said|felt|found|bought|ran|won|lost|left|gave|began|brought|sent|wrote|ate|drove|flew"
    r"|sang|swam|built|paid|sold|spent|broke|fell|heard|kept|thought|used to|earlier|finally|once)\b",
    re.IGNORECASE)
_ED = re.compile(r"\b[a-z]{3,}ed\b", re.IGNORECASE)
_ED_NOT_PAST = {
    "interested", "excited", "tired", "worried", "married", "scared", "bored", "stressed", "relaxed", "used",
    "need", "red", "bed", "shed", "seed", "feed", "speed", "indeed", "naked", "wicked", "sacred", "hundred",
    "embarrassed", "overwhelmed", "exhausted", "frustrated", "disappointed", "depressed", "annoyed",
    "confused", "terrified", "amazed", "thrilled", "pleased", "surprised", "concerned", "focused",
    "motivated", "inspired", "supposed", "based", "related", "involved", "detailed", "advanced", "beloved",
    "blessed", "crowded", "talented", "limited", "complicated", "dedicated", "experienced", "qualified",
    "retired", "engaged", "divorced", "allowed", "closed", "tied", "embed", "proceed", "exceed", "succeed",
}
_PRESENT = re.compile(
    r"\b(?:am|is|are|isn'?t|aren'?t|\w+'m|\w+'re|feel|feels|feeling|currently|now|these days|lately|nowadays"
    r"|still|always|usually|every (?:day|week|morning|evening|night|weekend)|have been|has been|'ve been"
    r"|do|does|don'?t|doesn'?t|have|has|love|loves|like|likes|hate|hates|want|wants|need|needs|live|lives"
    r"|work|works|own|owns|know|knows|play|plays|study|studies|use|uses|think|thinks|believe|believes)\b",
    re.IGNORECASE)


def orientation(text: str, window: TimeWindow | None = None, now: datetime | None = None) -> str:
    """past / present / future / mixed / unknown from a resolved time window (when it lies wholly
    before or after `now`) and tense and cue words."""
    if window is not None and now is not None and window.kind in ("relative", "absolute", "before", "after"):
        if window.end <= now:
            by_window = "past"
        elif window.start > now:
            by_window = "future"
        else:
            by_window = "present"
    else:
        by_window = None
    future = bool(_FUTURE.search(text))
    past = bool(_PAST_WORDS.search(text)) or any(m.group(0).lower() not in _ED_NOT_PAST for m in _ED.finditer(text))
    present = bool(_PRESENT.search(text))
    if by_window == "future" or (by_window is None and future):
        return "mixed" if past and by_window is None and _strong_past(text) else "future"
    if by_window == "past":
        return "mixed" if future else "past"
    if future and past:
        return "mixed"
    if past:
        return "past"
    if present or by_window == "present":
        return "present"
    return "unknown"


_STRONG_PAST = re.compile(r"\b(?:yesterday|ago|last (?:night|week|weekend|month|year)|went|did|was|were)\b", re.I)


def _strong_past(text: str) -> bool:
    return bool(_STRONG_PAST.search(text))


def resolve_event_time(text: str, now: datetime) -> TimeWindow | None:
    """The event window a text names, resolved against the dialogue time `now` (order words such
    as "first" or "latest" are not event times)."""
    window = parse_time_window(text, now)
    if window is None or window.kind not in ("relative", "absolute", "before", "after"):
        return None
    return window


# --- content type ---------------------------------------------------------------------------
_RISK = re.compile(
    r"\b(?:suicid\w*|kill(?:ing)? (?:my|him|her|them)sel(?:f|ves)|self[- ]harm\w*|hurt(?:ing)? (?:my|him|her)self"
    r"|want(?:ed)? to die|end (?:my life|it all)|no reason to live|can'?t go on|overdos\w*|abus(?:e|ed|ive))\b",
    re.IGNORECASE)
_SUPPORT = re.compile(
    r"\b(?:you should|you could|you might|maybe (?:you|try)|have you tried|try (?:to|\w+ing)|make sure"
    r"|it might help|it could help|i'?m here for you|proud of you|take care of yourself|that sounds (?:hard|tough"
    r"|painful|awful|difficult|stressful)|i'?m (?:so )?sorry|don'?t worry|my advice|i recommend|i suggest"
    r"|why don'?t you|let me know if|you (?:can|could) (?:start|ask|try|talk)|write down|remember to)\b",
    re.IGNORECASE)
_PLAN = re.compile(
    r"\b(?:will|going to|gonna|plan(?:s|ning|ned)? (?:to|on)|intend|hope to|hoping to|want(?:s)? to"
    r"|would like to|'d like to|thinking (?:of|about)|about to|schedule|book(?:ed)?|sign(?:ed)? up|promise"
    r"|next (?:week|weekend|month|year|time)|tomorrow|\w+'ll)\b", re.IGNORECASE)
# a plan is the speaker's own (or shared: "we", "let's"), not a prediction about someone else
_OWN_PLAN = re.compile(
    r"\b(?:let'?s|(?:i|we)(?:'ll|'m|'re| am| are| will| would| 'd|'d)?\b[^.?!]{0,30}?"
    r"\b(?:will|'ll|going to|gonna|plan(?:s|ning|ned)? (?:to|on)|intend|hope to|hoping to|want(?:s)? to"
    r"|would like to|'d like to|thinking (?:of|about)|about to|have to|need to|schedul\w*|book(?:ed)?"
    r"|sign(?:ed)? up|promise))", re.IGNORECASE)
_RELATION = re.compile(
    r"\b(?:mom|mum|mother|dad|father|parents?|sister|brother|sibling|son|daughter|wife|husband|partner"
    r"|boyfriend|girlfriend|fianc[eé]e?|friends?|best friend|grandmother|grandma|grandfather|grandpa|aunt"
    r"|uncle|cousin|niece|nephew|baby|kids?|children|child|family|boss|manager|colleague|co-?worker|landlord"
    r"|neighbou?r|teacher|advisor|therapist|roommate)\b", re.IGNORECASE)
_RELATION_EVENT = re.compile(
    r"\b(?:marri\w+|marry|wedding|divorc\w+|broke up|break(?:ing)? up|dating|met|born|had a baby|passed away"
    r"|died|argu\w+|fight|fought|moved in|engaged|adopt\w+|hospital|visit\w*|reconnect\w*|lost (?:his|her|their)"
    r"|promot\w+|fired|hired|graduat\w+)\b", re.IGNORECASE)
_STATE = re.compile(
    r"\b(?:feel|feels|feeling|felt|stressed|tired|worried|anxious|sick|ill|busy|struggling|trouble|exhausted"
    r"|nervous|lonely|overwhelmed|depressed|scared|afraid|hurts?|pain|can'?t sleep|sleeping|lately|these days"
    r"|currently|right now|still)\b", re.IGNORECASE)
_BELIEF = re.compile(
    r"\b(?:i think|i believe|i feel like|in my opinion|i guess|i suppose|i love|i like|i prefer|i hate|i enjoy"
    r"|i don'?t like|i can'?t stand|favou?rite|is the best|is better|is worse|should always|i'?m (?:a|not a) "
    r"(?:fan|person)|i'?m into|my kind of)\b", re.IGNORECASE)


def content_type(sentence: str, orient: str) -> str:
    """One of the paper's eight content types from cue words and the orientation (rule order:
    risk, support, plan, relationship event, state, belief/preference, event, general fact).
    `sentence` is the original (first-person) wording."""
    if _RISK.search(sentence):
        return "risk_signal"
    if _SUPPORT.search(sentence):
        return "support_interaction"
    if orient == "future" and _OWN_PLAN.search(sentence):
        return "homework_or_plan"
    if _RELATION.search(sentence) and (_RELATION_EVENT.search(sentence) or orient == "past"):
        return "relationship_event"
    if orient in ("present", "unknown") and (_STATE.search(sentence) or emotion_words(sentence)):
        return "current_state"
    if _BELIEF.search(sentence):
        return "belief_candidate"
    if orient in ("past", "mixed"):
        return "event"
    return "general_fact"


# --- affect words and intention ------------------------------------------------------------
EMOTIONS = (
    "happy", "glad", "excited", "thrilled", "proud", "grateful", "thankful", "relieved", "calm", "calmer", "hopeful",
    "delighted", "content", "sad", "upset", "angry", "mad", "furious", "frustrated", "annoyed", "anxious",
    "nervous", "worried", "scared", "afraid", "terrified", "lonely", "stressed", "overwhelmed", "exhausted",
    "tired", "humiliated", "hurt", "jealous", "guilty", "ashamed", "bored", "confused", "disappointed",
    "heartbroken", "depressed", "shocked", "surprised", "embarrassed", "unsettled", "miserable",
    "joyful", "ecstatic", "peaceful", "insecure", "hopeless", "helpless",
)
_EMOTION_RE = re.compile(r"\b(" + "|".join(EMOTIONS) + r")\b", re.IGNORECASE)


def emotion_words(text: str) -> tuple[str, ...]:
    """Emotion and state words in `text`, lower-cased, first occurrence order."""
    return tuple(dict.fromkeys(m.group(1).lower() for m in _EMOTION_RE.finditer(text)))


_INTENT_RE = re.compile(
    r"\b(?:will|going to|gonna|plan(?:s|ning)? (?:to|on)|intend(?:s|ing)? to|hope to|hoping to|want(?:s)? to"
    r"|would like to|'d like to|'ll)\s+(?P<what>[^.,;!?]{3,80})", re.IGNORECASE)


def intention(text: str) -> str:
    """The planned action a sentence states ("go camping at the lake"), else ""."""
    m = _INTENT_RE.search(text)
    return m.group("what").strip() if m else ""


# --- second person --------------------------------------------------------------------------
_APOS = "['\u2019]"
_YOU = r"(?<![\w'\u2019-])you"
_SECOND: list[tuple[re.Pattern[str], str]] = [
    (re.compile(rf"\b(are|were|have|do|did|can|could|will|would|should|did)\s+{_YOU}\b(?!{_APOS})", re.I), "inv"),
    (re.compile(rf"{_YOU}{_APOS}re\b", re.I), "{n} is"),
    (re.compile(rf"{_YOU}\s+are\b", re.I), "{n} is"),
    (re.compile(rf"{_YOU}\s+were\b", re.I), "{n} was"),
    (re.compile(rf"{_YOU}{_APOS}ve\b", re.I), "{n} has"),
    (re.compile(rf"{_YOU}\s+have\b", re.I), "{n} has"),
    (re.compile(rf"{_YOU}{_APOS}ll\b", re.I), "{n} will"),
    (re.compile(rf"{_YOU}{_APOS}d\b", re.I), "{n} would"),
    (re.compile(rf"{_YOU}\s+don{_APOS}?t\b", re.I), "{n} doesn't"),
    (re.compile(r"\byourself\b", re.I), "{n}"),
    (re.compile(r"\byours\b", re.I), "{n}'s"),
    (re.compile(r"\byour\b", re.I), "{n}'s"),
    (re.compile(rf"{_YOU}\b(?!{_APOS})", re.I), "{n}"),
]
_INVERT = {"are": "is", "were": "was", "have": "has", "do": "does"}


def rewrite_second_person(sentence: str, name: str) -> str:
    """Replace you/your/yours/yourself (and "are you", "you're", ...) by `name`."""
    for pattern, repl in _SECOND:
        if repl == "inv":
            def inv(m: re.Match[str]) -> str:
                verb = m.group(1)
                new = _INVERT.get(verb.lower(), verb)
                new = new[:1].upper() + new[1:] if verb[:1].isupper() else new
                return f"{new} {name}"
            sentence = pattern.sub(inv, sentence)
        else:
            sentence = pattern.sub(lambda m, r=repl: r.format(n=name), sentence)
    return sentence
