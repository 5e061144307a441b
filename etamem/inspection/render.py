"""Terminal rendering (rich) of the data from `etamem.inspection.reports`: trees, statistics, traces, paths.

Each function returns a rich renderable; print it with `rich.console.Console().print(...)`.
"""
from __future__ import annotations

from etamem.inspection.reports import AMUPath, Distribution, NodeInfo, QueryTrace, SpaceStats, ViewStats, snippet
from etamem.install_hints import install_hint

BAR = "█"


def _rich():
    try:
        import rich  # noqa: F401
        from rich import box
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text
        from rich.tree import Tree
    except ImportError as exc:  # pragma: no cover - rich is a base dependency
        raise ImportError(f"terminal rendering needs rich: {install_hint('inspect')}") from exc
    return box, Group, Table, Text, Tree


def _line(text: str = "", style: str | None = None):
    """One terminal line: cut with an ellipsis at the console width instead of wrapping."""
    _, _, _, Text, _ = _rich()
    return Text(text, style=style or "", no_wrap=True, overflow="ellipsis")


def _date(iso: str | None) -> str:
    return (iso or "")[:10]


def _node_label(node: NodeInfo, width: int):
    _, _, _, Text, _ = _rich()
    t = Text(no_wrap=True, overflow="ellipsis")
    if node.kind == "forest":
        t.append("Time forest", style="bold")
    elif node.view == "time":
        t.append(f"{node.node_id}", style="bold cyan")
    else:
        style = {"root": "bold", "inner": "bold blue", "leaf": "bold green"}[node.kind]
        t.append(f"{node.kind} {node.node_id}", style=style)
    t.append(f"  {node.count} AMUs", style="dim")
    if node.n_children and node.kind != "leaf":
        t.append(f", {node.n_children} children", style="dim")
    if node.cohesion is not None and node.count >= 2:
        t.append(f", cohesion {node.cohesion:.2f}", style="dim")
    if node.truncated:
        t.append("  …", style="yellow")
    if node.summary and node.kind not in ("leaf", "session"):
        t.append(f"\n{snippet(node.summary, width)}", style="italic")
    return t


def render_tree(node: NodeInfo, max_members: int = 3, width: int = 100):
    """A rich Tree of a subtree: node id, kind, AMU count, cohesion (leaves), summary (inner
    nodes) and up to `max_members` AMUs per leaf (date, polarity, text)."""
    _, _, _, Text, Tree = _rich()

    def add(parent, n: NodeInfo):
        branch = parent.add(_node_label(n, width))
        fill(branch, n)

    def fill(branch, n: NodeInfo):
        for c in n.children:
            add(branch, c)
        for a in n.members[:max_members]:
            line = _line()
            line.append(f"{_date(a.timestamp)} ", style="dim")
            line.append(f"{a.polarity[:3]} ", style={"positive": "green", "negative": "red"}.get(a.polarity, "dim"))
            line.append(snippet(f"{a.speaker}: {a.text}", width))
            branch.add(line)
        if len(n.members) > max_members:
            branch.add(_line(f"(+{len(n.members) - max_members} more AMUs)", style="dim"))

    title = {"event": "Event tree ", "affect": "Affect tree ", "time": "Time forest "}[node.view]
    if node.kind == "forest":
        title = ""  # the label says it already
    root = Tree(Text(title, style="bold underline") + _node_label(node, width))
    fill(root, node)
    return root


def _hist_lines(pairs: list[list[int]], width: int = 30) -> list[str]:
    if not pairs:
        return ["(none)"]
    top = max(c for _, c in pairs)
    return [f"{k:>4d} {BAR * max(1, round(width * c / top)):<{width}} {c}" for k, c in pairs]


def _dist_lines(d: Distribution | None, width: int = 30) -> list[str]:
    if d is None or not d.n:
        return ["(no leaf with 2+ AMUs)"]
    top = max(d.counts) or 1
    q = d.quantiles
    lines = [f"n {d.n}, min {q['min']:.2f}, median {q['median']:.2f}, max {q['max']:.2f}"]
    for lo, hi, c in zip(d.edges, d.edges[1:], d.counts):
        if c:
            lines.append(f"{lo:5.2f}–{hi:4.2f} {BAR * max(1, round(width * c / top)):<{width}} {c}")
    return lines


def render_view_stats(v: ViewStats):
    box, Group, Table, Text, _ = _rich()
    t = Table(title=f"{v.view}", box=box.SIMPLE, show_header=False, title_justify="left", title_style="bold")
    t.add_column("what", style="dim")
    t.add_column("value")
    t.add_row("AMUs / nodes / leaves", f"{v.amus} / {v.nodes} / {v.leaves}")
    t.add_row("depth", f"{v.depth} (nodes per level: {', '.join(map(str, v.nodes_per_depth))})")
    t.add_row("fan-out", f"mean {v.mean_fanout:.1f}, max {v.max_fanout}")
    t.add_row("leaf sizes" if v.view != "time" else "session sizes", "\n".join(_hist_lines(v.leaf_size_hist)))
    if v.thresholds is not None:
        t.add_row("cohesion", "\n".join(_dist_lines(v.cohesion)))
        cur, ini = v.thresholds, v.initial_thresholds or {}
        t.add_row("thresholds", "  ".join(f"{k} {cur[k]:.3f} (init {ini.get(k, float('nan')):.3f})" for k in cur))
        state = "calibrated" if v.calibrated else "warm-up"
        t.add_row("calibration", f"{state}, {v.observations} observations, {len(v.threshold_history)} updates, "
                                 f"{v.maintenance_steps} maintenance steps")
        if v.threshold_history:
            rows = v.threshold_history[-5:]
            t.add_row("last updates", "\n".join(
                f"step {h['step']:>3}: otsu {h['otsu']:.3f} tau_new {h['tau_new']:.3f} tau_coh {h['tau_coh']:.3f} "
                f"tau_merge {h['tau_merge']:.3f} M_max {h['m_max']:.1f}" for h in rows))
    if v.levels:
        t.add_row("levels", ", ".join(f"{k}s {n}" for k, n in v.levels.items()))
    return t


def render_stats(s: SpaceStats):
    _, Group, _, Text, _ = _rich()
    head = Text(f"{s.space}: turns {s.turns}, AMUs {s.amus} (neg {s.polarity['negative']} / neu "
                f"{s.polarity['neutral']} / pos {s.polarity['positive']})", style="bold")
    return Group(head, *(render_view_stats(s.views[v]) for v in ("event", "affect", "time")))


def render_trace(tr: QueryTrace, max_candidates: int = 5, width: int = 80):
    """Routing table, the beam per level for each view, and the hits with source turns."""
    box, Group, Table, Text, Tree = _rich()
    head = Text(f"Query: {tr.query}", style="bold")
    info = Text(f"space {tr.space}, top_k {tr.top_k}, routing {tr.routing}"
                + (f", now {tr.now}" if tr.now else "")
                + (f", window {_date(tr.window[0])} – {_date(tr.window[1])}" if tr.window else "")
                + (", raw-turn fallback used" if tr.fallback_used else ""), style="dim")
    routing = Table(box=box.SIMPLE, title="Routing", title_justify="left")
    for col in ("view", "entropy", "weight", "budget", "levels", "found", "nodes scored", "units scored"):
        routing.add_column(col, justify="left" if col == "view" else "right")
    for name, v in tr.views.items():
        routing.add_row(name, "-" if v.entropy is None else f"{v.entropy:.3f}", f"{v.weight:.3f}", str(v.budget),
                        str(len(v.levels)), str(len(v.found)), str(v.nodes_scored), str(v.units_scored))
    if tr.work:
        w = tr.work
        info.append(f"\nwork: {w['nodes_scored']} nodes, {w['units_scored']} units ({w['context_scored']} in turn "
                    f"context), {w['raw_turns']} raw turns searched"
                    + (" (exact scan)" if w["raw_turns_scanned_exactly"] else " (HNSW pool + BM25)"))
    beams = Tree(Text("Beam search", style="bold"))
    for name, v in tr.views.items():
        branch = beams.add(_line(f"{name} (budget {v.budget})", style="bold"))
        if not v.levels:
            branch.add(_line("not searched (budget 0 or empty view)", style="dim"))
        for i, level in enumerate(v.levels):
            lv = branch.add(_line(f"level {i + 1}: {len(level)} kept", style="cyan"))
            for c in level[:max_candidates]:
                lv.add(_line(f"{c.kind} {c.node_id} ({c.count}) score {c.score:.3f} = cos {c.cos:.3f} / "
                            f"bm25n {c.bm25n:.2f}  {snippet(c.label, width - 40)}"))
            if len(level) > max_candidates:
                lv.add(_line(f"(+{len(level) - max_candidates} more)", style="dim"))
    hits = Tree(Text(f"Hits ({len(tr.hits)})", style="bold"))
    for h in tr.hits:
        node = hits.add(_line(f"{h.rank:2d}. [{h.score:.3f}] {'+'.join(h.views)} {_date(h.amu.timestamp)} "
                             f"{snippet(h.amu.text, width)}"))
        for t in h.source_turns:
            node.add(_line(f"<- {t.turn_id} {t.speaker}: {snippet(t.text, width)}", style="dim"))
    return Group(head, info, routing, beams, hits)


def render_paths(p: AMUPath, width: int = 80):
    _, Group, _, Text, Tree = _rich()
    root = Tree(_line(f"{p.amu.amu_id} ({p.amu.polarity}, {_date(p.amu.timestamp)}): {snippet(p.amu.text, width)}",
                     style="bold"))
    for view, steps in p.paths.items():
        if steps is None:
            root.add(_line(f"{view}: not in this view", style="dim"))
            continue
        branch = root.add(_line(f"{view}", style="bold"))
        for s in steps:  # root first, one line per node, nested
            branch = branch.add(_line(f"{s.kind} {s.node_id} ({s.count} AMUs)"
                                      + (f"  {snippet(s.summary, width)}" if s.summary else "")))
    return root
