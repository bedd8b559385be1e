"""Agent Q-Mix (seed 002) as a controller: the greedy QMIX policy of a ``train_qmix.py`` run.

QMIX is the PettingZoo front-end's method: each agent picks one of six CommActions, and it trains
there (``python train_qmix.py``: replay, mixer, target networks). As a controller it plays
through :class:`controllers.comm_actions.CommActionController`, which rebuilds the agents'
observations from the orchestrator's and sends the round their joint action makes, so it is
scored on exactly the episodes, accounting and code path of every other method.

:meth:`QMIXController.fit` trains by running ``train_qmix.py`` in a child process (the training
script as a user runs it, with ``configs/default.yaml`` and the env keys of the comparison), then
loads the trained network; what training spent (episodes, LLM calls, tokens) comes from the run's
checkpoint. The child process keeps torch's threads and the training's memory apart from the
caller's.
"""
from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import gymnasium

from controllers.base import FitReport
from controllers.comm_actions import CommActionController, observation_builder
from topo_env.frontends.comm_actions import N_ACTIONS
from topo_env.frontends.env_config import EnvConfig
from topo_env.engine.config_checks import ConfigError

REPO_ROOT = Path(__file__).resolve().parents[1]
TRAIN_SCRIPT = REPO_ROOT / "train_qmix.py"
DEFAULT_CONFIG = REPO_ROOT / "configs" / "default.yaml"
TRAIN_EPISODES = 32768
"""configs/default.yaml's train.episodes: the TD episodes `python train_qmix.py` trains, after its teacher (docs/training.md)."""
ENV_ROUNDS = None  # the profile's rounds, as QMIX trains on them


class QMIXController(CommActionController):
    """The greedy policy of a QMIX agent network: ``agent`` (an :class:`AgentQNetwork`), or until
    :meth:`fit` / :meth:`load_run` an untrained one of ``configs/default.yaml``'s layout,
    initialised from ``seed`` (as every learned method starts)."""

    trainable = True

    def __init__(self, config: EnvConfig, seed: int = 0, agent: Any = None, run_dir: str | Path | None = None,
                 overrides: tuple[str, ...] = ()):
        import torch

        from learners.agent_network import build_agent_network
        from learners.config import load_experiment
        from learners.evaluation import QMIXPolicy  # torch only where QMIX is used

        if agent is None:
            with torch.random.fork_rng():
                torch.manual_seed(int(seed))
                agent = build_agent_network(observation_builder(config).dim, N_ACTIONS,
                                            load_experiment(DEFAULT_CONFIG).learner).eval()
        super().__init__(QMIXPolicy(agent), config, seed, "qmix")
        self.seed, self.run_dir, self.overrides = int(seed), run_dir, tuple(overrides)
        self.loaded_run: Path | None = None  # the run whose network plays (None: the initial network)

    def fit(self, env: gymnasium.Env, episodes: int, seed: int, progress: bool = False) -> FitReport:
        """Train with ``train_qmix.py`` on this controller's env config for ``episodes`` episodes
        (seed ``seed``) into ``run_dir`` (a temporary folder if None), then load the result. ``env``
        is not played: QMIX trains on the PettingZoo front-end of the same team."""
        out = Path(self.run_dir) if self.run_dir is not None else Path(tempfile.mkdtemp(prefix="topomarl_qmix_"))
        env_keys = {k: v for k, v in self.config.to_dict().items() if k not in ("split", "render_mode")}
        command = [sys.executable, str(TRAIN_SCRIPT), "--config", str(DEFAULT_CONFIG), "--out", str(out),
                   "--episodes", str(int(episodes)), "--set", f"train.seed={int(seed)}",
                   "--set", "train.references=false", "--set", "train.eval_episodes=100", "--set", "train.curve_every=0",
                   *[arg for k, v in env_keys.items() for arg in ("--set", f"env.{k}={json.dumps(v)}")],
                   *[arg for o in self.overrides for arg in ("--set", o)]]
        done = subprocess.run(command, cwd=REPO_ROOT, capture_output=not progress, text=True)
        if done.returncode != 0:
            tail = (done.stderr or "").strip().splitlines()[-1:] if not progress else []
            raise RuntimeError(f"training QMIX failed (exit {done.returncode}): {' '.join(tail) or 'see its output'}")
        return self.load_run(out)

    def load_run(self, run_dir: str | Path) -> FitReport:
        """Play the greedy network of a ``train_qmix.py`` run; returns what its training spent.
        A ConfigError names the layout field that differs from this controller's env."""
        from learners.evaluation import QMIXPolicy, agent_from_checkpoint, layout_difference, load_checkpoint

        cfg, checkpoint = load_checkpoint(run_dir)
        difference = layout_difference(dataclasses.replace(cfg, env=self.config), cfg)
        if difference:
            raise ConfigError(f"{run_dir}: the run's network does not fit this env: {difference}")
        agent = agent_from_checkpoint(checkpoint, cfg, observation_builder(self.config).dim)
        self.policy = QMIXPolicy(agent)
        self.loaded_run = Path(run_dir)
        return FitReport(episodes=int(checkpoint.get("episode", 0)), calls=int(checkpoint.get("calls_spent", 0)),
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
    ``run_dir`` (load a trained run instead of training) and ``overrides`` (``section.key=value``
    for train_qmix.py)."""
    config = dict(config or {})
    unknown = sorted(set(config) - {"run_dir", "overrides"})
    if unknown:
        raise ValueError(f"qmix config keys {unknown} unknown: use run_dir or overrides")
    env_config = env_config or EnvConfig.from_dict({"n_agents": n_agents, "rounds": rounds})
    controller = QMIXController(env_config, seed, overrides=tuple(config.get("overrides", ())))
    if config.get("run_dir"):
        controller.load_run(config["run_dir"])
    return controller
