"""The six CommActions on the batch simulator: the PettingZoo front-end's vocabulary over
:class:`topo_env.sim.batch.BatchSimulator`, which itself runs only :class:`BatchRoundSpec` s.

Given the same tasks, noise and actions, :class:`CommBatchSimulator` gives the answers, tokens and
rewards of the PettingZoo env with ``backend="sim"`` (``tests/test_batch_sim.py`` checks episode
by episode): each round's targets follow the env's ``target_rule`` from the previous round's
outputs, and the round the actions make is :func:`comm_round_specs`.
"""
from __future__ import annotations

import numpy as np

from topo_env.frontends.comm_actions import CommAction
from topo_env.frontends.comm_graph import build_adjacency_batch
from topo_env.frontends.targets import choose_targets
from topo_env.sim.batch import BatchResult, BatchRoundSpec, BatchSimulator, BatchState, TaskArrays
from topo_env.sim.model import EpisodeNoise


def comm_round_specs(actions: np.ndarray, targets: np.ndarray) -> BatchRoundSpec:
    """The rounds (B, N) CommActions make with these (B, N) targets: their graphs
    (:func:`topo_env.frontends.comm_graph.build_adjacency_batch`), everyone active, ``execute_verify`` verified."""
    b, n = actions.shape
    return BatchRoundSpec(build_adjacency_batch(actions, targets), np.ones((b, n), dtype=bool),
                          actions == CommAction.EXECUTE_VERIFY)


class CommBatchSimulator(BatchSimulator):
    """The batch simulator played with open-loop CommAction arrays."""

    def run(self, actions: np.ndarray, tasks: TaskArrays, noise: EpisodeNoise,
            adversaries: np.ndarray | None = None) -> BatchResult:
        """Run B episodes; ``actions`` is (B, T, N) or (T, N) (same sequence for all);
        ``adversaries`` a (B, N) bool mask (None: the fixed placement)."""
        b = len(tasks.difficulty)
        acts = np.asarray(actions, dtype=np.int64)
        if acts.ndim == 2:
            acts = np.broadcast_to(acts, (b,) + acts.shape)
        if acts.shape != (b, self.rounds, self.n):
            raise ValueError(f"actions must have shape (B, T, N) = {(b, self.rounds, self.n)}, got {acts.shape}")
        state = self.initial_state(b, adversaries)
        for t in range(self.rounds):
            state = self.run_round(state, acts[:, t], tasks, noise)
        return self.finish(state, tasks, noise)

    def run_round(self, state: BatchState, actions: np.ndarray, tasks: TaskArrays, noise: EpisodeNoise) -> BatchState:
        """One round of (B, N) CommActions: targets from the previous round (the env's
        ``target_rule``), then the round they make (:func:`comm_round_specs`)."""
        n = self.n
        b = actions.shape[0]
        prev = state.previous
        if prev is None:
            targets = np.broadcast_to(choose_targets(self.target_rule, None, None, n), (b, n))
        else:
            targets = choose_targets(self.target_rule, prev.label, prev.conf, n)
        return self.run_spec(state, comm_round_specs(actions, np.ascontiguousarray(targets)), tasks, noise)
