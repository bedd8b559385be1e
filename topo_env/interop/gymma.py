"""The env as one ``gymnasium.Env`` in epymarl's ``gymma`` shape, registered as ``TopoMARL-v0``.

epymarl's ``GymmaWrapper`` (``src/envs/gymma.py``) builds it with
``gymnasium.make(env_args.key, **other env_args)``, wraps it in ``TimeLimit(time_limit)`` and a
per-agent ``FlattenObservation``, and reads:

- ``n_agents``; ``observation_space`` / ``action_space``: ``Tuple`` of the per-agent spaces,
  here ``Box(float32, (D,))`` and ``Discrete(6)`` (the action mask is not part of the observation);
- ``reset(seed, options) -> (tuple of N observations, info)``;
- ``step(list of N ints) -> (observations, rewards, terminated, truncated, info)`` with
  ``rewards`` a list of N floats (every agent gets the team reward; epymarl's
  ``reward_scalarisation`` sums or averages them), ``terminated`` a bool;
- ``info``: numbers only (epymarl adds up the last step's values over episodes and logs means).
  ``info["episode_limit"]`` is always False: the last round is a true terminal state (the team
  answers and is scored), and epymarl stores ``terminated != episode_limit`` as its TD
  terminal flag, so True there would bootstrap past the end of the episode.

epymarl's gymma marks every action available (``get_avail_agent_actions`` returns ones), so it
matches this env when no action is disabled; :meth:`TopologyGymmaEnv.get_avail_actions` gives
the real masks (same name as epymarl's ``MultiAgentEnv`` method) for wrappers that read them,
and a masked action raises ``ValueError``. Set ``env_args.time_limit`` to ``rounds + 1``: the
env ends itself after its last round, and gymma reports a step on which its ``TimeLimit``
fires as ``episode_limit`` (a time-out, bootstrapped), which the last round is not.

epymarl's config system (sacred) refuses a ``with env_args.<key>=...`` override of a key its
config files do not declare (``ConfigAddedError``). :data:`EPYMARL_CONFIG`
(``epymarl_topomarl.yaml``, copied into epymarl's ``src/config/envs/``) declares every env key,
the ``backend`` keys included; its ``null`` means "the key's default", which is why
:func:`gymma_env_config` drops null values.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces

from topo_env.frontends.env_config import EnvConfig
from topo_env.engine.config_checks import ConfigError
from topo_env.frontends.parallel_env import TopologyParallelEnv

ENV_ID = "TopoMARL-v0"
EPYMARL_CONFIG = Path(__file__).with_name("epymarl_topomarl.yaml")
"""epymarl env config (``--env-config=topomarl`` once copied to ``src/config/envs/topomarl.yaml``)."""

#: Team-level numbers in every info: taken from agent_0's info (equal for all agents) ...
TEAM_INFO_KEYS: tuple[str, ...] = ("team_tokens", "edges", "density", "accuracy", "tokens_estimated")
#: ... and summed over agents.
SUMMED_INFO_KEYS: tuple[str, ...] = ("calls", "round_tokens")


class TopologyGymmaEnv(gymnasium.Env):
    """N agents in one gymnasium env: tuple observations, list actions, list rewards.

    Build with an :class:`~topo_env.frontends.env_config.EnvConfig` or with its keys as keyword arguments
    (what epymarl passes from ``env_args``), e.g. ``TopologyGymmaEnv(rounds=3)``.
    """

    metadata = {"render_modes": TopologyParallelEnv.metadata["render_modes"]}

    def __init__(self, config: EnvConfig | None = None, **env_keys: Any):
        self.env = TopologyParallelEnv(gymma_env_config(config, env_keys))
        env = self.env
        self.n_agents = env.n_agents
        self.render_mode = env.render_mode
        agents = env.possible_agents
        self.observation_space = spaces.Tuple(tuple(env.observation_space(a)["observation"] for a in agents))
        self.action_space = spaces.Tuple(tuple(env.action_space(a) for a in agents))
        self.state_space = env.state_space
        self._masks: list[np.ndarray] = []

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """``options`` as for :meth:`TopologyParallelEnv.reset` (``task``, ``split``)."""
        super().reset(seed=seed)
        obs, infos = self.env.reset(seed=seed, options=options)
        return self._observations(obs), self._info(infos)

    def step(self, actions):
        """``actions``: N integers, agent i's at position i."""
        if isinstance(actions, (str, bytes, dict)) or not hasattr(actions, "__len__"):
            raise ValueError(f"actions must be a sequence of {self.n_agents} integers, got {actions!r}")
        if len(actions) != self.n_agents:
            raise ValueError(f"actions has {len(actions)} entries, expected {self.n_agents} (one per agent): "
                             f"{actions!r}")
        agents = self.env.possible_agents
        obs, rewards, terminations, truncations, infos = self.env.step(dict(zip(agents, actions)))
        reward_list = [float(rewards[a]) for a in agents]
        terminated = all(terminations[a] for a in agents)
        truncated = all(truncations[a] for a in agents)
        return self._observations(obs), reward_list, terminated, truncated, self._info(infos)

    def get_avail_actions(self) -> list[list[int]]:
        """Per agent, 1 for each action it may take (its ``action_mask``)."""
        if not self._masks:
            raise RuntimeError("get_avail_actions() called before reset()")
        return [mask.tolist() for mask in self._masks]

    def state(self) -> np.ndarray:
        """The global state (``state_space``; see :mod:`topo_env.frontends.observation`)."""
        return self.env.state()

    def render(self) -> str | np.ndarray | None:
        """The env's ``render()`` in its ``render_mode``."""
        return self.env.render()

    def transcript(self) -> str:
        return self.env.transcript()

    def close(self) -> None:
        self.env.close()

    def _observations(self, obs: dict) -> tuple[np.ndarray, ...]:
        agents = self.env.possible_agents
        self._masks = [obs[a]["action_mask"] for a in agents]
        return tuple(obs[a]["observation"] for a in agents)

    def _info(self, infos: dict[str, dict]) -> dict[str, float | int | bool]:
        per_agent = [infos[a] for a in self.env.possible_agents]
        info: dict[str, float | int | bool] = {k: per_agent[0][k] for k in TEAM_INFO_KEYS}
        info.update({k: sum(i[k] for i in per_agent) for k in SUMMED_INFO_KEYS})
        info["round"] = self.env.round
        info["episode_limit"] = False
        return info


def gymma_env_config(config: EnvConfig | None, env_keys: dict[str, Any]) -> EnvConfig:
    """``config`` itself, or an :class:`EnvConfig` from env keys as epymarl passes them: a
    ``None`` value, at the top or inside a ``backend`` mapping, leaves that key at its default.
    Passing both ``config`` and keys is an error."""
    if config is not None and env_keys:
        raise ConfigError(f"pass either config or env keyword arguments, not both (got keys {sorted(env_keys)})")
    if config is not None and not isinstance(config, EnvConfig):
        raise ConfigError(f"config must be an EnvConfig, got {type(config).__name__}")
    if config is not None:
        return config
    keys = {k: v for k, v in env_keys.items() if v is not None}
    if isinstance(keys.get("backend"), dict):
        keys["backend"] = {k: v for k, v in keys["backend"].items() if v is not None}
    return EnvConfig.from_dict(keys)


def register() -> None:
    """Register :data:`ENV_ID` with gymnasium (once per process; importing this module does it)."""
    if ENV_ID not in gymnasium.registry:
        gymnasium.register(id=ENV_ID, entry_point=f"{__name__}:TopologyGymmaEnv")


register()
