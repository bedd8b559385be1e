"""Per-agent CommAction policies (QMIX, the fixed baselines) as controllers of the orchestrator env.

A :class:`topo_env.references.baselines.CommPolicy` chooses one of the six CommActions per agent from the
PettingZoo env's per-agent observations. :class:`CommActionController` rebuilds exactly those
observations from the orchestrator's view (:meth:`ObservationBuilder.agent_observations`, with the
round and the joint action it chose last), resolves the targets of ``selective_query`` /
``debate_check`` from the agents' last answers and confidences (``info["outputs"]``, the rule of
the env config) and sends the round the joint action makes (:func:`topo_env.frontends.parallel_env.comm_round_spec`:
its graph, everyone active, ``execute_verify`` agents verified). So a policy plays the same
episodes through either front-end: same seed, same task, noise, actions and reward (tested).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from controllers.base import Controller, graph_action
from topo_env.frontends.comm_actions import N_ACTIONS
from topo_env.references.baselines import CommPolicy, make_baseline
from topo_env.frontends.env_config import EnvConfig
from topo_env.frontends.encoders import make_encoder
from topo_env.frontends.parallel_env import comm_round_spec
from topo_env.frontends.observation import ObservationBuilder, answer_codes
from topo_env.frontends.targets import choose_targets_one


def observation_builder(config: EnvConfig) -> ObservationBuilder:
    """The observation layout of the PettingZoo env made from ``config``."""
    dim = make_encoder(config.encoder, None if config.encoder == "minilm" else config.embed_dim).dim
    return ObservationBuilder(config.n_agents, config.rounds, config.roles, dim, config.max_tokens, config.personas)


class CommActionController(Controller):
    """Plays a per-agent :class:`~topo_env.references.baselines.CommPolicy` (``policy.act(observations, infos)`` ->
    ``{"agent_i": action}``) as a graph-mode controller. ``seed`` seeds the per-episode seeds
    handed to ``policy.reset`` (the random baseline's draws)."""

    mode = "graph"

    def __init__(self, policy: CommPolicy, config: EnvConfig, seed: int = 0, name: str | None = None):
        self.policy, self.config = policy, config
        self.name = name or policy.name
        self.builder = observation_builder(config)
        self._rng = np.random.default_rng(seed)
        self._previous: list[int] | None = None
        self._sent_to = np.zeros((config.n_agents, config.n_agents), dtype=np.int8)

    def begin(self, observation: dict, info: dict) -> None:
        self.policy.reset(int(self._rng.integers(2**31)))
        self._previous = None
        self._sent_to = np.zeros_like(self._sent_to)

    def act(self, observation: dict, info: dict) -> dict[str, Any]:
        n = self.config.n_agents
        obs = self.builder.agent_observations(observation["task"], observation["agents"], int(observation["round"]),
                                              self._previous)
        names = [f"agent_{i}" for i in range(n)]
        mask = np.ones(N_ACTIONS, dtype=np.int8)
        observations = {a: {"observation": obs[i], "action_mask": mask} for i, a in enumerate(names)}
        infos = {a: {"sent_to": self._sent_to[i].copy()} for i, a in enumerate(names)}
        chosen = self.policy.act(observations, infos)
        actions = [int(chosen[a]) for a in names]
        if self._previous is None:
            targets = choose_targets_one(self.config.target_rule, None, None, n)
        else:
            outputs = info["outputs"]
            codes = answer_codes([None if o is None else o["answer"] for o in outputs])
            confs = [0.5 if o is None or o["confidence"] is None else o["confidence"] for o in outputs]
            targets = choose_targets_one(self.config.target_rule, codes, confs, n)
        spec = comm_round_spec(actions, targets)
        self._previous = actions
        self._sent_to = spec.adjacency.astype(np.int8)
        return graph_action(n, spec.adjacency, spec.active, spec.verify)


def build_baseline(name: str, config: EnvConfig, seed: int = 0) -> CommActionController:
    """A fixed baseline (``solo``, ``full``, ``chain``, ``star``, ``debate``) or ``random`` as a controller."""
    return CommActionController(make_baseline(name, seed=seed, roles=config.roles), config, seed, name)
