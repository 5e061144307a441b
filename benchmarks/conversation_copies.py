"""LoCoMo conversations copied as often as a benchmark needs: re-dated copies with renamed
speakers (and vocatives, see `Copy`), so that a space of any size holds distinct texts.

Used by `benchmarks.agent_loop`, `benchmarks.ingest` and `benchmarks.latency`.
"""
from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from itertools import count, groupby
from pathlib import Path
from typing import Iterator

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo" / "locomo10-dev.json"
DEMO = "demo"  # --data value: the bundled demo conversation
GENERATOR_VERSION = 2  # bump when the generated turns change (stores built by older versions are not reused)

# 199 distinct first names (a prime count, see names_for). None of them is a LoCoMo or demo speaker.
NAMES = tuple("""
Abigail Adrian Aisha Alberto Alexei Alina Amara Ambrose Anika Anselm Arjun Astrid Aurelio Beatrix Benedikt
Bianca Bjorn Bronwyn Caius Camille Cedric Celeste Chiara Cormac Dagny Dalia Damian Delphine Desmond Dmitri Dorian
Eamon Edith Eero Elif Elodie Emeka Enzo Esme Ezra Fabian Farah Felix Fiona Florian Freya Gareth Gemma Gideon Giulia
Gunnar Hamid Hana Hector Helga Hiro Idris Ilse Imogen Ingrid Isidore Ivana Jasper Jelena Joaquin Jovana Kamala
Kasimir Katya Keiko Kenji Kieran Lars Leila Leonie Lorcan Lucian Ludmila Magnus Malik Marek Margot Matteo Mirela
Moritz Nadia Naveen Nils Noor Odile Olek Oona Orla Oskar Pablo Paloma Petra Pilar Priya Quentin Rafael Rania Rasmus
Renata Rhys Rohan Rosalind Ruben Saoirse Sergei Signe Silas Sofia Soren Stellan Sunita Svea Tamsin Tariq Thea Tobias
Tomasz Ulla Ulrich Valentin Viggo Vikram Wanda Wendell Xavier Ximena Yannick Yara Yusuf Zainab Zara Zoltan Agnes
Alvaro Anneke Bastian Benno Carmen Casimir Dario Dunja Elias Emilia Ferdinand Greta Gustavo Henrik Hilde Ignacio
Irena Jalen Janek Kofi Lennart Linnea Lucia Mateus Milena Nikolai Ottilie Pascal Radek Rosalie Samir Selma Teodor
Tove Umberto Vesna Wilhelmina Yasmin Zeno Anouk Bartek Cosima Detlef Edda Folke Goran Halvard Ines Jarek Kalinda
Liesel Mirko Nanna Oswin Perpetua Rikard Sabine Thorsten Ursula Viktor Wiebke
""".split())


# --- the generator ------------------------------------------------------------------------
@dataclass
class Source:
    """One conversation to copy: its speakers (in order of appearance), its sessions (turn
    dicts with their parsed timestamps), its questions, and its first and last timestamps."""
    name: str
    speakers: tuple[str, ...]
    sessions: list[tuple[str, list[tuple[dict, datetime]]]]
    questions: list[str]
    first: datetime
    last: datetime


def source_from_turns(name: str, turns: list[dict], questions: list[str]) -> Source:
    from etamem.ingest.timeparse import parse_timestamp

    sessions = [(sid, [(t, parse_timestamp(t["timestamp"])) for t in group])
                for sid, group in groupby(turns, key=lambda t: t["session_id"])]
    stamps = [when for _, group in sessions for _, when in group]
    return Source(name, tuple(dict.fromkeys(t["speaker"] for t in turns)), sessions, list(questions),
                  min(stamps), max(stamps))


def load_sources(data: str | os.PathLike | None = None) -> tuple[list[Source], dict]:
    """The conversations to copy and a description of where they came from.

    `data`: a LoCoMo file; None = the default LoCoMo dev file, or the bundled demo
    conversation when that file is absent (the description says so); "demo" = the demo."""
    path = DEFAULT_DATA if data is None else data
    if str(path) != DEMO and Path(path).is_file():
        from etamem.ingest.datasets import read_locomo

        sources = [source_from_turns(c.space, c.turns, [q["question"] for q in c.questions if q.get("question")])
                   for c in read_locomo(path)]
        return sources, {"kind": "locomo", "path": str(Path(path).resolve()), "conversations": len(sources)}
    if data is not None and str(data) != DEMO:
        raise ValueError(f"data: {data} does not exist")
    from importlib import resources

    doc = json.loads(resources.files("etamem.data").joinpath("demo_conversation.json").read_text(encoding="utf-8"))
    info = {"kind": "demo", "path": "etamem/data/demo_conversation.json", "conversations": 1}
    if data is None:
        info["note"] = f"LoCoMo file not found at {DEFAULT_DATA}: the bundled demo conversation, repeated, instead"
    return [source_from_turns(doc.get("space", "demo"), doc["turns"], [q["question"] for q in doc["questions"]])], info


def names_for(k: int, m: int) -> list[str]:
    """m distinct names for copy k of a source with m speakers: the next m of the list, so
    consecutive copies share no name; a given (source, speaker) meets the same name again only
    after len(NAMES) rounds (a prime count)."""
    n = len(NAMES)
    return [NAMES[(m * k + j) % n] for j in range(m)]


MIN_AMU_WORDS = 3  # Config.min_amu_words, the rule extractor's default
_FIRST_PERSON = re.compile(r"(?<![\w'\u2019-])I(?![\w-])|\b(?:[Mm]e|[Mm]y|[Mm]ine|[Mm]yself)\b")
_END_PUNCT = re.compile(r"[.!?\u2026]+[\"'\u201d\u2019)\]]*\s*$")


@dataclass
class Copy:
    """Copy `index` of a source: speakers renamed, timestamps shifted by `shift` (whole weeks).

    With `vocatives` (the default), a sentence of a turn that the rule extractor keeps as an AMU
    (`Config.min_amu_words` content words after filler removal) but that names neither speaker
    and has no first-person word (which the extractor rewrites to the speaker's name) gets the other
    speaker's name as a vocative before its end punctuation ("Long time no see!" -> "Long time no
    see, Adrian!"), so that its AMU, too, differs from copy to copy: with names replaced alone,
    46% of the AMUs of a 100k-AMU LoCoMo space repeat an earlier copy's text (the cache wrapper
    would then serve their vectors, and the trees hold duplicates)."""
    index: int
    source: Source
    names: dict[str, str]
    shift: timedelta
    vocatives: bool = True
    _pattern: re.Pattern = field(init=False, repr=False)
    _questions: list[str] | None = field(default=None, init=False, repr=False)

    def __post_init__(self):
        alts = "|".join(re.escape(n) for n in sorted(self.names, key=len, reverse=True))
        self._pattern = re.compile(rf"\b(?:{alts})\b")
        new = list(self.names.values())
        self._addressee = {new[i]: new[(i + 1) % len(new)] for i in range(len(new))}
        self._new_pattern = re.compile(rf"\b(?:{'|'.join(re.escape(n) for n in new)})\b")

    def rename(self, text: str) -> str:
        return self._pattern.sub(lambda m: self.names[m.group(0)], text)

    def turn_text(self, text: str, speaker: str) -> str:
        """The turn's text in this copy: renamed, and with vocatives (see the class doc)."""
        text = self.rename(text)
        if not self.vocatives or speaker not in self._addressee:
            return text
        from etamem.extraction.extractors import content_words, split_sentences, strip_filler

        out = []
        for sentence in split_sentences(text):
            unit = len(content_words(strip_filler(sentence))) >= MIN_AMU_WORDS  # the rule extractor keeps it
            if unit and not (self._new_pattern.search(sentence) or _FIRST_PERSON.search(sentence)):
                m = _END_PUNCT.search(sentence)
                cut = m.start() if m else len(sentence)
                sentence = f"{sentence[:cut]}, {self._addressee[speaker]}{sentence[cut:]}"
            out.append(sentence)
        return " ".join(out)

    def sessions(self) -> Iterator[tuple[str, list[dict]]]:
        """(session id, turn dicts ready for `Memory.add`), in order; ids prefixed `c<index>:`."""
        for sid, group in self.source.sessions:
            turns = []
            for i, (t, when) in enumerate(group):
                speaker = self.names.get(t["speaker"], t["speaker"])
                extra = {k: self.rename(v) if isinstance(v, str) else v for k, v in (t.get("extra") or {}).items()}
                turns.append({"turn_id": f"c{self.index}:{t.get('turn_id') or f'{sid}:{i + 1}'}",
                              "session_id": f"c{self.index}:{sid}", "speaker": speaker,
                              "text": self.turn_text(t["text"], speaker),
                              "timestamp": (when + self.shift).isoformat(), "extra": extra})
            yield f"c{self.index}:{sid}", turns

    def questions(self) -> list[str]:
        if self._questions is None:
            self._questions = [self.rename(q) for q in self.source.questions]
        return self._questions


def copies(sources: list[Source], vocatives: bool = True) -> Iterator[Copy]:
    """Endless copies of the sources, round robin, each starting after the previous one ends
    (the first keeps its dates)."""
    cursor = sources[0].first
    week = timedelta(weeks=1)
    for k in count():
        src = sources[k % len(sources)]
        shift = math.ceil((cursor - src.first) / week) * week
        yield Copy(k, src, dict(zip(src.speakers, names_for(k, len(src.speakers)))), shift, vocatives)
        cursor = src.last + shift + timedelta(days=1)


def session_stream(sources: list[Source], vocatives: bool = True) -> Iterator[tuple[Copy, str, list[dict]]]:
    """Endless (copy, session id, turns) of the copies, session after session."""
    for copy in copies(sources, vocatives):
        for sid, turns in copy.sessions():
            yield copy, sid, turns
