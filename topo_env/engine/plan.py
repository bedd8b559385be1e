"""The execution plan of one round: a communication graph ordered into layers of strongly
connected components (the executor runs a layer's components concurrently).

Edge direction everywhere in topomarl: ``A[u, v] == 1`` means agent u's output of this round is
delivered to agent v before v answers (u -> v). No self-loops.
"""
from __future__ import annotations

import networkx as nx
import numpy as np

ExecutionPlan = list[list[tuple[int, ...]]]
"""Layers in execution order; each layer is a list of components; a component is a
sorted tuple of agent indices. Components of one layer have no edges between them."""


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
