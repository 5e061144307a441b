"""`supersedes` links of the rules, the attribute slots and both, without building
memories: units extracted as the engine does (the rule extractor), encoded by the real MiniLM,
classified by `etamem.facts.supersession.find_supersessions` as a write does.

    python -m benchmarks.slot_links [--locomo PATH] [--threshold T --margin M --tolerance X --ceiling C]
                                    [--no-change-words] [--grid] [--show-locomo] [--out FILE.json]

Reported:
- link recall per scenario file and split (`etamem/data/updates.json` dev / test,
  `etamem/data/updates_holdout2.json`): the new fact's unit supersedes the old fact's unit (old
  said on day 0, new on day 30, one batch each);
- cross links: every scenario of a set said by one user (olds a day apart, each new 40 days
  after its old): links other than new -> old of one scenario (some are right: another
  scenario's place is the same slot for one user);
- false links on `tests/data/short_statements.json` (one user says them all in sequence, none
  replaces another): a minute apart (as tests/test_facts_that_change.py) and a day apart;
- links made over LoCoMo's dev conversations (session by session; candidates the 32 nearest
  units of earlier sessions and the session's earlier units, as `construction.supersession_links`).
`--grid`: the slots' counts over thresholds and margins (slots alone; the vectors are encoded once).
"""
from __future__ import annotations

import argparse
import json
import os
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = [("updates.json", "dev"), ("updates.json", "test"), ("updates_holdout2.json", "test")]
T0 = datetime(2023, 3, 1, 9, tzinfo=timezone.utc)


class NoRules:
    """A rule classifier that links nothing: the slots alone."""

    def classify(self, new_text, speaker, candidates):
        return []


def extract(turns: list[dict], space: str):
    """AMUs of `turns` (dicts of `normalise_turns`) by the engine's default rule extractor, each
    turn with up to 4 earlier turns of its session as context (as `construction.build_units`)."""
    from etamem.config import Config
    from etamem.construction import CONTEXT_TURNS
    from etamem.extraction.extractors import RuleExtractor
    from etamem.ingest.inputs import normalise_turns
    from etamem.records import AMU

    ex, out = RuleExtractor.from_config(Config()), []
    norm = normalise_turns(turns, space, default_tz="UTC")
    for i, turn in enumerate(norm):
        context = [t for t in norm[max(0, i - CONTEXT_TURNS):i] if t.session_id == turn.session_id]
        for k, text in enumerate(ex.extract(turn, context)):
            out.append(AMU(amu_id=f"{turn.turn_id}#{k}", text=text, speaker=turn.speaker, timestamp=turn.timestamp,
                           session_id=turn.session_id, source_turn_ids=(turn.turn_id,), space=space))
    return out


def classifiers(encoder, threshold: float, margin: float, ceiling: float, change_words: bool = True,
                min_gap_days: float = 1.0, tolerance: float = 0.05) -> dict:
    from etamem.facts.slots import AttributeSlots, SlotSupersession
    from etamem.facts.supersession import RuleSupersession

    slots = AttributeSlots(threshold=threshold, margin=margin, ceiling=ceiling, change_words=change_words,
                           min_gap_days=min_gap_days, tolerance=tolerance)
    return {"rules": RuleSupersession(), "slots": SlotSupersession(encoder, NoRules(), slots),
            "both": SlotSupersession(encoder, RuleSupersession(), slots)}


def scenario_units(encoder) -> dict:
    """{(file, split): [(scenario id, old units, new units, vectors)]}."""
    out: dict = {}
    for name, split in SCENARIOS:
        rows = []
        for s in json.loads((ROOT / "etamem" / "data" / name).read_text())["scenarios"]:
            if s["split"] != split:
                continue
            days = s.get("gap_days", 30)
            old = extract([{"role": "user", "content": s["old"], "timestamp": T0.isoformat(), "id": f"{s['id']}:old",
                            "session_id": "a"}], s["id"])
            new = extract([{"role": "user", "content": s["new"], "id": f"{s['id']}:new", "session_id": "b",
                            "timestamp": (T0 + timedelta(days=days)).isoformat()}], s["id"])
            rows.append((s["id"], old, new, encoder.encode([u.text for u in old + new])))
        out[(name, split)] = rows
    return out


def recall(rows, classifier) -> tuple[int, int, list[str]]:
    from etamem.facts.lookalikes import distinct_facts
    from etamem.facts.supersession import find_supersessions

    hit, missed = 0, []
    for sid, old, new, vecs in rows:
        units = old + new
        links = find_supersessions(units, vecs, [[] for _ in units], classifier, distinct=distinct_facts)
        olds, news = {u.amu_id for u in old}, {u.amu_id for u in new}
        if any(a in news and b in olds for a, b, _, _ in links):
            hit += 1
        else:
            missed.append(sid)
    return hit, len(rows), missed


def cross_links(rows, classifier) -> list[tuple[str, str]]:
    """All scenarios of a set said by one user (olds on days 0, 1, ..., news 40 days after
    their old): links other than new -> old of one scenario (another scenario's fact is
    sometimes the same slot, so a few are not wrong; this counts them all)."""
    from dataclasses import replace

    from etamem.facts.lookalikes import distinct_facts
    from etamem.facts.supersession import find_supersessions

    units, vecs = [], []
    for d, (sid, old, new, v) in enumerate(rows):
        for u, x in zip(old + new, v):
            units.append(replace(u, timestamp=u.timestamp + timedelta(days=d + (10 if u in new else 0))))
            vecs.append(x)
    order = sorted(range(len(units)), key=lambda i: (units[i].timestamp, units[i].amu_id))
    units, vecs = [units[i] for i in order], np.asarray([vecs[i] for i in order], np.float32)
    text = {u.amu_id: u.text for u in units}
    out = []
    for a, b, _, _ in find_supersessions(units, vecs, [[] for _ in units], classifier, distinct=distinct_facts):
        if a.split(":")[0] != b.split(":")[0] or ":new" not in a or ":old" not in b:
            out.append((text[a], text[b]))
    return out


def statement_units(encoder, step: timedelta = timedelta(minutes=1)):
    """Units of the short statements said by one user `step` apart (one session)."""
    data = json.loads((ROOT / "tests" / "data" / "short_statements.json").read_text())["statements"]
    units = extract([{"role": "user", "content": s["text"], "id": f"s{i}", "session_id": "s",
                      "timestamp": (T0 + i * step).isoformat()} for i, s in enumerate(data)], "s")
    return units, encoder.encode([u.text for u in units])


def false_links(units, vecs, classifier) -> list[tuple[str, str]]:
    from etamem.facts.lookalikes import distinct_facts
    from etamem.facts.supersession import find_supersessions

    by_id = {u.amu_id: u.text for u in units}
    return [(by_id[a], by_id[b]) for a, b, _, _ in find_supersessions(units, vecs, [[] for _ in units], classifier,
                                                                      distinct=distinct_facts)]


def locomo_units(path: Path, encoder, cache: Path):
    """[(units of one conversation in order, vectors, session of each)] over the file."""
    from etamem.ingest.datasets import read_locomo

    convs = [(c.space, extract(c.turns, c.space)) for c in read_locomo(path)]
    texts = [u.text for _, units in convs for u in units]
    if cache.is_file() and np.load(cache).shape[0] == len(texts):
        vecs = np.load(cache)
    else:
        vecs = np.asarray(encoder.encode(texts), np.float32)
        np.save(cache, vecs)
    out, at = [], 0
    for _, units in convs:
        out.append((units, vecs[at:at + len(units)]))
        at += len(units)
    return out


def locomo_links(convs, classifier) -> list[tuple[str, str]]:
    """Links over each conversation, one session's units per batch; stored candidates: the 32
    units of earlier sessions nearest each new unit (every speaker; the same speaker kept later)."""
    from etamem.facts.lookalikes import distinct_facts
    from etamem.facts.supersession import find_supersessions, is_fact

    found = []
    for units, vecs in convs:
        sessions = list(dict.fromkeys(u.session_id for u in units))
        for s in sessions:
            idx = [i for i, u in enumerate(units) if u.session_id == s]
            prior = np.array([i for i, u in enumerate(units) if sessions.index(u.session_id) < sessions.index(s)],
                             np.int64)
            near = []
            for i in idx:
                if not len(prior) or not is_fact(units[i].text):
                    near.append([])
                    continue
                cos = vecs[prior] @ vecs[i]
                top = prior[np.argsort(-cos)[:32]]
                near.append([(units[j], float(vecs[j] @ vecs[i])) for j in top])
            batch = [units[i] for i in idx]
            nv = {units[j].amu_id: vecs[j] for j in prior}
            by_id = {u.amu_id: u.text for u in units}
            links = find_supersessions(batch, vecs[idx], near, classifier, near_vectors=nv, distinct=distinct_facts)
            found += [(by_id[a], by_id[b]) for a, b, _, _ in links]
    return found


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--locomo", default=str(ROOT.parent / "shared" / "data" / "locomo" / "locomo10-dev.json"))
    p.add_argument("--threshold", type=float, default=None)
    p.add_argument("--margin", type=float, default=None)
    p.add_argument("--ceiling", type=float, default=None)
    p.add_argument("--no-change-words", action="store_true", help="slot links without a change word in the newer")
    p.add_argument("--tolerance", type=float, default=None)
    p.add_argument("--grid", action="store_true")
    p.add_argument("--examples", type=int, default=10, help="false links shown per set")
    p.add_argument("--show-locomo", action="store_true", help="print the first LoCoMo links (not written to --out)")
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from etamem.facts.slots import AttributeSlots
    from etamem.models.encoders import SentenceTransformerEncoder

    defaults = AttributeSlots()
    t = a.threshold if a.threshold is not None else defaults.threshold
    m = a.margin if a.margin is not None else defaults.margin
    c = a.ceiling if a.ceiling is not None else defaults.ceiling
    tol = a.tolerance if a.tolerance is not None else defaults.tolerance
    enc = SentenceTransformerEncoder("minilm", device="cpu")
    scen = scenario_units(enc)
    st_units, st_vecs = statement_units(enc)
    daily_units, daily_vecs = statement_units(enc, timedelta(days=1))
    loc_path = Path(a.locomo)
    convs = locomo_units(loc_path, enc, Path("/tmp/slot_links_locomo.npy")) if loc_path.is_file() else None
    cw = not a.no_change_words
    grid = [(t, m, cw, tol)] if not a.grid else [(tt, mm, cw, to) for tt in (0.4, 0.45) for mm in (0.0, 0.03, 0.05)
                                                  for to in (0.0, 0.05)]
    report: dict = {"rows": []}
    for tt, mm, w, to in grid:
        cls = classifiers(enc, tt, mm, c, w, tolerance=to)
        names = ["slots"] if a.grid else ["rules", "slots", "both"]
        for name in names:
            row = {"threshold": tt, "margin": mm, "ceiling": c, "tolerance": to, "change_words": w,
                   "classifier": name}
            for (f, split), rows in scen.items():
                hit, n, missed = recall(rows, cls[name])
                row[f"{f}:{split}"] = f"{hit}/{n}"
                row[f"missed {f}:{split}"] = missed
                wrong = cross_links(rows, cls[name])
                row[f"cross {f}:{split}"] = len(wrong)
                row[f"cross examples {f}:{split}"] = wrong[:a.examples]
            fl = false_links(st_units, st_vecs, cls[name])
            row["short_statements_false"] = len(fl)
            row["short_statements_examples"] = fl[:a.examples]
            fl = false_links(daily_units, daily_vecs, cls[name])
            row["short_statements_daily_false"] = len(fl)
            row["short_statements_daily_examples"] = fl[:a.examples]
            if convs is not None:
                ll = locomo_links(convs, cls[name])
                row["locomo_dev_links"] = len(ll)
                if a.show_locomo:  # printed, never written to --out: the data is not committed
                    print(json.dumps({"locomo_examples": ll[:a.examples]}, ensure_ascii=False))
            report["rows"].append(row)
            print(json.dumps({k: v for k, v in row.items() if "missed" not in k and "examples" not in k}), flush=True)
    if a.out:
        Path(a.out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
