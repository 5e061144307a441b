"""How far to trust a small LLM judge: a seeded sample of its verdicts read by hand, and the
agreement between the two.

    python -m benchmarks.judge_check sheet OUT/results.jsonl --n 50 --seed 0 > sheet.md
    python -m benchmarks.judge_check agree OUT/results.jsonl --labels benchmarks/judge_labels/NAME.json

`sheet` prints the sampled answers (system, question id, question, gold answer, prediction, the
judge's verdict) as a Markdown table to read; `agree` joins hand labels (a JSON file keyed
"<system>|<qid>", true for CORRECT, false for WRONG; no dataset text in it) with the judge's
verdicts of the same run and prints the agreement with its 95% interval, Cohen's kappa, the
confusion table and both accuracies. The sample is the same for the same results and seed: every
judged answer (verdict given) ordered by a seeded hash of its key.
"""
from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path


def judged(results: str | Path) -> dict[str, dict]:
    """"<system>|<qid>" -> the run's last answer record for it, answers with a verdict only."""
    out = {}
    with open(results, encoding="utf-8") as fh:
        for line in fh:
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:  # a line cut by an interrupted run
                continue
            if rec.get("type") == "qa" and rec.get("correct") is not None:
                out[f"{rec['system']}|{rec['qid']}"] = rec
    return out


def sample(records: dict[str, dict], n: int, seed: int = 0) -> list[str]:
    """The first `n` keys in the order of sha256("<seed>:<key>") (stable as records are added)."""
    return sorted(records, key=lambda k: hashlib.sha256(f"{seed}:{k}".encode()).hexdigest())[:n]


def _cell(text) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def sheet(records: dict[str, dict], keys: list[str], questions: dict[str, str]) -> str:
    rows = ["| # | key | question | gold | prediction | judge |", "|---|---|---|---|---|---|"]
    for i, k in enumerate(keys, 1):
        r = records[k]
        rows.append(f"| {i} | {k} | {_cell(questions.get(r['qid'], ''))} | {_cell(r['gold'])} | "
                    f"{_cell(r['prediction'])} | {'CORRECT' if r['correct'] else 'WRONG'} |")
    return "\n".join(rows)


def agreement(judge: list[bool], hand: list[bool]) -> dict:
    """Agreement, its 95% bootstrap interval, Cohen's kappa, the confusion counts and both accuracies."""
    import numpy as np

    from etamem.bench.metrics import bootstrap_interval

    j, h = np.array(judge, bool), np.array(hand, bool)
    agree = (j == h).astype(np.float64)
    po = float(agree.mean())
    pe = float(j.mean() * h.mean() + (1 - j.mean()) * (1 - h.mean()))
    kappa = (po - pe) / (1 - pe) if pe < 1 else 1.0
    return {"n": int(j.size), "agreement": po, "interval": bootstrap_interval(agree), "kappa": kappa,
            "judge_correct_hand_correct": int((j & h).sum()), "judge_correct_hand_wrong": int((j & ~h).sum()),
            "judge_wrong_hand_correct": int((~j & h).sum()), "judge_wrong_hand_wrong": int((~j & ~h).sum()),
            "judge_accuracy": float(j.mean()), "hand_accuracy": float(h.mean())}


def _questions(settings: Path) -> dict[str, str]:
    """qid -> question text, read from the run's data file (named in its settings.json)."""
    from etamem.bench.data import load

    st = json.loads(settings.read_text(encoding="utf-8"))
    convs = load(st["dataset"], st["file"], locomo=st.get("locomo"), filler=st.get("filler"), split=st.get("split"))
    return {q.qid: q.question for c in convs for q in c.questions}


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(prog="python -m benchmarks.judge_check", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("sheet", help="print the sampled answers to read by hand")
    a = sub.add_parser("agree", help="agreement of hand labels with the judge")
    for sp in (s, a):
        sp.add_argument("results", help="a bench run's results.jsonl")
    s.add_argument("--n", type=int, default=50)
    s.add_argument("--seed", type=int, default=0)
    a.add_argument("--labels", required=True, help='JSON: {"labels": {"<system>|<qid>": true|false, ...}, ...}')
    args = p.parse_args(argv)
    records = judged(args.results)
    if args.command == "sheet":
        keys = sample(records, args.n, args.seed)
        print(sheet(records, keys, _questions(Path(args.results).parent / "settings.json")))
        return {"keys": keys}
    labels = json.loads(Path(args.labels).read_text(encoding="utf-8"))["labels"]
    missing = sorted(k for k in labels if k not in records)
    if missing:
        raise SystemExit(f"{len(missing)} labelled answer(s) not judged in {args.results}: {', '.join(missing[:5])}")
    keys = sorted(labels)
    out = agreement([bool(records[k]["correct"]) for k in keys], [bool(labels[k]) for k in keys])
    lo, hi = out["interval"]
    print(f"hand labels: {out['n']}; agreement {100 * out['agreement']:.1f}% [{100 * lo:.1f}, {100 * hi:.1f}], "
          f"Cohen's kappa {out['kappa']:.2f}")
    print(f"judge CORRECT: hand CORRECT {out['judge_correct_hand_correct']}, hand WRONG "
          f"{out['judge_correct_hand_wrong']}; judge WRONG: hand CORRECT {out['judge_wrong_hand_correct']}, "
          f"hand WRONG {out['judge_wrong_hand_wrong']}")
    print(f"accuracy by the judge {100 * out['judge_accuracy']:.1f}%, by hand {100 * out['hand_accuracy']:.1f}%")
    return out


if __name__ == "__main__":
    main()
