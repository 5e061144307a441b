"""Person rewrites of the rule extractor: I/me/my -> the speaker, you/your -> the addressee,
we/us/our -> a group, with verb agreement ("I love jazz" -> "Maya loves jazz").

Speakers that are role labels (`ROLE_SUBJECTS`: user, assistant, system, tool ..., any case)
are written "the user" / "the assistant"; a turn whose `extra["name"]` holds a name (a chat
message's `name`) is written with that name (`turn_subject`). Within one clause a second mention
of the speaker as possessive or reflexive reads "their" / "theirs" / "themselves" ("Bob starts
their new job"), and a repeated speaker subject after "and" is left out ("The user is vegetarian
and lives in Seattle").
"""
from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from typing import Any, Mapping, Sequence

from etamem.records import Turn

_APOS = "['\u2019]"
_IP = r"(?<![\w.'\u2019-])I"  # "I" not inside a word or "e.i."
_I = _IP + r"(?![\w'\u2019-]|\.\w)"  # bare "I", not "i.e." nor "I-95"
_FIRST_FIXED: list[tuple[re.Pattern[str], str]] = [
    (re.compile(rf"{_IP}{_APOS}m\b", re.I), "{n} is"),
    (re.compile(rf"{_I}\s+am\b", re.I), "{n} is"),
    (re.compile(rf"{_I}\s+was\b", re.I), "{n} was"),
    (re.compile(rf"{_IP}{_APOS}ve\b", re.I), "{n} has"),
]
_FIRST_OLD_VERBS: list[tuple[re.Pattern[str], str]] = [  # conjugate=False: the rewrite before verb agreement
    (re.compile(rf"{_I}\s+have\b", re.I), "{n} has"),
]
_FIRST_MODALS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(rf"{_IP}{_APOS}ll\b", re.I), "{n} will"),
    (re.compile(rf"{_IP}{_APOS}d\b", re.I), "{n} would"),
]
_FIRST_OLD_DO: list[tuple[re.Pattern[str], str]] = [
    (re.compile(rf"{_I}\s+don{_APOS}?t\b", re.I), "{n} doesn't"),
    (re.compile(rf"{_I}\s+do\b", re.I), "{n} does"),
]
_FIRST_OBJECTS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"\bmyself\b", re.I), "{n}"),
    (re.compile(r"\bmine\b", re.I), "{n}'s"),
    (re.compile(r"\bmy\b(?!\.\w)", re.I), "{n}'s"),
    (re.compile(r"\bme\b(?![\w'\u2019]|\.\w)", re.I), "{n}"),
]
# an inverted first person ("How do I ...?", "Am I ...?", "Haven't I ...?"): the verb before the
# subject agrees with the name ("How does the user ...?", "Is the user ...?")
_I_INVERSION_RE = re.compile(
    rf"(?<![\w'\u2019-])(am|do|don{_APOS}?t|have|haven{_APOS}?t|aren{_APOS}t)\s+(?={_I})", re.I)
_REWRITES = [*_FIRST_FIXED, *_FIRST_OLD_VERBS, *_FIRST_MODALS, *_FIRST_OLD_DO, *_FIRST_OBJECTS,
             (re.compile(_I, re.I), "{n}")]
_BARE_I_RE = re.compile(_I, re.I)

# conjugation of the verb after a singular subject ("Maya love" -> "Maya loves")
_MODALS = set("can could will would shall should may might must ought cannot can't couldn't won't wouldn't "
              "shouldn't mustn't mightn't".split())
# a word before the subject that makes the verb after it a base form or a plural ("did I go",
# "can I ask", "my wife and I love"): no conjugation
_BLOCK_BEFORE = _MODALS | set(
    "do does did don't doesn't didn't dont am is are was were isn't aren't wasn't weren't have has had haven't "
    "hasn't hadn't let make makes made help helps helped watch saw see hear heard nor to".split())
# words before "you" that leave it in subject position ("if you need", "glad you like")
_YOU_SUBJECT_AFTER = set(
    "and but or so that if when whenever because cause since as while before after until till unless though "
    "although where how why what who once than think thought hope guess bet know knew feel felt believe wish "
    "sure glad seems seem said say says mean means".split())
_ADVERBS = set(
    "really just also still always never often usually actually finally totally definitely probably even only "
    "already sometimes seriously truly honestly kinda sorta absolutely certainly generally mostly normally "
    "rarely simply typically literally basically personally especially genuinely sincerely constantly last "
    "occasionally frequently regularly hardly barely nearly almost ever sometime def prob".split())
_LY_VERBS = set("apply reply rely supply fly multiply imply comply ally rally bully tally".split())
_NOT_VERBS = set(
    "and or but nor so too to the a an of in on at for with as if than then now here there myself alone both all "
    "not once again though gonna wanna gotta dunno guys folks two".split())
_PAST_OR_BARE = set(  # irregular past tenses, and verbs whose past is their base form (left as said)
    "went got saw made took had did was were came found gave told felt thought bought brought caught taught left "
    "met ran said sent spent began wrote won lost kept slept heard knew grew drew ate drank swam sang rode drove "
    "flew fell held built paid sold stood understood wore woke broke chose forgot hid became meant fought sought "
    "led fed sat lay laid lit shot stuck struck swore tore threw blew dug hung bent lent dealt dreamt learnt "
    "burnt spelt spoke stole froze shook forgave overcame gotten been done seen taken given read put set cut "
    "let hit hurt quit shut cost spread bet cast split beat burst upset".split())
_EED_VERBS = set("need feed bleed breed speed succeed proceed exceed heed seed weed embed shed wed".split())
_ING_VERBS = set("bring sing ring sting swing cling fling spring string wring".split())
_THIRD_IRREGULAR = {"have": "has", "do": "does", "go": "goes", "be": "is", "am": "is", "are": "is",
                    "were": "was", "don't": "doesn't", "dont": "doesn't", "haven't": "hasn't",
                    "havent": "hasn't", "aren't": "isn't", "weren't": "wasn't"}
_NEXT_WORD_RE = re.compile(rf"\s+([A-Za-z]+(?:{_APOS}[a-z]+)?)(?![\w'\u2019-])")
# "<my|the ... noun | Name | pronoun> and" right before the subject: a compound (plural) subject
_COMPOUND_RE = re.compile(
    r"(?:\b(?i:my|our|your|his|her|their|the|a|an)\s+(?:[\w'\u2019-]+\s+){0,2}"
    r"|\b[A-Z][\w-]*['\u2019]s\s+(?:[\w'\u2019-]+\s+){0,2}|(?<![.!?]\s)\b[A-Z][\w'\u2019-]*\s+"
    r"|\b(?i:me|you|he|she|they|we|him|them|us)\s+)(?i:and|or|&)\s*$")
_PREV_WORD_RE = re.compile(r"([A-Za-z&]+(?:['\u2019][a-z]+)?)[\s]*$")


def third_person(verb: str) -> str:
    """Third-person singular present of a base verb: love -> loves, go -> goes, try -> tries,
    watch -> watches, have -> has, don't -> doesn't."""
    v = verb.replace("\u2019", "'")
    if v.lower() in _THIRD_IRREGULAR:
        return _THIRD_IRREGULAR[v.lower()]
    if v.endswith(("s", "sh", "ch", "x", "z", "o")):
        return v + "es"
    if v.endswith("y") and len(v) > 1 and v[-2].lower() not in "aeiou":
        return v[:-1] + "ies"
    return v + "s"


def _is_adverb(word: str) -> bool:
    w = word.lower()
    return w in _ADVERBS or (len(w) > 4 and w.endswith("ly") and w not in _LY_VERBS)


def _is_base_verb(word: str) -> bool:
    """Whether `word`, right after a subject, reads as a present-tense verb to conjugate."""
    w = word.replace("\u2019", "'")
    if w.lower() in _THIRD_IRREGULAR and w.islower():
        return True
    if not w.isalpha() or not w.islower() or w in _MODALS or w in _NOT_VERBS or w in _PAST_OR_BARE:
        return False
    if w.endswith("ing") and w not in _ING_VERBS:
        return False
    if w.endswith("ed") and w not in _EED_VERBS:
        return False
    if w.endswith("s") and not w.endswith(("ss", "us")):
        return False  # already conjugated, or a plural noun
    return not _is_adverb(w)


def _conjugated_rest(text: str, pos: int) -> tuple[str, int] | None:
    """(text to put after the subject, end of what it replaces) when the subject ending at
    `pos` is followed by a base verb, optionally after one adverb; else None."""
    m = _NEXT_WORD_RE.match(text, pos)
    if m and _is_adverb(m.group(1)):
        m2 = _NEXT_WORD_RE.match(text, m.end())
        if m2 is None:
            return None
        m = m2
    if m is None or not _is_base_verb(m.group(1)):
        return None
    return text[pos:m.start(1)] + third_person(m.group(1)), m.end(1)


def _prev_word(text: str, pos: int) -> str | None:
    """The word right before `pos` (None at the start or after punctuation)."""
    m = _PREV_WORD_RE.search(text[max(0, pos - 40):pos])
    return m.group(1).lower().replace("\u2019", "'") if m else None


# a word after which "<noun phrase> and I" starts a clause (a compound subject); after any other
# word ("at the gym and I love it", "with Tom and I saw") the "I" starts a clause of its own
_CLAUSE_OPENERS = set(
    "and but or so when whenever if because cause since while after before then once until till though although "
    "as that where yesterday today tonight tomorrow now also finally recently lately actually".split())


def _is_compound(text: str, pos: int) -> bool:
    """Whether the "and" right before `pos` joins a noun phrase at a clause start to the
    subject at `pos` ("my wife and I", "Tom and I")."""
    start = max(0, pos - 60)
    m = _COMPOUND_RE.search(text[start:pos])
    if m is None:
        return False
    before = _prev_word(text, start + m.start())
    return before is None or before in _CLAUSE_OPENERS


def _sub_subject(pattern: re.Pattern[str], text: str, name: str, subject_after: set[str] | None) -> str:
    """Replace each match of `pattern` (a bare subject pronoun) by `name`, conjugating the verb
    after it. `subject_after`: the words after which the pronoun is a subject (None: any word
    outside `_BLOCK_BEFORE`; always at the start or after punctuation)."""
    out: list[str] = []
    last = 0
    for m in pattern.finditer(text):
        if m.start() < last:
            continue
        out.append(text[last:m.start()])
        last = m.end()
        prev = _prev_word(text, m.start())
        if subject_after is not None:
            is_subject = prev is None or prev in subject_after
        elif prev in ("and", "or", "&"):  # "my wife and I go", "Tom and I go" vs "it rains and I go"
            is_subject = not _is_compound(text, m.start())
        else:
            is_subject = prev not in _BLOCK_BEFORE
        rest = _conjugated_rest(text, m.end()) if is_subject else None
        out.append(name)
        if rest is not None:
            out.append(rest[0])
            last = rest[1]
    out.append(text[last:])
    return "".join(out)


def _apply(rules: list[tuple[re.Pattern[str], str]], sentence: str, **names: str) -> str:
    def fn(repl: str):
        def sub(m: re.Match[str]) -> str:
            tok = m.group(0)
            if len(tok) > 1 and tok.isupper() and tok.isalpha():  # "ME", "MY", "US": acronyms
                return tok
            return repl.format(**names)
        return sub

    for pattern, repl in rules:
        sentence = pattern.sub(fn(repl), sentence)
    return sentence


def speaker_name(speaker: str) -> str:
    """Display form of a speaker: 'user' -> 'User', names unchanged."""
    speaker = speaker.strip() or "Speaker"
    return speaker[0].upper() + speaker[1:] if speaker.islower() else speaker


# role labels (any case) -> how units name them
ROLE_SUBJECTS = {"user": "the user", "human": "the user", "assistant": "the assistant", "ai": "the assistant",
                 "bot": "the assistant", "model": "the assistant", "system": "the system", "tool": "the tool"}


def speaker_role(speaker: str) -> str | None:
    """"user", "assistant", "system" or "tool" when `speaker` is a role label (any case), else None."""
    subject = ROLE_SUBJECTS.get(speaker.strip().lower())
    return subject[4:] if subject else None


def speaker_subject(speaker: str, extra: Mapping[str, Any] | None = None) -> str:
    """How units name a speaker: `extra["name"]` when it holds a name (a chat message's name),
    "the user" / "the assistant" / "the system" / "the tool" for a role label, else the
    speaker as `speaker_name` shows it."""
    name = extra.get("name") if extra else None
    if isinstance(name, str) and name.strip():
        return speaker_name(name)
    role = speaker_role(speaker)
    return f"the {role}" if role else speaker_name(speaker)


def turn_subject(turn: Turn) -> str:
    """`speaker_subject` of a turn's speaker."""
    return speaker_subject(turn.speaker, turn.extra)


_CLAUSE_BOUNDARY_RE = re.compile(r"[.;:!?,()\u2026]")
_OBJECTS_RE = re.compile(r"\b(myself|mine|my|me)\b(?![\w'\u2019]|\.\w)", re.I)
_OTHER_SUBJECT_RE = re.compile(r"\b(?:he|she|they|we|you|who|which)\b", re.I)


def _clause_starts(text: str) -> list[int]:
    """Where the clauses of `text` start: 0 and after each punctuation mark."""
    return [0, *(m.end() for m in _CLAUSE_BOUNDARY_RE.finditer(text))]


def _clause_start(starts: list[int], pos: int) -> int:
    """Where the clause holding `pos` starts (`starts` from `_clause_starts`): after the last
    punctuation before it."""
    return starts[bisect_right(starts, pos) - 1]


def _speaker_head(name: str) -> re.Pattern[str]:
    """The speaker as a clause's subject: "Bob starts ...", not "Bob's dog" nor "Bob and Tom"."""
    return re.compile(rf"\s*(?i:{re.escape(name)})\s+(?!(?:and|or)\b)[a-z]")


_LEAD_ADVERB = r"(?i:yesterday|today|tonight|then|now|recently|finally|also|so|and|but|actually|still|just)"


def _after_speaker_verb(clause: str, name: str) -> bool:
    """Whether `clause` is the speaker as subject (after one adverb such as "yesterday" at most)
    and one or two lower-case words (a verb, an auxiliary or adverb and a verb): what comes next
    is the verb's object ("Bob starts ", "Yesterday the user sold ")."""
    return re.fullmatch(rf"\s*(?:{_LEAD_ADVERB}\s+)?(?i:{re.escape(name)})"
                        rf"(?:\s+(?!(?:and|or)\b)[a-z][\w'\u2019-]*){{1,2}}\s+", clause) is not None


class _ClauseTail:
    """The clause being written (the text after the last punctuation mark of what was appended),
    kept only while it has at most `max_words` words: `_after_speaker_verb` needs no more, and a
    long clause is then never joined again (linear in the text)."""

    def __init__(self, max_words: int) -> None:
        self.max_words = max_words
        self.pieces: list[str] = []
        self.words = 0
        self.after_space = True  # the clause so far ends in whitespace (or is empty)

    def add(self, piece: str) -> None:
        cut = None
        for cut in _CLAUSE_BOUNDARY_RE.finditer(piece):
            pass
        if cut is not None:
            self.pieces, self.words, self.after_space = [], 0, True
            piece = piece[cut.end():]
        if not piece or self.words > self.max_words:
            return
        self.words += sum(1 for _ in _WORD_RUN_RE.finditer(piece)) - (not self.after_space and not piece[0].isspace())
        self.after_space = piece[-1].isspace()
        self.pieces.append(piece)

    def text(self) -> str | None:
        """The clause, or None when it has more than `max_words` words."""
        return "".join(self.pieces) if self.words <= self.max_words else None


_WORD_RUN_RE = re.compile(r"\S+")


def _rewrite_objects(text: str, name: str) -> str:
    """my/mine/myself/me -> "<name>'s" / "<name>'s" / name / name; right after the speaker as
    subject and its verb (`_after_speaker_verb`), my/mine/myself -> their/theirs/themselves
    ("Bob starts their new job", "Bob lost theirs", "Bob made it themselves")."""
    out: list[str] = []
    # an adverb, the name and two words: what `_after_speaker_verb` can accept
    clause = _ClauseTail(3 + len(name.split()))
    last = 0
    for m in _OBJECTS_RE.finditer(text):
        tok = m.group(1)
        out.append(text[last:m.start()])
        clause.add(out[-1])
        last = m.end()
        if len(tok) > 1 and tok.isupper():  # "ME", "MY": acronyms
            out.append(tok)
            clause.add(tok)
            continue
        so_far = clause.text()
        said = so_far is not None and _after_speaker_verb(so_far, name)
        word = tok.lower()
        if word == "me":
            out.append(name)
        elif word == "my":
            out.append("their" if said else f"{name}'s")
        elif word == "mine":
            out.append("theirs" if said else f"{name}'s")
        else:
            out.append("themselves" if said else name)
        clause.add(out[-1])
    out.append(text[last:])
    return "".join(out)


def _elide_repeated_subject(text: str, name: str) -> str:
    """"<name> is vegetarian and <name> lives in Seattle" -> "... and lives in Seattle": the
    speaker as subject again after "and", when the clause before starts with the speaker as
    subject and names no other subject (he, she, they, we, you, who, which)."""
    # the lookbehind and the possessive run: a long run of spaces is scanned once
    pattern = re.compile(rf"(,?(?<!\s)\s++and)\s+(?i:{re.escape(name)})(?=\s+(?!(?:and|or)\b)[a-z])")
    starts: list[int] | None = None
    others: list[re.Match[str]] = []
    heads: dict[int, int] = {}  # clause start -> end of the speaker as its subject (-1: not)
    out: list[str] = []
    last = 0
    for m in pattern.finditer(text):
        if starts is None:  # clause starts and other subjects: found once, read per match
            starts = _clause_starts(text)
            others = list(_OTHER_SUBJECT_RE.finditer(text))
            other_starts = [o.start() for o in others]
            head = _speaker_head(name)
        start = _clause_start(starts, m.start())
        if start not in heads:
            h = head.match(text, start)
            heads[start] = h.end() if h else -1
        i = bisect_left(other_starts, start)  # the first other subject in the clause, if any
        if not 0 <= heads[start] <= m.start() or (i < len(others) and others[i].end() <= m.start()):
            continue
        out.append(text[last:m.end(1)])
        last = m.end()
    out.append(text[last:])
    return "".join(out)


def _inverted_verb(m: re.Match[str]) -> str:
    """The auxiliary of an inverted "I" ("do I", "am I") in the third person, its case kept."""
    word = m.group(1).replace("\u2019", "'").lower()
    verb = {"aren't": "isn't"}.get(word) or third_person(word)
    return (verb[:1].upper() + verb[1:] if m.group(1)[:1].isupper() else verb) + " "


def rewrite_first_person(sentence: str, name: str, conjugate: bool = True) -> str:
    """`sentence` with I/me/my/mine/myself (and I'm, I've, I'll, I'd ...) replaced by `name`.
    With `conjugate` (the default) the present-tense verb after "I" agrees with the name ("I
    love" -> "Maya loves", "I try" -> "Maya tries", "I don't" -> "Maya doesn't", "How do I" ->
    "How does Maya", "Am I" -> "Is Maya"; modals, past
    tenses, questions ("can I go") and compound subjects ("Tom and I go") are left as they
    are), a second mention in one clause reads their/theirs/themselves ("I start my job" ->
    "Bob starts their job"), and a repeated subject after "and" is left out ("I'm tired and I
    go" -> "Maya is tired and goes"). Without it: the plain word-for-word rewrite."""
    if not conjugate:
        return _apply(_REWRITES, sentence, n=name)
    sentence = _I_INVERSION_RE.sub(_inverted_verb, sentence)
    sentence = _apply([*_FIRST_FIXED, *_FIRST_MODALS], sentence, n=name)
    sentence = _sub_subject(_BARE_I_RE, sentence, name, None)
    return _elide_repeated_subject(_rewrite_objects(sentence, name), name)


_YOU = r"(?<![\w'\u2019-])you"
_YOU_PLURAL = r"(?!\s+(?:guys|all|two|both|folks|people|lot)\b)"
_YOU_INVERSION_RE = re.compile(
    rf"\b(are|were|have|do|don{_APOS}?t|aren{_APOS}t|weren{_APOS}t|haven{_APOS}?t)\s+you\b(?![\w'\u2019]){_YOU_PLURAL}",
    re.I)
_YOU_FIXED: list[tuple[re.Pattern[str], str]] = [
    (re.compile(rf"{_YOU}{_APOS}re\b", re.I), "{a} is"),
    (re.compile(rf"{_YOU}{_APOS}ve\b", re.I), "{a} has"),
    (re.compile(rf"{_YOU}{_APOS}ll\b", re.I), "{a} will"),
    (re.compile(rf"{_YOU}{_APOS}d\b", re.I), "{a} would"),
    (re.compile(rf"{_YOU}\s+are\b(?!\s+(?:guys|all|two|both)\b)", re.I), "{a} is"),
    (re.compile(rf"{_YOU}\s+were\b", re.I), "{a} was"),
    (re.compile(r"\byourself\b", re.I), "{a}"),
    (re.compile(r"\byours\b", re.I), "{a}'s"),
    (re.compile(r"\byour\b", re.I), "{a}'s"),
]
# "you" left as said: thanks and greetings, the discourse marker "you know", plural "you guys"
_BARE_YOU_RE = re.compile(
    rf"(?<!\bthank )(?<!\bsee ){_YOU}(?![\w'\u2019-]){_YOU_PLURAL}"
    r"(?!\s+know\s*(?:[,.!?\u2026]|$|what\b))",
    re.I)
_WE_RULES: list[tuple[re.Pattern[str], str]] = [
    (re.compile(rf"(?<![\w'\u2019-])we{_APOS}re\b", re.I), "{w} are"),
    (re.compile(rf"(?<![\w'\u2019-])we{_APOS}ve\b", re.I), "{w} have"),
    (re.compile(rf"(?<![\w'\u2019-])we{_APOS}ll\b", re.I), "{w} will"),
    (re.compile(rf"(?<![\w'\u2019-])we{_APOS}d\b", re.I), "{w} would"),
    (re.compile(r"(?<![\w'\u2019-])we\b(?![\w'\u2019-])", re.I), "{w}"),
    (re.compile(r"(?<![\w'\u2019-])(?<!\blet )us\b(?![\w'\u2019-]|\.\w)", re.I), "{w}"),
    (re.compile(r"\bours\b", re.I), "{wp}"),
    (re.compile(r"\bour\b", re.I), "{wp}"),
]


def rewrite_second_person(sentence: str, addressee: str, conjugate: bool = True) -> str:
    """Replace you/your/yours/yourself (you're, you've, ...) by `addressee`, the other speaker:
    "Did you go?" -> "Did Mel go?", "your dog" -> "Mel's dog", "Are you ...?" -> "Is Mel ...?",
    "if you need" -> "if Mel needs". Left as said: "thank you", "see you", the marker "you
    know", the plural "you guys/all/two/both"."""
    if conjugate:
        def inv(m: re.Match[str]) -> str:
            verb = third_person(m.group(1).lower())
            verb = verb[:1].upper() + verb[1:] if m.group(1)[:1].isupper() else verb
            return f"{verb} {addressee}"
        sentence = _YOU_INVERSION_RE.sub(inv, sentence)
    sentence = _apply(_YOU_FIXED, sentence, a=addressee)
    if conjugate:
        return _sub_subject(_BARE_YOU_RE, sentence, addressee, _YOU_SUBJECT_AFTER)
    return _BARE_YOU_RE.sub(addressee, sentence)


def rewrite_first_plural(sentence: str, group: str, possessive: str | None = None) -> str:
    """Replace we/us (we're, we've, ...) by `group` ("Maya and Jonas") and our/ours by
    `possessive` (default "<group>'s"); "let us" and "US" stay."""
    return _apply(_WE_RULES, sentence, w=group, wp=possessive or f"{group}'s")


WE_FORMS = ("others", "pair")


def first_plural_group(name: str, other: str | None, form: str = "others") -> tuple[str, str]:
    """(group, possessive) that we/us and our/ours stand for when `name` says them to `other`.

    "others" (the default): "Maya and others", "Maya's" ("our kids" -> "Maya's kids"). In a
    dialogue "we" is more often the speaker with family, friends or a team, or people in
    general, than the two speakers. "pair": "Maya and Jonas", "Maya and Jonas's" (the speaker
    and others when `other` is unknown)."""
    if form not in WE_FORMS:
        raise ValueError(f"we form {form!r}: expected one of {WE_FORMS}")
    if form == "pair" and other:
        return f"{name} and {other}", f"{name} and {other}'s"
    return f"{name} and others", f"{name}'s"


def _addressee(turn: Turn, context: Sequence[Turn], name_of) -> str | None:
    """`name_of(t)` of the one other speaker in `context`, or None when there is none or several."""
    others = {name_of(t) for t in context if t.speaker != turn.speaker}
    return others.pop() if len(others) == 1 else None


def addressee_of(turn: Turn, context: Sequence[Turn]) -> str | None:
    """The one other speaker in `context` (a two-person dialogue) as `speaker_name` shows it,
    or None when there is none or several."""
    return _addressee(turn, context, lambda t: speaker_name(t.speaker))


def addressee_subject(turn: Turn, context: Sequence[Turn]) -> str | None:
    """As `addressee_of`, written as units name that speaker (`turn_subject`: "the assistant")."""
    return _addressee(turn, context, turn_subject)


def we_group(speaker: str, name: str, other: str | None, form: str = "others") -> tuple[str, str]:
    """(group, possessive) for we/us/our said by `speaker`, written `name`, to `other`: the
    assistant's "we" is the assistant and the user it talks to (`other`, else "the user"):
    ("the assistant and the user", "the assistant and the user's"); anyone else's:
    `first_plural_group(name, other, form)`."""
    if speaker_role(speaker) == "assistant":
        return first_plural_group(name, other or "the user", "pair")
    return first_plural_group(name, other, form)


def capitalise(text: str) -> str:
    """`text` with its first letter upper case."""
    return text[:1].upper() + text[1:] if text else text
