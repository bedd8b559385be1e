"""Pictures of runs: per-round communication graphs, action shares, learning curves, robustness.

Every drawing function returns a :class:`matplotlib.figure.Figure` built directly on an Agg
canvas (no pyplot, no global backend switch), so it works in scripts, tests and notebooks
alike; in a notebook run ``%matplotlib inline`` once and a returned figure displays itself.
:func:`save_figure` writes a PNG. :func:`draw_round` draws one round of a
:class:`~topo_env.RoundSpec` (its graph, who is called, who is verified), :func:`round_picture`
returns that as an RGB array (the envs' ``render_mode="rgb_array"``) and :func:`show_picture`
puts such an array in a window, or in a PNG where there is no display (``render_mode="human"``).
matplotlib is imported by the functions that draw, never by importing this module.

One unit for accuracy: it is passed in as a fraction in [0, 1] (as results.json stores it) and
drawn in points (x100), as the tables print it.

Edge direction as everywhere in topomarl: ``A[t, u, v] == 1`` means agent u's output of
round t reaches agent v (u -> v).

Which action made an edge (:func:`edge_actions`): an edge u -> v can be explained by the
sender's or the receiver's action (see :func:`topo_env.frontends.comm_graph.build_adjacency`). It is
credited to the first of, in this order:

1. u ``broadcast_all`` (u -> everyone),
2. u ``execute_verify`` with v == (u + 1) mod N (the chain),
3. v ``aggregate_refine`` (everyone -> v),
4. u ``selective_query`` / ``debate_check`` pointing at v (u -> its target),
5. v ``debate_check`` pointing at u (the debate's reverse edge).

Rules 1-3 do not depend on targets, so they come first. Without ``targets`` (the peers
that selective_query / debate_check point at: ``env.history[t].targets``) rules 4 and 5
accept any peer.
"""
from __future__ import annotations

import math
import os
import sys
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import networkx as nx
import numpy as np

from topo_env.frontends.comm_actions import ACTION_NAMES, N_ACTIONS, CommAction
from topo_env.frontends.comm_graph import build_adjacency
from topo_env.engine.tasks import DIFFICULTY_BUCKETS

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

__all__ = [
    "ACCURACY_METRICS", "ACTION_STYLES", "ADVERSARY_COLOR", "LEARNING_METRICS", "POINTS", "ROUND_STYLES",
    "draw_episodes", "draw_round", "draw_topology", "draw_topology_examples", "edge_actions",
    "plot_action_distribution", "plot_learning_curves", "plot_pareto", "plot_robustness", "plot_sweeps",
    "round_picture", "save_figure", "show_picture",
]

ACTION_STYLES: dict[str, dict[str, str]] = {
    "solo_process": {"color": "#9e9e9e", "linestyle": "solid"},  # makes no edge: node colour only
    "broadcast_all": {"color": "#0072B2", "linestyle": "solid"},
    "selective_query": {"color": "#009E73", "linestyle": "dashed"},
    "aggregate_refine": {"color": "#E69F00", "linestyle": "dashdot"},
    "execute_verify": {"color": "#CC79A7", "linestyle": "solid"},
    "debate_check": {"color": "#8C564B", "linestyle": "dotted"},
}
"""Colour (node fill and edge) and edge line style of each action (Okabe-Ito colours)."""

ADVERSARY_COLOR = "#B2182B"  # dark red: apart from the action colours

ROUND_STYLES: dict[str, str] = {
    "called": "#0072B2",  # active this round
    "verified": "#009E73",  # active, its output goes through the domain verifier
    "not called": "#BDBDBD",  # inactive: keeps its last output
    "message": "#333333",  # an edge u -> v
}
"""Node fills and the edge colour of :func:`draw_round` (a RoundSpec has no actions to colour by)."""

POINTS = 100.0
"""Accuracy fractions are drawn times this: accuracy in points, as in the tables."""
ACCURACY_METRICS = frozenset({"accuracy"})
"""Metrics given as fractions and drawn in points."""

LEARNING_METRICS: dict[str, str] = {
    "reward": "return per episode",
    "accuracy": "accuracy (points)",
    "tokens_per_task": "tokens per task",
    "density": "graph density",
    "epsilon": "exploration epsilon",
    "loss": "TD loss",
}
"""Metrics :func:`plot_learning_curves` knows, in panel order, with their axis labels."""

DPI = 120
_NODE_SIZE = 900  # points^2
_RADIUS = 1.0  # layout circle
_X_REACH = 1.75  # panel x range: the circle plus room for labels left and right
_PANEL_WIDTH = 3.1  # inches per round


# -- topology ------------------------------------------------------------------------------


def edge_actions(adjacency: np.ndarray, actions: Sequence[int], targets: Sequence[int] | None = None
                 ) -> dict[tuple[int, int], int]:
    """The action credited with each edge of one round (rules in the module docstring).

    Args:
        adjacency: (N, N) 0/1, ``A[u, v] == 1`` iff u -> v; no self-loops.
        actions: (N,) action indices 0..5.
        targets: optional (N,) peer each agent's selective_query / debate_check points at.

    Returns:
        ``{(u, v): action index}`` for every edge, in row-major order.

    Raises:
        ValueError: an edge no action explains, or an edge an action makes that is missing
        (with targets: any difference from :func:`~topo_env.frontends.comm_graph.build_adjacency`).
    """
    adj = np.asarray(adjacency)
    acts = [int(a) for a in actions]
    n = adj.shape[0]
    if targets is not None:
        expected = build_adjacency(acts, [int(x) for x in targets])
        diff = np.argwhere(expected != (adj != 0))
        if diff.size:
            u, v = (int(x) for x in diff[0])
            have = "has" if adj[u, v] else "lacks"
            raise ValueError(f"adjacency {have} edge {u}->{v}, unlike build_adjacency(actions={acts}, "
                             f"targets={[int(x) for x in targets]})")
    for u, a in enumerate(acts):  # edges an action makes whatever the targets
        must = {int(CommAction.BROADCAST_ALL): [(u, v) for v in range(n) if v != u],
                int(CommAction.AGGREGATE_REFINE): [(v, u) for v in range(n) if v != u],
                int(CommAction.EXECUTE_VERIFY): [(u, (u + 1) % n)]}.get(a, [])
        for s, r in must:
            if not adj[s, r]:
                raise ValueError(f"adjacency lacks edge {s}->{r} that agent {u}'s {ACTION_NAMES[a]} makes")
    credited: dict[tuple[int, int], int] = {}
    for u, v in zip(*np.nonzero(adj)):
        u, v = int(u), int(v)
        credited[(u, v)] = _credit(u, v, acts, targets, n)
    return credited


def _credit(u: int, v: int, acts: list[int], targets: Sequence[int] | None, n: int) -> int:
    pointing = (int(CommAction.SELECTIVE_QUERY), int(CommAction.DEBATE_CHECK))
    if acts[u] == CommAction.BROADCAST_ALL:
        return int(CommAction.BROADCAST_ALL)
    if acts[u] == CommAction.EXECUTE_VERIFY and v == (u + 1) % n:
        return int(CommAction.EXECUTE_VERIFY)
    if acts[v] == CommAction.AGGREGATE_REFINE:
        return int(CommAction.AGGREGATE_REFINE)
    if acts[u] in pointing and (targets is None or int(targets[u]) == v):
        return acts[u]
    if acts[v] == CommAction.DEBATE_CHECK and (targets is None or int(targets[v]) == u):
        return int(CommAction.DEBATE_CHECK)
    raise ValueError(f"edge {u}->{v} is made by no agent's action (actions {[ACTION_NAMES[a] for a in acts]})")


def draw_topology(adjacency: Any, actions: Any, roles: Sequence[str], adversaries: Sequence[int] = (),
                  agent_names: Sequence[str] | None = None, title: str | None = None,
                  ax_row: Sequence[Axes] | None = None, targets: Any = None) -> Figure:
    """One panel per round: the team's communication graph.

    Nodes sit on a fixed circle (agent 0 at the top, then clockwise), filled with the colour
    of the action the agent chose, numbered, and labelled outside with the agent name (if
    given) and role; adversaries get a dark red ring and "(adv)". Each edge u -> v is an
    arrow in the colour and line style of the action credited with it (:func:`edge_actions`);
    opposite edges curve apart. Arrows carry ``gid = "u->v:action_name"``.

    Args:
        adjacency: (T, N, N) 0/1, ``A[t, u, v] == 1`` iff u -> v in round t.
        actions: (T, N) action indices (``topo_env.frontends.comm_actions.ACTION_NAMES``).
        roles: N role labels (role kinds or persona names).
        adversaries: agent indices to mark.
        agent_names: N names shown above the roles (default: none, the index is in the node).
        title: figure title (the figure's suptitle, or the sub-figure's when drawing into
            ``ax_row`` of a sub-figure).
        ax_row: T axes to draw into (e.g. one row of a grid); default a new figure. The
            action legend is added to the figure unless it already has one.
        targets: optional (T, N) peers of selective_query / debate_check, for exact credit.

    Returns:
        The figure drawn on (the root figure when ``ax_row`` lies in a sub-figure).
    """
    adj, acts, tgts = _check_topology(adjacency, actions, targets)
    t_len, n = acts.shape
    roles = _check_labels("roles", roles, n)
    names = None if agent_names is None else _check_labels("agent_names", agent_names, n)
    adv = _check_adversaries(adversaries, n)
    if ax_row is None:
        fig = _new_figure(figsize=(_PANEL_WIDTH * t_len + 0.4, _panel_height(n) + 0.75))
        axes = list(fig.subplots(1, t_len, squeeze=False)[0])
        container = fig
    else:
        axes = list(ax_row)
        if len(axes) != t_len:
            raise ValueError(f"ax_row has {len(axes)} axes, adjacency has {t_len} rounds")
        container = axes[0].figure
        fig = container.figure  # the root figure (a Figure is its own root)
    pos = _circle_positions(n)
    for t, ax in enumerate(axes):
        credited = edge_actions(adj[t], acts[t], None if tgts is None else tgts[t])
        edge_groups = {ACTION_NAMES[a]: (ACTION_STYLES[ACTION_NAMES[a]], [e for e, c in credited.items() if c == a])
                       for a in sorted(set(credited.values()))}
        fills = [ACTION_STYLES[ACTION_NAMES[a]]["color"] for a in acts[t]]
        _draw_graph(ax, pos, edge_groups, fills, roles, names, adv)
        ax.set_title(f"round {t + 1}  ({len(credited)} edges)", fontsize=10)
    if title:
        container.suptitle(title, fontsize=11)
    if not fig.legends:
        fig.legend(handles=_action_handles(adv), loc="outside lower center", ncols=4, fontsize=8, frameon=False)
    return fig


def draw_topology_examples(examples: Sequence[tuple], roles: Sequence[str], adversaries: Sequence[int] = (),
                           agent_names: Sequence[str] | None = None, title: str | None = None) -> Figure:
    """Several episodes' graphs, one row of :func:`draw_topology` panels per episode.

    Args:
        examples: per row ``(label, adjacency (T, N, N), actions (T, N))``, optionally followed
            by ``targets`` (T, N) or None and the row's ``adversaries`` (replacing the argument);
            all rows with the same T and N.
        roles, adversaries, agent_names: as in :func:`draw_topology`.
    """
    if not examples:
        raise ValueError("examples is empty: nothing to draw")
    rows = []
    for example in examples:
        if not 3 <= len(example) <= 5:
            raise ValueError(f"an example must be (label, adjacency, actions[, targets[, adversaries]]), "
                             f"got {len(example)} items")
        label, adjacency, actions, targets, adv = (*example, None, None)[:5]
        rows.append((str(label), np.asarray(adjacency), np.asarray(actions), targets,
                     adversaries if adv is None else adv))
    t_len, n = rows[0][2].shape if rows[0][2].ndim == 2 else (0, 0)
    for label, _, actions, _, _ in rows:
        if actions.ndim != 2 or actions.shape != (t_len, n) or t_len == 0:
            raise ValueError(f"example {label!r} has actions of shape {actions.shape}; the first has {(t_len, n)}")
    every_adversary = sorted({int(i) for row in rows for i in _check_adversaries(row[4], n)})
    fig = _new_figure(figsize=(_PANEL_WIDTH * t_len + 0.4, (_panel_height(n) + 0.35) * len(rows) + 0.8))
    fig.legend(handles=_action_handles(every_adversary), loc="outside lower center", ncols=4, fontsize=8,
               frameon=False)
    for (label, adjacency, actions, targets, adv), sub in zip(rows, fig.subfigures(len(rows), 1, squeeze=False)[:, 0]):
        draw_topology(adjacency, actions, roles, adv, agent_names, title=label, targets=targets,
                      ax_row=list(sub.subplots(1, t_len, squeeze=False)[0]))
    if title:
        fig.suptitle(title, fontsize=12)
    return fig


def draw_episodes(episodes: Sequence[Any], roles: Sequence[str], adversaries: Sequence[int] = (),
                  agent_names: Sequence[str] | None = None, title: str | None = None, limit: int = 3) -> Figure:
    """:func:`draw_topology_examples` of a few recorded episodes: the first of each difficulty
    bucket (easy, medium, hard) when episodes carry one, else the first ``limit``.

    Args:
        episodes: objects with ``adjacency`` (T, N, N) and ``actions`` (T, N), and optionally
            ``bucket``, ``reward``, ``targets`` (T, N) and ``adversaries`` (e.g.
            :class:`learners.evaluation.EpisodeTrace` or :class:`learners.runner.EpisodeStats`);
            an episode's own ``adversaries`` replace the argument.
    """
    if not episodes:
        raise ValueError("episodes is empty: nothing to draw")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"limit={limit!r}: must be an integer >= 1")
    chosen: list[int] = []
    for bucket in DIFFICULTY_BUCKETS:
        found = next((k for k, ep in enumerate(episodes) if getattr(ep, "bucket", None) == bucket), None)
        if found is not None:
            chosen.append(found)
    chosen = sorted(chosen)[:limit] if chosen else list(range(min(limit, len(episodes))))
    examples = []
    for k in chosen:
        ep = episodes[k]
        parts = [f"episode {k}"]
        if getattr(ep, "bucket", None) is not None:
            parts.append(str(ep.bucket))
        if getattr(ep, "reward", None) is not None:
            parts.append(f"return {float(ep.reward):+.2f}")
        own = getattr(ep, "adversaries", None)
        examples.append((", ".join(parts), ep.adjacency, ep.actions, getattr(ep, "targets", None),
                         adversaries if own is None else own))
    return draw_topology_examples(examples, roles, adversaries, agent_names, title)


def _draw_graph(ax: Axes, pos: dict[int, np.ndarray], edge_groups: Mapping[str, tuple[Mapping[str, str], list]],
                fills: Sequence[str], roles: list[str], names: list[str] | None, adv: list[int]) -> None:
    """One graph on ``ax``: ``edge_groups`` maps a label to (``{"color", "linestyle"}``, its
    edges); arrows carry ``gid = "u->v:label"``. Nodes filled with ``fills``, numbered,
    labelled with name and role; adversaries ringed in dark red."""
    n = len(fills)
    graph = nx.DiGraph()
    graph.add_nodes_from(range(n))
    graph.add_edges_from(e for _, edges in edge_groups.values() for e in edges)
    for label, (style, edges) in edge_groups.items():
        arrows = nx.draw_networkx_edges(
            graph, pos, edgelist=edges, ax=ax, node_size=_NODE_SIZE, arrows=True, arrowstyle="-|>",
            arrowsize=14, width=2.0, edge_color=style["color"], style=style["linestyle"],
            connectionstyle="arc3,rad=0.14", min_source_margin=2, min_target_margin=4,
        )
        for (u, v), arrow in zip(edges, arrows):
            arrow.set_gid(f"{u}->{v}:{label}")
    nodes = nx.draw_networkx_nodes(
        graph, pos, ax=ax, node_size=_NODE_SIZE, node_color=list(fills),
        edgecolors=[ADVERSARY_COLOR if i in adv else "#333333" for i in range(n)],
        linewidths=[4.0 if i in adv else 1.0 for i in range(n)],
    )
    nodes.set_gid("nodes")
    nodes.set_zorder(3)
    if adv:  # a white gap inside the adversary's red ring keeps it apart from any fill colour
        inner = ax.scatter([pos[i][0] for i in adv], [pos[i][1] for i in adv], s=_NODE_SIZE * 0.66,
                           c=[fills[i] for i in adv], edgecolors="white", linewidths=1.6, zorder=3.5)
        inner.set_gid("adversaries")
    for i in range(n):
        ax.text(*pos[i], str(i), ha="center", va="center", fontsize=11, fontweight="bold", color="white", zorder=4)
        lines = ([names[i]] if names else []) + textwrap.wrap(roles[i], 16) + (["(adv)"] if i in adv else [])
        out = pos[i] / np.linalg.norm(pos[i])
        ha = "center" if abs(out[0]) < 0.3 else ("left" if out[0] > 0 else "right")
        va = "bottom" if out[1] > 0.3 else ("top" if out[1] < -0.3 else "center")
        ax.text(*(pos[i] + 0.3 * out), "\n".join(lines), ha=ha, va=va, fontsize=8, zorder=4, gid=f"label:{i}", clip_on=False,
                color=ADVERSARY_COLOR if i in adv else "#222222", fontweight="bold" if i in adv else "normal")
    ax.set_xlim(-_X_REACH, _X_REACH)
    ax.set_ylim(*_y_limits(n))
    ax.set_aspect("equal")
    ax.set_axis_off()


def _y_limits(n: int) -> tuple[float, float]:
    """Vertical data range of a panel: the nodes plus room for the labels above and below."""
    ys = [p[1] for p in _circle_positions(n).values()]
    return min(ys) - 0.75, max(ys) + 0.85


def _panel_height(n: int) -> float:
    """Inches of a panel _PANEL_WIDTH wide at equal aspect, plus its title."""
    low, high = _y_limits(n)
    return _PANEL_WIDTH * (high - low) / (2 * _X_REACH) + 0.3


def _circle_positions(n: int) -> dict[int, np.ndarray]:
    """Agent 0 at the top, then clockwise: the same place for an agent in every panel."""
    angles = math.pi / 2 - 2 * math.pi * np.arange(n) / n
    return {i: _RADIUS * np.array([math.cos(a), math.sin(a)]) for i, a in enumerate(angles)}


def _action_handles(adv: list[int]) -> list[Line2D]:
    from matplotlib.lines import Line2D

    handles = []
    for name in ACTION_NAMES:
        style = ACTION_STYLES[name]
        line = "none" if name == "solo_process" else style["linestyle"]
        handles.append(Line2D([], [], color=style["color"], linestyle=line, linewidth=2, marker="o", markersize=8,
                              markerfacecolor=style["color"], markeredgecolor="#333333", label=name))
    return handles + _adversary_handles(adv)


def _adversary_handles(adv: list[int]) -> list[Line2D]:
    """The legend entry of the adversary ring: one when ``adv`` holds an agent, else none."""
    from matplotlib.lines import Line2D

    return [Line2D([], [], linestyle="none", marker="o", markersize=9, markerfacecolor="white",
                   markeredgecolor=ADVERSARY_COLOR, markeredgewidth=2.5, label="adversary")] if adv else []


def _check_adjacency(adjacency: Any) -> np.ndarray:
    """``adjacency`` as int8 of shape (T, N, N), T >= 1, N >= 2, 0/1 without self-loops."""
    adj = np.asarray(adjacency)
    if adj.ndim != 3 or adj.shape[1] != adj.shape[2] or adj.shape[0] < 1 or adj.shape[1] < 2:
        raise ValueError(f"adjacency must have shape (T, N, N) with T >= 1, N >= 2, got {adj.shape}")
    if not np.isin(adj, (0, 1)).all():
        bad = adj[~np.isin(adj, (0, 1))].flat[0]
        raise ValueError(f"adjacency must hold 0/1, found {bad!r}")
    n = adj.shape[1]
    loops = np.argwhere(adj[:, np.arange(n), np.arange(n)] != 0)
    if loops.size:
        t, i = (int(x) for x in loops[0])
        raise ValueError(f"adjacency has a self-loop {i}->{i} in round {t + 1}")
    return adj.astype(np.int8)


def _check_topology(adjacency: Any, actions: Any, targets: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    adj = _check_adjacency(adjacency)
    t_len, n = adj.shape[0], adj.shape[1]
    acts = np.asarray(actions)
    if acts.shape != (t_len, n):
        raise ValueError(f"actions must have shape (T, N) = {(t_len, n)} like adjacency, got {acts.shape}")
    if acts.size and not np.issubdtype(acts.dtype, np.integer):
        raise ValueError(f"actions must be integer action indices 0..{N_ACTIONS - 1}, got dtype {acts.dtype}")
    bad = np.argwhere((acts < 0) | (acts >= N_ACTIONS))
    if bad.size:
        t, i = (int(x) for x in bad[0])
        raise ValueError(f"unknown action index {int(acts[t, i])} of agent {i} in round {t + 1}; "
                         f"known: 0..{N_ACTIONS - 1} {list(ACTION_NAMES)}")
    tgts = None
    if targets is not None:
        tgts = np.asarray(targets)
        if tgts.shape != (t_len, n) or not np.issubdtype(tgts.dtype, np.integer):
            raise ValueError(f"targets must be integers of shape {(t_len, n)}, got {tgts.shape} {tgts.dtype}")
    return adj, acts.astype(np.int64), tgts


def _check_labels(key: str, labels: Sequence[str], n: int) -> list[str]:
    if isinstance(labels, str) or len(labels) != n:
        raise ValueError(f"{key}={labels!r} must hold {n} labels, one per agent")
    return [str(x) for x in labels]


def _check_adversaries(adversaries: Sequence[int], n: int) -> list[int]:
    out = []
    for i in adversaries:
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)) or not 0 <= i < n:
            raise ValueError(f"adversary index {i!r} is not an agent index in 0..{n - 1}")
        out.append(int(i))
    return out


# -- one round as pixels --------------------------------------------------------------------


def draw_round(adjacency: Any, roles: Sequence[str], *, active: Any = None, verify: Any = None,
               adversaries: Sequence[int] = (), agent_names: Sequence[str] | None = None, title: str = "") -> Figure:
    """One round's communication graph, coloured by what a :class:`~topo_env.RoundSpec` runs.

    The same drawing as a :func:`draw_topology` panel, but a RoundSpec has no actions to colour
    by: called agents are blue, called and verified green, agents not called (they keep their
    last output) grey (:data:`ROUND_STYLES`); every edge u -> v is one dark arrow with
    ``gid = "u->v:message"``. The figure's size depends on N only.

    Args:
        adjacency: (N, N) 0/1 or bool, ``A[u, v]`` iff u's output reaches v; no self-loops.
        roles: N role labels.
        active, verify: (N,) 0/1 or bool (default: all called, none verified).
        adversaries, agent_names: as in :func:`draw_topology`.
        title: drawn above the graph (e.g. ``"round 2 of 3"``); the edge count follows it.
    """
    adj = np.asarray(adjacency)
    if adj.ndim != 2:
        raise ValueError(f"adjacency must have shape (N, N), got {adj.shape}")
    adj = _check_adjacency(adj[None])[0]
    n = adj.shape[0]
    called = _check_flags("active", active, n, default=True)
    verified = _check_flags("verify", verify, n, default=False)
    roles = _check_labels("roles", roles, n)
    names = None if agent_names is None else _check_labels("agent_names", agent_names, n)
    adv = _check_adversaries(adversaries, n)
    fills = [ROUND_STYLES["not called"] if not called[i] else ROUND_STYLES["verified" if verified[i] else "called"]
             for i in range(n)]
    edges = [(int(u), int(v)) for u, v in zip(*np.nonzero(adj))]
    fig = _new_figure(figsize=(_PANEL_WIDTH + 0.4, _panel_height(n) + 0.75))
    ax = fig.subplots()
    message = {"color": ROUND_STYLES["message"], "linestyle": "solid"}
    _draw_graph(ax, _circle_positions(n), {"message": (message, edges)}, fills, roles, names, adv)
    fig.suptitle(f"{title}  ({len(edges)} edges)" if title else f"{len(edges)} edges", fontsize=10)
    fig.legend(handles=_round_handles(adv), loc="outside lower center", ncols=2, fontsize=8, frameon=False)
    return fig


def round_picture(adjacency: Any, roles: Sequence[str], **options: Any) -> np.ndarray:
    """:func:`draw_round` (same arguments) as an RGB image: ``uint8`` of shape (H, W, 3), H and
    W fixed by N, so the frames of an episode stack into a video (``render_mode="rgb_array"``)."""
    fig = draw_round(adjacency, roles, **options)
    fig.canvas.draw()
    return np.asarray(fig.canvas.buffer_rgba())[..., :3].copy()


def show_picture(rgb: Any, path_if_headless: str | Path) -> str | None:
    """Show an (H, W, 3) ``uint8`` picture in a window; where no window can open (no display, or
    matplotlib has no interactive backend) save it as a PNG at ``path_if_headless`` instead.

    Returns the path written, or None when the picture went to a window (one window, reused
    by later calls, so an episode plays as a slide show)."""
    pixels = np.asarray(rgb)
    if pixels.ndim != 3 or pixels.shape[2] != 3 or pixels.dtype != np.uint8:
        raise ValueError(f"rgb must be a uint8 array of shape (H, W, 3), got {pixels.dtype} {pixels.shape}")
    path = Path(path_if_headless)
    if path.suffix.lower() != ".png":
        raise ValueError(f"path_if_headless {str(path)!r} must end in .png")
    if _has_display():
        import matplotlib.pyplot as plt

        fig = plt.figure("topomarl", figsize=(pixels.shape[1] / DPI, pixels.shape[0] / DPI))
        if fig.canvas.required_interactive_framework is not None:  # a GUI backend: a real window
            fig.clf()
            ax = fig.add_axes((0, 0, 1, 1))
            ax.imshow(pixels)
            ax.set_axis_off()
            plt.show(block=False)
            plt.pause(0.001)
            return None
        plt.close(fig)
    from matplotlib.image import imsave

    path.parent.mkdir(parents=True, exist_ok=True)
    imsave(path, pixels, format="png")
    return str(path)


def _has_display() -> bool:
    """Whether a window could open: always on macOS and Windows, with X11 or Wayland elsewhere."""
    if sys.platform in ("darwin", "win32"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def _round_handles(adv: list[int]) -> list[Line2D]:
    from matplotlib.lines import Line2D

    return [Line2D([], [], linestyle="none", marker="o", markersize=9, markerfacecolor=ROUND_STYLES[k],
                   markeredgecolor="#333333", label=k) for k in ("called", "verified", "not called")
            ] + _adversary_handles(adv)


def _check_flags(key: str, flags: Any, n: int, default: bool) -> np.ndarray:
    """(N,) bool from 0/1 or bool; None: all ``default``."""
    if flags is None:
        return np.full(n, default)
    arr = np.asarray(flags)
    if arr.shape != (n,) or not np.isin(arr, (0, 1)).all():
        raise ValueError(f"{key} must be {n} values 0/1 (one per agent), got {arr.tolist()!r}")
    return arr.astype(bool)


# -- action shares ---------------------------------------------------------------------------


def plot_action_distribution(dist_by_round: Sequence[Mapping[str, float]] | Mapping[str, Sequence[Mapping[str, float]]],
                             title: str | None = None) -> Figure:
    """Stacked bars: per round, the share of agent choices that went to each action.

    Args:
        dist_by_round: ``[{action_name: share}, ...]`` over rounds (``action_distribution_by_round``
            of results.json; a missing action counts 0), or ``{policy_name: that list}`` for one
            panel per policy, side by side on a shared axis (e.g. clean vs attacked).

    Bars carry ``gid = "policy|round t|action"`` (policy ``""`` for a bare list).
    """
    by_policy = _check_distributions(dist_by_round)
    from matplotlib.lines import Line2D

    fig = _new_figure(figsize=(1.3 + 2.2 * len(by_policy) + 0.45 * sum(len(d) for d in by_policy.values()), 4.2))
    axes = fig.subplots(1, len(by_policy), sharey=True, squeeze=False)[0]
    for ax, (policy, rounds) in zip(axes, by_policy.items()):
        x = np.arange(1, len(rounds) + 1)
        bottom = np.zeros(len(rounds))
        for name in ACTION_NAMES:
            shares = np.array([r.get(name, 0.0) for r in rounds], dtype=float)
            bars = ax.bar(x, shares, width=0.62, bottom=bottom, color=ACTION_STYLES[name]["color"],
                          edgecolor="white", linewidth=0.6, label=name)
            for t, (bar, share) in enumerate(zip(bars, shares)):
                bar.set_gid(f"{policy}|round {t + 1}|{name}")
                if share >= 0.07:
                    ax.text(x[t], bottom[t] + share / 2, f"{share:.0%}", ha="center", va="center", fontsize=8,
                            color="white" if name in ("broadcast_all", "debate_check") else "black")
            bottom += shares
        ax.set_xticks(x, [f"round {t}" for t in x])
        ax.set_xlim(0.4, len(rounds) + 0.6)
        ax.set_ylim(0, 1.0)
        ax.yaxis.set_major_formatter(lambda v, _: f"{v:.0%}")
        if policy:
            ax.set_title(policy, fontsize=10)
    axes[0].set_ylabel("share of agent choices")
    handles = [Line2D([], [], linestyle="none", marker="s", markersize=10, color=ACTION_STYLES[a]["color"], label=a)
               for a in ACTION_NAMES]
    fig.legend(handles=handles, loc="outside right center", fontsize=8, frameon=False)
    if title:
        fig.suptitle(title, fontsize=11)
    return fig


def _check_distributions(dist: Any) -> dict[str, list[dict[str, float]]]:
    by_policy = {"": dist} if not isinstance(dist, Mapping) else dict(dist)
    if not by_policy:
        raise ValueError("dist_by_round is empty: no policy to plot")
    out = {}
    for policy, rounds in by_policy.items():
        if isinstance(rounds, (str, Mapping)) or not isinstance(rounds, Sequence) or not rounds:
            raise ValueError(f"distribution of {policy or 'the policy'!r} must be a non-empty list of "
                             f"{{action_name: share}} per round, got {rounds!r}")
        checked = []
        for t, shares in enumerate(rounds):
            if not isinstance(shares, Mapping):
                raise ValueError(f"round {t + 1} of {policy!r} must map action names to shares, got {shares!r}")
            for name, share in shares.items():
                if name not in ACTION_NAMES:
                    raise ValueError(f"unknown action {name!r} in round {t + 1}; known: {list(ACTION_NAMES)}")
                if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0.0 <= share <= 1.0:
                    raise ValueError(f"share of {name!r} in round {t + 1} is {share!r}: must be in [0, 1]")
            total = float(sum(shares.values()))
            if total > 1.0 + 1e-6:
                raise ValueError(f"shares of round {t + 1} of {policy!r} sum to {total:.4f} > 1")
            checked.append({k: float(v) for k, v in shares.items()})
        out[str(policy)] = checked
    return out


# -- learning curves ------------------------------------------------------------------------


def plot_learning_curves(curves: Mapping[str, Sequence[float]], title: str | None = None,
                         references: Mapping[str, Mapping[str, float]] | None = None) -> Figure:
    """One panel per metric against the episode.

    Args:
        curves: ``"episode"`` (ints, increasing) and any metrics (e.g. those of
            :data:`LEARNING_METRICS`), each a list of floats as long as ``episode``; NaN or
            None (e.g. the loss before learning starts) leaves a gap. Metrics of
            :data:`ACCURACY_METRICS` are fractions, drawn in points.
        references: optional ``{metric: {label: value}}`` drawn as dashed horizontal lines
            (e.g. the best fixed baseline's reward), in the metric's unit as given.

    Curves carry ``gid = "curve:metric"``.
    """
    if "episode" not in curves:
        raise ValueError(f"curves needs the key 'episode', got keys {sorted(curves)}")
    episodes = np.asarray(curves["episode"], dtype=float)
    if episodes.ndim != 1 or episodes.size == 0:
        raise ValueError(f"curves['episode'] must be a non-empty list, got {curves['episode']!r}")
    metrics = [m for m in LEARNING_METRICS if m in curves] + sorted(set(curves) - set(LEARNING_METRICS) - {"episode"})
    if not metrics:
        raise ValueError("curves holds no metric besides 'episode'")
    values = {}
    for m in metrics:
        v = np.array([np.nan if x is None else x for x in curves[m]], dtype=float)
        if v.shape != episodes.shape:
            raise ValueError(f"curves[{m!r}] has {v.size} values, curves['episode'] has {episodes.size}")
        values[m] = v * _scale(m)
    references = dict(references or {})
    for m, lines in references.items():
        if m not in values:
            raise ValueError(f"reference for metric {m!r}, which is not in curves ({metrics})")
        for label, value in lines.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f"reference {label!r} of {m!r} is {value!r}: must be a finite number")
    ncols = min(3, len(metrics))
    nrows = math.ceil(len(metrics) / ncols)
    fig = _new_figure(figsize=(4.0 * ncols, 2.9 * nrows + 0.3))
    axes = fig.subplots(nrows, ncols, squeeze=False, sharex=True).ravel()
    for ax, m in zip(axes, metrics):
        ax.plot(episodes, values[m], color="#0072B2", linewidth=1.6, marker="o" if episodes.size <= 30 else None,
                markersize=3, label="qmix" if m in references else None, gid=f"curve:{m}")
        for k, (label, value) in enumerate(references.get(m, {}).items()):
            value = value * _scale(m)
            ax.axhline(value, linestyle="--", linewidth=1.2, color=("#D55E00", "#009E73", "#CC79A7", "#555555")[k % 4],
                       label=f"{label} ({_number(value)})")
        if m in references:
            ax.legend(fontsize=7, loc="best")
        ax.set_title(LEARNING_METRICS.get(m, m), fontsize=10)
        ax.grid(alpha=0.3)
    for ax in axes[len(metrics):]:
        ax.set_axis_off()
    for ax in axes[max(0, len(metrics) - ncols):len(metrics)]:
        ax.set_xlabel("episode")
        ax.xaxis.set_tick_params(labelbottom=True)
    if title:
        fig.suptitle(title, fontsize=11)
    return fig


def _scale(metric: str) -> float:
    """What a metric's values are multiplied by when drawn: :data:`POINTS` for accuracy."""
    return POINTS if metric in ACCURACY_METRICS else 1.0


def _number(value: float) -> str:
    """Short text of a reference value: thousands without exponent, others to 3 digits."""
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"


# -- robustness -----------------------------------------------------------------------------


def plot_robustness(clean: Mapping[str, Mapping[str, float]], attacked: Mapping[str, Mapping[str, float]],
                    title: str | None = None) -> Figure:
    """Clean vs attacked, per policy: accuracy in points (with the change, in points, written
    above each pair) and tokens per task.

    Args:
        clean, attacked: ``{policy: {"accuracy": float, "tokens_per_task": float, ...}}`` with the
            same policies (e.g. the ``eval`` entries of two results.json files); accuracy a
            fraction in [0, 1].

    Bars carry ``gid = "metric|policy|clean"`` or ``"...|attacked"``.
    """
    if set(clean) != set(attacked):
        raise ValueError(f"clean and attacked must hold the same policies: only clean {sorted(set(clean) - set(attacked))}, "
                         f"only attacked {sorted(set(attacked) - set(clean))}")
    if not clean:
        raise ValueError("no policy to plot")
    policies = list(clean)
    for label, results in (("clean", clean), ("attacked", attacked)):
        for p in policies:
            for key in ("accuracy", "tokens_per_task"):
                v = results[p].get(key)
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                    raise ValueError(f"{label}[{p!r}][{key!r}] is {v!r}: must be a finite number")
    fig = _new_figure(figsize=(max(7.0, 2 * (1.2 + 0.6 * len(policies))), 4.4))
    ax_acc, ax_tok = fig.subplots(1, 2)
    x = np.arange(len(policies))
    width = 0.38
    colours = {"clean": "#0072B2", "attacked": ADVERSARY_COLOR}
    for ax, key, label in ((ax_acc, "accuracy", "accuracy (points)"), (ax_tok, "tokens_per_task", "tokens per task")):
        for k, (which, results) in enumerate((("clean", clean), ("attacked", attacked))):
            heights = [float(results[p][key]) * _scale(key) for p in policies]
            bars = ax.bar(x + (k - 0.5) * width, heights, width, color=colours[which], label=which)
            for p, bar in zip(policies, bars):
                bar.set_gid(f"{key}|{p}|{which}")
        ax.set_xticks(x, policies, rotation=30 if len(policies) > 5 else 0, ha="right" if len(policies) > 5 else "center")
        ax.set_title(label, fontsize=10)
        ax.grid(axis="y", alpha=0.3)
    acc = {which: {p: float(results[p]["accuracy"]) * POINTS for p in policies}
           for which, results in (("clean", clean), ("attacked", attacked))}
    top = max(max(acc["clean"][p], acc["attacked"][p]) for p in policies)
    ax_acc.set_ylim(0, max(POINTS, top) * 1.12)
    for i, p in enumerate(policies):
        drop = acc["attacked"][p] - acc["clean"][p]
        high = max(acc["clean"][p], acc["attacked"][p])
        ax_acc.text(x[i], high + 0.02 * POINTS, f"{drop:+.1f}", ha="center", va="bottom", fontsize=8,
                    color=ADVERSARY_COLOR if drop < 0 else "#333333", gid=f"drop:{p}")
    fig.legend(*ax_acc.get_legend_handles_labels(), loc="outside lower center", ncols=2, fontsize=8, frameon=False)
    if title:
        fig.suptitle(title, fontsize=11)
    return fig


# -- files ----------------------------------------------------------------------------------


def _new_figure(figsize: tuple[float, float]) -> Figure:
    """A constrained-layout figure on its own Agg canvas: no pyplot, no global backend."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize, dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def save_figure(fig: Figure, path: str | Path) -> Path:
    """Write ``fig`` as a PNG (120 dpi) at ``path`` (parent directories created) and close it
    if pyplot manages it; returns the path."""
    path = Path(path)
    if path.suffix.lower() != ".png":
        raise ValueError(f"path {str(path)!r} must end in .png")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI, format="png")
    _release(fig)
    return path


def _release(fig: Figure) -> None:
    """Close a pyplot-managed figure (a figure built as ``Figure()`` needs nothing)."""
    pyplot = sys.modules.get("matplotlib.pyplot")  # only if someone imported pyplot already
    if pyplot is not None:
        pyplot.close(fig)


def plot_sample_efficiency(points: Sequence[Mapping[str, float]], references: Mapping[str, float] | None = None,
                           title: str | None = None) -> Figure:
    """Held-out reward of the greedy policy against training episodes (left) and LLM calls spent
    (right). ``points``: dicts with ``episode``, ``calls`` and ``reward`` (a run's
    ``learning_curve.points``); ``references``: ``{label: reward}`` drawn as dashed lines (e.g.
    the best fixed sequence and the adaptive reference on the same episodes)."""
    if not points:
        raise ValueError("no learning-curve points to plot")
    for key in ("episode", "calls", "reward"):
        if any(key not in p for p in points):
            raise ValueError(f"every learning-curve point needs {key!r}")
    reward = np.array([p["reward"] for p in points], dtype=float)
    fig = _new_figure(figsize=(9.0, 3.4))
    axes = fig.subplots(1, 2, sharey=True)
    for ax, key, label in ((axes[0], "episode", "training episodes"), (axes[1], "calls", "LLM calls spent")):
        x = np.array([p[key] for p in points], dtype=float)
        ax.plot(x, reward, color="#0072B2", marker="o", linewidth=1.6, label="greedy QMIX", gid=f"curve:{key}")
        for (name, value), style in zip((references or {}).items(), ("--", ":", "-.")):
            ax.axhline(value, color="#555555", linestyle=style, linewidth=1.0, label=name)
        ax.set_xlabel(label)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("held-out reward (Eq. 12)")
    axes[1].legend(fontsize=8, loc="lower right")
    if title:
        fig.suptitle(title, fontsize=10)
    return fig


def plot_pareto(points: Mapping[str, Sequence[tuple[float, float]]], title: str | None = None) -> Figure:
    """Accuracy (points) against tokens per task, one colour per method: ``points[method]`` holds
    one ``(tokens_per_task, accuracy)`` pair per seed, drawn as small dots, and their mean as a
    large marker with the method's name (the leaderboard's picture). Up and to the left is better."""
    if not points or not any(points.values()):
        raise ValueError("no methods to plot")
    fig = _new_figure(figsize=(7.0, 4.6))
    ax = fig.subplots()
    from matplotlib import colormaps

    colours = colormaps["tab20"].colors
    for k, (name, pairs) in enumerate(sorted(points.items())):
        xy = np.asarray(pairs, dtype=float).reshape(-1, 2)
        if not len(xy):
            continue
        colour = colours[k % len(colours)]
        ax.scatter(xy[:, 0], 100 * xy[:, 1], s=14, color=colour, alpha=0.6, gid=f"seeds:{name}")
        mx, my = xy[:, 0].mean(), 100 * xy[:, 1].mean()
        ax.scatter([mx], [my], s=70, color=colour, edgecolor="black", linewidth=0.6, label=name, gid=f"mean:{name}")
        ax.annotate(name, (mx, my), textcoords="offset points", xytext=(5, 4), fontsize=8)
    ax.set_xlabel("tokens per task")
    ax.set_ylabel("accuracy (points)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best", ncol=2)
    if title:
        ax.set_title(title, fontsize=10)
    return fig


SWEEP_STYLES: tuple[tuple[str, str], ...] = (("#0072B2", "o"), ("#D55E00", "s"), ("#009E73", "^"), ("#555555", "*"),
                                             ("#CC79A7", "D"))
"""Colour and marker of the series of :func:`plot_sweeps`, in the order given."""


def plot_sweeps(panels: Mapping[str, Mapping[str, Any]], metrics: Sequence[str] = ("accuracy", "tokens_per_task"),
                title: str | None = None) -> Figure:
    """One column per swept setting and one row per metric: each series' mean with its standard
    error as an error bar, against the swept value (e.g. QMIX, the best fixed sequence and the
    adaptive reference as the team size grows).

    Args:
        panels: ``{column title: {"x": [numbers], "series": {label: {metric: [[mean, se] or None,
            one per x]}}, "ticks": [labels] or None, "log_x": bool, "xlabel": str}}``; a None
            entry (a value a series has no figure for) is left out. Metrics of
            :data:`ACCURACY_METRICS` are fractions, drawn in points.
        metrics: the rows, with :data:`LEARNING_METRICS`' axis labels where it has them.

    Error bars carry ``gid = "column|metric|label"``.
    """
    if not panels:
        raise ValueError("no panels to plot")
    for name, panel in panels.items():
        x = panel.get("x")
        if not x or not panel.get("series"):
            raise ValueError(f"panel {name!r} needs a non-empty 'x' and 'series'")
        for label, figures in panel["series"].items():
            for m in metrics:
                if len(figures.get(m, ())) != len(x):
                    raise ValueError(f"panel {name!r}, series {label!r}: {m!r} needs one entry per x ({len(x)})")
    fig = _new_figure(figsize=(3.6 * len(panels), 2.8 * len(metrics) + 0.6))
    axes = fig.subplots(len(metrics), len(panels), squeeze=False)
    for j, (name, panel) in enumerate(panels.items()):
        x = np.asarray(panel["x"], dtype=float)
        for i, m in enumerate(metrics):
            ax = axes[i, j]
            for k, (label, figures) in enumerate(panel["series"].items()):
                kept = [(xv, pair) for xv, pair in zip(x, figures[m]) if pair is not None]
                if not kept:
                    continue
                colour, marker = SWEEP_STYLES[k % len(SWEEP_STYLES)]
                xs = [xv for xv, _ in kept]
                mean, se = (np.array([pair[c] for _, pair in kept], dtype=float) * _scale(m) for c in (0, 1))
                bars = ax.errorbar(xs, mean, yerr=se, color=colour, marker=marker, markersize=4, linewidth=1.4,
                                   capsize=3, label=label)
                bars.lines[0].set_gid(f"{name}|{m}|{label}")
            if panel.get("log_x"):
                ax.set_xscale("log")
            if panel.get("ticks"):
                ax.set_xticks(x, panel["ticks"])
                ax.minorticks_off()
            ax.grid(alpha=0.3)
            if j == 0:
                ax.set_ylabel(LEARNING_METRICS.get(m, m))
            if i == 0:
                ax.set_title(name, fontsize=10)
            if i == len(metrics) - 1:
                ax.set_xlabel(panel.get("xlabel", ""))
    handles = {}
    for ax in axes.ravel():  # every series once, whichever panel drew it
        for handle, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    legend = fig.legend(list(handles.values()), list(handles), loc="outside lower center", ncols=len(handles),
                        fontsize=8, frameon=False)
    texts = [legend]
    if title:
        texts.append(fig.suptitle(title, fontsize=11))
    renderer = fig.canvas.get_renderer()
    widest = max(text.get_window_extent(renderer).width for text in texts) / fig.dpi
    if widest + 0.2 > fig.get_figwidth():  # one narrow column: widen the figure so the legend and title fit
        fig.set_figwidth(widest + 0.2)
    return fig
