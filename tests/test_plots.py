"""Behaviour of topo_env.frontends.plots: which action each drawn edge is credited to, what every panel
draws (arrows, adversary marks, legends, bar heights, curves), accuracy in points, one round as
an RGB array, pictures shown or saved, files written, and clear errors on bad input."""
from __future__ import annotations

import os
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest
from matplotlib.collections import PathCollection
from matplotlib.colors import to_hex
from matplotlib.figure import Figure
from matplotlib.image import imread
from matplotlib.patches import FancyArrowPatch, Rectangle
from matplotlib.text import Text

import topo_env
from topo_env.frontends.comm_actions import ACTION_NAMES
from topo_env.frontends.comm_graph import build_adjacency
from topo_env.frontends.plots import (
    ACTION_STYLES, ADVERSARY_COLOR, DPI, ROUND_STYLES, draw_episodes, draw_round, draw_topology,
    draw_topology_examples, edge_actions, plot_action_distribution, plot_learning_curves, plot_robustness,
    plot_sweeps, round_picture, save_figure, show_picture,
)

S, B, Q, G, V, D = range(6)  # solo, broadcast, query, aggregate, verify, debate
ROLES3 = ("specialist", "specialist", "analyzer")


def arrows_of(ax) -> dict[str, FancyArrowPatch]:
    return {p.get_gid(): p for p in ax.patches if isinstance(p, FancyArrowPatch)}


def bars_of(fig: Figure) -> dict[str, Rectangle]:
    return {p.get_gid(): p for ax in fig.axes for p in ax.patches if isinstance(p, Rectangle) and p.get_gid()}


def legend_labels(fig: Figure) -> list[str]:
    return [t.get_text() for legend in fig.legends for t in legend.get_texts()]


# -- which action made an edge ----------------------------------------------------------------------


def test_edge_credit_follows_the_documented_order():
    # agent 0 broadcasts, agent 2 aggregates: 0 -> 2 is explained by both, the broadcast wins
    acts = [B, S, G]
    assert edge_actions(build_adjacency(acts), acts) == {(0, 1): B, (0, 2): B, (1, 2): G}
    # a debate 0 <-> 1 (targets 1, 0) and agent 2's query at 0; 1 -> 2 from agent 1's execute_verify
    acts, targets = [D, V, Q], [1, 2, 0]
    adj = build_adjacency(acts, targets)
    assert edge_actions(adj, acts, targets) == {(0, 1): D, (1, 0): D, (1, 2): V, (2, 0): Q}
    # execute_verify's chain edge beats the receiver's aggregate; the receiver's debate comes last
    acts, targets = [V, G, D], [1, 2, 0]
    adj = build_adjacency(acts, targets)
    credit = edge_actions(adj, acts, targets)
    assert credit[(0, 1)] == V and credit[(2, 1)] == G and credit[(0, 2)] == D and credit[(2, 0)] == D


def test_every_edge_is_credited_to_an_action_that_makes_it():
    """Random joint actions and targets for N = 2..6: with the targets, each edge is credited
    once, to an endpoint's action that alone produces it. Without them, the credit differs only
    where the targets matter (selective_query / debate_check), and still names an endpoint's
    action that points that way."""
    rng = np.random.default_rng(7)
    for _ in range(300):
        n = int(rng.integers(2, 7))
        acts = rng.integers(0, 6, size=n).tolist()
        targets = [int((i + rng.integers(1, n)) % n) for i in range(n)]
        adj = build_adjacency(acts, targets)
        credit = edge_actions(adj, acts, targets)
        assert sorted(credit) == sorted(map(tuple, np.argwhere(adj).tolist()))
        for (u, v), a in credit.items():
            makers = [i for i in (u, v) if acts[i] == a]
            alone = [build_adjacency([a if j == i else S for j in range(n)], targets)[u, v] for i in makers]
            assert any(alone), (acts, targets, (u, v), ACTION_NAMES[a])
        guessed = edge_actions(adj, acts)
        assert guessed.keys() == credit.keys()
        for edge, a in guessed.items():
            if credit[edge] in (B, V, G):
                assert a == credit[edge], (acts, targets, edge)
            else:
                u, v = edge
                assert (acts[u] == a and a in (Q, D)) or (acts[v] == a == D), (acts, targets, edge)


def test_edge_credit_rejects_graphs_the_actions_cannot_make():
    with pytest.raises(ValueError, match=r"edge 1->2 is made by no agent"):
        edge_actions(np.array([[0, 0, 0], [0, 0, 1], [0, 0, 0]]), [S, S, S])
    with pytest.raises(ValueError, match=r"lacks edge 0->2 that agent 0's broadcast_all"):
        edge_actions(np.array([[0, 1, 0], [0, 0, 0], [0, 0, 0]]), [B, S, S])
    acts, targets = [Q, S, S], [1, 0, 0]
    wrong = build_adjacency(acts, [2, 0, 0])
    with pytest.raises(ValueError, match=r"lacks edge 0->1"):
        edge_actions(wrong, acts, targets)


# -- topology drawings ------------------------------------------------------------------------------


def test_draw_topology_draws_each_edge_once_in_its_action_style():
    acts = np.array([[B, S, G], [V, D, Q], [S, S, S]])
    targets = np.array([[1, 2, 0], [1, 0, 0], [1, 2, 0]])
    adj = np.stack([build_adjacency(a, t) for a, t in zip(acts, targets)])
    fig = draw_topology(adj, acts, ROLES3, targets=targets, title="three rounds")
    assert isinstance(fig, Figure) and len(fig.axes) == 3 and fig.get_suptitle() == "three rounds"
    for t, ax in enumerate(fig.axes):
        credit = edge_actions(adj[t], acts[t], targets[t])
        arrows = arrows_of(ax)
        assert set(arrows) == {f"{u}->{v}:{ACTION_NAMES[a]}" for (u, v), a in credit.items()}
        assert len(arrows) == int(adj[t].sum())
        for gid, arrow in arrows.items():
            style = ACTION_STYLES[gid.split(":")[1]]
            assert to_hex(arrow.get_edgecolor()) == style["color"].lower()
        assert ax.get_title().startswith(f"round {t + 1}")
    assert len(arrows_of(fig.axes[2])) == 0  # all solo: no edge
    nodes = next(c for c in fig.axes[0].collections if isinstance(c, PathCollection) and c.get_gid() == "nodes")
    fills = [to_hex(c) for c in nodes.get_facecolors()]
    assert fills == [ACTION_STYLES[ACTION_NAMES[a]]["color"].lower() for a in acts[0]]
    assert set(ACTION_NAMES) <= set(legend_labels(fig)) and "adversary" not in legend_labels(fig)


def test_draw_topology_marks_the_adversary_and_labels_roles():
    acts = np.array([[S, B, S, G]])
    adj = build_adjacency(acts[0])[None]
    roles = ("algorithm designer", "specialist", "specialist", "analyzer")
    fig = draw_topology(adj, acts, roles, adversaries=[1], agent_names=[f"agent_{i}" for i in range(4)])
    ax = fig.axes[0]
    labels = {t.get_gid(): t for t in ax.texts if (t.get_gid() or "").startswith("label:")}
    assert len(labels) == 4
    assert "(adv)" in labels["label:1"].get_text()
    assert all("(adv)" not in labels[f"label:{i}"].get_text() for i in (0, 2, 3))
    assert to_hex(labels["label:1"].get_color()) == ADVERSARY_COLOR.lower()
    assert "agent_3" in labels["label:3"].get_text() and "analyzer" in labels["label:3"].get_text()
    assert "algorithm" in labels["label:0"].get_text() and "designer" in labels["label:0"].get_text()
    nodes = next(c for c in ax.collections if c.get_gid() == "nodes")
    rims = [to_hex(c) for c in nodes.get_edgecolors()]
    assert rims[1] == ADVERSARY_COLOR.lower() and ADVERSARY_COLOR.lower() not in rims[:1] + rims[2:]
    assert "adversary" in legend_labels(fig)
    numbers = sorted(t.get_text() for t in ax.texts if t.get_gid() is None)
    assert numbers == ["0", "1", "2", "3"]


def test_draw_topology_of_a_real_episode_with_its_targets():
    env = topo_env.parallel_env(profile="mmlu_pro", rounds=3, adversarial_agents=[2])
    env.reset(seed=3)
    rng = np.random.default_rng(3)
    while env.agents:
        env.step({a: int(rng.integers(0, 6)) for a in env.agents})
    adj = np.stack([r.adjacency for r in env.history])
    acts = np.array([r.actions for r in env.history])
    targets = np.array([r.targets for r in env.history])
    fig = draw_topology(adj, acts, env.config.roles, adversaries=env.config.adversarial_agents, targets=targets)
    assert [len(arrows_of(ax)) for ax in fig.axes] == [int(a.sum()) for a in adj]


def test_draw_into_given_axes_and_examples_grid():
    acts = np.array([[B, S, S], [S, S, G]])
    adj = np.stack([build_adjacency(a) for a in acts])
    fig = Figure()
    axes = fig.subplots(2, 2)
    assert draw_topology(adj, acts, ROLES3, ax_row=axes[1]) is fig
    assert [len(arrows_of(ax)) for ax in axes[1]] == [2, 2] and not arrows_of(axes[0][0])
    assert len(fig.legends) == 1
    draw_topology(adj, acts, ROLES3, ax_row=axes[0])
    assert len(fig.legends) == 1  # one legend per figure
    with pytest.raises(ValueError, match="ax_row has 1 axes, adjacency has 2 rounds"):
        draw_topology(adj, acts, ROLES3, ax_row=[axes[0][0]])
    grid = draw_topology_examples([("first", adj, acts), ("second", adj[::-1], acts[::-1], None, [2])], ROLES3,
                                  title="grid")
    assert [sub.get_suptitle() for sub in grid.subfigs] == ["first", "second"]
    assert len(grid.axes) == 4 and "adversary" in legend_labels(grid)


def test_draw_episodes_picks_the_first_episode_of_each_bucket():
    acts = np.array([[B, S, S], [S, S, G]])
    adj = np.stack([build_adjacency(a) for a in acts])
    buckets = ["hard", "hard", "easy", "medium", "easy"]
    episodes = [SimpleNamespace(adjacency=adj, actions=acts, bucket=b, reward=0.5 * k, adversaries=(k % 3,))
                for k, b in enumerate(buckets)]
    fig = draw_episodes(episodes, ROLES3)
    titles = [sub.get_suptitle() for sub in fig.subfigs]
    assert titles == ["episode 0, hard, return +0.00", "episode 2, easy, return +1.00", "episode 3, medium, return +1.50"]
    rims = [to_hex(next(c for c in sub.axes[0].collections if c.get_gid() == "nodes").get_edgecolors()[k % 3])
            for sub, k in zip(fig.subfigs, (0, 2, 3))]
    assert rims == [ADVERSARY_COLOR.lower()] * 3  # each episode's own adversary
    plain = [SimpleNamespace(adjacency=adj, actions=acts) for _ in range(5)]
    assert len(draw_episodes(plain, ROLES3, limit=2).subfigs) == 2


@pytest.mark.parametrize("change, words", [
    (dict(actions=np.array([[B, S, S]])), ["actions", "(2, 3)", "(1, 3)"]),
    (dict(actions=np.array([[B, S, 7], [S, S, S]])), ["unknown action index 7", "agent 2", "round 1"]),
    (dict(adversaries=[5]), ["adversary index 5", "0..2"]),
    (dict(adversaries=[-1]), ["adversary index -1"]),
    (dict(roles=("specialist", "analyzer")), ["roles", "3 labels"]),
    (dict(adjacency=np.ones((2, 3, 4))), ["(T, N, N)", "(2, 3, 4)"]),
    (dict(adjacency=np.full((2, 3, 3), 2)), ["0/1", "2"]),
    (dict(adjacency=np.stack([np.eye(3, dtype=int)] * 2)), ["self-loop 0->0", "round 1"]),
    (dict(actions=np.array([[S, S, S], [S, S, S]])), ["edge 0->1 is made by no agent"]),
])
def test_draw_topology_bad_input(change, words):
    acts = np.array([[B, S, S], [S, S, S]])
    args = dict(adjacency=np.stack([build_adjacency(a) for a in acts]), actions=acts, roles=ROLES3, adversaries=())
    args.update(change)
    with pytest.raises(ValueError) as err:
        draw_topology(**args)
    for word in words:
        assert word in str(err.value), (word, str(err.value))


# -- action shares ----------------------------------------------------------------------------------


def test_action_distribution_bars_equal_the_shares():
    rounds = [{"solo_process": 0.25, "broadcast_all": 0.5, "debate_check": 0.25},
              {"aggregate_refine": 1.0}]
    fig = plot_action_distribution(rounds, title="qmix")
    bars = bars_of(fig)
    assert len(bars) == 2 * len(ACTION_NAMES) and len(fig.axes) == 1
    for t, shares in enumerate(rounds):
        bottom = 0.0
        for name in ACTION_NAMES:
            bar = bars[f"|round {t + 1}|{name}"]
            assert bar.get_height() == pytest.approx(shares.get(name, 0.0))
            assert bar.get_y() == pytest.approx(bottom)  # stacked in action order
            assert to_hex(bar.get_facecolor()) == ACTION_STYLES[name]["color"].lower()
            bottom += shares.get(name, 0.0)
    assert legend_labels(fig) == list(ACTION_NAMES)


def test_action_distribution_side_by_side_policies():
    clean = [{"solo_process": 1.0}, {"broadcast_all": 0.6, "solo_process": 0.4}]
    attacked = [{"debate_check": 0.3, "solo_process": 0.7}, {"solo_process": 1.0}]
    fig = plot_action_distribution({"clean": clean, "attacked": attacked})
    assert [ax.get_title() for ax in fig.axes] == ["clean", "attacked"]
    bars = bars_of(fig)
    assert bars["attacked|round 1|debate_check"].get_height() == pytest.approx(0.3)
    assert bars["clean|round 2|broadcast_all"].get_height() == pytest.approx(0.6)
    assert bars["clean|round 2|debate_check"].get_height() == 0.0


@pytest.mark.parametrize("dist, words", [
    ([{"shout": 0.5}], ["unknown action 'shout'", "round 1"]),
    ([{"solo_process": 1.5}], ["solo_process", "1.5", "[0, 1]"]),
    ([{"solo_process": 0.7, "broadcast_all": 0.7}], ["sum to 1.4"]),
    ([], ["non-empty list"]),
    ({"qmix": "solo_process"}, ["'qmix'", "non-empty list"]),
])
def test_action_distribution_bad_input(dist, words):
    with pytest.raises(ValueError) as err:
        plot_action_distribution(dist)
    for word in words:
        assert word in str(err.value), (word, str(err.value))


# -- learning curves --------------------------------------------------------------------------------


def test_learning_curves_one_panel_per_metric_with_references():
    curves = {"episode": [10, 20, 30], "reward": [0.1, 0.3, 0.2], "loss": [None, 0.5, 0.25], "epsilon": [1.0, 0.5, 0.1]}
    fig = plot_learning_curves(curves, title="run", references={"reward": {"best fixed": 0.25}})
    panels = [ax for ax in fig.axes if ax.axison]
    assert [ax.get_title() for ax in panels] == ["return per episode", "exploration epsilon", "TD loss"]
    for ax, key in zip(panels, ("reward", "epsilon", "loss")):
        line = next(li for li in ax.lines if li.get_gid() == f"curve:{key}")
        assert list(line.get_xdata()) == [10, 20, 30]
        np.testing.assert_allclose(line.get_ydata(), [np.nan if v is None else v for v in curves[key]])
    reference = [li for li in panels[0].lines if li.get_gid() is None]
    assert len(reference) == 1 and list(reference[0].get_ydata()) == [0.25, 0.25]
    assert "best fixed (0.25)" in [t.get_text() for t in panels[0].get_legend().get_texts()]


def test_learning_curves_draw_accuracy_in_points():
    curves = {"episode": [10, 20], "accuracy": [0.5, 0.625], "reward": [0.1, 0.2]}
    fig = plot_learning_curves(curves, references={"accuracy": {"best fixed": 0.6}, "reward": {"best fixed": 0.3}})
    panels = {ax.get_title(): ax for ax in fig.axes if ax.axison}
    assert set(panels) == {"accuracy (points)", "return per episode"}
    acc = panels["accuracy (points)"]
    curve = next(li for li in acc.lines if li.get_gid() == "curve:accuracy")
    np.testing.assert_allclose(curve.get_ydata(), [50.0, 62.5])
    reference = next(li for li in acc.lines if li.get_gid() is None)
    assert list(reference.get_ydata()) == [60.0, 60.0]
    assert "best fixed (60)" in [t.get_text() for t in acc.get_legend().get_texts()]
    reward = panels["return per episode"]  # other metrics keep their unit
    curve = next(li for li in reward.lines if li.get_gid() == "curve:reward")
    np.testing.assert_allclose(curve.get_ydata(), [0.1, 0.2])


@pytest.mark.parametrize("curves, references, words", [
    ({"episode": [1, 2], "reward": [0.1]}, None, ["curves['reward'] has 1 values", "2"]),
    ({"reward": [0.1]}, None, ["'episode'"]),
    ({"episode": [1]}, None, ["no metric"]),
    ({"episode": [1], "reward": [0.1]}, {"accuracy": {"x": 0.5}}, ["'accuracy'", "not in curves"]),
    ({"episode": [1], "reward": [0.1]}, {"reward": {"x": float("nan")}}, ["'x'", "finite"]),
])
def test_learning_curves_bad_input(curves, references, words):
    with pytest.raises(ValueError) as err:
        plot_learning_curves(curves, references=references)
    for word in words:
        assert word in str(err.value), (word, str(err.value))


# -- robustness -------------------------------------------------------------------------------------


def test_robustness_bars_and_drops():
    clean = {"qmix": {"accuracy": 0.8, "tokens_per_task": 3000.0}, "solo": {"accuracy": 0.6, "tokens_per_task": 1500.0}}
    attacked = {"qmix": {"accuracy": 0.7, "tokens_per_task": 3100.0}, "solo": {"accuracy": 0.35, "tokens_per_task": 1600.0}}
    fig = plot_robustness(clean, attacked, title="agent 0 adversarial")
    bars = bars_of(fig)
    for policy in clean:
        for which, results in (("clean", clean), ("attacked", attacked)):
            assert bars[f"accuracy|{policy}|{which}"].get_height() == pytest.approx(100 * results[policy]["accuracy"])
            assert bars[f"tokens_per_task|{policy}|{which}"].get_height() == pytest.approx(
                results[policy]["tokens_per_task"])
    drops = {t.get_gid(): t.get_text() for t in fig.axes[0].texts}
    assert drops == {"drop:qmix": "-10.0", "drop:solo": "-25.0"}  # points, as in the tables
    assert [ax.get_title() for ax in fig.axes] == ["accuracy (points)", "tokens per task"]
    assert fig.axes[0].get_ylim()[1] >= 100
    assert legend_labels(fig) == ["clean", "attacked"]


def test_robustness_bad_input():
    good = {"qmix": {"accuracy": 0.5, "tokens_per_task": 10.0}}
    with pytest.raises(ValueError, match=r"only clean \['qmix'\]"):
        plot_robustness(good, {"solo": good["qmix"]})
    with pytest.raises(ValueError, match=r"attacked\['qmix'\]\['accuracy'\] is None"):
        plot_robustness(good, {"qmix": {"tokens_per_task": 10.0}})


# -- files ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("columns", [1, 3])
def test_sweeps_keep_their_legend_and_title_inside_the_figure(columns):
    series = {label: {"accuracy": [[0.8, 0.01], None], "tokens_per_task": [[9000.0, 50.0], [12000.0, 80.0]]}
              for label in ("QMIX", "best fixed sequence", "adaptive reference")}
    panels = {f"setting {k}": {"x": [1, 2], "series": series, "xlabel": "value"} for k in range(columns)}
    title = "Figure 5 on the simulated team: mean (SE) over seeds [0, 1, 2]"
    fig = plot_sweeps(panels, title=title)
    fig.canvas.draw()
    inside = fig.bbox
    titles = [t for t in fig.findobj(Text) if t.get_text() == title]
    assert len(titles) == 1
    for text in [*fig.legends, *titles]:
        box = text.get_window_extent()
        assert inside.x0 <= box.x0 and box.x1 <= inside.x1, (columns, box, inside)
    assert legend_labels(fig) == ["QMIX", "best fixed sequence", "adaptive reference"]


def test_save_figure_writes_a_png_at_120_dpi(tmp_path):
    acts = np.array([[B, S, G], [S, D, S]])
    fig = draw_topology(np.stack([build_adjacency(a) for a in acts]), acts, ROLES3, adversaries=[0])
    width, height = fig.get_size_inches()
    path = save_figure(fig, tmp_path / "new" / "dir" / "topology.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    pixels = imread(path)
    assert pixels.shape[:2] == (round(height * DPI), round(width * DPI))
    assert pixels[..., :3].std() > 0.05  # not blank
    with pytest.raises(ValueError, match="must end in .png"):
        save_figure(fig, tmp_path / "x.jpg")


# -- one round as pixels ----------------------------------------------------------------------------


def node_fills(fig_or_ax) -> list[str]:
    nodes = next(c for c in fig_or_ax.collections if c.get_gid() == "nodes")
    return [to_hex(c) for c in nodes.get_facecolors()]


def test_round_picture_is_an_rgb_array_whose_size_depends_on_n_only():
    ring = np.roll(np.eye(3, dtype=np.int8), 1, axis=1)  # 0 -> 1 -> 2 -> 0
    picture = round_picture(ring, ROLES3, title="round 1 of 2")
    assert picture.dtype == np.uint8 and picture.ndim == 3 and picture.shape[2] == 3
    assert picture.std() > 5  # not blank
    star = np.zeros((3, 3), dtype=bool)
    star[0, 1:] = True
    other = round_picture(star, ROLES3, active=[1, 1, 0], verify=[0, 1, 0], adversaries=[2], title="round 2 of 2")
    assert other.shape == picture.shape  # frames of one episode stack into a video
    assert not np.array_equal(other, picture)
    assert round_picture(np.zeros((5, 5)), ROLES3 + ("a", "b")).shape != picture.shape


def test_draw_round_draws_the_graph_and_what_the_round_runs():
    adj = np.array([[0, 1, 1, 0], [0, 0, 0, 1], [0, 0, 0, 0], [0, 0, 0, 0]])
    fig = draw_round(adj, ("a", "b", "c", "d"), active=[1, 1, 1, 1], verify=[0, 0, 1, 0], adversaries=[1])
    ax = fig.axes[0]
    assert set(arrows_of(ax)) == {"0->1:message", "0->2:message", "1->3:message"}
    assert node_fills(ax) == [ROUND_STYLES[k].lower() for k in ("called", "called", "verified", "called")]
    assert fig.get_suptitle() == "3 edges"
    assert set(legend_labels(fig)) == {"called", "verified", "not called", "adversary"}
    fig = draw_round(np.zeros((4, 4)), ("a", "b", "c", "d"), active=[0, 1, 1, 0], title="round 1 of 2")
    assert node_fills(fig.axes[0]) == [ROUND_STYLES[k].lower()
                                       for k in ("not called", "called", "called", "not called")]
    assert not arrows_of(fig.axes[0]) and "adversary" not in legend_labels(fig)
    assert fig.get_suptitle() == "round 1 of 2  (0 edges)"


@pytest.mark.parametrize("change, words", [
    (dict(adjacency=np.ones((2, 3, 3))), ["(N, N)", "(2, 3, 3)"]),
    (dict(adjacency=np.eye(3)), ["self-loop 0->0"]),
    (dict(adjacency=np.full((3, 3), 2)), ["0/1", "2"]),
    (dict(active=[1, 0]), ["active", "3 values"]),
    (dict(verify=[0, 2, 0]), ["verify", "[0, 2, 0]"]),
    (dict(roles=("a",)), ["roles", "3 labels"]),
    (dict(adversaries=[3]), ["adversary index 3"]),
])
def test_round_picture_bad_input(change, words):
    args = dict(adjacency=np.zeros((3, 3)), roles=ROLES3)
    args.update(change)
    with pytest.raises(ValueError) as err:
        round_picture(**args)
    for word in words:
        assert word in str(err.value), (word, str(err.value))


def test_show_picture_without_a_display_saves_a_png(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    picture = round_picture(np.array([[0, 1], [0, 0]]), ("a", "b"))
    written = show_picture(picture, tmp_path / "frames" / "round_1.png")
    assert written == str(tmp_path / "frames" / "round_1.png")
    assert (imread(written)[..., :3] * 255).round().astype(np.uint8).tolist() == picture.tolist()
    with pytest.raises(ValueError, match="must end in .png"):
        show_picture(picture, tmp_path / "x.jpg")
    with pytest.raises(ValueError, match=r"uint8 array of shape \(H, W, 3\)"):
        show_picture(picture[..., 0], tmp_path / "x.png")


def test_show_picture_with_a_display_but_no_gui_backend_saves_a_png(tmp_path):
    """A display variable but only the Agg backend (pyplot falls back to it): no window can
    open, so the picture is saved; run in a fresh interpreter so pyplot's backend is its own."""
    script = (
        "import sys, numpy as np, matplotlib\n"
        "matplotlib.use('Agg')\n"
        "from topo_env.frontends.plots import show_picture\n"
        "print(show_picture(np.zeros((4, 6, 3), np.uint8), sys.argv[1]))\n"
    )
    target = tmp_path / "shown.png"
    out = subprocess.run([sys.executable, "-c", script, str(target)], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "DISPLAY": ":99"}, check=True)
    assert out.stdout.strip() == str(target) and imread(target).shape[:2] == (4, 6)


def test_importing_the_module_imports_no_matplotlib():
    code = "import sys, topo_env.frontends.plots; print('matplotlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "False"
