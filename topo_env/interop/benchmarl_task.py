"""The env as a BenchMARL task: :class:`TopoMARLTask` (the enum) and :class:`TopoMARLClass`.

BenchMARL's own ``PettingZooTask`` builds PettingZoo's bundled envs by name only, so a new env
comes in as a task class of its own (BenchMARL's "Creating a new task" recipe).
``TopoMARLTask.TOPOLOGY.get_from_yaml()`` reads ``benchmarl_topomarl.yaml`` next to this
module (:class:`~topo_env.frontends.env_config.EnvConfig` keys; ``get_from_yaml(path)`` another file,
``get_task(config={...})`` a dict); the config is validated when the task is built. A team the
batch simulator plays is one vectorised env of BenchMARL's ``num_envs`` rows
(:class:`~topo_env.interop.torchrl_env.TopologyTorchRLEnv`; BenchMARL then batches nothing itself, as
with VMAS); any other team, and a simulated one asked for pictures (``render_mode: rgb_array``), is
the raw PettingZoo env in TorchRL's ``PettingZooWrapper``, built as BenchMARL builds its PettingZoo
tasks (categorical actions, the state), one env per episode, that BenchMARL batches. Both have one
group ``"agent"``, the action mask read from the observations, a global state (QMIX's mixer input)
and numeric infos under the same keys, so the spec methods are BenchMARL's own for PettingZoo tasks
(:class:`benchmarl.environments.PettingZooClass`).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from benchmarl.environments import PettingZooClass, Task
from tensordict import TensorDictBase
from torchrl.data import Composite
from torchrl.envs import EnvBase, PettingZooWrapper

from topo_env.engine.backend_registry import BATCH_SIMULATOR, backend_offers
from topo_env.frontends.env_config import EnvConfig
from topo_env.engine.config_checks import load_yaml
from topo_env.frontends.parallel_env import TopologyParallelEnv
from topo_env.interop.torchrl_env import TopologyTorchRLEnv

DEFAULT_YAML = Path(__file__).with_name("benchmarl_topomarl.yaml")
#: Team-level infos logged at episode ends (BenchMARL key ``collection/episode_end/<key>``).
EPISODE_END_INFO_KEYS: tuple[str, ...] = ("accuracy", "team_tokens", "density")


class TopoMARLClass(PettingZooClass):
    """BenchMARL's task interface over the topology env. ``config``: EnvConfig keys."""

    def __init__(self, name: str, config: dict | None):
        super().__init__(name=name, config=config)
        self.env_config = EnvConfig.from_dict(self.config)  # validated up front

    def get_env_fun(self, num_envs: int, continuous_actions: bool, seed: int | None,
                    device) -> Callable[[], EnvBase]:
        """A maker of one vectorised env of ``num_envs`` rows (simulated team, no pictures), else a
        maker of one-episode envs that BenchMARL batches ``num_envs`` of itself."""
        if backend_offers(self.env_config.backend, BATCH_SIMULATOR) and self.env_config.render_mode != "rgb_array":
            return functools.partial(TopologyTorchRLEnv, self.env_config, num_envs=num_envs, seed=seed, device=device)
        return SeededEnvMaker(self.env_config, seed, device)

    def supports_continuous_actions(self) -> bool:
        return False

    def supports_discrete_actions(self) -> bool:
        return True

    def has_state(self) -> bool:
        return True

    def has_render(self, env: EnvBase) -> bool:
        """Evaluation videos need pixels: only with ``render_mode: rgb_array`` in the task config."""
        return self.env_config.render_mode == "rgb_array"

    def max_steps(self, env: EnvBase) -> int:
        return self.env_config.rounds

    # BenchMARL's PettingZoo spec methods, on one env's specs: the vectorised env's without its batch
    # dimension (as BenchMARL's VMAS task reads its env's unbatched specs)
    def observation_spec(self, env: EnvBase) -> Composite:
        return super().observation_spec(OneEnvSpecs.of(env))

    def action_mask_spec(self, env: EnvBase) -> Composite | None:
        return super().action_mask_spec(OneEnvSpecs.of(env))

    def state_spec(self, env: EnvBase) -> Composite | None:
        return super().state_spec(OneEnvSpecs.of(env))

    def info_spec(self, env: EnvBase) -> Composite | None:
        return super().info_spec(OneEnvSpecs.of(env))

    def action_spec(self, env: EnvBase) -> Composite:
        return super().action_spec(OneEnvSpecs.of(env))

    @staticmethod
    def log_info(batch: TensorDictBase) -> dict[str, float]:
        """Mean accuracy, team tokens and density over the episodes that ended in ``batch``."""
        done = batch.get(("next", "done")).squeeze(-1)
        if not bool(done.any()):
            return {}
        info = batch.get(("next", "agent", "info"))
        return {f"collection/episode_end/{k}": info.get(k)[done][:, 0].float().mean().item()
                for k in EPISODE_END_INFO_KEYS}

    @staticmethod
    def env_name() -> str:
        return "topomarl"


@dataclass(frozen=True)
class OneEnvSpecs:
    """What BenchMARL's PettingZoo spec methods read of an env (its group map, observation and
    action specs), for one env: a vectorised env's unbatched specs (an unbatched env's own)."""

    group_map: dict[str, list[str]]
    observation_spec: Composite
    full_action_spec: Composite

    @classmethod
    def of(cls, env: EnvBase) -> "OneEnvSpecs":
        return cls(env.group_map, env.observation_spec_unbatched, env.full_action_spec_unbatched)


class SeededEnvMaker:
    """Makes TorchRL envs of one config (the raw env in ``PettingZooWrapper``, with
    categorical actions and the state); the k-th env it makes (k = 0, 1, ...) is seeded with
    ``seed + k``, so that the copies BenchMARL's ``SerialEnv`` batches play different tasks
    (one seed for all would repeat the same episodes in every copy). ``seed=None``: unseeded.
    With ``parallel_collection=True`` TorchRL pickles the maker into each worker before it has
    made an env, so every worker starts from ``seed``: keep the default serial collection."""

    def __init__(self, config: EnvConfig, seed: int | None, device):
        self.config, self.seed, self.device = config, seed, device
        self.made = 0

    def __call__(self) -> EnvBase:
        seed = None if self.seed is None else self.seed + self.made
        self.made += 1
        return PettingZooWrapper(env=TopologyParallelEnv(self.config), return_state=True, categorical_actions=True,
                                 seed=seed, device=self.device)


class TopoMARLTask(Task):
    """Enum of the topology env's BenchMARL tasks (one: the env of the YAML config)."""

    TOPOLOGY = None

    @staticmethod
    def associated_class():
        return TopoMARLClass

    def get_from_yaml(self, path: str | Path | None = None) -> TopoMARLClass:
        """The task with the config of ``path`` (default :data:`DEFAULT_YAML`)."""
        return self.get_task(config=load_yaml(DEFAULT_YAML if path is None else path))
