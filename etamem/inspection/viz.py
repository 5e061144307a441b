"""Pictures of a space: a self-contained HTML page and PNG plots (matplotlib, Agg backend).

`write_html(path, stats, views)` embeds the data as JSON and renders the three views as
collapsible trees with a node-details panel; it needs no network (inline CSS/JS only). Every
tree node becomes an `li.node` element, every AMU under a leaf an `li.amu` element. URL options: `#open=2` opens two levels,
`&node=event:22` shows that node's details.
`write_plots(out_dir, stats, views, proj)` writes tree_shapes.png, leaf_sizes.png,
thresholds.png and projection.png. `write_all(mem, space, out_dir)` does both.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from etamem.inspection.reports import VIEWS, NodeInfo, Projection, SpaceStats, projection, space_stats, subtree
from etamem.output import atomic_write, pyplot, save_png

POLARITY_COLOURS = {"negative": "#d62728", "neutral": "#7f7f7f", "positive": "#2ca02c"}
VIEW_COLOURS = {"raw": "#bcbd22", "event": "#1f77b4", "affect": "#ff7f0e", "time": "#9467bd", "none": "#000000"}


# --- HTML ------------------------------------------------------------------------------------------
PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>ETAMem: __TITLE__</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#222;background:#fafafa}
header{padding:10px 16px;background:#263238;color:#fff}header h1{font-size:18px;margin:0}
header p{margin:4px 0 0;color:#cfd8dc}
main{display:flex;gap:12px;padding:12px}
.views{flex:3;display:flex;gap:12px;min-width:0}
section.view{flex:1;background:#fff;border:1px solid #ddd;border-radius:6px;padding:8px;overflow:auto;max-height:85vh;min-width:0}
section.view h2{font-size:15px;margin:0 0 6px}
section.view .meta{color:#666;font-size:12px;margin-bottom:6px}
#details{flex:1.2;background:#fff;border:1px solid #ddd;border-radius:6px;padding:8px;max-height:85vh;overflow:auto}
ul{list-style:none;margin:0;padding-left:14px}ul.tree{padding-left:0}
li.node>.label{cursor:pointer;white-space:nowrap;padding:1px 3px;border-radius:3px}
li.node>.label:hover{background:#e3f2fd}li.node>.label.sel{background:#bbdefb}
li.node>.label .tw{display:inline-block;width:12px;color:#888}
li.node.collapsed>ul{display:none}
.k-leaf,.k-session{color:#2e7d32}.k-inner,.k-month,.k-week,.k-day{color:#1565c0}.k-root,.k-forest{color:#000;font-weight:bold}
.n{color:#888;font-size:12px}
li.amu{font-size:12px;color:#444;white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
.p-positive{color:#2ca02c}.p-negative{color:#d62728}.p-neutral{color:#7f7f7f}
table{border-collapse:collapse;font-size:12px}td{padding:2px 6px;border-bottom:1px solid #eee;vertical-align:top}
.toolbar button{font-size:12px;margin-right:4px}
</style></head><body>
<header><h1>ETAMem memory of space <span id="space"></span></h1><p id="summary"></p></header>
<main><div class="views" id="views"></div><aside id="details"><h2>Node details</h2><p>Click a node.</p></aside></main>
<script id="etamem-data" type="application/json">__DATA__</script>
<script>
(function(){
"use strict";
var data=JSON.parse(document.getElementById("etamem-data").textContent);
function el(tag,cls,text){var e=document.createElement(tag);if(cls)e.className=cls;if(text!=null)e.textContent=text;return e;}
document.getElementById("space").textContent=data.stats.space;
var s=data.stats;
document.getElementById("summary").textContent="turns "+s.turns+", AMUs "+s.amus+" (negative "+s.polarity.negative+
  " / neutral "+s.polarity.neutral+" / positive "+s.polarity.positive+")";
var details=document.getElementById("details"),selected=null;
function row(t,k,v){var tr=el("tr");tr.appendChild(el("td",null,k));tr.appendChild(el("td",null,v));t.appendChild(tr);}
function show(n,label){
  if(selected)selected.classList.remove("sel");selected=label;label.classList.add("sel");
  details.textContent="";details.appendChild(el("h2",null,n.view+" · "+n.kind+" "+n.node_id));
  var t=el("table");row(t,"AMUs",String(n.count));row(t,"children",String(n.n_children));row(t,"depth",String(n.depth));
  if(n.cohesion!=null)row(t,"cohesion",n.cohesion.toFixed(3));
  if(n.start)row(t,"time range",n.start.slice(0,16)+" – "+n.end.slice(0,16));
  if(n.summary)row(t,"summary",n.summary);
  details.appendChild(t);
  if(n.members.length){details.appendChild(el("h3",null,"AMUs"));var ul=el("ul");
    n.members.forEach(function(a){var li=el("li",null);li.appendChild(el("span","p-"+a.polarity,"● "));
      li.appendChild(document.createTextNode(a.timestamp.slice(0,10)+" "+a.speaker+": "+a.text+" ["+a.amu_id+" ← "+a.source_turn_ids.join(", ")+"]"));
      ul.appendChild(li);});details.appendChild(ul);}
}
var opts={};location.hash.replace(/^#/,"").split("&").forEach(function(kv){var i=kv.indexOf("=");
  if(i>0)opts[kv.slice(0,i)]=decodeURIComponent(kv.slice(i+1));});
var openLevels=opts.open?parseInt(opts.open,10):1,labels={};
function build(n,level){
  var open=level<openLevels;
  var li=el("li","node"+(open?"":" collapsed"));li.dataset.nodeId=n.node_id;li.dataset.kind=n.kind;
  var label=el("span","label");var has=n.children.length||n.members.length;
  label.appendChild(el("span","tw",has?(open?"▾":"▸"):"·"));
  var name=n.kind==="forest"?"Time forest":(n.view==="time"?n.node_id:n.kind+" "+n.node_id);
  label.appendChild(el("span","k-"+n.kind,name));label.appendChild(el("span","n"," "+n.count+" AMUs"));
  li.appendChild(label);
  label.addEventListener("click",function(ev){ev.stopPropagation();
    if(has){li.classList.toggle("collapsed");label.firstChild.textContent=li.classList.contains("collapsed")?"▸":"▾";}
    show(n,label);});
  labels[n.view+":"+n.node_id]=[n,label];
  if(has){var ul=el("ul");n.children.forEach(function(c){ul.appendChild(build(c,level+1));});
    n.members.forEach(function(a){var m=el("li","amu");m.title=a.text;m.appendChild(el("span","p-"+a.polarity,"● "));
      m.appendChild(document.createTextNode(a.text));ul.appendChild(m);});li.appendChild(ul);}
  return li;
}
function setAll(sec,collapsed){sec.querySelectorAll("li.node").forEach(function(li){
  if(li.querySelector("ul")){li.classList.toggle("collapsed",collapsed);li.firstChild.firstChild.textContent=collapsed?"▸":"▾";}});}
var titles={event:"Event tree",affect:"Affect tree",time:"Time forest"};
data.order.forEach(function(v){
  var sec=el("section","view");sec.id="view-"+v;sec.appendChild(el("h2",null,titles[v]));
  var st=s.views[v];sec.appendChild(el("div","meta",st.amus+" AMUs, "+st.nodes+" nodes, "+st.leaves+
    (v==="time"?" sessions":" leaves")+", depth "+st.depth));
  var bar=el("div","toolbar"),b1=el("button",null,"expand all"),b2=el("button",null,"collapse all");
  bar.appendChild(b1);bar.appendChild(b2);sec.appendChild(bar);
  var ul=el("ul","tree");ul.appendChild(build(data.views[v],0));sec.appendChild(ul);
  b1.addEventListener("click",function(){setAll(sec,false);});b2.addEventListener("click",function(){setAll(sec,true);});
  document.getElementById("views").appendChild(sec);
});
if(data.links&&data.links.length){var ls=el("section","view");ls.id="links";
  ls.appendChild(el("h2",null,"Relation links"));var lt=el("table");
  data.links.forEach(function(k){var tr=el("tr");
    tr.appendChild(el("td",null,k.source_text+" ["+k.source+", "+k.source_status+"]"));
    tr.appendChild(el("td",null,k.relation+" ("+k.confidence.toFixed(2)+")"));
    tr.appendChild(el("td",null,k.target_text+" ["+k.target+", "+k.target_status+"]"));lt.appendChild(tr);});
  ls.appendChild(lt);document.getElementById("views").appendChild(ls);}
if(data.chains&&data.chains.length){var cs=el("section","view");cs.id="chains";
  cs.appendChild(el("h2",null,"Facts that changed (oldest version first)"));var cl=el("ul");
  data.chains.forEach(function(c){cl.appendChild(el("li",null,c.map(function(x){
    return x.text+" ["+x.said.slice(0,10)+", "+x.status+"]";}).join(" \u2192 ")));});
  cs.appendChild(cl);document.getElementById("views").appendChild(cs);}
if(opts.node&&labels[opts.node])show(labels[opts.node][0],labels[opts.node][1]);
document.body.dataset.rendered=String(document.querySelectorAll("li.node").length);
})();
</script></body></html>
"""


def render_html(stats: SpaceStats, views: dict[str, NodeInfo], links: list | None = None,
                chains: list | None = None) -> str:
    """The page as a string: data embedded as JSON (with `</` escaped), no external URL; `links`
    (`etamem.fta.inspection.LinkInfo`s) add a "Relation links" section, `chains` (lists of
    `ChainStep`) a "Facts that changed" one."""
    data = {"stats": stats.to_dict(), "order": [v for v in VIEWS if v in views],
            "views": {k: n.to_dict() for k, n in views.items()}, "links": [i.to_dict() for i in links or []],
            "chains": [[s.to_dict() for s in c] for c in chains or []]}
    blob = json.dumps(data, ensure_ascii=False).replace("</", "<\\/").replace("<!--", "<\\!--")
    title = stats.space.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return PAGE.replace("__TITLE__", title).replace("__DATA__", blob)


def write_html(path, stats: SpaceStats, views: dict[str, NodeInfo], links: list | None = None,
               chains: list | None = None) -> Path:
    path = Path(path)
    atomic_write(path, render_html(stats, views, links, chains))
    return path


# --- PNG plots -----------------------------------------------------------------------------------
def _layout(root: NodeInfo) -> tuple[list[tuple[float, float, float, float]], list[tuple[float, float, int, str]]]:
    """Tidy layout: leaves at x = 0, 1, 2 ... in depth-first order, a parent above the mean of
    its children, y = -level. Returns (edges x0, y0, x1, y1) and (x, y, count, kind) per node."""
    edges, nodes = [], []
    next_x = [0.0]

    def place(n: NodeInfo, level: int) -> float:
        if not n.children:
            x = next_x[0]
            next_x[0] += 1.0
        else:
            xs = [place(c, level + 1) for c in n.children]
            x = sum(xs) / len(xs)
            edges.extend((x, -level, cx, -level - 1) for cx in xs)
        nodes.append((x, -level, n.count, n.kind))
        return x

    place(root, 0)
    return edges, nodes


def plot_tree_shapes(path, views: dict[str, NodeInfo], stats: SpaceStats) -> Path:
    plt = pyplot("inspect")
    fig, axes = plt.subplots(1, len(views), figsize=(5.2 * len(views), 4.2), dpi=90)
    axes = axes if len(views) > 1 else [axes]
    for ax, (name, root) in zip(axes, views.items()):
        edges, nodes = _layout(root)
        for x0, y0, x1, y1 in edges:
            ax.plot([x0, x1], [y0, y1], color="#b0bec5", lw=0.6, zorder=1)
        if nodes:
            xs, ys, counts, kinds = zip(*nodes)
            colours = ["#2e7d32" if k in ("leaf", "session") else "#1565c0" for k in kinds]
            ax.scatter(xs, ys, s=[8 + 4 * c ** 0.8 for c in counts], c=colours, alpha=0.8, zorder=2, linewidths=0)
        v = stats.views[name]
        ax.set_title(f"{name}: {v.nodes} nodes, {v.leaves} {'sessions' if name == 'time' else 'leaves'}, "
                     f"depth {v.depth}", fontsize=10)
        ax.set_xticks([])
        ax.set_ylabel("level")
        ax.set_yticks(sorted({int(y) for _, y, _, _ in nodes}))
        ax.set_yticklabels([str(-int(y)) for y in sorted({int(y) for _, y, _, _ in nodes})])
    fig.suptitle(f"Tree shapes of {stats.space} (dot area ~ AMUs; green = leaf/session)", fontsize=11)
    return save_png(fig, path)


def plot_leaf_sizes(path, stats: SpaceStats) -> Path:
    plt = pyplot("inspect")
    from matplotlib.ticker import MaxNLocator

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.4), dpi=90)
    for ax, name in zip(axes, VIEWS):
        v = stats.views[name]
        if v.leaf_size_hist:
            ks, cs = zip(*v.leaf_size_hist)
            width = max(1, (max(ks) - min(ks) + 1) // 30)  # wide ranges (sessions): bins of `width` sizes
            bins = np.arange(min(ks), max(ks) + width + 1, width) - 0.5
            ax.hist(ks, bins=bins, weights=cs, color=VIEW_COLOURS[name], rwidth=0.85)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_title(f"{name}: {'AMUs per session' if name == 'time' else 'AMUs per leaf'}", fontsize=10)
        ax.set_xlabel("size")
        ax.set_ylabel("count")
    return save_png(fig, path)


def plot_thresholds(path, stats: SpaceStats) -> Path:
    """Per semantic tree: tau_new / tau_coh / tau_merge and the Otsu threshold (top) and
    M_max (bottom) after each calibration update; dotted lines are the initial values."""
    plt = pyplot("inspect")
    from matplotlib.ticker import MaxNLocator

    fig, axes = plt.subplots(2, 2, figsize=(12, 5.2), dpi=90, sharex="col", height_ratios=(2.2, 1))
    for col, name in enumerate(("event", "affect")):
        v = stats.views[name]
        top, bottom = axes[0][col], axes[1][col]
        hist = v.threshold_history
        if hist:
            steps = [h["step"] for h in hist]
            for key, colour in (("tau_new", "#1f77b4"), ("tau_coh", "#2ca02c"), ("tau_merge", "#d62728")):
                top.plot(steps, [h[key] for h in hist], marker=".", color=colour, label=key)
                top.axhline(v.initial_thresholds[key], color=colour, lw=0.7, ls=":")
            top.plot(steps, [h["otsu"] for h in hist], color="#7f7f7f", ls="--", lw=0.8, label="Otsu")
            bottom.plot(steps, [h["m_max"] for h in hist], marker=".", color="#9467bd", label="M_max")
            bottom.axhline(v.initial_thresholds["m_max"], color="#9467bd", lw=0.7, ls=":")
            top.legend(fontsize=8, loc="best", ncol=2)
        else:
            top.text(0.5, 0.5, f"no calibration update yet\n(warm-up: {v.observations} observations)",
                     ha="center", va="center", transform=top.transAxes)
        top.set_title(f"{name}: calibrated thresholds per maintenance step (dotted: initial)", fontsize=10)
        top.set_ylabel("cosine")
        bottom.set_ylabel("M_max")
        bottom.set_xlabel("maintenance step (session end)")
        bottom.xaxis.set_major_locator(MaxNLocator(integer=True))
    return save_png(fig, path)


def plot_projection(path, proj: Projection) -> Path:
    plt = pyplot("inspect")
    method = {"pca": "PCA", "tsne": "t-SNE"}.get(proj.method, proj.method)
    fig, axes = plt.subplots(1, 2, figsize=(12, 5), dpi=90)
    for kind in ("raw", "event", "affect", "none"):
        pts = [p for p in proj.text if p.kind == kind]
        if pts:
            axes[0].scatter([p.x for p in pts], [p.y for p in pts], s=9, alpha=0.6, c=VIEW_COLOURS[kind],
                            label=f"{'raw turns' if kind == 'raw' else kind + ' AMUs'} ({len(pts)})", linewidths=0)
    axes[0].set_title(f"text embeddings ({method}): raw turns and AMUs by view", fontsize=10)
    for pol in ("negative", "positive", "neutral"):
        pts = [p for p in proj.affect if p.polarity == pol]
        if pts:
            axes[1].scatter([p.x for p in pts], [p.y for p in pts], s=9, alpha=0.7, c=POLARITY_COLOURS[pol],
                            label=f"{pol} ({len(pts)})", linewidths=0)
    axes[1].set_title(f"affective embeddings of Affect AMUs ({method}) by polarity", fontsize=10)
    for ax in axes:
        ax.set_xticks([])
        ax.set_yticks([])
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8, markerscale=2)
    return save_png(fig, path)


def write_plots(out_dir, stats: SpaceStats, views: dict[str, NodeInfo], proj: Projection | None) -> list[Path]:
    out = Path(out_dir)
    paths = [plot_tree_shapes(out / "tree_shapes.png", views, stats), plot_leaf_sizes(out / "leaf_sizes.png", stats),
             plot_thresholds(out / "thresholds.png", stats)]
    if proj is not None:
        paths.append(plot_projection(out / "projection.png", proj))
    return paths


def write_all(mem, space: str, out_dir, *, method: str = "pca", plots: bool = True) -> list[Path]:
    """index.html plus (with `plots`) the four PNGs for one space; returns the paths written."""
    stats = space_stats(mem, space)
    views = {v: subtree(mem, stats.space, v) for v in VIEWS}
    from etamem.fta.inspection import fact_chains, link_infos

    out = Path(out_dir)
    paths = [write_html(out / "index.html", stats, views, link_infos(mem, stats.space), fact_chains(mem, stats.space))]
    if plots:
        paths += write_plots(out, stats, views, projection(mem, stats.space, method))
    return paths
