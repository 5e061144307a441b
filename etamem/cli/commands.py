"""`etamem` command line: demo, ingest, search, ask, bench."""
from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from importlib import resources
from itertools import groupby

from etamem.cli.common import NewStoreUndo, note
from etamem.cli.common import config_from_args as _config  # noqa: F401  (importable from here, as before)
from etamem.cli.common import existing_store as _existing_store
from etamem.cli.common import open_memory as _memory
from etamem.cli.common import setup_logging as _setup_logging
from etamem.presets import PRESETS
from etamem.records import UnknownIdError


def polarity_counts(amus) -> dict[str, int]:
    counts = Counter(a.polarity for a in amus)
    return {p: counts.get(p, 0) for p in ("negative", "neutral", "positive")}


def _print_hits(hits, mem, space) -> None:
    from etamem.ingest.timeparse import format_date

    for rank, h in enumerate(hits, 1):
        print(f"  {rank:2d}. [{h.score:.3f}] ({format_date(h.amu.timestamp)}, {h.amu.polarity}) {h.amu.text}")
        for turn in mem.turns(space, turn_ids=list(h.source_turn_ids)):
            print(f"        <- {turn.turn_id} {turn.speaker}: {turn.text}")


# --- demo ---------------------------------------------------------------------------------
DEMO_PRESET = {"top_k": 10}  # the demo's answers use 10 units; --config / --set / --top-k override it
# a small local reader: the short answer prompt over fewer turns (docs/benchmarks.md, 'A short prompt
# for a small reader')
LOCAL_DEMO_PRESET = {"top_k": 5, "answer_style": "short"}


def cmd_demo(args) -> int:
    if getattr(args, "llm", "none") == "local":
        from etamem.cli.llm import local_server_for

        with local_server_for(args, args.llm_model) as llm_values:
            return run_demo(args, {**LOCAL_DEMO_PRESET, **llm_values})
    return run_demo(args, DEMO_PRESET)


def run_demo(args, preset: dict) -> int:
    doc = json.loads(resources.files("etamem.data").joinpath("demo_conversation.json").read_text(encoding="utf-8"))
    space = doc["space"]
    t0 = time.perf_counter()
    with _memory(args, args.store, preset=preset) as mem:
        print(f"ETAMem demo: {doc['title']}")
        print(f"{len(doc['turns'])} turns in {len({t['session_id'] for t in doc['turns']})} sessions; "
              f"store: {args.store or 'in memory'}\n")
        t_add = time.perf_counter()
        for _, session in groupby(doc["turns"], key=lambda t: t["session_id"]):
            mem.add(list(session), space=space)
        mem.end_session(space)
        per_turn = (time.perf_counter() - t_add) / len(doc["turns"])
        if mem.llm_queue is not None:  # the adds stored rule units; the model's land behind them
            print(f"Stored {len(doc['turns'])} turns ({per_turn:.2f} s per add, searchable at once); waiting for "
                  "the model's units (Memory.flush) ...")
            t_flush = time.perf_counter()
            mem.flush(space)
            queued = mem.stats(space)["extraction"]
            print(f"The model's units are in: {time.perf_counter() - t_flush:.1f} s behind the adds; "
                  f"{queued['queue']['landed']} turns by the model, {queued['queue']['kept_rules']} kept their "
                  f"rule units, {queued['queued_turns']} still queued\n")
        amus = mem.list(space)
        print(f"Extracted {len(amus)} AMUs with {type(mem.extractor).__name__} ({per_turn:.2f} s per turn); "
              f"affect tagger: {mem.affect_tagger.name}; text encoder: {mem.text_encoder.name}\n")
        views = mem.views(space)
        print("What each view holds:")
        for line in format_view_stats(views.shape()):
            print(f"  {line}")
        for name, title in (("event", "Event tree (neutral AMUs, text embeddings)"),
                            ("affect", "Affect tree (positive/negative AMUs, affective embeddings)")):
            tree = views.tree(name)
            print(f"{title}: {tree.active_rows} AMUs in {len(tree.leaves())} leaves")
            for leaf in tree.leaves()[:args.show]:
                texts = [tree.texts[r] for r in tree.members[leaf]]
                more = f" (+{len(texts) - 2} more)" if len(texts) > 2 else ""
                print(f"  leaf {leaf}: " + " | ".join(texts[:2]) + more)
        print("Time forest (month / ISO week / day / session):")
        forest = views.time
        for month in forest.roots:
            for week in forest.nodes[month].children:
                for day in forest.nodes[week].children:
                    for session in forest.nodes[day].children:
                        print(f"  {month[2:]} / {week[2:]} / {day[2:]} / {session[2:]}: "
                              f"{forest.nodes[session].count} AMUs")
        print()
        for q in doc["questions"]:
            ans = mem.answer(q["question"], space=space, now=q["now"], top_k=args.top_k)
            print(f"Q: {q['question']}")
            print(f"A: {ans.text}")
            if not ans.llm_used:
                print(f"   ({ans.note})")
            print("   evidence:")
            _print_hits(ans.hits[:3], mem, space)
            print()
    print(f"demo finished in {time.perf_counter() - t0:.1f} s")
    return 0


# --- ingest -------------------------------------------------------------------------------
def cmd_ingest(args) -> int:
    from tqdm import tqdm

    from etamem.ingest.datasets import read_conversations

    conversations = list(read_conversations(args.file, args.format))
    if args.limit:
        conversations = conversations[:args.limit]
    if getattr(args, "space", None):  # `etamem import --space S`: every message into S
        for conv in conversations:
            conv.space = args.space
    t_all = time.perf_counter()
    rows = []
    undo, mem = NewStoreUndo(args.store), None
    try:
        mem = _memory(args, args.store)
        fresh = _check_all(mem, conversations, args.replace)  # a bad turn anywhere stores nothing
    except BaseException:
        if mem is not None:
            mem.close()
        undo.undo()  # a refused ingest leaves no store behind where there was none
        raise
    with mem:
        for conv, (n_fresh, n_skipped) in zip(conversations, fresh):
            t0 = time.perf_counter()
            if conv.space in mem.spaces() and args.replace:
                _confirm_replace(args, mem, conv.space)
                mem.delete(space=conv.space)
            present = len(conv.turns) - n_skipped - n_fresh
            bar = tqdm(total=len(conv.turns), desc=conv.space, unit="turn", disable=args.no_progress or args.quiet,
                       file=sys.stderr)
            try:
                for _, session in groupby(conv.turns, key=lambda t: t.get("session_id") if isinstance(t, dict) else None):
                    session = list(session)
                    mem.add(session, space=conv.space)  # turns already stored (same id and content) are skipped
                    bar.update(len(session))
            except KeyboardInterrupt:
                bar.close()
                stored = len(mem.turns(conv.space)) if conv.space in mem.spaces() else 0
                print(f"\ninterrupted: {conv.space} has {stored} of its {len(conv.turns)} turns stored; run the same "
                      f"command again to add the rest", file=sys.stderr)
                return 130
            mem.end_session(conv.space)
            bar.close()
            amus = mem.list(conv.space)
            pol = polarity_counts(amus)
            rows.append((conv.space, len(conv.turns) - n_skipped, len(amus), pol, time.perf_counter() - t0))
            skipped = f", skipped {n_skipped}: no text or a system message" if n_skipped else ""
            print(f"{conv.space}: turns {len(conv.turns) - n_skipped} (added {n_fresh}, already present "
                  f"{present}{skipped}), AMUs {len(amus)}, polarity neg {pol['negative']} / neu {pol['neutral']} / "
                  f"pos {pol['positive']}, {rows[-1][4]:.1f} s")
            for line in format_view_stats(mem.stats(conv.space)["views"]):
                print(f"  {line}")
    if rows:
        total = Counter()
        for _, n_turns, n_amus, pol, _ in rows:
            total.update({"turns": n_turns, "amus": n_amus, **pol})
        print(f"total: {len(rows)} conversations, turns {total['turns']}, AMUs {total['amus']}, polarity neg "
              f"{total['negative']} / neu {total['neutral']} / pos {total['positive']}, "
              f"wall {time.perf_counter() - t_all:.1f} s")
    return 0


def _check_all(mem, conversations, replace: bool) -> list[tuple[int, int]]:
    """Validate every turn of every conversation before anything is stored (ValueError naming
    the file and line, or record and turn, and the field); per conversation, (the number of its
    turns not yet stored (all of them with `replace`), the number of its items skipped: chat
    messages without text or of a system role)."""
    from etamem.ingest.inputs import space_as_stored

    counts = []
    for conv in conversations:
        labels = conv.labels or [f"{conv.space}: turn {i}" for i in range(len(conv.turns))]
        try:
            conv.space = space_as_stored(conv.space, mem.store.has_space)
        except ValueError as exc:
            raise ValueError(f"{labels[0] if labels else conv.space}: {exc}") from None
        kept = len(mem.check(conv.turns, space=conv.space, labels=labels, new_space=True))
        fresh = kept if replace else len(mem.check(conv.turns, space=conv.space, labels=labels))
        counts.append((fresh, len(conv.turns) - kept))
    return counts


def _confirm_replace(args, mem, space: str) -> None:
    """`--replace` deletes a stored space: say what, and ask (or require --yes off a terminal)."""
    what = f"{space}: --replace deletes its {len(mem.turns(space))} turns and {len(mem.list(space))} units"
    if args.yes:
        note(args, what)
        return
    if not sys.stdin.isatty():
        raise ValueError(f"{what}; add --yes to confirm (not asked: no terminal)")
    if input(f"{what}. Delete them? [y/N] ").strip().lower() not in ("y", "yes"):
        raise ValueError(f"{space}: not replaced (answered no)")


def format_view_stats(views: dict) -> list[str]:
    """One line per view: AMUs, depth, leaves, fan-out and thresholds (semantic trees) or
    months/weeks/days/sessions (time)."""
    lines = []
    for name in ("event", "affect"):
        v = views[name]
        t = v["thresholds"]
        lines.append(
            f"{name:6s} AMUs {v['amus']:5d}  depth {v['depth']}  leaves {v['leaves']:4d}  nodes {v['nodes']:4d}  "
            f"fan-out {v['mean_fanout']:.1f}  tau_new {t['tau_new']:.3f}  tau_coh {t['tau_coh']:.3f}  "
            f"tau_merge {t['tau_merge']:.3f}  M_max {t['m_max']:.1f}  ({'calibrated' if v['calibrated'] else 'warm-up'})")
    v = views["time"]
    lines.append(f"time   AMUs {v['amus']:5d}  months {v['months']}  weeks {v['weeks']}  days {v['days']}  "
                 f"sessions {v['sessions']}")
    return lines


def cmd_stats(args) -> int:
    with _memory(args, _existing_store(args.store)) as mem:
        spaces = [args.space] if args.space else mem.spaces()
        report = [mem.stats(space) for space in spaces]
        if args.json:
            print(json.dumps(report, indent=1))
        else:
            for r in report:
                print(f"{r['space']}: turns {r['turns']}, AMUs {r['amus']}")
                for line in format_view_stats(r["views"]):
                    print(f"  {line}")
    return 0


# --- search / ask -------------------------------------------------------------------------
def cmd_search(args) -> int:
    from etamem.inspection.reports import resolve_space

    with _memory(args, _existing_store(args.store)) as mem:
        args.space = resolve_space(mem, args.space)  # may be left out when the store holds one space
        hits = mem.search(args.query, space=args.space, top_k=args.top_k, now=args.now)
        if args.json:
            print(json.dumps([{"amu_id": h.amu.amu_id, "text": h.amu.text, "score": h.score, "similarity": h.similarity,
                               "timestamp": h.amu.timestamp.isoformat(), "views": list(h.views),
                               "source_turn_ids": list(h.source_turn_ids)} for h in hits], indent=1))
        else:
            _print_hits(hits, mem, args.space)
    return 0


def cmd_ask(args) -> int:
    from etamem.inspection.reports import resolve_space

    with _memory(args, _existing_store(args.store)) as mem:
        args.space = resolve_space(mem, args.space)
        ans = mem.answer(args.question, space=args.space, now=args.now, top_k=args.top_k)
        print(ans.text)
        if ans.note:
            print(f"({ans.note})")
        print("evidence:")
        _print_hits(ans.hits[:args.show], mem, args.space)
    return 0


# --- inspection: inspect / trace / export / viz (etamem.inspection.reports, render, viz) -------------------
def _console():
    from rich.console import Console

    return Console(soft_wrap=False)


def cmd_inspect(args) -> int:
    from etamem.inspection import reports as ins

    with _memory(args, _existing_store(args.store)) as mem:
        space = ins.resolve_space(mem, args.space)
        if args.links:
            from etamem.fta.inspection import fact_chains, link_infos, render_chains, render_links

            infos, chains = link_infos(mem, space, args.amu), fact_chains(mem, space, args.amu)
            if args.json:
                print(json.dumps({"links": [i.to_dict() for i in infos],
                                  "chains": [[s.to_dict() for s in c] for c in chains]}, indent=1, ensure_ascii=False))
            else:
                _console().print(render_links(infos))
                if chains:
                    print(f"Facts that changed ({len(chains)}), oldest version first:\n{render_chains(chains)}")
            return 0
        if args.amu:
            data = ins.amu_paths(mem, space, args.amu)
            if args.json:
                print(json.dumps(data.to_dict(), indent=1, ensure_ascii=False))
            else:
                from etamem.inspection.render import render_paths

                _console().print(render_paths(data))
            return 0
        views = [args.view] if args.view else list(ins.VIEWS)
        depth = None if args.depth <= 0 else args.depth
        nodes = [ins.subtree(mem, space, v, node=args.node, depth=depth) for v in views]
        if args.json:
            print(json.dumps([n.to_dict() for n in nodes], indent=1, ensure_ascii=False))
        else:
            from etamem.inspection.render import render_tree

            console = _console()
            for n in nodes:
                console.print(render_tree(n, max_members=args.members))
    return 0


def cmd_trace(args) -> int:
    from etamem.inspection.reports import trace_query

    with _memory(args, _existing_store(args.store)) as mem:
        tr = trace_query(mem, args.question, args.space, top_k=args.top_k, now=args.now)
        if args.json:
            print(json.dumps(tr.to_dict(), indent=1, ensure_ascii=False))
        else:
            from etamem.inspection.render import render_trace

            _console().print(render_trace(tr, max_candidates=args.show))
    return 0


def cmd_reindex(args) -> int:
    """Re-encode every space with the configured models (after changing the text encoder or the
    affect tagger, which a store otherwise refuses) and record them as the store's models."""
    with _memory(args, _existing_store(args.store)) as mem:
        t0 = time.perf_counter()
        before = mem.store.models()
        counts = mem.reindex()
        after = mem.store.models()
    for space, c in counts.items():
        print(f"{space}: {c['units']} units, {c['turns']} turns re-encoded ({c['moved']} moved between views)")
    print(f"models: {before or '(none recorded)'} -> {after} in {time.perf_counter() - t0:.1f} s")
    return 0


def cmd_export(args) -> int:
    from etamem.inspection.reports import export_store

    if args.format == "chat":
        from etamem.cli.data import export_chat

        return export_chat(args)

    with _memory(args, _existing_store(args.store)) as mem:
        text = json.dumps(export_store(mem, [args.space] if args.space else None).to_dict(), ensure_ascii=False,
                          indent=args.indent)
    if args.out:
        from etamem.output import atomic_write

        atomic_write(args.out, text + "\n")  # a text file ends with a newline, as the printed export
        note(args, f"wrote {args.out} ({len(text) / 1e6:.1f} MB)")
    else:
        print(text)
    return 0


def cmd_viz(args) -> int:
    from etamem.inspection.reports import resolve_space
    from etamem.inspection.viz import write_all

    with _memory(args, _existing_store(args.store)) as mem:
        space = resolve_space(mem, args.space)
        for path in write_all(mem, space, args.out, method=args.projection, plots=not args.no_plots):
            print(path)
    return 0


def cmd_stats_detail(args) -> int:
    from etamem.inspection.reports import space_stats

    with _memory(args, _existing_store(args.store)) as mem:
        report = [space_stats(mem, s) for s in ([args.space] if args.space else mem.spaces())]
        if args.json:
            print(json.dumps([r.to_dict() for r in report], indent=1))
        else:
            from etamem.inspection.render import render_stats

            console = _console()
            for r in report:
                console.print(render_stats(r))
    return 0


def add_inspection_commands(sub, common, stats_parser) -> None:
    stats_parser.add_argument("--detail", action="store_const", const=cmd_stats_detail, dest="func",
                              help="histograms, cohesion and threshold history (etamem.inspection.reports)")

    def store_space(sp, what):
        sp.add_argument("store")
        sp.add_argument("--space", default=None, help=f"space to {what} (default: the store's only space)")

    i = sub.add_parser("inspect", help="show a view's tree (or an AMU's path with --amu)")
    store_space(i, "show")
    i.add_argument("--view", choices=["event", "affect", "time"], default=None, help="default: all three")
    i.add_argument("--depth", type=int, default=3, help="levels below the start node (0: all)")
    i.add_argument("--node", default=None, help="start node id (default: the root)")
    i.add_argument("--members", type=int, default=3, help="AMUs shown per leaf")
    i.add_argument("--amu", default=None, help="show where this AMU sits in each view")
    i.add_argument("--links", action="store_true", help="relation links of the space (of the --amu unit) and the facts that changed")
    i.add_argument("--json", action="store_true")
    common(i)
    i.set_defaults(func=cmd_inspect)

    t = sub.add_parser("trace", help="why a query returned its hits: routing, beams, hits")
    t.add_argument("store")
    t.add_argument("question")
    t.add_argument("--space", default=None, help="default: the store's only space")
    t.add_argument("--top-k", type=int, default=None)
    t.add_argument("--now", default=None, help="question date")
    t.add_argument("--show", type=int, default=5, help="beam candidates shown per level")
    t.add_argument("--json", action="store_true")
    common(t)
    t.set_defaults(func=cmd_trace)

    e = sub.add_parser("export", help="everything a store holds, as JSON; or its turns as chat JSONL (--format chat)")
    e.add_argument("store")
    e.add_argument("--format", choices=["json", "chat"], default="json",
                   help="json: turns, units, views and links; chat: the turns as `ingest --format chat` / "
                        "`import` read them (one message per line)")
    e.add_argument("--space", default=None, help="one space (default: all)")
    e.add_argument("--out", default=None, help="file to write (default: stdout)")
    e.add_argument("--indent", type=int, default=None)
    common(e)
    e.set_defaults(func=cmd_export)

    z = sub.add_parser("viz", help="HTML page with the three views and PNG plots")
    store_space(z, "draw")
    z.add_argument("--out", required=True, help="output directory")
    z.add_argument("--projection", choices=["pca", "tsne"], default="pca")
    z.add_argument("--no-plots", action="store_true", help="HTML page only")
    common(z)
    z.set_defaults(func=cmd_viz)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="etamem", description="ETAMem: Event-Time-Affect memory for LLM agents")
    p.add_argument("-v", "--verbose", action="count", default=1,
                   help="debug logging (the default logs progress at info level)")
    p.add_argument("-q", "--quiet", action="store_true", help="errors only (no progress, no warnings)")
    sub = p.add_subparsers(dest="command", required=True)

    def common(sp):
        sp.add_argument("--config", help="JSON file with Config values")
        sp.add_argument("--set", action="append", metavar="KEY=VALUE", help="override one Config value")
        sp.add_argument("--preset", choices=PRESETS, default=None,
                        help="start from a preset: default (the project's) or paper (the seed's method; with "
                             "--set method=fta, FTA-Mem's); --config and --set apply on top (docs/presets.md)")

    d = sub.add_parser("demo", help="ingest the bundled sample conversation and answer questions (offline)")
    d.add_argument("--store", default=None, help="store directory (default: in memory)")
    d.add_argument("--show", type=int, default=5, help="AMUs shown per view")
    d.add_argument("--top-k", type=int, default=None, help="units per answer (default 10, or the config's top_k)")
    d.add_argument("--llm", choices=["none", "local"], default="none",
                   help="local: extraction and answers by a local model (etamem llm serve's server, started "
                        "for the demo; pip install -e '.[local-llm]'); none: offline (or the LLM the config names)")
    d.add_argument("--llm-model", default=None, help="with --llm local: a .gguf file or a known model name")
    common(d)
    d.set_defaults(func=cmd_demo)

    from etamem.ingest.datasets import FORMATS

    i = sub.add_parser("ingest", help="ingest a conversation file into a store")
    i.add_argument("file")
    i.add_argument("--format", required=True, choices=list(FORMATS),
                   help="locomo, longmemeval, jsonl (one turn per line) or chat (one chat message per line: "
                        "role, content, optional name, id, timestamp, session_id; optional space)")
    i.add_argument("--store", required=True, help="store directory")
    i.add_argument("--limit", type=int, default=0, help="only the first N conversations")
    i.add_argument("--replace", action="store_true",
                   help="delete conversations already in the store and ingest them again (asks; --yes off a terminal)")
    i.add_argument("--yes", action="store_true", help="confirm --replace without asking")
    i.add_argument("--no-progress", action="store_true")
    common(i)
    i.set_defaults(func=cmd_ingest)

    s = sub.add_parser("search", help="search a store")
    s.add_argument("store")
    s.add_argument("query")
    s.add_argument("--space", default=None, help="default: the store's only space")
    s.add_argument("--top-k", type=int, default=None, help="hits (default: the config's top_k)")
    s.add_argument("--now", default=None, help="question date")
    s.add_argument("--json", action="store_true")
    common(s)
    s.set_defaults(func=cmd_search)

    st = sub.add_parser("stats", help="per-view statistics of a saved store")
    st.add_argument("store")
    st.add_argument("--space", default=None, help="one space (default: all)")
    st.add_argument("--json", action="store_true")
    common(st)
    st.set_defaults(func=cmd_stats)

    a = sub.add_parser("ask", help="answer a question from a store")
    a.add_argument("store")
    a.add_argument("question")
    a.add_argument("--space", default=None, help="default: the store's only space")
    a.add_argument("--top-k", type=int, default=None)
    a.add_argument("--now", default=None, help="question date")
    a.add_argument("--show", type=int, default=5, help="evidence hits shown")
    common(a)
    a.set_defaults(func=cmd_ask)
    r = sub.add_parser("reindex", help="re-encode a store with the configured text encoder and affect tagger")
    r.add_argument("store")
    common(r)
    r.set_defaults(func=cmd_reindex)
    add_inspection_commands(sub, common, st)
    from etamem.cli.data import register as add_data_commands

    add_data_commands(sub, common, cmd_ingest)
    add_serve_commands(sub, common)
    from etamem.cli.llm import add_llm_commands

    add_llm_commands(sub)
    add_bench_parser(sub)
    return p


def add_serve_commands(sub, common) -> None:
    from etamem.cli.serve import add_serve_commands as add

    add(sub, common)


def add_bench_parser(sub) -> None:
    """`etamem bench DATASET FILE`: the benchmark runner (etamem/bench/)."""
    from etamem.cli.bench import EPILOG, add_arguments, cmd_bench

    b = sub.add_parser("bench", help="benchmark on LoCoMo / LongMemEval-S (retrieval, QA, ablations, cost, plots)",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(b)
    b.set_defaults(func=cmd_bench)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _setup_logging(-1 if args.quiet else args.verbose)
    try:
        return args.func(args)
    except (ValueError, UnknownIdError) as exc:  # a user mistake: bad value, unknown id or space
        print(f"etamem: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("etamem: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into e.g. `head`
        sys.stderr.close()
        return 0
    except Exception as exc:
        status = _said_plainly(exc)
        if status is None:
            raise
        return status


def _said_plainly(exc: Exception) -> int | None:
    """For a file or store failure, print it in one line and return the exit status (2: a full
    disk, a condition the user fixes; 1: others); None for any other error."""
    from etamem.store.disk_full import DISK_FULL, database_errors, is_disk_full

    if not isinstance(exc, (OSError, *database_errors())):
        return None
    if is_disk_full(exc):
        print(f"etamem: error: {DISK_FULL}: this command's last write was not stored (what was acknowledged "
              "before is); free space and run it again", file=sys.stderr)
        return 2
    if isinstance(exc, OSError):  # a file that cannot be read or written
        print(f"etamem: error: {exc}", file=sys.stderr)
        return 1
    # the store could not be read or written: a lost server, a damaged file
    print(f"etamem: error: the store failed: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__} "
          f"(what was acknowledged before is stored; run the command again once the cause is fixed)", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
