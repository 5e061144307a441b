"""Inspection of a space's memory: what the views hold, where an AMU sits, why it was retrieved.

Everything here returns plain dataclasses (`.to_dict()` gives JSON-ready data,
`Cls.from_dict(d)` reads it back); rendering lives in `etamem.inspection.render` (terminal) and
`etamem.inspection.viz` (HTML page and PNG plots).

    stats = space_stats(mem, "conv-26")              # per-view shape, histograms, thresholds
    node = subtree(mem, "conv-26", "event", depth=2)  # a subtree with summaries and AMUs
    where = amu_paths(mem, "conv-26", "D1:3#0")       # root-to-leaf path in each view
    trace = trace_query(mem, "Where does Ana live?", "conv-26")  # routing, beams, hits
    dump = export_store(mem)                          # everything above for every space
"""
from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np

from etamem.install_hints import install_hint
from etamem.kernels import cohesion_from_sum
from etamem.records import AMU, Turn

VIEWS = ("event", "affect", "time")
EXPORT_FORMAT = "etamem-export"
EXPORT_VERSION = 1
FOREST_ROOT = "time"  # id of the synthetic node above the Time forest's months


# --- generic (de)serialisation ------------------------------------------------------------------
def _load(tp, value):
    """Build a value of type `tp` (dataclass, list[X], dict[str, X], X | None, scalar) from JSON data."""
    if value is None:
        return None
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        return _load(inner[0], value) if len(inner) == 1 else value
    if origin is list:
        (arg,) = typing.get_args(tp) or (Any,)
        return [_load(arg, v) for v in value]
    if origin is dict:
        _, arg = typing.get_args(tp) or (str, Any)
        return {k: _load(arg, v) for k, v in value.items()}
    if dataclasses.is_dataclass(tp):
        return tp.from_dict(value)
    return value


class _Data:
    """Mixin: `to_dict()` (JSON-ready) and `from_dict()` (its inverse) for the dataclasses below."""

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict):
        hints = typing.get_type_hints(cls)
        return cls(**{f.name: _load(hints[f.name], data[f.name]) for f in dataclasses.fields(cls) if f.name in data})


# --- data types ----------------------------------------------------------------------------------
@dataclass
class AMUInfo(_Data):
    amu_id: str
    text: str
    speaker: str
    timestamp: str  # ISO 8601
    session_id: str
    polarity: str
    source_turn_ids: list[str]
    polarity_scores: list[float] = field(default_factory=list)
    status: str = "active"

    @classmethod
    def of(cls, amu: AMU) -> "AMUInfo":
        return cls(amu.amu_id, amu.text, amu.speaker, amu.timestamp.isoformat(), amu.session_id, amu.polarity,
                   list(amu.source_turn_ids), [float(s) for s in amu.polarity_scores], amu.status)


@dataclass
class TurnInfo(_Data):
    turn_id: str
    session_id: str
    speaker: str
    text: str
    timestamp: str  # ISO 8601

    @classmethod
    def of(cls, turn: Turn) -> "TurnInfo":
        return cls(turn.turn_id, turn.session_id, turn.speaker, turn.text, turn.timestamp.isoformat())


@dataclass
class Distribution(_Data):
    """Values summarised: count, quantiles and a histogram (`edges` has len(counts) + 1)."""

    n: int
    quantiles: dict[str, float]  # min, p25, median, p75, max
    edges: list[float]
    counts: list[int]

    @classmethod
    def of(cls, values, bins: int = 10, value_range: tuple[float, float] | None = None) -> "Distribution":
        v = np.asarray(values, dtype=np.float64)
        if v.size == 0:
            return cls(0, {}, [], [])
        q = np.percentile(v, [0, 25, 50, 75, 100])
        counts, edges = np.histogram(v, bins=bins, range=value_range)
        return cls(int(v.size), dict(zip(("min", "p25", "median", "p75", "max"), map(float, q))),
                   [float(e) for e in edges], [int(c) for c in counts])


@dataclass
class ViewStats(_Data):
    """Shape of one view. Semantic trees fill the threshold fields; the Time forest `levels`."""

    view: str
    amus: int
    nodes: int
    leaves: int
    depth: int
    mean_fanout: float
    max_fanout: int
    fanout_hist: list[list[int]]  # [children, inner nodes with that many]
    leaf_size_hist: list[list[int]]  # [AMUs in a leaf (Time: session), leaves with that many]
    nodes_per_depth: list[int]  # index 0 = root (Time: months)
    cohesion: Distribution | None = None  # mean pairwise cosine of leaves with >= 2 AMUs
    thresholds: dict[str, float] | None = None
    initial_thresholds: dict[str, float] | None = None
    calibrated: bool | None = None
    observations: int | None = None
    threshold_history: list[dict[str, float]] = field(default_factory=list)
    maintenance_steps: int = 0
    counters: dict[str, int] = field(default_factory=dict)
    levels: dict[str, int] = field(default_factory=dict)


@dataclass
class SpaceStats(_Data):
    space: str
    turns: int
    amus: int
    polarity: dict[str, int]
    views: dict[str, ViewStats]


@dataclass
class NodeInfo(_Data):
    """One node with its subtree. kind: root / inner / leaf (semantic trees), forest / month /
    week / day / session (Time). `children` is empty past the depth limit (`truncated`)."""

    view: str
    node_id: str
    kind: str
    depth: int
    count: int
    n_children: int
    summary: str | None = None
    cohesion: float | None = None
    start: str | None = None
    end: str | None = None
    children: list["NodeInfo"] = field(default_factory=list)
    members: list[AMUInfo] = field(default_factory=list)
    truncated: bool = False

    def walk(self):
        """This node and every node below it that is included, depth first."""
        yield self
        for c in self.children:
            yield from c.walk()


@dataclass
class PathStep(_Data):
    node_id: str
    kind: str
    count: int
    summary: str | None = None


@dataclass
class AMUPath(_Data):
    """Root-to-leaf path of an AMU in each view (None: the AMU is not in that view)."""

    amu: AMUInfo
    paths: dict[str, list[PathStep] | None]


@dataclass
class Candidate(_Data):
    node_id: str
    kind: str
    count: int
    score: float
    cos: float
    bm25n: float
    label: str


@dataclass
class ViewTraceInfo(_Data):
    view: str
    entropy: float | None
    weight: float
    budget: int
    levels: list[list[Candidate]]  # the beam kept at each level, best first
    leaves: list[str]  # the leaves whose AMUs were scored
    found: list[list]  # [amu_id, score], best first
    nodes_scored: int = 0  # work: nodes scored over all levels
    units_scored: int = 0  # AMUs of the final leaves scored
    context_scored: int = 0  # of those, scored with their source turns in context


@dataclass
class HitInfo(_Data):
    rank: int
    score: float
    views: list[str]
    amu: AMUInfo
    source_turns: list[TurnInfo]


@dataclass
class QueryTrace(_Data):
    query: str
    space: str
    top_k: int
    now: str | None
    routing: str
    window: list[str] | None
    fallback_used: bool
    budgets: dict[str, int]
    views: dict[str, ViewTraceInfo]
    hits: list[HitInfo]
    work: dict[str, int] = field(default_factory=dict)  # units scored per stage (`trace_query`)


@dataclass
class SpaceExport(_Data):
    stats: SpaceStats
    turns: list[TurnInfo]
    amus: list[AMUInfo]
    views: dict[str, NodeInfo]


@dataclass
class StoreExport(_Data):
    format: str
    version: int
    spaces: list[SpaceExport]


# --- helpers ---------------------------------------------------------------------------------------
def _locked(fn):
    """Run `fn(mem, ...)` under the Memory's lock, so views are not read while another thread
    changes them."""
    @functools.wraps(fn)
    def wrapper(mem, *args, **kwargs):
        lock = getattr(mem, "_lock", None)
        if lock is None:
            return fn(mem, *args, **kwargs)
        with lock:
            return fn(mem, *args, **kwargs)
    return wrapper


def _pairs(counter: Counter) -> list[list[int]]:
    return [[int(k), int(v)] for k, v in sorted(counter.items())]


def snippet(text: str | None, n: int = 90) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= n else text[: n - 1] + "…"


def resolve_space(mem, space: str | None) -> str:
    """`space`, or the store's only space when None; ValueError otherwise."""
    spaces = mem.spaces()
    if space is None:
        if len(spaces) != 1:
            raise ValueError(f"space: the store holds {len(spaces)} spaces, name one with --space ({spaces[:10]})")
        return spaces[0]
    from etamem.ingest.inputs import space_as_stored

    space = space_as_stored(space, spaces.__contains__)
    if space not in spaces:
        raise ValueError(f"space: unknown space {space!r} (known: {spaces[:10]})")
    return space


def _check_view(view: str) -> str:
    if view not in VIEWS:
        raise ValueError(f"view: expected one of {VIEWS}, got {view!r}")
    return view


def _tree_kind(tree, nid: int) -> str:
    return "root" if nid == tree.root else ("leaf" if tree.is_leaf[nid] else "inner")


def leaf_cohesion(tree, nid: int) -> float:
    """Mean pairwise cosine of a leaf's AMUs (1.0 for fewer than two)."""
    return float(cohesion_from_sum(tree.sums[nid], int(tree.count[nid])))


# --- statistics ----------------------------------------------------------------------------------
def _tree_stats(name: str, tree) -> ViewStats:
    shape = tree.shape()
    alive = [int(n) for n in np.flatnonzero(tree.alive[: tree.n_nodes])]
    inner = [n for n in alive if not tree.is_leaf[n] and tree.children[n]]
    leaves = [int(n) for n in tree.leaves()]
    per_depth = Counter(len(tree.path(n)) - 1 for n in alive)
    coh = [leaf_cohesion(tree, n) for n in leaves if tree.count[n] >= 2]
    cal = tree.calibrator
    return ViewStats(
        view=name, amus=shape["amus"], nodes=shape["nodes"], leaves=shape["leaves"], depth=shape["depth"],
        mean_fanout=shape["mean_fanout"], max_fanout=shape["max_fanout"],
        fanout_hist=_pairs(Counter(len(tree.children[n]) for n in inner)),
        leaf_size_hist=_pairs(Counter(int(tree.count[n]) for n in leaves)),
        nodes_per_depth=[per_depth.get(d, 0) for d in range(max(per_depth, default=-1) + 1)],
        cohesion=Distribution.of(coh, bins=10, value_range=(min([0.0, *coh]), 1.0)),
        thresholds=cal.current.as_dict(), initial_thresholds=cal.initial.as_dict(), calibrated=cal.warmed_up,
        observations=int(cal.seen), threshold_history=[dict(h) for h in cal.history],
        maintenance_steps=tree.steps, counters=dict(tree.stats))


def _time_stats(forest) -> ViewStats:
    shape = forest.shape()
    nodes = forest.nodes.values()
    sessions = [n for n in nodes if n.level == "session"]
    inner = [n for n in nodes if n.level != "session"]
    fan = [len(n.children) for n in inner]
    levels = forest.counts()
    return ViewStats(
        view="time", amus=shape["amus"], nodes=shape["nodes"], leaves=len(sessions), depth=shape["depth"],
        mean_fanout=float(np.mean(fan)) if fan else 0.0, max_fanout=max(fan, default=0),
        fanout_hist=_pairs(Counter(fan)), leaf_size_hist=_pairs(Counter(n.count for n in sessions)),
        nodes_per_depth=[levels[k] for k in ("month", "week", "day", "session")],
        counters=dict(forest.stats), levels=levels)


@_locked
def space_stats(mem, space: str) -> SpaceStats:
    """Per-view statistics of a space: nodes, leaves, depth, fan-out and leaf-size histograms,
    cohesion distribution, calibrated thresholds with their history."""
    space = resolve_space(mem, space)
    views = mem.views(space)
    amus = mem.list(space)
    pol = Counter(a.polarity for a in amus)
    return SpaceStats(space, mem.store.count_turns(space), len(amus),
                      {p: pol.get(p, 0) for p in ("negative", "neutral", "positive")},
                      {"event": _tree_stats("event", views.event), "affect": _tree_stats("affect", views.affect),
                       "time": _time_stats(views.time)})


# --- subtrees --------------------------------------------------------------------------------------
@_locked
def subtree(mem, space: str, view: str, node: str | None = None, depth: int | None = None,
            members: bool = True) -> NodeInfo:
    """The subtree of `view` under `node` (default: the root; Time: a synthetic node "time"
    above the months), `depth` levels down (None: all), leaves with their AMUs if `members`."""
    space, view = resolve_space(mem, space), _check_view(view)
    views = mem.views(space)
    by_id = {a.amu_id: a for a in mem.list(space)} if members else {}
    if view == "time":
        return _time_subtree(views.time, node, depth, by_id)
    tree = views.tree(view)
    start = tree.root if node is None else _tree_node(tree, node)
    return _tree_subtree(view, tree, start, len(tree.path(start)) - 1, depth, by_id)


def _tree_node(tree, node) -> int:
    try:
        nid = int(node)
    except (TypeError, ValueError):
        raise ValueError(f"node: expected an integer node id, got {node!r}") from None
    if not (0 <= nid < tree.n_nodes and tree.alive[nid]):
        raise ValueError(f"node: no live node {nid} in this tree")
    return nid


def _tree_subtree(view, tree, nid: int, level: int, depth: int | None, by_id: dict) -> NodeInfo:
    leaf = bool(tree.is_leaf[nid])
    out = NodeInfo(view, str(nid), _tree_kind(tree, nid), level, int(tree.count[nid]), len(tree.children[nid]),
                   summary=None if leaf else tree.summary[nid], cohesion=leaf_cohesion(tree, nid) if leaf else None)
    if depth is not None and depth <= 0:
        out.truncated = bool(tree.children[nid]) or (leaf and bool(by_id))
        return out
    nxt = None if depth is None else depth - 1
    out.children = [_tree_subtree(view, tree, c, level + 1, nxt, by_id) for c in tree.children[nid]]
    if leaf:
        out.members = [AMUInfo.of(by_id[tree.amu_ids[r]]) for r in tree.members[nid] if tree.amu_ids[r] in by_id]
    return out


def _time_subtree(forest, node: str | None, depth: int | None, by_id: dict) -> NodeInfo:
    if node is not None and node != FOREST_ROOT and node not in forest.nodes:
        raise ValueError(f"node: no Time node {node!r} (ids look like M:2023-05, W:2023-W19, D:2023-05-08, S:<session>)")

    def build(key: str, level: int, left: int | None) -> NodeInfo:
        n = forest.nodes[key]
        out = NodeInfo("time", key, n.level, level, n.count, len(n.children), summary=n.summary,
                       start=n.start.isoformat(), end=n.end.isoformat())
        if left is not None and left <= 0:
            out.truncated = bool(n.children) or (n.level == "session" and bool(by_id))
            return out
        out.children = [build(c, level + 1, None if left is None else left - 1) for c in n.children]
        out.members = [AMUInfo.of(by_id[a]) for a in n.members if a in by_id]
        return out

    if node is None or node == FOREST_ROOT:
        roots = forest.roots
        out = NodeInfo("time", FOREST_ROOT, "forest", -1, sum(forest.nodes[r].count for r in roots), len(roots))
        if depth is not None and depth <= 0:
            out.truncated = bool(roots)
            return out
        out.children = [build(r, 0, None if depth is None else depth - 1) for r in roots]
        return out
    return build(node, len(forest.path(node)) - 1, depth)


# --- paths -----------------------------------------------------------------------------------------
@_locked
def amu_paths(mem, space: str, amu_id: str) -> AMUPath:
    """Where an AMU sits: root-to-leaf node path in each view (None where it is absent)."""
    space = resolve_space(mem, space)
    amu = mem.get(amu_id, space)
    views = mem.views(space)
    paths: dict[str, list[PathStep] | None] = {}
    for name in ("event", "affect"):
        tree = views.tree(name)
        row = tree.row_of.get(amu_id)
        if row is None:
            paths[name] = None
            continue
        nodes = reversed(tree.path(int(tree.leaf_of[row])))
        paths[name] = [PathStep(str(n), _tree_kind(tree, n), int(tree.count[n]), tree.summary[n]) for n in nodes]
    forest = views.time
    session = forest.amu_session.get(amu_id)
    if session is None:
        paths["time"] = None
    else:
        paths["time"] = [PathStep(k, forest.nodes[k].level, forest.nodes[k].count, forest.nodes[k].summary)
                         for k in reversed(forest.path(f"S:{session}"))]
    return AMUPath(AMUInfo.of(amu), paths)


# --- query traces -------------------------------------------------------------------------------------
def _candidate_info(views, view: str, key: str, score: float, cos: float, bm: float) -> Candidate:
    if view == "time":
        n = views.time.nodes[key]
        label = views.time.node_text(key)
        return Candidate(key, n.level, n.count, score, cos, bm, snippet(label))
    tree = views.tree(view)
    nid = int(key)
    return Candidate(key, _tree_kind(tree, nid), int(tree.count[nid]), score, cos, bm, snippet(tree.node_text(nid)))


@_locked
def trace_query(mem, query: str, space: str, *, top_k: int | None = None, now: datetime | str | None = None,
                routing: str | None = None) -> QueryTrace:
    """Why the hits came back: per view the normalised entropy, weight and budget, the beam
    kept at each level with (score, cos, BM25n), the leaves searched and the AMUs found, and the
    work (nodes and units scored per view, summed in `work` with the raw turns searched); then
    the final hits with their source turns. Runs `mem.retrieve(..., trace=True)`."""
    space = resolve_space(mem, space)
    k = mem.config.top_k if top_k is None else int(top_k)
    result = mem.retrieve(query, space, top_k=k, now=now, routing=routing, trace=True)
    views = mem.views(space)
    vt = {}
    for name, t in result.traces.items():
        levels = [[_candidate_info(views, name, *c) for c in level] for level in t.beam.levels]
        vt[name] = ViewTraceInfo(name, t.entropy, float(t.weight), int(t.budget), levels, list(t.beam.leaves),
                                 [[a, float(s)] for a, s in t.found], t.beam.nodes_scored, t.beam.units_scored,
                                 t.beam.context_scored)
    turn_ids = sorted({s for h in result.hits for s in h.source_turn_ids})
    turns = {t.turn_id: t for t in mem.turns(space, turn_ids=turn_ids)} if turn_ids else {}
    hits = [HitInfo(i, float(h.score), list(h.views), AMUInfo.of(h.amu),
                    [TurnInfo.of(turns[s]) for s in h.source_turn_ids if s in turns])
            for i, h in enumerate(result.hits, 1)]
    when = None if now is None else (now.isoformat() if isinstance(now, datetime) else str(now))
    window = None if result.window is None else [result.window[0].isoformat(), result.window[1].isoformat()]
    info = mem.index_info(space)
    work = {"nodes_scored": sum(v.nodes_scored for v in vt.values()),
            "units_scored": sum(v.units_scored for v in vt.values()),
            "context_scored": sum(v.context_scored for v in vt.values()),
            "raw_turns": int(info.get("turns", 0)),  # the raw-turn search: every turn by BM25, and by an
            # exact product while the turns are at most `raw_exact_max` (then an HNSW graph's pool)
            "raw_turns_scanned_exactly": int(info.get("turns", 0)) if info.get("turn_index_mode") == "exact" else 0}
    return QueryTrace(query, space, k, when, routing or mem.config.routing, window, bool(result.fallback_used),
                      dict(result.budgets), vt, hits, work)


# --- export --------------------------------------------------------------------------------------------
def export_space(mem, space: str) -> SpaceExport:
    """Turns, AMUs (every status), statistics and the full trees of one space."""
    space = resolve_space(mem, space)
    return SpaceExport(space_stats(mem, space), [TurnInfo.of(t) for t in mem.turns(space)],
                       [AMUInfo.of(a) for a in mem.list(space, status=None)],
                       {v: subtree(mem, space, v) for v in VIEWS})


@_locked
def export_store(mem, spaces: list[str] | None = None) -> StoreExport:
    """Everything the store holds for `spaces` (default: all) as one JSON-ready record."""
    names = mem.spaces() if spaces is None else [resolve_space(mem, s) for s in spaces]
    return StoreExport(EXPORT_FORMAT, EXPORT_VERSION, [export_space(mem, s) for s in names])


def load_export(data: dict) -> StoreExport:
    """Read an export back (e.g. `json.load` of `etamem export`); ValueError if it is not one."""
    if not isinstance(data, dict) or data.get("format") != EXPORT_FORMAT:
        raise ValueError(f"not an ETAMem export (expected format {EXPORT_FORMAT!r})")
    if data.get("version") != EXPORT_VERSION:
        raise ValueError(f"export version {data.get('version')!r} is not supported (expected {EXPORT_VERSION})")
    return StoreExport.from_dict(data)


# --- 2-D projections ---------------------------------------------------------------------------------
@dataclass
class Point(_Data):
    x: float
    y: float
    kind: str  # raw / event / affect
    polarity: str | None
    item_id: str  # turn id or AMU id
    text: str


@dataclass
class Projection(_Data):
    """2-D projections: `text` = raw turns and AMU text vectors in one space (coloured by view),
    `affect` = affective vectors of the Affect AMUs (coloured by polarity)."""

    method: str
    text: list[Point]
    affect: list[Point]


def project_2d(x: np.ndarray, method: str = "pca", seed: int = 0) -> np.ndarray:
    """(n, d) float -> (n, 2) float64 by PCA (NumPy SVD) or t-SNE (scikit-learn, `bench` extra)."""
    x = np.asarray(x, dtype=np.float64)
    if x.shape[0] < 2:
        return np.zeros((x.shape[0], 2))
    if method == "pca":
        c = x - x.mean(axis=0)
        _, _, vt = np.linalg.svd(c, full_matrices=False)
        out = c @ vt[:2].T
        return np.pad(out, ((0, 0), (0, 2 - out.shape[1])))
    if method == "tsne":
        try:
            from sklearn.manifold import TSNE
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ImportError(f"t-SNE needs scikit-learn: {install_hint('bench')}") from exc
        return TSNE(2, perplexity=min(30.0, (x.shape[0] - 1) / 3), init="pca", random_state=seed).fit_transform(x)
    raise ValueError(f"method: expected 'pca' or 'tsne', got {method!r}")


@_locked
def projection(mem, space: str, method: str = "pca", max_points: int = 3000, seed: int = 0) -> Projection:
    """Project raw-turn, Event and Affect representations to 2-D (at most `max_points` per
    panel, an even sample). Raw turns are encoded with the memory's text encoder."""
    from etamem.extraction.extractors import turn_text

    space = resolve_space(mem, space)
    rng = np.random.default_rng(seed)

    def sample(items: list) -> list:
        if len(items) <= max_points:
            return items
        keep = np.sort(rng.choice(len(items), max_points, replace=False))
        return [items[i] for i in keep]

    views = mem.views(space)
    turns = sample(mem.turns(space))
    amus = sample(mem.list(space))
    ids = [a.amu_id for a in amus]
    t_vecs = mem.store.amu_vectors(space, "text", ids) if ids else np.zeros((0, views.event.dim), np.float32)
    r_vecs = mem.text_encoder.encode([turn_text(t) for t in turns]) if turns else np.zeros((0, t_vecs.shape[1]))
    xy = project_2d(np.vstack([r_vecs, t_vecs]), method, seed)
    text = [Point(float(p[0]), float(p[1]), "raw", None, t.turn_id, t.text) for p, t in zip(xy, turns)]
    text += [Point(float(p[0]), float(p[1]), views.view_of(a.amu_id) or "none", a.polarity, a.amu_id, a.text)
             for p, a in zip(xy[len(turns):], amus)]
    aff = [a for a in amus if views.view_of(a.amu_id) == "affect"]
    a_vecs = mem.store.amu_vectors(space, "affect", [a.amu_id for a in aff]) if aff else np.zeros((0, 2))
    axy = project_2d(a_vecs, method, seed)
    affect = [Point(float(p[0]), float(p[1]), "affect", a.polarity, a.amu_id, a.text) for p, a in zip(axy, aff)]
    return Projection(method, text, affect)
