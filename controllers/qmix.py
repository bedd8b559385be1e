"""Agent Q-Mix (seed 002) as a controller: the greedy QMIX policy of a training run.

QMIX is the PettingZoo front-end's method: each agent picks one of six CommActions, and it trains
there (:mod:`learners.training`: replay, mixer, target networks). As a controller it plays
through :class:`controllers.per_agent.CommActionController`, which rebuilds the agents'
observations from the orchestrator's and sends the round their joint action makes, so it is
scored on exactly the episodes, accounting and code path of every other method.

:meth:`QMIXController.train` trains with :func:`learners.training.train_in_child` (a child process
that keeps torch's threads and the training's memory apart from the caller's) on
``configs/default.yaml`` with the env of the comparison, then loads the trained network; what
training spent (episodes, LLM calls, tokens) comes from the run's checkpoint.
"""
from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path
from typing import Any

import gymnasium

from controllers.base import TrainingSpend
from controllers.per_agent import CommActionController, observation_builder
from topo_env.frontends.comm_actions import N_ACTIONS
from topo_env.frontends.env_config import EnvConfig
from topo_env.engine.config_checks import ConfigError

TRAIN_EPISODES = 8192
"""configs/default.yaml's train.episodes: the TD episodes `python train_qmix.py` trains, after its teacher
(docs/training.md); a literal, as reading the YAML would import torch here (tests/test_controllers.py checks
that the two agree)."""
ENV_ROUNDS = None  # the profile's rounds, as QMIX trains on them
BUILD_TAKES_ENV_CONFIG = True  # the registry hands build() the comparison's env config (training needs it)


class QMIXController(CommActionController):
    """The greedy policy of a QMIX agent network: ``agent`` (an :class:`AgentQNetwork`), or until
    :meth:`train` / :meth:`load_run` an untrained one of ``configs/default.yaml``'s layout,
    initialised from ``seed`` (as every learned method starts)."""

    trainable = True

    def __init__(self, config: EnvConfig, seed: int = 0, agent: Any = None, run_dir: str | Path | None = None,
                 overrides: tuple[str, ...] = (), train_config: str | Path | None = None):
        import torch

        from learners.agent_network import build_agent_network
        from learners.config import DEFAULT_CONFIG, load_experiment
        from learners.evaluation import QMIXPolicy  # torch only where QMIX is used

        if agent is None:
            with torch.random.fork_rng():
                torch.manual_seed(int(seed))
                agent = build_agent_network(observation_builder(config).dim, N_ACTIONS,
                                            load_experiment(DEFAULT_CONFIG).qmix).eval()
        super().__init__(QMIXPolicy(agent), config, seed, "qmix")
        self.seed, self.run_dir, self.overrides = int(seed), run_dir, tuple(overrides)
        self.train_config = train_config  # the training's YAML (None: configs/default.yaml)
        self.loaded_run: Path | None = None  # the run whose network plays (None: the initial network)

    def train(self, env: gymnasium.Env, episodes: int, seed: int, progress: bool = False) -> TrainingSpend:
        """Train on this controller's env config for ``episodes`` episodes (seed ``seed``) into
        ``run_dir`` (a temporary folder if None): ``train_config`` with ``overrides``, 100
        held-out episodes and no references or learning curve, in a child process (its output in
        ``run_dir/train.log`` unless ``progress``); then load the result. ``env`` is not played:
        QMIX trains on the PettingZoo front-end of the same team."""
        from learners.child import train_in_child
        from learners.training import RunOptions

        out = Path(self.run_dir) if self.run_dir is not None else Path(tempfile.mkdtemp(prefix="topomarl_qmix_"))
        out.mkdir(parents=True, exist_ok=True)
        cfg = self.training_config(int(episodes), int(seed))
        log = None if progress else out / "train.log"
        code = train_in_child(cfg, out, RunOptions(progress=progress, source="configs/default.yaml"), log=log)
        if code != 0:
            tail = log.read_text().strip().splitlines()[-1:] if log is not None and log.is_file() else []
            raise RuntimeError(f"training QMIX failed (exit {code}): {' '.join(tail) or 'see its output'}")
        return self.load_run(out)

    def training_config(self, episodes: int, seed: int) -> Any:
        """The :class:`learners.config.ExperimentConfig` :meth:`train` runs: ``configs/default.yaml``
        (or ``train_config``) on this controller's env, ``episodes`` episodes, seed ``seed``, then
        ``overrides``."""
        from learners.config import DEFAULT_CONFIG, load_experiment, with_overrides

        base = load_experiment(self.train_config or DEFAULT_CONFIG)
        env = dataclasses.replace(self.config, split="train", render_mode=None)
        train = dataclasses.replace(base.train, episodes=episodes, seed=seed, references=False, eval_episodes=100,
                                    curve_every=0)
        return with_overrides(dataclasses.replace(base, env=env, train=train), list(self.overrides))

    def load_run(self, run_dir: str | Path) -> TrainingSpend:
        """Play the greedy network of a training run (its folder); returns what its training spent.
        A ConfigError names the layout field that differs from this controller's env."""
        from learners.evaluation import QMIXPolicy, agent_from_checkpoint, layout_difference, load_checkpoint

        cfg, checkpoint = load_checkpoint(run_dir)
        difference = layout_difference(dataclasses.replace(cfg, env=self.config), cfg)
        if difference:
            raise ConfigError(f"{run_dir}: the run's network does not fit this env: {difference}")
        agent = agent_from_checkpoint(checkpoint, cfg, observation_builder(self.config).dim)
        self.policy = QMIXPolicy(agent)
        self.loaded_run = Path(run_dir)
        return TrainingSpend(episodes=int(checkpoint.get("episode", 0)), calls=int(checkpoint.get("calls_spent", 0)),
                         tokens=int(checkpoint.get("tokens_spent", 0)),
                         simulator_episodes=int(checkpoint.get("simulator_episodes_spent", 0)))

    def state_dict(self) -> dict:
        return {"run_dir": None if self.loaded_run is None else str(self.loaded_run)}

    def load_state_dict(self, state: dict) -> None:
        if state.get("run_dir") and Path(state["run_dir"]) != self.loaded_run:
            self.load_run(state["run_dir"])


def build(n_agents: int, rounds: int, seed: int, config: dict | None = None,
          env_config: EnvConfig | None = None) -> QMIXController:
    """The leaderboard's constructor: ``env_config`` is the comparison's env; ``config`` may hold
    ``run_dir`` (load a trained run instead of training), ``train_config`` (the training's YAML; default
    configs/default.yaml) and ``overrides`` (``section.key=value``
    of the training's config, :meth:`QMIXController.training_config`)."""
    config = dict(config or {})
    unknown = sorted(set(config) - {"run_dir", "overrides", "train_config"})
    if unknown:
        raise ValueError(f"qmix config keys {unknown} unknown: use run_dir, train_config or overrides")
    env_config = env_config or EnvConfig.from_dict({"n_agents": n_agents, "rounds": rounds})
    controller = QMIXController(env_config, seed, overrides=tuple(config.get("overrides", ())),
                                train_config=config.get("train_config"))
    if config.get("run_dir"):
        controller.load_run(config["run_dir"])
    return controller
