"""Inspecting FTA relation links: `etamem inspect STORE --links [--amu ID]` and the HTML page's
"Relation links" section.

`link_infos(mem, space, unit_id=None)` lists the space's links (those touching `unit_id`) with
both units' texts and lifecycle; `render_links(infos)` is the terminal table.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class LinkInfo:
    """One link, from the newer unit (`source`) to the older one (`target`), with both ends' text
    and lifecycle status (final / superseded / contradicted / partial)."""

    source: str
    target: str
    relation: str
    confidence: float
    source_text: str
    target_text: str
    source_status: str
    target_status: str

    def to_dict(self) -> dict:
        return asdict(self)


def link_infos(mem, space: str, unit_id: str | None = None) -> list[LinkInfo]:
    """The links of `space` (touching `unit_id` when given), oldest first."""
    from .engine import load_units

    links = mem.links(space, unit_id)
    units = load_units(mem.store, space, sorted({x for link in links for x in (link.source, link.target)}))

    def end(uid: str) -> tuple[str, str]:
        u = units.get(uid)
        return ("(deleted)", "") if u is None else (u.text, u.status)

    out = []
    for link in links:
        (s_text, s_status), (t_text, t_status) = end(link.source), end(link.target)
        out.append(LinkInfo(link.source, link.target, link.relation, round(link.confidence, 3), s_text, t_text,
                            s_status, t_status))
    return out


def render_links(infos: list[LinkInfo]):
    """A rich Table of the links (newer unit, relation, older unit)."""
    from rich.table import Table

    table = Table(title=f"{len(infos)} relation links (newer -> older)")
    for col in ("newer unit", "relation", "older unit"):
        table.add_column(col, overflow="fold")
    for i in infos:
        table.add_row(f"{i.source} [{i.source_status}]\n{i.source_text}", f"{i.relation} ({i.confidence:.2f})",
                      f"{i.target} [{i.target_status}]\n{i.target_text}")
    return table


__all__ = ["LinkInfo", "link_infos", "render_links"]
