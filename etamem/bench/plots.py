"""PNG plots of a run summary (matplotlib, Agg backend, imported lazily):
per-category bars per system, recall against K, cost against accuracy, and the mean routing
weight per view by category for each ETAMem system that routes across several views."""
from __future__ import annotations

from pathlib import Path

from etamem.bench.report import VIEWS, main_k
from etamem.output import pyplot, save_png

VIEW_COLOURS = {"event": "tab:blue", "affect": "tab:red", "time": "tab:green"}


def _main_metric(summary: dict) -> tuple[str, str]:
    if summary["dataset"] == "locomo-plus":  # a cue turn among the first k
        k = main_k(summary)
        return f"recall_any@{k}", f"cue recall_any@{k}"
    if summary["dataset"] != "longmemeval":  # LoCoMo, PrefEval: evidence recall
        k = main_k(summary)
        return f"recall@{k}", f"evidence recall@{k}"
    return "session_recall_all@10", "session recall_all@10"


def write_plots(out: Path, summary: dict) -> list[Path]:
    plt = pyplot("bench")
    out = Path(out)
    systems = summary["systems"]
    cats = summary["categories"] + ["all"]
    metric, metric_label = _main_metric(summary)
    has_qa = any(s["qa"] for s in systems.values())
    paths = []

    # 1. per-category bars per system (retrieval; plus judge accuracy when answers exist)
    panels = [("retrieval", metric, metric_label)] + ([("qa", "accuracy", "judge accuracy")] if has_qa else [])
    fig, axes = plt.subplots(len(panels), 1, figsize=(14, 4.5 * len(panels)), squeeze=False)
    colours = [plt.cm.tab20(i % 20) for i in range(len(systems))]
    width = 0.85 / max(1, len(systems))
    for ax, (part, name, label) in zip(axes[:, 0], panels):
        for i, (key, s) in enumerate(systems.items()):
            block = s[part] or {}
            values = (block.get("metrics", {}).get(name, {}) if part == "retrieval" else block.get(name, {}))
            ax.bar([c + i * width for c in range(len(cats))], [values.get(c) or 0.0 for c in cats], width,
                   label=s["label"], color=colours[i])
        ax.set_xticks([c + 0.425 - width / 2 for c in range(len(cats))])
        ax.set_xticklabels([str(c) for c in cats], fontsize=9)
        ax.set_ylabel(label)
        ax.set_ylim(0, 1)
    axes[0, 0].set_title(f"{summary['dataset']}: per category")
    axes[0, 0].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    paths.append(save_png(fig, out / "categories.png", dpi=110))

    # 2. recall against K
    if summary["dataset"] == "locomo-plus":
        series = [(f"recall_{x}@{{k}}", summary["settings"]["ks"], f"cue recall_{x}@K (all)") for x in ("any", "first")]
    elif summary["dataset"] != "longmemeval":
        series = [("recall@{k}", summary["settings"]["ks"], "evidence recall@K (all)")]
    else:
        series = [("session_recall_all@{k}", [5, 10], "session recall_all@K"),
                  ("turn_recall_all@{k}", [5, 10, 50], "turn recall_all@K")]
    fig, axes = plt.subplots(1, len(series), figsize=(6 * len(series) + 3, 5), squeeze=False)
    for ax, (pattern, ks, label) in zip(axes[0], series):
        ax.set_prop_cycle(color=[plt.cm.tab20(i % 20) for i in range(len(systems))])
        for s in systems.values():
            m = s["retrieval"]["metrics"]
            ys = [m.get(pattern.format(k=k), {}).get("all") for k in ks]
            if any(y is not None for y in ys):
                ax.plot(ks, [y if y is not None else float("nan") for y in ys], marker="o", label=s["label"])
        ax.set_xlabel("K")
        ax.set_ylabel(label)
    axes[0, -1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    paths.append(save_png(fig, out / "recall_vs_k.png", dpi=110))

    # 3. cost against accuracy
    fig, ax = plt.subplots(figsize=(9, 6))
    for s in systems.values():
        if has_qa and s["qa"]:
            x, y = s["qa"]["answer_tokens_per_question"], s["qa"]["accuracy"].get("all")
        else:
            x, y = s["retrieval"]["context_tokens"], s["retrieval"]["metrics"].get(metric, {}).get("all")
        if x is None or y is None:
            continue
        ax.scatter([x], [y])
        ax.annotate(s["label"], (x, y), fontsize=6, xytext=(3, 3), textcoords="offset points")
    ax.set_xlabel("answer tokens per question" if has_qa else "context tokens per question")
    ax.set_ylabel("judge accuracy (all)" if has_qa else f"{metric_label} (all)")
    ax.set_title("cost against accuracy")
    paths.append(save_png(fig, out / "cost_accuracy.png", dpi=110))

    # 4. routing weights by category (the paper's Fig. 3), one panel per multi-view ETAMem system
    routed = [s for s in systems.values() if s.get("routing") and len(s["routing"]["weights"].get("all", {})) > 1]
    if routed:
        paths.append(_routing_plot(plt, out, summary, routed, cats))
    if summary.get("sweep"):
        paths.append(_sweep_plot(plt, out, summary, metric, metric_label))
    return paths


def _sweep_plot(plt, out: Path, summary: dict, metric: str, metric_label: str) -> Path:
    """`--sweep`: the main metric (all questions, with its 95% interval) against each swept value,
    one panel per setting (the ETAMem paper's Fig. 4 shape)."""
    fields = list(dict.fromkeys(p["field"] for p in summary["sweep"]))
    fig, axes = plt.subplots(1, len(fields), figsize=(5 * len(fields), 4), squeeze=False)
    for ax, name in zip(axes[0], fields):
        points = [p for p in summary["sweep"] if p["field"] == name]
        xs, ys, lo, hi = [], [], [], []
        for p in points:
            r = summary["systems"][p["system"]]["retrieval"]
            y, ci = r["metrics"].get(metric, {}).get("all"), r.get("intervals", {}).get(metric, {}).get("all")
            if y is None:
                continue
            xs.append(p["value"] if isinstance(p["value"], (int, float)) else str(p["value"]))
            ys.append(y)
            lo.append(y - (ci[0] if ci else y))
            hi.append((ci[1] if ci else y) - y)
        ax.errorbar(range(len(xs)), ys, yerr=[lo, hi], marker="o", capsize=3)
        ax.set_xticks(range(len(xs)))
        ax.set_xticklabels([str(x) for x in xs])
        ax.set_xlabel(name)
        ax.set_ylabel(f"{metric_label} (all)")
    fig.suptitle(f"{summary['dataset']}: sweep (95% intervals over questions)")
    return save_png(fig, out / "sweep.png", dpi=110)


def _routing_plot(plt, out: Path, summary: dict, routed: list[dict], cats: list[str]) -> Path:
    ncols = min(3, len(routed))
    nrows = -(-len(routed) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(5.5 * ncols, 4 * nrows), squeeze=False)
    for ax in axes.flat[len(routed):]:
        ax.set_visible(False)
    for ax, s in zip(axes.flat, routed):
        weights = s["routing"]["weights"]
        views = [v for v in VIEWS if v in weights.get("all", {})]
        width = 0.85 / len(views)
        for i, v in enumerate(views):
            ax.bar([c + i * width for c in range(len(cats))], [weights.get(c, {}).get(v) or 0.0 for c in cats],
                   width, label=v, color=VIEW_COLOURS[v])
        ax.set_xticks([c + 0.425 - width / 2 for c in range(len(cats))])
        ax.set_xticklabels([str(c) for c in cats], fontsize=8, rotation=30 if summary["dataset"] != "locomo" else 0)
        ax.set_ylabel("mean routing weight")
        ax.set_ylim(0, 1)
        ax.set_title(s["label"], fontsize=9)
    axes[0, 0].legend(fontsize=8, loc="upper left")
    fig.suptitle(f"{summary['dataset']}: routing weight per view by "
                 + ("category" if summary["dataset"] == "locomo" else "question type"))
    return save_png(fig, out / "routing_weights.png", dpi=110)
