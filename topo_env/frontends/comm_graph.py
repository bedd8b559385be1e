"""The PettingZoo front-end's vocabulary made a graph: six CommActions (and their targets) -> the
round's (N, N) adjacency (the execution order of a graph is :mod:`topo_env.engine.plan`).

Edge direction everywhere in topomarl: ``A[u, v] == 1`` means agent u's output of this
round is delivered to agent v before v answers (u -> v). No self-loops.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from topo_env.frontends.comm_actions import N_ACTIONS, CommAction


def ring_targets(n_agents: int) -> np.ndarray:
    """The ring rule: agent i targets (i + 1) mod N."""
    return (np.arange(n_agents) + 1) % n_agents


_BROADCAST, _QUERY, _AGGREGATE, _VERIFY, _DEBATE = (
    int(CommAction.BROADCAST_ALL), int(CommAction.SELECTIVE_QUERY), int(CommAction.AGGREGATE_REFINE),
    int(CommAction.EXECUTE_VERIFY), int(CommAction.DEBATE_CHECK),
)


def build_adjacency_batch(actions: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """Vectorised :func:`build_adjacency` for already validated input.

    Args:
        actions: (B, N) ints in 0..5.
        targets: (B, N) ints, ``targets[b, i] != i``.

    Returns:
        (B, N, N) int8 adjacency, same rules as :func:`build_adjacency`.
    """
    b, n = actions.shape
    adj = np.zeros((b, n, n), dtype=np.int8)
    rows, agents = np.nonzero(actions == _BROADCAST)
    adj[rows, agents, :] = 1
    rows, agents = np.nonzero(actions == _AGGREGATE)
    adj[rows, :, agents] = 1
    rows, agents = np.nonzero(actions == _VERIFY)
    adj[rows, agents, (agents + 1) % n] = 1
    rows, agents = np.nonzero((actions == _QUERY) | (actions == _DEBATE))
    adj[rows, agents, targets[rows, agents]] = 1
    rows, agents = np.nonzero(actions == _DEBATE)
    adj[rows, targets[rows, agents], agents] = 1
    idx = np.arange(n)
    adj[:, idx, idx] = 0
    return adj


def build_adjacency(actions: Sequence[int], targets: Sequence[int] | None = None) -> np.ndarray:
    """Map a joint action to the round's directed graph (paper Eq. 11).

    Args:
        actions: ``actions[i]`` is agent i's :class:`CommAction` (int 0..5), length N >= 2.
        targets: ``targets[i]`` is the peer that agent i's selective_query / debate_check
            points at (ignored for other actions). ``None`` means the ring rule.

    Returns:
        (N, N) int8 array of 0/1, ``A[u, v] = 1`` iff u -> v. Edges per action of agent i:
        solo_process none; broadcast_all i -> every other; selective_query i -> target;
        aggregate_refine every other -> i; execute_verify i -> (i + 1) mod N;
        debate_check i <-> target. The graph is the union over agents.
    """
    acts = np.asarray(actions)
    if acts.ndim != 1 or acts.shape[0] < 2:
        raise ValueError(f"actions must be a 1-d sequence of at least 2 actions, got {actions!r}")
    n = acts.shape[0]
    if not np.issubdtype(acts.dtype, np.integer):
        raise ValueError(f"actions must be integers 0..{N_ACTIONS - 1}, got {actions!r}")
    bad = np.flatnonzero((acts < 0) | (acts >= N_ACTIONS))
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"action of agent {i} is {int(acts[i])}, outside 0..{N_ACTIONS - 1}")
    tgt = ring_targets(n) if targets is None else np.asarray(targets)
    if tgt.shape != (n,) or not np.issubdtype(tgt.dtype, np.integer):
        raise ValueError(f"targets must be {n} integers, got {targets!r}")
    pointing = (acts == CommAction.SELECTIVE_QUERY) | (acts == CommAction.DEBATE_CHECK)
    bad = np.flatnonzero(pointing & ((tgt < 0) | (tgt >= n) | (tgt == np.arange(n))))
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"target of agent {i} is {int(tgt[i])}: must be another agent in 0..{n - 1}")
    return adjacency_of(acts.tolist(), tgt.tolist())


def adjacency_of(actions: list[int], targets: list[int]) -> np.ndarray:
    """:func:`build_adjacency` without validation, in plain Python: the env's hot path
    (a numpy version costs ~10x more for one small graph). Tests hold it equal to
    :func:`build_adjacency_batch`."""
    n = len(actions)
    rows = [[0] * n for _ in range(n)]
    for i, a in enumerate(actions):
        if a == _BROADCAST:
            rows[i] = [1] * n
        elif a == _AGGREGATE:
            for u in range(n):
                rows[u][i] = 1
        elif a == _VERIFY:
            rows[i][(i + 1) % n] = 1
        elif a == _QUERY:
            rows[i][targets[i]] = 1
        elif a == _DEBATE:
            rows[i][targets[i]] = 1
            rows[targets[i]][i] = 1
    for i in range(n):
        rows[i][i] = 0
    return np.array(rows, dtype=np.int8)


