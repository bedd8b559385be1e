"""From a joint action to a communication graph, and from a graph to an execution order.

Edge direction everywhere in topomarl: ``A[u, v] == 1`` means agent u's output of this
round is delivered to agent v before v answers (u -> v). No self-loops.
"""
from __future__ import annotations

from collections.abc import Sequence

import networkx as nx
import numpy as np

from topo_env.actions import N_ACTIONS, CommAction

ExecutionPlan = list[list[tuple[int, ...]]]
"""Layers in execution order; each layer is a list of components; a component is a
sorted tuple of agent indices. Components of one layer have no edges between them."""


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


def execution_plan(adjacency: np.ndarray) -> ExecutionPlan:
    """Order a round: strongly connected components, run layer by layer.

    The graph is condensed into its strongly connected components; the condensation DAG
    is split into topological generations (layer k holds the components whose
    predecessors all lie in layers < k). Within a layer, components are sorted by their
    smallest agent index. Every agent appears in exactly one component.
    """
    adj = np.asarray(adjacency)
    if adj.ndim != 2 or adj.shape[0] != adj.shape[1]:
        raise ValueError(f"adjacency must be square, got shape {adj.shape}")
    g = nx.from_numpy_array((adj != 0).astype(np.int8), create_using=nx.DiGraph)
    cond = nx.condensation(g)
    members = cond.graph["mapping"]  # agent -> component id
    comps: dict[int, list[int]] = {}
    for agent, cid in members.items():
        comps.setdefault(cid, []).append(agent)
    plan: ExecutionPlan = []
    for generation in nx.topological_generations(cond):
        layer = sorted(tuple(sorted(comps[cid])) for cid in generation)
        plan.append(layer)
    return plan


def degrees(adjacency: np.ndarray) -> tuple[list[int], list[int]]:
    """(in-degree, out-degree) of every agent of one (N, N) graph, as Python ints (plain Python:
    numpy reductions cost more on a small graph, and the envs call this every step)."""
    rows = adjacency.tolist()
    return [sum(c) for c in zip(*rows)], [sum(r) for r in rows]


def density(adjacency: np.ndarray) -> float:
    """Edges divided by the N(N-1) possible directed edges."""
    n = adjacency.shape[-1]
    return float(np.count_nonzero(adjacency)) / (n * (n - 1))


class PlanCache:
    """Memoises :func:`execution_plan` per adjacency (an instance per env or simulator;
    no global state)."""

    def __init__(self, max_entries: int = 65536):
        self._plans: dict[bytes, ExecutionPlan] = {}
        self._arrays: dict[int | bytes, np.ndarray] = {}
        self._max = max_entries

    def plan_arrays(self, adjacency: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The plans of a batch of graphs as arrays.

        Args:
            adjacency: (B, N, N) 0/1.

        Returns:
            ``layer`` (B, N): layer index of each agent; ``component`` (B, N): an id shared
            by the members of one component; ``multi`` (B, N) bool: agent is in a
            component of several agents.
        """
        b, n, _ = adjacency.shape
        flat = adjacency.reshape(b, n * n).astype(bool)
        if n * n <= 62:  # one int64 code per graph
            codes = (flat * (1 << np.arange(n * n, dtype=np.int64))).sum(axis=1)
            uniq, inverse = np.unique(codes, return_inverse=True)
            keys = uniq.tolist()
        else:  # large teams: the packed bits as bytes
            packed = np.packbits(flat, axis=1)
            uniq, inverse = np.unique(packed, axis=0, return_inverse=True)
            keys = [row.tobytes() for row in uniq]
        table = np.empty((len(keys), 3, n), dtype=np.int64)
        for k, code in enumerate(keys):
            row = self._arrays.get(code)
            if row is None:
                if isinstance(code, int):
                    adj = ((code >> np.arange(n * n)) & 1).reshape(n, n)
                else:
                    adj = np.unpackbits(np.frombuffer(code, dtype=np.uint8))[: n * n].reshape(n, n)
                row = np.zeros((3, n), dtype=np.int64)
                for li, layer in enumerate(execution_plan(adj)):
                    for comp in layer:
                        for a in comp:
                            row[0, a], row[1, a], row[2, a] = li, comp[0], len(comp) > 1
                if len(self._arrays) >= self._max:
                    self._arrays.clear()
                self._arrays[code] = row
            table[k] = row
        rows = table[inverse.reshape(-1)]
        return rows[:, 0], rows[:, 1], rows[:, 2].astype(bool)

    def __call__(self, adjacency: np.ndarray) -> ExecutionPlan:
        key = np.ascontiguousarray(adjacency, dtype=np.int8).tobytes()
        plan = self._plans.get(key)
        if plan is None:
            plan = execution_plan(adjacency)
            if len(self._plans) >= self._max:
                self._plans.clear()
            self._plans[key] = plan
        return plan
