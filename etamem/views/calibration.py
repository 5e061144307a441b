"""Adaptive thresholds for one semantic tree (see docs/design.md, 'Calibration').

A bounded reservoir of observed similarities (AMU -> best leaf at insertion, sampled
within-leaf pairs and sibling-centroid pairs) is split by Otsu's method at each maintenance
step; percentiles of the high-similarity class give the targets for `tau_new` (low
percentile) and `tau_merge` (high percentile); leaf-size statistics give the `m_max` target.
`tau_coh` targets the Otsu threshold itself (capped by `tau_new`): cohesion is a mean over
all pairs of a leaf, so a pure leaf sits around the typical within-cluster similarity and
a leaf mixing two clusters falls towards the boundary between the classes. Using the low
percentile there (as for `tau_new`) split about half of all pure leaves in our tests and
then merged them back, session after session. Every update is smoothed by an EMA and applies to later operations only.
Until `min_obs` observations exist (warm-up) the initial values stay in force.

The `m_max` target is 1.5 x the 75th percentile of leaf sizes, clipped to `m_max_bounds`:
leaves that the data keeps filling raise the capacity, a forest of small leaves lowers it,
and the bounds keep the rule from drifting (splitting at capacity would otherwise feed back
into the statistic it is computed from).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from etamem.kernels import ema, otsu_threshold


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return x ^ (x >> 31)


def hist_percentile(hist, q: float) -> float:
    """`np.percentile(values, q)` (linear interpolation) of the non-negative integers that
    `hist` counts (hist: (V,) integers, hist[v] = how many values equal v; at least one value)."""
    cum = np.cumsum(np.asarray(hist, np.int64))
    total = int(cum[-1])
    h = (total - 1) * q / 100.0
    lo = int(np.floor(h))
    v_lo, v_hi = np.searchsorted(cum, [lo, min(lo + 1, total - 1)], side="right")
    return float(v_lo + (h - lo) * (v_hi - v_lo))


@dataclass
class Thresholds:
    tau_new: float
    tau_coh: float
    tau_merge: float
    m_max: float

    def as_dict(self) -> dict[str, float]:
        return {"tau_new": self.tau_new, "tau_coh": self.tau_coh, "tau_merge": self.tau_merge, "m_max": self.m_max}


@dataclass
class Calibrator:
    """Reservoir + Otsu + EMA calibration; `history` keeps one record per update."""

    initial: Thresholds
    reservoir_size: int = 4096
    min_obs: int = 64
    low_pct: float = 10.0
    high_pct: float = 90.0
    alpha: float = 0.3
    m_max_bounds: tuple[int, int] = (6, 24)
    seed: int = 0
    current: Thresholds | None = None
    reservoir: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))
    seen: int = 0  # observations offered to the reservoir so far
    history: list[dict] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.current is None:
            self.current = Thresholds(**self.initial.as_dict())

    @classmethod
    def from_config(cls, config) -> "Calibrator":
        return cls(Thresholds(config.tau_new_init, config.tau_coh_init, config.tau_merge_init, float(config.m_max_init)),
                   reservoir_size=config.calibration_reservoir, min_obs=config.calibration_min_obs,
                   low_pct=config.calibration_low_pct, high_pct=config.calibration_high_pct,
                   alpha=config.calibration_ema_alpha, m_max_bounds=tuple(config.m_max_bounds), seed=config.seed)

    @property
    def warmed_up(self) -> bool:
        return self.seen >= self.min_obs

    @property
    def m_max(self) -> int:
        return int(round(self.current.m_max))

    def observe(self, values) -> None:
        """Offer similarities to the reservoir (Algorithm R: uniform over everything seen)."""
        vals = np.asarray(values, dtype=np.float32).ravel()
        vals = vals[np.isfinite(vals)]
        n_fill = min(max(0, self.reservoir_size - self.reservoir.size), vals.size)
        if n_fill:
            self.reservoir = np.concatenate([self.reservoir, vals[:n_fill]])
            self.seen += n_fill
        for v in vals[n_fill:]:
            self.seen += 1
            j = _splitmix64(self.seed * 0x9E3779B1 + self.seen) % self.seen  # stateless: same after reload
            if j < self.reservoir_size:
                self.reservoir[j] = v

    def targets(self, size_hist) -> tuple[Thresholds, float] | None:
        """(targets, Otsu threshold) from the reservoir and the leaf-size histogram (size_hist:
        (V,) integers, size_hist[v] = leaves holding v AMUs, as `SemanticTree.leaf_size_hist`);
        None during warm-up."""
        if not self.warmed_up or self.reservoir.size < 2:
            return None
        values = self.reservoir.astype(np.float64)
        if float(np.ptp(values)) < 1e-9:  # one similarity value only: nothing to split
            return None
        t = otsu_threshold(values)
        high = values[values > t]
        if high.size == 0:
            high = values
        low_t = float(np.percentile(high, self.low_pct))
        high_t = float(np.percentile(high, self.high_pct))
        lo, hi = self.m_max_bounds
        m_max = (float(np.clip(1.5 * hist_percentile(size_hist, 75), lo, hi)) if np.any(size_hist)
                 else self.current.m_max)
        return Thresholds(tau_new=low_t, tau_coh=min(float(t), low_t), tau_merge=max(high_t, low_t), m_max=m_max), t

    def update(self, size_hist, step: int) -> bool:
        """One maintenance-time update (leaf-size histogram as in `targets`); returns False
        (nothing changes) during warm-up."""
        got = self.targets(size_hist)
        if got is None:
            return False
        target, otsu = got
        cur = self.current
        self.current = Thresholds(*(float(ema(getattr(cur, k), getattr(target, k), self.alpha))
                                    for k in ("tau_new", "tau_coh", "tau_merge", "m_max")))
        self.history.append({"step": step, "observations": int(self.seen), "otsu": float(otsu),
                             **{f"target_{k}": v for k, v in target.as_dict().items()}, **self.current.as_dict()})
        return True

    # --- persistence (plain JSON + float32 array) ----------------------------------------
    def state(self) -> dict:
        return {"initial": self.initial.as_dict(), "current": self.current.as_dict(), "seen": self.seen,
                "history": self.history, "reservoir_size": self.reservoir_size, "min_obs": self.min_obs,
                "low_pct": self.low_pct, "high_pct": self.high_pct, "alpha": self.alpha,
                "m_max_bounds": list(self.m_max_bounds), "seed": self.seed}

    @classmethod
    def from_state(cls, state: dict, reservoir: np.ndarray) -> "Calibrator":
        return cls(Thresholds(**state["initial"]), reservoir_size=state["reservoir_size"], min_obs=state["min_obs"],
                   low_pct=state["low_pct"], high_pct=state["high_pct"], alpha=state["alpha"],
                   m_max_bounds=tuple(state["m_max_bounds"]), seed=state["seed"],
                   current=Thresholds(**state["current"]), reservoir=np.asarray(reservoir, np.float32).copy(),
                   seen=state["seen"], history=list(state["history"]))
