"""Command line of the benchmark runner: `etamem bench DATASET FILE` and
`python -m benchmarks DATASET FILE` (the same arguments)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

EPILOG = """systems (keys; groups: baselines, views, ablations, diagnosis, packet, unified, fta-all, fta-paper, paper-to-default,
  all):
  full-context bm25-turns dense-turns hybrid-turns flat-amus etamem no-amus no-hierarchy
  no-fallback event-only affect-only time-only event+affect event+time affect+time
  mean-routing no-bm25 shared-text shared-affect unified-semantic unified-affective etamem-rrf
  previous-defaults no-flat-candidates no-context-impute long-turns-40 no-context turn-context-only no-dialogue
  no-speaker-boost no-self-boost bm25-ceiling wide-beam narrow-beam
  fta fta-fixed-window fta-plain-windows fta-session fta-turn-pair fta-no-links fta-no-time
  fta-no-affect fta-fact-only fta-question-only fta-no-rewrite fta-no-cue fta-no-aux fta-no-bm25
  fta-flat-packet etamem-as-turns etamem-packet etamem-over-fta
  (group packet, not in all: hybrid-turns etamem-packet etamem-as-turns, ETAMem's ranking read as the paper's
   packet and as its source turns only;
   group unified: unified-semantic unified-affective time-only, the paper's Table 5;
   group fta-all: hybrid-turns etamem and the fta systems up to fta-no-links, fta-no-cue,
   fta-no-bm25, fta-flat-packet, etamem-over-fta;
   group fta-paper: the FTA-Mem paper's Tables 6-8 and Fig. 3, see docs/fta-paper.md)
  ladder-0 ladder-1 ladder-2 ladder-3 ladder-4 ladder-5 ladder-6 ladder-7 ladder-8 ladder-9 ladder-10 ladder-11
  (group paper-to-default, not in all: from the paper's query-time settings to the run's own, one
   of the project's additions at a time; docs/presets.md)

Retrieval modes: by default each system returns --pool units (80 LoCoMo / 100 LongMemEval)
and recall@k counts their first k distinct source turns, so an ETAMem system routes the pool
across its views, not k. --budget K is the paper's setting: every system returns K units
(ETAMem routes exactly K) and recall@k counts the distinct turns of those K units.

Without an LLM only retrieval metrics are computed (full-context is skipped). With
--model (or ETAMEM_LLM_MODEL) and OPENAI_BASE_URL / OPENAI_API_KEY, AMUs are extracted by the
LLM and every system is also scored on answers (judge accuracy, token F1, BLEU-1).
A rerun with the same --out skips finished items; the LLM cache makes repeated calls free.

--roles (LoCoMo): speaker_a becomes `user`, speaker_b `assistant`, and their first names in
turns, photo captions and questions become "the user" / "the assistant" (whole words,
possessives included, "The user" where a sentence starts); nicknames ("Mel") are left as they
are and answers keep their text. Recorded in the run's settings: a named and a roles run need
separate --out directories (or --fresh).

locomo-plus FILE --locomo LOCOMO_FILE: each item's cue (two turns) is added to its LoCoMo
conversation's memory for its trigger only (the store's files put back after); retrieval only (recall_any@k /
recall_first@k of the cue turns, by relation type). The conversations are LoCoMo's spaces:
--stores can point at a LoCoMo run's stores to reuse them.

updates [FILE] --filler PATH [--split dev|test|all]: facts that change (the shipped scenarios by
default, memories of 8 scenarios with 6 PrefEval chats between the facts); retrieval only:
current_first / current_before_old of now-questions, old_in_5 / old_first of past-questions, per
kind. A LongMemEval-format FILE: its knowledge-update questions (no filler, no past question).
Default systems: bm25-turns dense-turns hybrid-turns etamem fta."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dataset", choices=["locomo", "locomo-plus", "longmemeval", "prefeval", "updates"])
    p.add_argument("file", nargs="?", default=None,
                   help="the official file, unchanged (locomo10.json, longmemeval_s.json, locomo_plus.json; "
                   "prefeval: the directory with explicit_preference/ and filtered_inter_turns.json; updates: "
                   "optional, a scenarios file (default: the shipped etamem/data/updates.json) or a LongMemEval-format "
                   "file, whose knowledge-update questions are used)")
    p.add_argument("--filler", default=None, metavar="PATH",
                   help="updates: PrefEval's directory or its filtered_inter_turns.json, the real chats placed "
                   "between the facts (required for scenarios)")
    p.add_argument("--filler-chats", type=int, default=None, metavar="N",
                   help="updates: filler chats per memory (default 6)")
    p.add_argument("--filler-turns", type=int, default=None, metavar="N",
                   help="updates: each filler chat cut to its first N messages (default: whole); with --filler-chats, "
                   "a memory short enough for a run that classifies every write with a local LLM")
    p.add_argument("--split", choices=["dev", "test", "all"], default=None,
                   help="updates: the scenarios' split (default dev; test is kept apart for the final evaluation)")
    p.add_argument("--locomo", default=None, metavar="LOCOMO_FILE",
                   help="locomo-plus: the LoCoMo file its items are stitched into (required; item "
                   "`locomo_conversation` indexes its samples)")
    p.add_argument("--out", default=None, help="results directory (default bench-results/<dataset>-<file stem>)")
    p.add_argument("--systems", nargs="+", default=None, metavar="NAME", help="system keys or groups (default: all)")
    p.add_argument("--ks", type=int, nargs="+", default=None, help="LoCoMo / PrefEval / LoCoMo-Plus recall@K values (default 10 20 25; PrefEval 1 5 10; "
                   "LoCoMo-Plus 5 10 20)")
    p.add_argument("--pool", type=int, default=None,
                   help="pool mode: units per system before cutting at K (default 80 / 100)")
    p.add_argument("--budget", type=int, default=None, metavar="K",
                   help="budget mode: every system returns K units (ETAMem routes exactly K; the paper's setting)")
    p.add_argument("--qa-turns", type=int, default=None,
                   help="distinct source turns in the answer context (default: --budget K, else config top_k, 20)")
    p.add_argument("--model", default=None, help="answer and extraction model (default $ETAMEM_LLM_MODEL)")
    p.add_argument("--base-url", default=None, help="OpenAI-compatible endpoint (default $OPENAI_BASE_URL)")
    p.add_argument("--judge-model", default=None, help="judge model (default: the answer model)")
    p.add_argument("--judge-base-url", default=None)
    p.add_argument("--no-llm", action="store_true", help="ignore any configured LLM (retrieval metrics only)")
    p.add_argument("--no-qa", action="store_true",
                   help="the LLM builds the stores (extraction, links: --set extractor=llm) but answers nothing: "
                   "retrieval metrics and construction cost only")
    p.add_argument("--limit", type=int, default=0, help="only the first N conversations (LongMemEval: questions; PrefEval: trials)")
    p.add_argument("--conversations", nargs="+", default=None, metavar="ID", help="LoCoMo sample ids / LongMemEval question ids")
    p.add_argument("--questions", nargs="+", default=None, metavar="QID",
                   help="question ids (LoCoMo: <sample_id>:q<index in qa>)")
    p.add_argument("--per-conversation", type=int, default=0, help="only the first N questions of each conversation")
    p.add_argument("--sessions", type=int, default=0, metavar="N",
                   help="LoCoMo: each conversation cut to its first N sessions, with only the questions whose "
                   "evidence lies in them (a memory short enough to build with a local LLM)")
    p.add_argument("--seed", type=int, default=None, help="Config seed (everything random is seeded)")
    p.add_argument("--stores", default=None, help="store directory (default <out>/stores); reused across runs")
    p.add_argument("--config", default=None, help="JSON file with Config values")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="Config override, JSON value (e.g. --set top_k=20 --set bm25_weight=0.1)")
    p.add_argument("--preset", choices=["default", "paper"], default="default",
                   help="start from a preset (docs/presets.md): paper = the seed's method (with --set method=fta, "
                        "FTA-Mem's; K per dataset as the paper) and, unless --pool / --budget, --budget K; "
                        "--config / --set on top; the report lists every setting that differs from the preset")
    p.add_argument("--sweep", action="append", default=None, metavar="NAME=V1,V2,...",
                   help="one system per value of a query-time setting (a Config field or beta, K, B, budget, lambda, "
                        "tau), e.g. --sweep beta=0.0,0.1,0.2,0.3; only these systems unless --systems; "
                        "plotted in sweep.png")
    p.add_argument("--tokenizer", default=None, metavar="MODEL|PATH|estimate",
                   help="evidence within the reader's budget: count each evidence turn's tokens to the reader with "
                   "this tokenizer (a known model such as qwen-0.5b, a .gguf path, or estimate) and report the share "
                   "within 500 / 1,000 / 2,000 tokens (docs/benchmarks.md)")
    p.add_argument("--context-tokens", type=int, default=None, metavar="T",
                   help="answers: every system's answer prompt cut to T tokens (the whole prompt, counted with "
                   "--tokenizer), filled in rank order, evidence first (docs/benchmarks.md, 'Answers with a local "
                   "reader'); default: --qa-turns distinct turns, no token cut")
    p.add_argument("--sample", type=int, default=0, metavar="N",
                   help="a seeded sample of N questions over the selected conversations, stratified by category "
                   "(--seed; a smaller N with the same seed gives a subset)")
    p.add_argument("--progress", action="store_true", help="show a progress bar")
    p.add_argument("--no-plots", action="store_true")
    p.add_argument("--fresh", action="store_true", help="discard results in --out made with other settings")
    p.add_argument("--roles", action="store_true",
                   help="LoCoMo: speakers as user / assistant, their first names replaced (see below)")


def options_from_args(args):
    from etamem.bench.runner import BenchOptions
    from etamem.config import parse_overrides

    overrides = parse_overrides(args.set, args.config)
    if not args.file:
        if args.dataset != "updates":
            raise ValueError(f"file: required for {args.dataset} (the official file)")
        from etamem.bench.updates import shipped_scenarios

        args.file = shipped_scenarios()
    return BenchOptions(dataset=args.dataset, file=args.file, out=args.out, systems=args.systems, ks=args.ks,
                        pool=args.pool, budget=args.budget, qa_turns=args.qa_turns, overrides=overrides,
                        model=args.model, base_url=args.base_url, judge_model=args.judge_model,
                        judge_base_url=args.judge_base_url,
                        no_llm=args.no_llm, limit=args.limit, conversations=args.conversations,
                        questions=args.questions, per_conversation=args.per_conversation, seed=args.seed,
                        stores=args.stores, progress=args.progress, plots=not args.no_plots, fresh=args.fresh,
                        roles=args.roles, locomo=args.locomo, filler=args.filler, split=args.split,
                        filler_chats=args.filler_chats, filler_turns=args.filler_turns,
                        preset=args.preset, sweep=args.sweep, budget_tokenizer=args.tokenizer,
                        context_tokens=args.context_tokens, sample=args.sample, sessions=args.sessions,
                        no_qa=args.no_qa)


def cmd_bench(args) -> int:
    from etamem.bench.report import markdown
    from etamem.bench.runner import run

    opts = options_from_args(args)
    summary = run(opts)
    out = Path(opts.out or Path("bench-results") / f"{opts.dataset}-{Path(opts.file).stem}")
    print(markdown(summary))
    plots = [p for p in ("categories.png", "recall_vs_k.png", "cost_accuracy.png", "routing_weights.png", "sweep.png")
             if opts.plots and (out / p).exists()]
    print(f"Results in {out}/ ({', '.join(['report.md', 'summary.json', 'results.jsonl'] + plots)}). "
          f"Wall time {summary['wall_s']:.1f} s.")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks", description="ETAMem benchmark runner",
                                epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p)
    args = p.parse_args(argv)
    from etamem.cli.common import setup_logging

    setup_logging(1)  # progress of the run (etamem at INFO), other libraries at WARNING
    try:
        return cmd_bench(args)
    except ValueError as exc:
        print(f"benchmarks: error: {exc}", file=sys.stderr)
        return 2
