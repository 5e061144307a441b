"""`TimeForest`: Month -> ISO week -> Day -> Session -> AMUs (see docs/design.md, 'Time forest').

Deterministic from timestamps. A session hangs under the day of its start (the timestamp
of the first AMU that arrived for it), so sessions spanning midnight stay one session; a
day hangs under its ISO week within its own month: a week that spans two months has a node in
each (`W:2024-W09` under February for 26-29 February, `W:2024-W09/2024-03` under March for 1-3
March). Stores of earlier versions filed a week under the month of its Monday: their days stay
where they are (new units of such a day join it there), new days follow this rule. Node ids
say what they are: `M:2023-05`, `W:2023-W19`, `D:2023-05-08`, `S:<session id>`. Every node keeps the
float64 sum of its AMUs' text vectors (centroid = normalised sum), its time range and a
`pending` counter; month/week/day summaries follow the same delta rule as the trees
(session summaries are their AMU texts).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

import numpy as np

from etamem.kernels import topk

LEVELS = ("month", "week", "day", "session")


@dataclass
class TimeNode:
    node_id: str
    level: str
    parent: str | None
    start: datetime
    end: datetime
    children: list[str] = field(default_factory=list)  # sorted by start
    members: list[str] = field(default_factory=list)  # session nodes: AMU ids in arrival order
    sum: np.ndarray | None = None  # (d,) float64
    count: int = 0
    summary: str | None = None
    pending: int = 0

    def centroid(self) -> np.ndarray:
        n = np.linalg.norm(self.sum)
        return (self.sum / max(n, 1e-12)).astype(np.float32)


def time_path(session_start: datetime, session_id: str) -> list[tuple[str, str, datetime, datetime]]:
    """(node id, level, start, end) from month down to session for a session start."""
    day0 = datetime(session_start.year, session_start.month, session_start.day, tzinfo=session_start.tzinfo)
    monday = day0 - timedelta(days=day0.weekday())
    iso = monday.isocalendar()
    month0 = datetime(day0.year, day0.month, 1, tzinfo=session_start.tzinfo)  # the day's own month
    month_end = datetime(month0.year + (month0.month == 12), month0.month % 12 + 1, 1, tzinfo=session_start.tzinfo)
    week = f"W:{iso.year}-W{iso.week:02d}"
    if (monday.year, monday.month) != (day0.year, day0.month):  # the part of a week in the next month
        week += f"/{month0:%Y-%m}"
    return [
        (f"M:{month0:%Y-%m}", "month", month0, month_end),
        (week, "week", max(monday, month0), min(monday + timedelta(days=7), month_end)),
        (f"D:{day0:%Y-%m-%d}", "day", day0, day0 + timedelta(days=1)),
        (f"S:{session_id}", "session", session_start, session_start),
    ]


class TimeForest:
    """The Time view of one space."""

    def __init__(self, dim: int, *, summary_delta: int = 8, summary_reps: int = 3):
        self.dim, self.summary_delta, self.summary_reps = dim, summary_delta, summary_reps
        self.nodes: dict[str, TimeNode] = {}
        self.session_start: dict[str, datetime] = {}
        self.amu_session: dict[str, str] = {}
        self.vectors: dict[str, np.ndarray] = {}
        self.times: dict[str, datetime] = {}
        self.texts: dict[str, str] = {}
        self.changed: set[str] = set()  # nodes to persist
        self.removed: set[str] = set()
        self.dirty: set[str] = set()  # nodes to look at in the next maintenance
        self._roots: list[str] | None = None  # months by start (cached; reset when a month comes or goes)
        self.stats = {"inserted": 0, "deleted": 0, "summaries_first": 0, "summaries_refresh": 0,
                      "pending_updates": 0}

    @property
    def roots(self) -> list[str]:
        if self._roots is None:
            self._roots = sorted((n.node_id for n in self.nodes.values() if n.parent is None),
                                 key=lambda i: self.nodes[i].start)
        return self._roots

    def path(self, node_id: str) -> list[str]:
        out = [node_id]
        while self.nodes[out[-1]].parent is not None:
            out.append(self.nodes[out[-1]].parent)
        return out

    def insert(self, amu_id: str, vec: np.ndarray, timestamp: datetime, session_id: str, text: str = "") -> str:
        """Place an AMU under its session; returns the session node id."""
        if amu_id in self.amu_session:
            raise ValueError(f"amu_id {amu_id!r} is already in the time forest")
        start = self.session_start.setdefault(session_id, timestamp)
        parent = None
        path = time_path(start, session_id)
        day = self.nodes.get(path[2][0])
        if day is not None:  # a day already placed (a store of an earlier version: its week's month) stays
            path, parent = path[2:], day.parent
        for node_id, level, lo, hi in path:
            node = self.nodes.get(node_id)
            if node is None:
                node = self.nodes[node_id] = TimeNode(node_id, level, parent, lo, hi, sum=np.zeros(self.dim))
                if parent is None:
                    self._roots = None
                else:
                    kids = self.nodes[parent].children
                    kids.append(node_id)
                    kids.sort(key=lambda c: (self.nodes[c].start, c))
            parent = node_id
        vec64 = np.asarray(vec, np.float64)
        session = self.nodes[parent]
        session.members.append(amu_id)
        for node_id in self.path(parent):
            node = self.nodes[node_id]
            node.sum = node.sum + vec64
            node.count += 1
            node.pending += 1
            self.stats["pending_updates"] += 1
            node.start, node.end = min(node.start, timestamp), max(node.end, timestamp)
            self.changed.add(node_id)
            self.dirty.add(node_id)
        self.amu_session[amu_id] = session_id
        self.vectors[amu_id] = np.asarray(vec, np.float32)
        self.times[amu_id] = timestamp
        self.texts[amu_id] = text
        self.stats["inserted"] += 1
        return parent

    def delete(self, amu_id: str) -> bool:
        session_id = self.amu_session.pop(amu_id, None)
        if session_id is None:
            return False
        vec = self.vectors.pop(amu_id).astype(np.float64)
        self.times.pop(amu_id)
        self.texts.pop(amu_id)
        leaf = f"S:{session_id}"
        self.nodes[leaf].members.remove(amu_id)
        for node_id in self.path(leaf):
            node = self.nodes[node_id]
            node.sum = node.sum - vec
            node.count -= 1
            node.pending += 1
            self.stats["pending_updates"] += 1
            self.changed.add(node_id)
            self.dirty.add(node_id)
        for node_id in self.path(leaf):
            node = self.nodes[node_id]
            if node.count == 0:
                if node.parent is not None:
                    self.nodes[node.parent].children.remove(node_id)
                else:
                    self._roots = None
                del self.nodes[node_id]
                self.changed.discard(node_id)
                self.removed.add(node_id)
                if node.level == "session":
                    self.session_start.pop(session_id, None)
        self.stats["deleted"] += 1
        return True

    def ancestors(self, amu_id: str) -> list[str]:
        """Day, week and month node ids above the AMU's session (empty if absent)."""
        session_id = self.amu_session.get(amu_id)
        return [] if session_id is None else self.path(f"S:{session_id}")[1:]

    # --- summaries -------------------------------------------------------------------------
    def refresh_summaries(self, nodes) -> None:
        """Recompute the extractive summaries of these day/week/month nodes, deepest first."""
        for n in sorted((n for n in set(nodes) if n in self.nodes), key=lambda n: -len(self.path(n))):
            node = self.nodes[n]
            if node.level != "session" and node.summary is not None:
                node.summary = " ".join(self.texts[a] for a in self.subtree_reps(n))
                self.changed.add(n)

    def node_text(self, node_id: str) -> str:
        node = self.nodes[node_id]
        if node.level == "session":
            return " ".join(self.texts[a] for a in node.members)
        return node.summary or ""

    def subtree_reps(self, node_id: str) -> list[str]:
        """AMU ids nearest the node centroid among its sessions' members (bounded work:
        at most `summary_reps` candidates per child)."""
        node = self.nodes[node_id]
        if node.level == "session":
            cands = node.members
        else:
            cands = [a for c in node.children for a in self.subtree_reps(c)]
        if not cands:
            return []
        sims = np.stack([self.vectors[a] for a in cands]) @ node.centroid()
        return [cands[i] for i in topk(sims, self.summary_reps).tolist()]

    def maintain(self, summariser=None) -> dict[str, int]:
        """Refresh month/week/day summaries that are new or whose pending reached delta."""
        before = dict(self.stats)
        self.summarised: list[str] = []  # month/week/day nodes refreshed by this pass, deepest first
        todo = sorted(self.dirty & set(self.nodes), key=lambda i: -len(self.path(i)))
        self.dirty = set()
        for node_id in todo:
            node = self.nodes[node_id]
            if node.level == "session":
                if node.pending >= self.summary_delta:
                    node.pending = 0
                    self.changed.add(node_id)
                continue
            first = node.summary is None
            if not first and node.pending < self.summary_delta:
                continue
            reps = [self.texts[a] for a in self.subtree_reps(node_id)]
            self.summarised.append(node_id)
            node.summary = " ".join(reps) if summariser is None else summariser(
                [self.node_text(c) for c in node.children], reps)
            node.pending = 0
            self.changed.add(node_id)
            self.stats["summaries_first" if first else "summaries_refresh"] += 1
        return {k: self.stats[k] - before[k] for k in self.stats}

    # --- persistence and inspection -------------------------------------------------------
    def pop_changes(self) -> tuple[list[str], list[str]]:
        changed = sorted(n for n in self.changed if n in self.nodes)
        removed = sorted(n for n in self.removed if n not in self.nodes)
        self.changed, self.removed = set(), set()
        return changed, removed

    def node_row(self, node_id: str) -> dict:
        n = self.nodes[node_id]
        return {"node_id": node_id, "parent_id": n.parent, "is_leaf": n.level == "session",
                "children": list(n.children), "members": list(n.members), "count": n.count,
                "sum": n.sum.astype("<f8").tobytes(), "summary": n.summary, "pending": n.pending,
                "info": {"level": n.level, "start": n.start.isoformat(), "end": n.end.isoformat(),
                         **({"session_start": self.session_start[node_id[2:]].isoformat()}
                            if n.level == "session" and node_id[2:] in self.session_start else {})}}

    def state(self) -> dict:
        # session starts live in the session nodes' rows (a write saves only the nodes it changed)
        return {"dim": self.dim, "summary_delta": self.summary_delta, "summary_reps": self.summary_reps,
                "stats": self.stats}

    @classmethod
    def restore(cls, state: dict, rows: list[dict], vectors: dict[str, np.ndarray], texts: dict[str, str],
                times: dict[str, datetime]) -> "TimeForest":
        # a new instance of this class: the classmethod sets its rows through its private setter
        forest = cls(state["dim"], summary_delta=state["summary_delta"], summary_reps=state["summary_reps"])
        forest.stats = dict(state["stats"])
        forest.session_start = {k: datetime.fromisoformat(v) for k, v in state.get("session_start", {}).items()}
        for r in rows:
            forest._set_row(r, vectors, texts, times)
        return forest

    def _set_row(self, r: dict, vectors, texts: dict[str, str], times: dict[str, datetime]) -> None:
        """Set one node from its saved row, with its members' vectors, texts and times by id."""
        info = r["info"]
        self.nodes[r["node_id"]] = TimeNode(
            r["node_id"], info["level"], r["parent_id"], datetime.fromisoformat(info["start"]),
            datetime.fromisoformat(info["end"]), list(r["children"]), list(r["members"]),
            np.frombuffer(r["sum"], dtype="<f8").copy(), r["count"], r["summary"], r["pending"])
        if info["level"] == "session":  # older rows: the state held it, or the node's start is it
            sid = r["node_id"][2:]
            if "session_start" in info:
                self.session_start[sid] = datetime.fromisoformat(info["session_start"])
            else:
                self.session_start.setdefault(sid, self.nodes[r["node_id"]].start)
        for a in r["members"]:
            self.amu_session[a] = r["node_id"][2:]
            if a in vectors:  # else kept (a unit this forest holds already)
                self.vectors[a] = np.asarray(vectors[a], np.float32)
                self.texts[a] = texts.get(a, "")
                self.times[a] = times[a]

    def apply_rows(self, state: dict, rows: list[dict], removed: list[str], vectors, texts: dict[str, str],
                   times: dict[str, datetime]) -> None:
        """Bring the forest to rows another process committed (`etamem.live.change_log`): its saved
        `state()`, the rows of the nodes it changed, the ids of the nodes it removed, and the
        vectors, texts and times of the units new to it. Units that left go first (`drop_units`)."""
        self.stats = dict(state["stats"])
        for node_id in removed:
            if self.nodes.pop(node_id, None) is not None and node_id.startswith("S:"):
                self.session_start.pop(node_id[2:], None)
        for r in rows:
            self._set_row(r, vectors, texts, times)
        self._roots = None
        self.dirty, self.changed, self.removed = set(), set(), set()

    def drop_units(self, amu_ids: list[str]) -> None:
        """Forget units another process removed (their nodes' rows follow: `apply_rows`)."""
        for a in amu_ids:
            if self.amu_session.pop(a, None) is not None:
                del self.vectors[a], self.texts[a], self.times[a]

    def counts(self) -> dict[str, int]:
        """Nodes per level."""
        out = {level: 0 for level in LEVELS}
        for n in self.nodes.values():
            out[n.level] += 1
        return out

    def shape(self) -> dict:
        return {"amus": len(self.amu_session), "nodes": len(self.nodes), **{f"{k}s": v for k, v in self.counts().items()},
                "depth": 4 if self.nodes else 0}

    def snapshot(self) -> dict:
        return {i: (n.parent, n.level, list(n.children), list(n.members), n.count, n.summary)
                for i, n in sorted(self.nodes.items())}
