"""The topology env inside other MARL libraries.

- :mod:`topo_env.interop.gymma`: a ``gymnasium.Env`` in epymarl's ``gymma`` shape; importing
  this package registers it as ``TopoMARL-v0``, so ``gymnasium.make("topo_env.interop:TopoMARL-v0")``
  and epymarl's ``env_args.key="topo_env.interop:TopoMARL-v0"`` find it.
- :mod:`topo_env.interop.common`: :class:`ObservationMaskOnly`, the PettingZoo view that TorchRL
  and BenchMARL read (the action mask in the observation only).
- :mod:`topo_env.interop.torchrl_env`: the env as a TorchRL env (imports torchrl).
- :mod:`topo_env.interop.benchmarl_task`: the env as a BenchMARL task (imports benchmarl).

SuperSuit and Tianshou take the plain env (see the README section "Use with other MARL libraries").
"""
from topo_env.interop.common import ObservationMaskOnly, resolve_config
from topo_env.interop.gymma import ENV_ID, TopologyGymmaEnv

__all__ = ["ENV_ID", "ObservationMaskOnly", "TopologyGymmaEnv", "resolve_config"]
