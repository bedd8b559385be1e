"""The env as a TorchRL env (``torchrl.envs.PettingZooWrapper``).

TorchRL groups ``agent_0..agent_{N-1}`` into one group ``"agent"``. Keys of a step:
``("agent", "observation", "observation")`` float32 (N, D); ``("agent", "action_mask")`` bool
(N, 6), also set as the mask of the action spec; ``("agent", "action")`` int64 (N,);
``("agent", "reward")`` (N, 1); ``("agent", "info", key)`` for the env's numeric info keys;
``"state"`` float32 (``state_space``); done / terminated / truncated per agent and overall.
"""
from __future__ import annotations

from typing import Any

from torchrl.envs import PettingZooWrapper

from topo_env.config import EnvConfig
from topo_env.env import TopologyParallelEnv
from topo_env.interop.common import ObservationMaskOnly, resolve_config


def torchrl_env(config: EnvConfig | None = None, *, seed: int | None = None, device: str = "cpu",
                **env_keys: Any) -> PettingZooWrapper:
    """A TorchRL env over a new :class:`TopologyParallelEnv` (``config`` or its keys),
    categorical actions, global state, reset with ``seed`` when given."""
    env = TopologyParallelEnv(resolve_config(config, env_keys))
    return PettingZooWrapper(env=ObservationMaskOnly(env), return_state=True, categorical_actions=True,
                             seed=seed, device=device)
