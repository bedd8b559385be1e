"""The topology env inside other MARL libraries.

The PettingZoo env itself, ``topo_env.parallel_env(**env_keys)``, is what TorchRL's
``PettingZooWrapper`` (``use_mask=True``), SuperSuit's vector envs and Tianshou's ``PettingZooEnv``
take, as their docs show (the action mask is in each observation only). This package holds what a
library cannot do with the plain env:

- :mod:`topo_env.interop.gymma`: one ``gymnasium.Env`` in epymarl's ``gymma`` shape; importing
  this package registers it as ``TopoMARL-v0``, so ``gymnasium.make("topo_env.interop:TopoMARL-v0")``
  and epymarl's ``env_args.key="topo_env.interop:TopoMARL-v0"`` find it. :data:`EPYMARL_CONFIG`
  is the env config file to copy into epymarl's ``src/config/envs/`` (it declares every env key,
  so that ``with env_args.<key>=...`` overrides are accepted).
- :mod:`topo_env.interop.torchrl_env`: :class:`TopologyTorchRLEnv`, the simulated team as one
  vectorised TorchRL env of B episodes per step (imports torch and torchrl when first used:
  ``import topo_env.interop`` itself stays free of torch, for epymarl users).
- :mod:`topo_env.interop.benchmarl_task`: the env as a BenchMARL task (BenchMARL builds its own
  PettingZoo tasks by name only; imports benchmarl).
"""
from typing import Any

from topo_env.interop.gymma import ENV_ID, EPYMARL_CONFIG, TopologyGymmaEnv, gymma_env_config

__all__ = ["ENV_ID", "EPYMARL_CONFIG", "TopologyGymmaEnv", "TopologyTorchRLEnv", "gymma_env_config"]


def __getattr__(name: str) -> Any:
    """``TopologyTorchRLEnv`` on first use (PEP 562), so that importing this package loads no torch."""
    if name == "TopologyTorchRLEnv":
        from topo_env.interop.torchrl_env import TopologyTorchRLEnv

        return TopologyTorchRLEnv
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
