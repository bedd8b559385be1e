"""BenchMARL's discrete-action algorithms, off the shelf, on the simulated team, and their greedy policies.

    from controllers.benchmarl_policy import play_held_out, train_benchmarl
    trained = train_benchmarl("mappo", config, seed=0, frames=300_000, out_dir="runs/x")
    scores = play_held_out(trained.policy, config, seed=0, episodes=20_000)  # {"reward", "accuracy", "team_tokens"}

Training (:func:`train_benchmarl`) runs a BenchMARL ``Experiment`` on the topology task
(:mod:`topo_env.interop.benchmarl_task`: a simulated team is one vectorised TorchRL env) with BenchMARL's
default hyperparameters: ``ExperimentConfig.get_from_yaml()``, the algorithm's ``XxxConfig.get_from_yaml()``,
``MlpConfig.get_from_yaml()`` for the actor and the critic. What it overrides (:func:`experiment_config`), and why:

- ``max_n_frames`` = ``frames`` (the budget), ``max_n_iters`` None: the run stops on frames;
- ``save_folder`` = ``out_dir``; ``loggers`` csv into it (``[]`` without one): the default's wandb
  needs an account and the network;
- ``sampling_device`` / ``train_device`` / ``buffer_device`` cpu (the defaults, stated);
- ``evaluation`` off (``create_json``, which records evaluations, with it): BenchMARL's evaluation plays 10
  episodes every 120,000 frames for its logs and changes nothing in training; the policy is scored here on
  the held-out episodes of :func:`play_held_out` instead (thousands, on the seeds every method shares);
- ``render`` off: the simulated team draws no pictures (``render_mode`` None).

Two more things are not BenchMARL's hyperparameters but the machine's and the env's: torch runs on
``torch_threads`` threads (default :data:`TORCH_THREADS`, restored afterwards: on 2 cores beside another
job an MLP step took 4x longer on 2 threads than on 1), and the training episodes are env seeds
``training_env_seed(seed, 0) + j`` of the train split (:func:`benchmarl_task`), as our QMIX's, so that
seeds train on disjoint episodes (BenchMARL's task seeds the env with the experiment's seed: seeds 0, 1, 2
would replay all but a row of each other's episodes).

Units. ``frames`` are env steps times env rows (BenchMARL's ``total_frames``): an episode of T rounds is T
frames, so episodes = frames / T. BenchMARL collects whole batches (6,000 frames by default), so a run
collects ``frames`` rounded up to whole batches; :attr:`TrainedBenchMARL.frames` is what it collected.

Scoring (:func:`play_held_out`): the policy plays greedily (TorchRL's ``ExplorationType.DETERMINISTIC``:
the mode of PPO's and SAC's masked categorical, no epsilon for the Q-learners) the eval-split episodes
``held_out_seed(seed) + k``, k < ``episodes``, on :class:`~topo_env.interop.torchrl_env.TopologyTorchRLEnv`,
``chunk`` rows at a time: the episodes the PettingZoo env plays after ``reset(seed=held_out_seed(seed) + k)``
and :func:`learners.evaluation.score_on_simulator` plays for the same seed, so rewards pair episode by episode.

As leaderboard methods (``benchmarl_mappo`` ... in :data:`controllers.registry.LIBRARY`,
:class:`BenchMARLController`) the greedy policy plays the orchestrator env through
:class:`~controllers.per_agent.CommActionController`, as QMIX does; :meth:`BenchMARLController.train` trains
on the simulated team of the comparison's env config for ``episodes * rounds`` frames (the env it is handed
is not played).
"""
from __future__ import annotations

import contextlib
import dataclasses
import io
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import benchmarl.algorithms
import gymnasium
import numpy as np
import torch
from benchmarl.experiment import Experiment, ExperimentConfig
from benchmarl.experiment.callback import Callback
from benchmarl.models.mlp import MlpConfig
from tensordict import TensorDict
from torchrl.envs.utils import ExplorationType, set_exploration_type

from controllers.base import TrainingSpend
from controllers.per_agent import CommActionController
from controllers.registry import BENCHMARL_ALGORITHMS, LIBRARY
from topo_env.engine.backend_registry import BATCH_SIMULATOR, backend_offers
from topo_env.engine.seeding import held_out_seed, training_env_seed
from topo_env.frontends.env_config import EnvConfig
from topo_env.interop.benchmarl_task import TopoMARLClass
from topo_env.interop.torchrl_env import GROUP, TopologyTorchRLEnv
from topo_env.references.baselines import agent_index

TRAIN_FRAMES: dict[str, int] = {"mappo": 108_000, "ippo": 108_000, "qmix": 156_000, "vdn": 216_000, "iql": 270_000,
                                "masac": 54_000}
"""Each algorithm's budget in frames: what it trains in about 18 minutes on 2 cores beside other jobs, in whole
batches of 6,000 frames, so that a run with its scoring fits in 20 minutes. Measured frames per second with
BenchMARL's defaults at N = 3, T = 2, embed_dim 512, one torch thread, a load of 3-4.7 (the mean of two short
runs, 6,000 and 12,000 frames): mappo 95 (a 90,000-frame run: 116), ippo 102, qmix 149, vdn 202, iql 255,
masac 53. They differ 5-fold: one budget for all would be masac's (54,000 frames)."""
TRAIN_EPISODES: dict[str, int] = {f"benchmarl_{a}": frames // 2 for a, frames in TRAIN_FRAMES.items()}
"""The leaderboard's budgets in episodes, by method name: :data:`TRAIN_FRAMES` at T = 2."""
ENV_ROUNDS: int | None = None  # the profile's rounds
BUILD_TAKES_ENV_CONFIG: bool = True  # the registry hands build() the comparison's env config (training needs it)
TORCH_THREADS: int = 1
"""torch threads while training (None: leave torch's setting); see the module docstring."""
PLAY_CHUNK: int = 2048
"""Held-out episodes :func:`play_held_out` plays at once (a few tens of MB at N = 3, T = 2)."""


def algorithm_config(algorithm: str) -> Any:
    """BenchMARL's default config of ``algorithm`` (``benchmarl.algorithms.<Name>Config.get_from_yaml()``);
    an unknown name is a one-line ValueError listing the known ones."""
    if algorithm not in BENCHMARL_ALGORITHMS:
        raise ValueError(f"BenchMARL algorithm {algorithm!r}: not one of {list(BENCHMARL_ALGORITHMS)}")
    return getattr(benchmarl.algorithms, f"{algorithm.capitalize()}Config").get_from_yaml()


def experiment_config(frames: int, out_dir: str | Path, loggers: bool = True,
                      changes: Mapping[str, Any] | None = None) -> Any:
    """BenchMARL's default ``ExperimentConfig`` with the overrides of the module docstring, then ``changes``
    (``ExperimentConfig`` keys; none in a study: the tests' tiny batches). An unknown key is a one-line
    ValueError."""
    if isinstance(frames, bool) or not isinstance(frames, (int, np.integer)) or frames < 1:
        raise ValueError(f"frames={frames!r}: give a positive integer (env steps times env rows)")
    cfg = ExperimentConfig.get_from_yaml()
    cfg.max_n_frames, cfg.max_n_iters = int(frames), None
    cfg.save_folder, cfg.loggers = str(out_dir), ["csv"] if loggers else []
    cfg.sampling_device = cfg.train_device = cfg.buffer_device = "cpu"
    cfg.evaluation, cfg.create_json, cfg.render = False, False, False
    unknown = sorted(set(changes or {}) - {f.name for f in dataclasses.fields(cfg)})
    if unknown:
        raise ValueError(f"BenchMARL experiment key {unknown[0]!r}: not an ExperimentConfig field")
    return dataclasses.replace(cfg, **(changes or {}))


class DisjointSeedsTask(TopoMARLClass):
    """The topology task whose env, for an experiment seeded ``seed``, plays the env seeds
    ``training_env_seed(seed, 0) + j`` (module docstring)."""

    def get_env_fun(self, num_envs: int, continuous_actions: bool, seed: int | None, device):
        first = None if seed is None else training_env_seed(seed, 0)
        return super().get_env_fun(num_envs, continuous_actions, first, device)


def benchmarl_task(config: EnvConfig) -> DisjointSeedsTask:
    """The BenchMARL task of ``config``'s team on the train split (:class:`DisjointSeedsTask`)."""
    return DisjointSeedsTask(name="TOPOLOGY", config=dataclasses.replace(config, split="train").to_dict())


class LearningCurve(Callback):
    """Records ``(total frames, mean training episode return)`` after each collected batch."""

    def __init__(self):
        super().__init__()
        self.points: list[tuple[int, float]] = []

    def on_batch_collected(self, batch) -> None:
        self.points.append((int(self.experiment.total_frames), float(self.experiment.mean_return)))


@dataclass
class TrainedBenchMARL:
    """A finished BenchMARL run: the experiment's policy module (``experiment.policy``: the actor with
    its exploration; greedy under ``ExplorationType.DETERMINISTIC``), the frames it collected and the
    episodes they make (frames / rounds), its wall seconds (building the experiment included), and
    ``curve``: after each collected batch, ``(total frames, mean training episode return)`` (the return
    BenchMARL logs, exploring)."""

    algorithm: str
    policy: Any
    frames: int
    episodes: int
    seconds: float
    curve: list[tuple[int, float]] = field(default_factory=list)


def build_experiment(algorithm: str, config: EnvConfig, seed: int, frames: int, out_dir: str | Path,
                     loggers: bool = True, callbacks: list | None = None,
                     changes: Mapping[str, Any] | None = None) -> Any:
    """The BenchMARL ``Experiment`` :func:`train_benchmarl` runs (built, not run). A team the batch
    simulator does not play is a one-line ValueError."""
    if not backend_offers(config.backend, BATCH_SIMULATOR):
        raise ValueError(f"BenchMARL trains here on a simulated team (the batch simulator); backend kind "
                         f"{config.backend.kind!r} is not one")
    algorithm_cfg = algorithm_config(algorithm)
    return Experiment(task=benchmarl_task(config), algorithm_config=algorithm_cfg,
                      model_config=MlpConfig.get_from_yaml(), critic_model_config=MlpConfig.get_from_yaml(),
                      seed=int(seed), config=experiment_config(frames, out_dir, loggers, changes),
                      callbacks=callbacks or [])


def train_benchmarl(algorithm: str, config: EnvConfig, seed: int, frames: int, out_dir: str | Path | None = None,
                    progress: bool = False, torch_threads: int | None = TORCH_THREADS,
                    changes: Mapping[str, Any] | None = None) -> TrainedBenchMARL:
    """Train BenchMARL's ``algorithm`` with its defaults (module docstring) for ``frames`` frames on the
    simulated team of ``config`` (train split), seed ``seed``; csv logs into ``out_dir`` (None: no logs, a
    temporary folder). ``progress``: BenchMARL's own progress bar and warnings. ``changes``:
    :func:`experiment_config`'s. Returns the trained policy."""
    threads = torch.get_num_threads()
    if torch_threads is not None:
        torch.set_num_threads(int(torch_threads))
    curve = LearningCurve()
    started = time.perf_counter()
    try:
        with tempfile.TemporaryDirectory(prefix="topomarl_benchmarl_") as scratch:
            folder = Path(out_dir) if out_dir is not None else Path(scratch)
            folder.mkdir(parents=True, exist_ok=True)
            with contextlib.nullcontext() if progress else contextlib.redirect_stderr(io.StringIO()):
                experiment = build_experiment(algorithm, config, seed, frames, folder, out_dir is not None, [curve],
                                              changes)
                experiment.run()  # silenced: BenchMARL's progress bar and warnings
    finally:
        torch.set_num_threads(threads)
    frames_done = int(experiment.total_frames)
    return TrainedBenchMARL(algorithm, experiment.policy, frames_done, frames_done // config.rounds,
                            time.perf_counter() - started, curve.points)


def play_held_out(policy: Any, config: EnvConfig, seed: int, episodes: int,
                  chunk: int = PLAY_CHUNK) -> dict[str, np.ndarray]:
    """The TorchRL ``policy`` (``("agent", ...)`` observations and mask -> ``("agent", "action")``) played
    greedily on ``episodes`` eval-split episodes of env seeds ``held_out_seed(seed) + k`` (module docstring),
    ``chunk`` at a time. Returns (E,) arrays ``reward`` (the episode's return), ``accuracy`` and
    ``team_tokens``, in episode order."""
    if isinstance(episodes, bool) or not isinstance(episodes, (int, np.integer)) or episodes < 1:
        raise ValueError(f"episodes={episodes!r}: give a positive integer")
    cfg, first = dataclasses.replace(config, split="eval"), held_out_seed(seed)
    out = {"reward": np.zeros(episodes), "accuracy": np.zeros(episodes), "team_tokens": np.zeros(episodes, np.int64)}
    for start in range(0, int(episodes), int(chunk)):
        rows = min(int(chunk), int(episodes) - start)
        env = TopologyTorchRLEnv(cfg, num_envs=rows, seed=first + start)
        with set_exploration_type(ExplorationType.DETERMINISTIC), torch.no_grad():
            played = env.rollout(cfg.rounds, policy, break_when_any_done=True)  # (rows, T): all rows end together
        step = played.get("next")
        last = step.get((GROUP, "info"))[:, -1]
        out["reward"][start:start + rows] = step.get((GROUP, "reward"))[:, :, 0, 0].double().sum(1).numpy()
        out["accuracy"][start:start + rows] = last.get("accuracy")[:, 0].numpy()
        out["team_tokens"][start:start + rows] = last.get("team_tokens")[:, 0].numpy()
        env.close()
    return out


# -- the leaderboard's controllers -----------------------------------------------------------
class TorchRLCommPolicy:
    """A TorchRL policy of the topology env's group (a trained BenchMARL policy) as a
    :class:`~topo_env.references.baselines.CommPolicy`: the agents' observations and masks in one
    batch of one env, the greedy joint action out. Stateless across rounds (BenchMARL's MLPs)."""

    privileged = False

    def __init__(self, policy: Any, name: str):
        self.policy, self.name = policy, name

    def reset(self, seed: int | None) -> None:
        """Nothing to reset: greedy, no memory."""

    def act(self, observations: dict, infos: dict) -> dict[str, int]:
        names = sorted(observations, key=agent_index)
        obs = torch.as_tensor(np.stack([observations[a]["observation"] for a in names]), dtype=torch.float32)
        mask = torch.as_tensor(np.stack([observations[a]["action_mask"] for a in names]).astype(bool))
        n = len(names)
        group = TensorDict({"observation": TensorDict({"observation": obs[None]}, batch_size=(1, n)),
                            "action_mask": mask[None]}, batch_size=(1, n))
        with set_exploration_type(ExplorationType.DETERMINISTIC), torch.no_grad():
            actions = self.policy(TensorDict({GROUP: group}, batch_size=(1,))).get((GROUP, "action"))[0]
        return {a: int(actions[i]) for i, a in enumerate(names)}


class BenchMARLController(CommActionController):
    """The greedy policy of BenchMARL's ``algorithm`` trained on this controller's env config
    (``benchmarl_<algorithm>``); before :meth:`train`, the untrained policy of the seed's experiment."""

    trainable = True

    def __init__(self, config: EnvConfig, seed: int, algorithm: str):
        algorithm_config(algorithm)  # checks the name
        self.algorithm, self.seed = algorithm, int(seed)
        self.trained: TrainedBenchMARL | None = None
        super().__init__(TorchRLCommPolicy(None, f"benchmarl_{algorithm}"), config, seed, f"benchmarl_{algorithm}")

    def begin(self, observation: dict, info: dict) -> None:
        if self.policy.policy is None:  # untrained: the experiment's initial policy
            with tempfile.TemporaryDirectory(prefix="topomarl_benchmarl_") as scratch:
                self.policy.policy = build_experiment(self.algorithm, self.config, self.seed, 1, scratch, False).policy
        super().begin(observation, info)

    def train(self, env: gymnasium.Env, episodes: int, seed: int, progress: bool = False) -> TrainingSpend:
        """BenchMARL for ``episodes * rounds`` frames on the simulated team of this controller's env config
        (``env`` is not played); returns the episodes it trained on."""
        self.trained = train_benchmarl(self.algorithm, self.config, seed, int(episodes) * self.config.rounds,
                                       progress=progress)
        self.policy.policy = self.trained.policy
        return TrainingSpend(episodes=self.trained.episodes)


def build(n_agents: int, rounds: int, seed: int, config: dict | None = None, env_config: EnvConfig | None = None,
          method: str = "benchmarl_mappo") -> BenchMARLController:
    """The leaderboard's constructor: ``method`` is the registry's name (``benchmarl_<algorithm>``),
    ``env_config`` the comparison's env. ``config`` takes no keys: the hyperparameters are BenchMARL's."""
    if config:
        raise ValueError(f"{method} config keys {sorted(config)}: none are taken (BenchMARL's defaults)")
    if method not in LIBRARY:
        raise ValueError(f"method {method!r}: not one of {list(LIBRARY)}")
    env_config = env_config or EnvConfig.from_dict({"n_agents": n_agents, "rounds": rounds})
    return BenchMARLController(env_config, seed, method.removeprefix("benchmarl_"))
