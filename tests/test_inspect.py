"""Inspection utilities: statistics, subtrees, AMU paths, query traces, export, CLI and the HTML page."""
import json
import os
import re
import shutil
import subprocess

import numpy as np
import pytest

from etamem import Config, Memory
from etamem.inspection import reports as ins
from etamem.models.affect import VaderAffectTagger

TOPICS = [
    ("cat", ["I adopted a grey cat named Miso.", "Miso the cat sleeps on the sofa all day.",
             "The cat chased a red laser dot.", "I bought cat food and a scratching post."]),
    ("job", ["I started a new job as a nurse in Lyon.", "The nursing shift starts at seven.",
             "My job at the hospital is tiring.", "I passed the nursing exam, I am thrilled!"]),
    ("car", ["My car broke down on the highway, which was terrible.", "The garage fixed the car engine.",
             "I drive the car to Lyon every week.", "The car insurance costs too much, awful."]),
    ("trip", ["I booked a train ticket to Marseille for July.", "We will visit the old port in Marseille.",
              "The hotel in Marseille has a sea view, lovely.", "I packed my bag for the Marseille trip."]),
]


def turns():
    out, i = [], 0
    for s, day in enumerate(("2023-05-08", "2023-05-20", "2023-06-02", "2023-06-03")):
        for _, texts in TOPICS:
            for j in (s % 2, 2 + s % 2):
                out.append({"turn_id": f"t{i}", "session_id": f"s{s}", "timestamp": f"{day}T10:{i % 60:02d}",
                            # sessions 2 and 3 say what 0 and 1 said, each line by the other speaker:
                            # no repeats (a repeat is a mention of the earlier unit)
                            "speaker": "Ana" if (i + (s >= 2)) % 2 else "Ben", "text": texts[j]})
                i += 1
    return out


def make_memory(encoder, path=None):
    cfg = Config(b_max=2, m_min=1, summary_delta=2, calibration_min_obs=8)
    return Memory(path, cfg, text_encoder=encoder, affect_tagger=VaderAffectTagger(encoder))


@pytest.fixture
def mem(hashing_encoder):
    m = make_memory(hashing_encoder)
    m.add(turns(), space="u")
    m.end_session("u")
    yield m
    m.close()


@pytest.fixture
def store_dir(minilm, tmp_path):
    """A saved store built with the real encoder (the CLI loads it to encode queries)."""
    path = tmp_path / "store"
    with make_memory(minilm, path) as m:
        m.add(turns(), space="u")
        m.end_session("u")
    return path


def alive_nodes(tree):
    return {int(n) for n in np.flatnonzero(tree.alive[: tree.n_nodes])}


def test_space_stats_match_the_views(mem):
    s = ins.space_stats(mem, "u")
    views = mem.views("u")
    amus = mem.list("u")
    assert s.amus == len(amus) and s.turns == len(turns())
    assert s.polarity == {p: sum(a.polarity == p for a in amus) for p in ("negative", "neutral", "positive")}
    for name in ("event", "affect"):
        tree, v = views.tree(name), s.views[name]
        assert v.amus == tree.active_rows and v.nodes == len(alive_nodes(tree)) and v.leaves == len(tree.leaves())
        assert sum(v.nodes_per_depth) == v.nodes and len(v.nodes_per_depth) == v.depth + 1
        assert sum(k * c for k, c in v.leaf_size_hist) == v.amus and sum(c for _, c in v.leaf_size_hist) == v.leaves
        inner = [n for n in alive_nodes(tree) if not tree.is_leaf[n]]
        assert sum(k * c for k, c in v.fanout_hist) == sum(len(tree.children[n]) for n in inner) == v.nodes - 1
        assert v.cohesion.n == sum(tree.count[n] >= 2 for n in tree.leaves()) == sum(v.cohesion.counts)
        assert v.thresholds == tree.calibrator.current.as_dict()
        assert v.threshold_history == tree.calibrator.history and v.calibrated == tree.calibrator.warmed_up
    # the small config makes the trees deep enough, and calibration ran
    assert s.views["event"].depth >= 2 and s.views["affect"].depth >= 1
    assert any(s.views[v].threshold_history for v in ("event", "affect"))
    t = s.views["time"]
    assert t.levels == views.time.counts() == {"month": 2, "week": 3, "day": 4, "session": 4}  # a day under its own month
    assert t.leaf_size_hist == [[8, 4]] and t.nodes == len(views.time.nodes)


def test_subtree_covers_the_tree_and_honours_depth_and_node(mem):
    views = mem.views("u")
    for name in ("event", "affect"):
        tree = views.tree(name)
        full = ins.subtree(mem, "u", name)
        nodes = list(full.walk())
        assert {int(n.node_id) for n in nodes} == alive_nodes(tree)
        assert sorted(a.amu_id for n in nodes for a in n.members) == sorted(tree.row_of)
        for n in nodes:
            assert n.n_children == len(n.children) and not n.truncated
            if n.children:
                assert n.count == sum(c.count for c in n.children) and n.cohesion is None
            else:
                assert n.kind == "leaf" and n.count == len(n.members) and -1.0 <= n.cohesion <= 1.0
    inner = next(n for n in ins.subtree(mem, "u", "event").walk() if n.kind == "inner")
    assert ins.subtree(mem, "u", "event", node=inner.node_id) == inner
    top = ins.subtree(mem, "u", "event", depth=1)
    assert max(n.depth for n in top.walk()) == 1
    assert any(n.truncated for n in top.children) and not any(n.members for n in top.walk() if n.kind != "leaf")
    time = ins.subtree(mem, "u", "time")
    assert time.kind == "forest" and {n.node_id for n in time.walk()} == set(views.time.nodes) | {"time"}
    assert [n.node_id for n in time.children] == ["M:2023-05", "M:2023-06"] and time.count == len(mem.list("u"))
    day = ins.subtree(mem, "u", "time", node="D:2023-06-03")
    assert [c.node_id for c in day.children] == ["S:s3"] and len(day.children[0].members) == 8
    with pytest.raises(ValueError, match="node"):
        ins.subtree(mem, "u", "event", node="999")
    with pytest.raises(ValueError, match="view"):
        ins.subtree(mem, "u", "emotion")


def test_amu_paths_lead_from_the_root_to_the_amus_leaf(mem):
    views = mem.views("u")
    for amu in mem.list("u"):
        p = ins.amu_paths(mem, "u", amu.amu_id)
        home = views.view_of(amu.amu_id)
        other = "affect" if home == "event" else "event"
        tree = views.tree(home)
        assert p.paths[other] is None and p.amu.amu_id == amu.amu_id
        steps = p.paths[home]
        assert int(steps[0].node_id) == tree.root and steps[-1].kind == "leaf"
        assert amu.amu_id in [tree.amu_ids[r] for r in tree.members[int(steps[-1].node_id)]]
        assert all(tree.parent[int(b.node_id)] == int(a.node_id) for a, b in zip(steps, steps[1:]))
        assert [s.kind for s in p.paths["time"]] == ["month", "week", "day", "session"]
        assert p.paths["time"][-1].node_id == f"S:{amu.session_id}"
        assert ins.AMUPath.from_dict(json.loads(json.dumps(p.to_dict()))) == p


@pytest.mark.parametrize("query", ["Where does the cat sleep?", "What happened to the car on the highway?"])
def test_trace_matches_the_search(mem, query):
    tr = ins.trace_query(mem, query, "u", top_k=6)
    res = mem.retrieve(query, "u", top_k=6)
    assert tr.budgets == res.budgets and sum(tr.budgets.values()) == max(6, mem.config.route_budget)
    assert [h.amu.amu_id for h in tr.hits] == [h.amu.amu_id for h in res.hits]
    assert [h.score for h in tr.hits] == pytest.approx([h.score for h in res.hits])
    for name, v in tr.views.items():
        assert v.budget == res.budgets[name] and v.weight == pytest.approx(res.weights[name])
        assert v.entropy == pytest.approx(res.entropies.get(name))
        assert len(v.found) <= v.budget
        if v.budget:
            assert v.levels and [c.node_id for c in v.levels[-1]] == v.leaves
            assert all(c.kind in ("leaf", "session") for c in v.levels[-1])
            for level in v.levels:
                assert [c.score for c in level] == sorted((c.score for c in level), reverse=True)
            # the work: every child of each beam scored, every unit of the final leaves, all in context
            assert v.nodes_scored >= sum(len(level) for level in v.levels)
            assert v.units_scored == sum(c.count for c in v.levels[-1]) > 0
            assert v.context_scored == (v.units_scored if mem.config.context_share > 0 else 0)
    assert tr.work["units_scored"] == sum(v.units_scored for v in tr.views.values())
    assert tr.work["nodes_scored"] == sum(v.nodes_scored for v in tr.views.values())
    assert tr.work["raw_turns"] == tr.work["raw_turns_scanned_exactly"] == len(mem.turns("u"))
    turns_by_id = {t.turn_id: t for t in mem.turns("u")}
    for h in tr.hits:
        assert [t.turn_id for t in h.source_turns] == h.amu.source_turn_ids
        assert all(t.text == turns_by_id[t.turn_id].text for t in h.source_turns)
    assert "cat" in tr.hits[0].amu.text.lower() or "car" in tr.hits[0].amu.text.lower()
    assert ins.QueryTrace.from_dict(json.loads(json.dumps(tr.to_dict()))) == tr


def test_projections_keep_planar_geometry_and_tsne_runs():
    rng = np.random.default_rng(0)
    plane = rng.normal(size=(40, 2)) @ rng.normal(size=(2, 16)) + 3.0  # rank-2 data in 16-D
    xy = ins.project_2d(plane, "pca")
    d_in = np.linalg.norm(plane[:, None] - plane[None], axis=-1)
    d_out = np.linalg.norm(xy[:, None] - xy[None], axis=-1)
    np.testing.assert_allclose(d_out, d_in, atol=1e-8)
    assert ins.project_2d(plane[:1], "pca").shape == (1, 2)
    with pytest.raises(ValueError, match="method"):
        ins.project_2d(plane, "umap")
    pytest.importorskip("sklearn")
    two = np.vstack([rng.normal(0, 0.05, (15, 8)), rng.normal(3, 0.05, (15, 8))])
    emb = ins.project_2d(two, "tsne")
    assert emb.shape == (30, 2) and np.isfinite(emb).all()
    # the two clusters stay apart: every point is nearer its own cluster's centre
    c0, c1 = emb[:15].mean(0), emb[15:].mean(0)
    assert (np.linalg.norm(emb[:15] - c0, axis=1) < np.linalg.norm(emb[:15] - c1, axis=1)).all()


def test_export_round_trips_and_matches_the_store(mem):
    exp = ins.export_store(mem)
    data = json.loads(json.dumps(exp.to_dict()))
    back = ins.load_export(data)
    assert back == exp and back.to_dict() == data
    (space,) = back.spaces
    assert [t.turn_id for t in space.turns] == [t.turn_id for t in mem.turns("u")]
    assert [a.amu_id for a in space.amus] == [a.amu_id for a in mem.list("u", status=None)]
    assert space.stats == ins.space_stats(mem, "u")
    for v in ("event", "affect", "time"):
        assert len(list(space.views[v].walk())) == space.stats.views[v].nodes + (v == "time")
    with pytest.raises(ValueError, match="not an ETAMem export"):
        ins.load_export({"spaces": []})


def test_cli_inspect_trace_export_stats(store_dir, minilm, tmp_path, capsys):
    from etamem.cli import main

    assert main(["-q", "inspect", str(store_dir), "--view", "event", "--depth", "0"]) == 0
    out = capsys.readouterr().out
    assert "Event tree" in out and "leaf" in out and "AMUs" in out
    assert main(["-q", "inspect", str(store_dir), "--view", "time", "--depth", "2", "--json"]) == 0
    (node,) = json.loads(capsys.readouterr().out)
    assert node["kind"] == "forest" and [c["node_id"] for c in node["children"]] == ["M:2023-05", "M:2023-06"]
    assert main(["-q", "inspect", str(store_dir), "--amu", "t0#0"]) == 0
    assert "S:s0" in capsys.readouterr().out
    assert main(["-q", "trace", str(store_dir), "Where does the cat sleep?", "--top-k", "4"]) == 0
    out = capsys.readouterr().out
    assert "Routing" in out and "budget" in out and "Hits (" in out and "<- t" in out
    assert main(["-q", "trace", str(store_dir), "Where does the cat sleep?", "--top-k", "4", "--json"]) == 0
    assert sum(json.loads(capsys.readouterr().out)["budgets"].values()) == Config().route_budget
    out_file = tmp_path / "export.json"
    assert main(["-q", "export", str(store_dir), "--format", "json", "--out", str(out_file)]) == 0
    with make_memory(minilm, store_dir) as m:
        assert ins.load_export(json.loads(out_file.read_text())) == ins.export_store(m)
    assert main(["-q", "stats", str(store_dir), "--detail"]) == 0
    out = capsys.readouterr().out
    assert "cohesion" in out and "thresholds" in out and "session sizes" in out
    assert main(["-q", "stats", str(store_dir), "--detail", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["views"]["time"]["levels"]["session"] == 4
    assert main(["-q", "inspect", str(store_dir), "--space", "nope"]) == 2


def test_viz_writes_plots_and_a_self_contained_page(mem, tmp_path):
    from etamem.inspection.viz import write_all

    paths = write_all(mem, "u", tmp_path / "viz")
    names = sorted(p.name for p in paths)
    assert names == ["index.html", "leaf_sizes.png", "projection.png", "thresholds.png", "tree_shapes.png"]
    for p in paths:
        if p.suffix == ".png":
            assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 5000
    html = (tmp_path / "viz" / "index.html").read_text()
    assert not re.search(r"(src|href)\s*=\s*[\"']?(https?:)?//", html) and "http://" not in html.split("<script")[0]
    proj = ins.projection(mem, "u")
    assert sum(p.kind == "raw" for p in proj.text) == len(turns())
    assert sum(p.kind != "raw" for p in proj.text) == len(mem.list("u"))
    assert len(proj.affect) == mem.views("u").affect.active_rows


CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None)


@pytest.mark.skipif(CHROMIUM is None, reason="Debian chromium not installed (.ci/run installs it: apt-get install chromium)")
def test_html_page_renders_every_node_in_headless_chromium(mem, tmp_path):
    from etamem.inspection.viz import write_html

    stats = ins.space_stats(mem, "u")
    # a summary carrying markup must show as text, not break the page
    views = {v: ins.subtree(mem, "u", v) for v in ins.VIEWS}
    views["event"].walk().__next__().summary = "</script><b>not markup</b>"
    page = write_html(tmp_path / "page" / "index.html", stats, views)
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=3000"]
    root = views["event"].node_id  # selected through the URL: its details (with the summary) are rendered
    dom = subprocess.run([CHROMIUM, *flags, "--dump-dom", f"{page.as_uri()}#node=event:{root}"], capture_output=True,
                         text=True, timeout=120).stdout
    expected_nodes = sum(stats.views[v].nodes for v in ins.VIEWS) + 1  # + the Time forest's own root
    assert len(re.findall(r'<li class="node[ "]', dom)) == expected_nodes
    assert f'data-rendered="{expected_nodes}"' in dom
    assert len(re.findall(r'<li class="amu"', dom)) == 2 * stats.amus  # under a tree leaf and a session
    assert dom.count('<section class="view"') == 3 and "<b>not markup</b>" not in dom
    assert "<td>&lt;/script&gt;&lt;b&gt;not markup&lt;/b&gt;</td>" in dom  # shown as text in the details
    shot = tmp_path / "page.png"
    subprocess.run([CHROMIUM, *flags, "--window-size=1400,900", f"--screenshot={shot}", page.as_uri()],
                   capture_output=True, timeout=120)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    keep = os.environ.get("ETAMEM_KEEP_SCREENSHOT")
    if keep:
        shutil.copy(shot, keep)
