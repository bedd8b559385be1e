"""Pieces shared by the library adapters: config resolution and the mask-in-observation view."""
from __future__ import annotations

from typing import Any

from pettingzoo.utils.wrappers import BaseParallelWrapper

from topo_env.config import ConfigError, EnvConfig
from topo_env.env import TopologyParallelEnv


def resolve_config(config: EnvConfig | None, env_keys: dict[str, Any]) -> EnvConfig:
    """``config`` itself, or an :class:`EnvConfig` from the YAML ``env:`` keys; not both."""
    if config is not None and env_keys:
        raise ConfigError(f"pass either config or env keyword arguments, not both (got keys {sorted(env_keys)})")
    if config is not None and not isinstance(config, EnvConfig):
        raise ConfigError(f"config must be an EnvConfig, got {type(config).__name__}")
    return config if config is not None else EnvConfig.from_dict(env_keys)


class ObservationMaskOnly(BaseParallelWrapper):
    """The env with ``"action_mask"`` dropped from the infos (it stays in each observation).

    TorchRL's ``PettingZooWrapper`` (and BenchMARL on top of it) takes the mask from the
    observation *or* the info: it removes the info copy from its specs but, when the
    observation holds a mask, still writes the info copy, and fails. Everything else
    (spaces, ``state()``, ``state_space``, ``render()``, attributes) is the wrapped env's.
    """

    def __init__(self, env: TopologyParallelEnv):
        super().__init__(env)

    def reset(self, seed: int | None = None, options: dict | None = None):
        obs, infos = self.env.reset(seed=seed, options=options)
        return obs, _without_mask(infos)

    def step(self, actions: dict):
        obs, rewards, terminations, truncations, infos = self.env.step(actions)
        return obs, rewards, terminations, truncations, _without_mask(infos)


def _without_mask(infos: dict[str, dict]) -> dict[str, dict]:
    return {agent: {k: v for k, v in info.items() if k != "action_mask"} for agent, info in infos.items()}
