"""The one interface behind `Memory`: a method builds a space's units from its turns and
searches, answers and renders context over them. Two implement it:

- ETAMem (`etamem.retrieval.views_method.ViewsMethod`): units searched through the Event, Affect and
  Time views with entropy routing and the raw-turn fallback; its units are AMUs
  (`etamem.construction.AMUUnits`) or, with `units="fta"`, FTA-Mem's units
  (`etamem.fta.fta_method.FTAUnits`);
- FTA-Mem (`etamem.fta.fta_method.FTAMethod`): FTA units and their relation links, searched with
  FTA-Mem's scoring and answered from its four-section packet.

`make_method(config)` chooses once, from `Config.method` and `Config.units`; `Memory` never asks
which method it runs. The `engine` argument of every call is the `etamem.engine.Engine` (store,
models, live spaces) the method works in.
"""
from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, Sequence

import numpy as np

from etamem.records import AMU, Answer, Hit, SearchResult, Turn

if TYPE_CHECKING:
    from etamem.engine import Engine
    from etamem.live.space import LiveSpace
    from etamem.store.schema import UnitExtras


class Units(Protocol):
    """How turns become units. `kind`: "amu" or "fta", recorded per space (a space holds one kind)."""

    kind: str

    def build(self, engine: Engine, live: LiveSpace, turns: list[Turn], complete: bool
              ) -> tuple[list[Turn], list[AMU], np.ndarray, np.ndarray, np.ndarray, Any]:
        """One session's pending `turns` of the live space made into units: (turns done, units,
        text vectors (n, d_t), affective vectors (n, d_a), raw-turn vectors (len(turns done), d_t),
        extras to store with them (`etamem.store.sql.UnitExtras`) or None). `complete`: the
        session will get no more turns in this batch."""

    def forget_extras(self, store: Any, space: str, units: Sequence[AMU], dropped: Sequence[str],
                      rewritten: Sequence[Turn]) -> UnitExtras | None:
        """What deleting `units` of a space holding this kind of units (and dropping / rewriting
        the turns `dropped` / `rewritten`) changes in its other rows, written with the deletion;
        None: nothing."""

    def history(self, store: Any, space: str, unit_id: str) -> list | None:
        """The versions of the stored unit `unit_id`, oldest first, when this kind of units keeps
        its own (FTA units: their relation links); None: the `supersedes` chain between units."""

    def warm(self, engine: Engine) -> None:
        """Load now what the first writes would load on first use (`Memory.warm`)."""


class Method(Protocol):
    """Search, answers and context over a space's units (see the module docstring)."""

    name: str
    units: Units

    def check_readable(self, space: str, stored_kind: str | None) -> None:
        """ValueError naming the setting to use when this method cannot search a space holding
        `stored_kind` units ("amu", "fta", None: nothing recorded yet)."""

    def search(self, engine: Engine, query: str, space: str, k: int, when: datetime | None, *,
               views: tuple[str, ...], routing: str | None, fallback: bool, trace: bool,
               filters: Any = None) -> SearchResult:
        """The `k` best hits of the space for `query` (the caller holds the space's cache scope);
        only units (and raw turns) that `filters` (an `etamem.filters.UnitFilter`, None: all)
        lets through, `k` of them whenever that many match."""

    def answer(self, engine: Engine, question: str, space: str, result: SearchResult, when: datetime | None) -> Answer:
        """An answer from `result` (the retrieval for `question`)."""

    def context(self, engine: Engine, space: str, hits: list[Hit], when: datetime | None) -> str:
        """The prompt-ready memory text of `hits`."""


def make_units(kind: str) -> Units:
    """The units of `kind`: "fta" FTA-Mem's, else AMUs."""
    if kind == "fta":
        from etamem.fta.fta_method import FTAUnits

        return FTAUnits()
    from etamem.construction import AMUUnits

    return AMUUnits()


def stored_units(method: Method, store: Any, space: str) -> Units:
    """The units of `space` by the kind its store records (none recorded: AMUs): `method.units`
    when they are of that kind, else a new object of that kind (to read or forget the space's
    rows; it builds nothing)."""
    from etamem.construction import UNITS_KEY

    kind = store.get_space_meta(space, UNITS_KEY) or "amu"
    return method.units if method.units.kind == kind else make_units(kind)


def make_method(config) -> Method:
    """The method `config` chooses: `Config.method` for search and answers, `Config.unit_kind()`
    for the units its writes build."""
    units = make_units(config.unit_kind())
    if config.method == "fta":
        from etamem.fta.fta_method import FTAMethod

        return FTAMethod(units)
    from etamem.retrieval.views_method import ViewsMethod

    return ViewsMethod(units)
