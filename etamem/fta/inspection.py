"""Inspecting relation links: `etamem inspect STORE --links [--amu ID]` and the HTML page's
"Relation links" and "Facts that changed" sections (FTA-Mem's relations, and `supersedes`
between AMUs).

`link_infos(mem, space, unit_id=None)` lists the space's links (those touching `unit_id`) with
both units' texts and lifecycle; `render_links(infos)` is the terminal table; `fact_chains(mem,
space, unit_id=None)` the versions of each fact that changed, oldest first (`Memory.history`),
`render_chains(chains)` their terminal lines.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class LinkInfo:
    """One link, from the newer unit (`source`) to the older one (`target`), with both ends' text
    and lifecycle status (final / superseded / contradicted / partial), and the older FTA unit's
    paper lifecycle (`etamem.fta.packet.lifecycle_text`, "" when unknown or for an AMU)."""

    source: str
    target: str
    relation: str
    confidence: float
    source_text: str
    target_text: str
    source_status: str
    target_status: str
    target_lifecycle: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def link_infos(mem, space: str, unit_id: str | None = None) -> list[LinkInfo]:
    """The links of `space` (touching `unit_id` when given), oldest first."""
    from etamem.fta.builder import load_units
    from etamem.fta.packet import lifecycle_text

    links = mem.links(space, unit_id)
    ids = sorted({x for link in links for x in (link.source, link.target)})
    loaded = load_units(mem.store, space, ids)
    units = {uid: (u.text, u.status) for uid, u in loaded.items()}
    amus = [i for i in ids if i not in units]  # AMUs (supersedes links): status from the links
    if amus:
        from etamem.facts.current_first import with_status

        found = with_status(mem.store.amus(space, status=None, amu_ids=amus), mem.store.unit_links(space, amus))
        units.update((a.amu_id, (a.text, a.status)) for a in found)

    def end(uid: str) -> tuple[str, str]:
        return units.get(uid, ("(deleted)", ""))

    out = []
    for link in links:
        (s_text, s_status), (t_text, t_status) = end(link.source), end(link.target)
        older = loaded.get(link.target)
        out.append(LinkInfo(link.source, link.target, link.relation, round(link.confidence, 3), s_text, t_text,
                            s_status, t_status, lifecycle_text(older) if older is not None else ""))
    return out


@dataclass(frozen=True)
class ChainStep:
    """One version of a fact that changed: unit id, text, date said (ISO), status, and for an FTA
    unit its paper lifecycle in words ("" when unknown)."""

    unit_id: str
    text: str
    said: str
    status: str
    lifecycle: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def fact_chains(mem, space: str, unit_id: str | None = None) -> list[list[ChainStep]]:
    """The versions of every fact of `space` that changed (those of `unit_id`), each chain oldest
    first, chains in the order of their newest version."""
    from etamem.facts.supersession import REPLACING
    from etamem.fta.packet import lifecycle_text

    links = [link for link in mem.links(space, unit_id) if link.relation in REPLACING]
    seen: set[str] = set()
    chains = []
    for link in links:
        if link.source in seen:
            continue
        versions = mem.history(link.source, space)
        ids = [getattr(v, "amu_id", None) or v.unit_id for v in versions]
        seen.update(ids)
        chains.append([ChainStep(i, v.text, (getattr(v, "timestamp", None) or v.dialogue_time).isoformat(),
                                 v.status, lifecycle_text(v) if hasattr(v, "lifecycle") else "")
                       for i, v in zip(ids, versions)])
    return sorted(chains, key=lambda c: c[-1].said)


def render_chains(chains: list[list[ChainStep]]) -> str:
    """One line per chain: `text [date, status] -> text [date, status]`."""
    return "\n".join(" -> ".join(f"{s.text} [{s.said[:10]}, {s.status}]" for s in chain) for chain in chains)


def render_links(infos: list[LinkInfo]):
    """A rich Table of the links (newer unit, relation, older unit)."""
    from rich.table import Table

    table = Table(title=f"{len(infos)} relation links (newer -> older)")
    for col in ("newer unit", "relation", "older unit"):
        table.add_column(col, overflow="fold")
    for i in infos:
        life = f"\n{i.target_lifecycle}" if i.target_lifecycle else ""
        table.add_row(f"{i.source} [{i.source_status}]\n{i.source_text}", f"{i.relation} ({i.confidence:.2f})",
                      f"{i.target} [{i.target_status}]\n{i.target_text}{life}")
    return table


__all__ = ["ChainStep", "LinkInfo", "fact_chains", "link_infos", "render_chains", "render_links"]
