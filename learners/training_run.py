"""The state of a training run and what keeps it: the run's objects and record (:class:`TrainingRun`,
:class:`RunRecord`), where its training episodes come from (:class:`EpisodeSource`), the budgets,
the Ctrl-C handler (:class:`GracefulStop`), the validation's bookkeeping and the checkpoint.
:func:`learners.training.train` puts them in order."""
from __future__ import annotations

import copy
import dataclasses
import random
import shlex
import signal
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import torch
from torch.utils.tensorboard import SummaryWriter

from learners.batch_runner import BatchEpisodeRunner, BatchStats
from learners.buffer import EpisodeReplayBuffer
from learners.config import ExperimentConfig
from learners.distributed import RayRollouts  # imports Ray only when runtime.ray is set
from learners.evaluation import AGENT_LAYOUT, MIXER_LAYOUT, layout_difference, load_checkpoint
from topo_env.frontends.inflight import EpisodesInFlight
from learners.learner import QMIXLearner
from learners.runner import EpisodeRunner
from learners.schedules import epsilon_at
from topo_env.engine.cli import RunError
from topo_env.engine.config_checks import ConfigError
from topo_env.engine.user_files import set_aside, write_atomically
from topo_env.engine.seeding import EXPLORATION_STREAM, NOISE_SAMPLE_STREAM, episode_rng, training_env_seed
from topo_env.frontends.parallel_env import TopologyParallelEnv
from topo_env.frontends.vector_env import SimVectorEnv


@dataclasses.dataclass
class RunRecord:
    """What a run has done, saved in every checkpoint beside the networks and the replay.

    ``validation``: ``{"history": [{"episode", "reward"}, ...], "best": {"episode", "reward",
    "agent": state_dict} or None}``; ``curves``: the log windows' points
    (:func:`learners.report.log_window`); ``held_out_curve``: the learning curve's points;
    ``spent``: ``{"tokens", "calls", "simulator_episodes"}`` of training and validation (toward
    ``train.token_budget`` and ``train.call_budget``); ``teacher``: the teacher stage's report;
    ``seconds`` and ``time_split`` (``{"rollouts", "updates"}``): the TD training's wall time and
    its seconds waiting for episodes and in gradient updates, over every part of a resumed run;
    ``window``: the log window's training episodes (``stats``, BatchStats) and ``losses`` since
    its last point, so that a resumed run's first window covers the interruption; ``checked``: per
    check ("validation", "curve") the agent network's :attr:`~learners.learner.QMIXLearner.agent_updates`
    at its last run and its figures (``reward``, ``accuracy``, ``tokens_per_task``): a check of the
    same network again takes them instead of playing, in a resumed run too."""
    validation: dict = dataclasses.field(default_factory=lambda: {"history": [], "best": None})
    curves: list[dict] = dataclasses.field(default_factory=list)
    held_out_curve: list[dict] = dataclasses.field(default_factory=list)
    spent: dict[str, int] = dataclasses.field(default_factory=lambda: {"tokens": 0, "calls": 0, "simulator_episodes": 0})
    teacher: dict | None = None
    seconds: float = 0.0
    time_split: dict[str, float] = dataclasses.field(default_factory=lambda: {"rollouts": 0.0, "updates": 0.0})
    window: dict[str, list] = dataclasses.field(default_factory=lambda: {"stats": [], "losses": []})
    checked: dict[str, tuple[int, dict]] = dataclasses.field(default_factory=dict)

    @classmethod
    def of_checkpoint(cls, checkpoint: dict[str, Any]) -> "RunRecord":
        """The record a checkpoint saved."""
        return cls(validation=checkpoint.get("validation") or {"history": [], "best": None},
                   curves=list(checkpoint.get("curves", [])), held_out_curve=list(checkpoint.get("held_out_curve", [])),
                   spent={"tokens": int(checkpoint.get("tokens_spent", 0)), "calls": int(checkpoint.get("calls_spent", 0)),
                          "simulator_episodes": int(checkpoint.get("simulator_episodes_spent", 0))},
                   teacher=checkpoint.get("teacher"), seconds=float(checkpoint.get("seconds", 0.0)),
                   time_split=dict(checkpoint.get("time_split") or {"rollouts": 0.0, "updates": 0.0}),
                   window=checkpoint.get("log_window") or {"stats": [], "losses": []},
                   checked={check: (int(updates), dict(figures))
                            for check, (updates, figures) in (checkpoint.get("checked") or {}).items()})


@dataclasses.dataclass
class TrainingRun:
    """One training run's objects and record. ``train_envs``, ``eval_envs``, ``validation_envs``:
    an env and its siblings, one per episode in flight (``validation_envs`` empty without
    ``train.validate_every``); ``runners``: one per training env, each with its own copy of the
    agent network; ``start``: the episode training starts at (a resumed run's checkpoint);
    ``committed``: the episodes the learner and the replay hold, and ``untouched`` whether they hold
    exactly those (no later episode half stored); ``started``: when this process's part of the
    TD training began (``time.perf_counter``); ``saved``: the episode of the run's latest
    checkpoint on disk (None: none yet); ``reference_search``: the process searching the held-out
    headroom references beside the training (:func:`topo_env.references.headroom.search_in_background`;
    None: cached, or not scored); ``stopped``: Ctrl-C or a budget ended it early, and
    ``stop_reason`` which ("interrupted" or "budget"); ``command`` and ``continue_with``: as in
    :class:`learners.training.RunOptions` (what the closing lines tell to run)."""
    cfg: ExperimentConfig
    out_dir: Path
    device: torch.device
    learner: QMIXLearner
    buffer: EpisodeReplayBuffer
    train_envs: list[TopologyParallelEnv]
    eval_envs: list[TopologyParallelEnv]
    validation_envs: list[TopologyParallelEnv]
    runners: list[EpisodeRunner]
    writer: SummaryWriter
    start: int = 0
    record: RunRecord = dataclasses.field(default_factory=RunRecord)
    committed: int = 0
    untouched: bool = True
    started: float = 0.0
    saved: int | None = None
    reference_search: Any = None
    stopped: bool = False
    stop_reason: str | None = None
    command: str | None = None
    continue_with: str | None = None

    @property
    def time_split(self) -> dict[str, float]:
        """Seconds waiting for episodes and in gradient updates, over the whole run."""
        return self.record.time_split

    @property
    def seconds(self) -> float:
        """The TD training's wall time over the whole run (earlier parts of a resumed run included)."""
        return self.record.seconds + (time.perf_counter() - self.started if self.started else 0.0)


class GracefulStop:
    """While alive, the first SIGINT only sets ``requested``; the training loop then ends the
    episodes in flight, writes a checkpoint and exits. A second SIGINT interrupts at once."""

    def __init__(self):
        self.requested = False
        self._previous = signal.getsignal(signal.SIGINT)
        try:
            signal.signal(signal.SIGINT, self._handle)
        except ValueError:  # not the main thread: keep the default behaviour
            self._previous = None

    def _handle(self, signum, frame) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True

    def restore(self) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)


def pick_device(name: str) -> torch.device:
    """``runtime.device``: ``auto`` (CUDA where there is one), ``cpu`` or ``cuda``."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("runtime.device='cuda' but no CUDA device is available")
    return torch.device(name)


def load_init_from(learner: QMIXLearner, cfg: ExperimentConfig, run_dir: str | Path) -> None:
    """``init_from`` (``--init-from``): load another run's networks into ``learner`` (its validation-best agent
    network if it validated, and its mixer where the mixer's layout matches)."""
    init_cfg, init_checkpoint = load_checkpoint(run_dir)
    differs = layout_difference(cfg, init_cfg, AGENT_LAYOUT)
    if differs:
        raise ConfigError(f"--init-from {run_dir}: its networks do not fit this run: {differs}")
    best = (init_checkpoint.get("validation") or {}).get("best")
    mixer_differs = layout_difference(cfg, init_cfg, MIXER_LAYOUT)
    learner.load_networks(init_checkpoint["learner"], agent=best["agent"] if best else None, mixer=mixer_differs is None)
    if mixer_differs:  # e.g. a mixer trained on the simulator's privileged state: the agents' networks only
        print(f"--init-from {run_dir}: its agent network; the mixer starts afresh ({mixer_differs})", file=sys.stderr)


def restore(learner: QMIXLearner, buffer: EpisodeReplayBuffer, checkpoint: dict[str, Any]) -> int:
    """A resumed run: the learner, the replay and the random streams of ``checkpoint``; returns its episode."""
    learner.load_state_dict(checkpoint["learner"])
    if checkpoint["buffer"] is not None:
        buffer.load_state_dict(checkpoint["buffer"])
    torch.set_rng_state(checkpoint["torch_rng"])
    np.random.set_state(checkpoint["numpy_rng"])
    random.setstate(checkpoint["python_rng"])
    return int(checkpoint["episode"])


def save_checkpoint(run: TrainingRun, episode: int) -> None:
    """``run.out_dir/checkpoint.pt`` after ``episode`` episodes: config, learner, record, random
    streams and (with ``train.save_buffer``) the replay. Written atomically and durably
    (:func:`topo_env.engine.user_files.write_atomically`); a failed write (a full disk, an I/O
    error) removes its temporary file, leaves the previous checkpoint and raises a one-line RunError."""
    path, cfg, record = run.out_dir / "checkpoint.pt", run.cfg, run.record
    state = {"config": cfg.to_dict(), "learner": run.learner.state_dict(), "episode": episode,
             "curves": list(record.curves),
             "tokens_spent": int(record.spent["tokens"]), "calls_spent": int(record.spent["calls"]),
             "simulator_episodes_spent": int(record.spent.get("simulator_episodes", 0)), "teacher": record.teacher,
             "validation": record.validation,
             "held_out_curve": list(record.held_out_curve),
             "seconds": run.seconds, "time_split": dict(record.time_split),
             "log_window": {"stats": list(record.window["stats"]), "losses": list(record.window["losses"])},
             "checked": {check: [updates, dict(figures)] for check, (updates, figures) in record.checked.items()},
             "torch_rng": torch.get_rng_state(), "numpy_rng": np.random.get_state(), "python_rng": random.getstate(),
             "buffer": run.buffer.state_dict() if cfg.train.save_buffer else None}
    try:
        write_atomically(path, lambda fh: torch.save(state, fh))
    except (OSError, RuntimeError) as err:  # torch reports a full disk as RuntimeError ("enforce fail ...")
        kept = (f"the previous checkpoint (episode {run.saved}) is intact" if run.saved is not None and path.exists()
                else "no earlier checkpoint exists")
        reason = getattr(err, "strerror", None) or " ".join(str(err).split())[:160]
        raise RunError(f"could not write the checkpoint of episode {episode} to {path} ({reason}); {kept}: "
                       f"make room (a full disk?), then {continue_hint(run)}") from None
    run.saved = episode


def resume_command(out_dir: Path) -> str:
    """The command that continues a checkpointed run in ``out_dir``."""
    return f"python train_qmix.py --resume {shlex.quote(str(out_dir))}"


def continue_hint(run: TrainingRun) -> str:
    """What continues ``run`` from its latest checkpoint, or starts it again where it has none."""
    if run.continue_with:
        return f"continue with: {run.continue_with}"
    if run.saved is not None:
        return f"continue with: {resume_command(run.out_dir)}"
    return f"start again with: {run.command}" if run.command else "start it again (nothing was saved yet)"


def say_stopped_in(run: TrainingRun, stage: str, reason: str = "interrupted") -> None:
    """The one line of a run stopped in ``stage`` (Ctrl-C; or a budget): what is kept and the
    command that continues (:func:`continue_hint`); marks it stopped."""
    kept = (f"the checkpoint at episode {run.saved} in {run.out_dir} stands" if run.saved is not None
            else "nothing was saved yet")
    print(f"\nstopped in {stage}: {kept}; {continue_hint(run)}", flush=True)
    run.stopped, run.stop_reason = True, reason


RUN_FILES = ("config.json", "checkpoint.pt", "checkpoint.pt.tmp", "results.json", "*.png", "events.out.tfevents.*")
"""What a training run writes into its folder (:func:`set_aside_earlier_run` moves them)."""


def set_aside_earlier_run(out_dir: Path) -> Path | None:
    """Before a new (not resumed) run in ``out_dir``: move an earlier run's files there
    (:data:`RUN_FILES`) into ``out_dir/earlier/<UTC time>/``, so that none of them looks like the
    new run's and none is lost; says so in one stderr line. Returns that folder, or None."""
    found = sorted({f.name for pattern in RUN_FILES for f in out_dir.glob(pattern) if f.is_file()})
    aside = set_aside(out_dir, found)
    if aside is not None:
        print(f"{out_dir} held an earlier run: moved its {len(found)} file(s) to {aside}", file=sys.stderr)
    return aside


class EpisodeSource:
    """The training episodes from ``run.start`` to ``train.episodes``, in index order, as
    ``(first, episodes, stats)``: batched (``sim_scale.batched``) ``sim_scale.batch`` episodes at a
    time (an EpisodeBatch), each batch played with the weights after the batches before it
    (learners.batch_runner); otherwise one episode at a time (a ReplayEpisode), K in flight
    (topo_env.frontends.inflight) or on W Ray workers (learners.distributed), each played with the weights of
    its launch. Once ``stop.requested``, the batches end; call :meth:`stop_launching` to launch no
    more single episodes (those in flight still arrive), and :meth:`close` at the end."""

    def __init__(self, run: TrainingRun, stop: GracefulStop):
        self.run, self.stop = run, stop
        cfg, episodes = run.cfg, range(run.start, run.cfg.train.episodes)
        if cfg.sim_scale.batched:
            self._batch_runner = BatchEpisodeRunner(
                SimVectorEnv(dataclasses.replace(cfg.env, split="train"), encoder=run.train_envs[0].encoder),
                run.learner.agent, run.device, privileged=cfg.sim_scale.privileged_state)
            self.rollouts, self._source = None, self._batches()
            self._played = self._source
            return
        if cfg.runtime.ray is None:
            self.rollouts = EpisodesInFlight(run.train_envs)
            self._source = self.rollouts.play(episodes, self._launch)  # episodes in index order
        else:  # W Ray workers, K in flight each, weights shipped every runtime.sync_every episodes
            self.rollouts = RayRollouts(cfg, weights=run.learner.agent.state_dict)
            self._source = self.rollouts.play(episodes, start_version=run.start)  # also in index order
        self._played = ((j, record, BatchStats.of_episodes([stats])) for j, (record, stats) in self._source)

    def __iter__(self) -> Iterator[tuple[int, Any, BatchStats]]:
        return self._played

    def in_flight(self) -> int:
        """Episodes launched and not yet handed back (0 on the batched team)."""
        return 0 if self.rollouts is None else self.rollouts.in_flight

    def stop_launching(self) -> None:
        if self.rollouts is not None:
            self.rollouts.stop_launching()

    def close(self) -> None:
        """Cancels the episodes still in flight, if any."""
        self._played.close()
        self._source.close()

    def _launch(self, env: TopologyParallelEnv, slot: int, j: int):
        """Episode j, launched once episode j - K is committed: played with the weights of now."""
        run, cfg, seed = self.run, self.run.cfg, self.run.cfg.train.seed
        runner, explore = run.runners[slot], cfg.exploration
        runner.agent.load_state_dict(run.learner.agent.state_dict())
        return runner.arun(epsilon_at(j, cfg), episode_rng(seed, EXPLORATION_STREAM, j), seed=training_env_seed(seed, j),
                           team_explore=explore.team_explore, deviation_explore=explore.deviation_explore,
                           deviation_rank_decay=explore.deviation_rank_decay, policy_version=run.committed,
                           topology_explore=explore.topology_explore)

    def _batches(self):
        cfg, seed = self.run.cfg, self.run.cfg.train.seed
        explore, size = cfg.exploration, cfg.sim_scale.batch
        for first in range(self.run.start, cfg.train.episodes, size):
            if self.stop.requested:
                return
            js = range(first, min(first + size, cfg.train.episodes))
            episodes, stats = self._batch_runner.run(
                [training_env_seed(seed, j) for j in js], np.array([epsilon_at(j, cfg) for j in js]),
                episode_rng(seed, EXPLORATION_STREAM, first), "train", explore.team_explore, explore.deviation_explore,
                explore.deviation_rank_decay, explore.topology_explore, policy_version=first,
                noise_samples=cfg.sim_scale.noise_samples,
                noise_rng=episode_rng(seed, NOISE_SAMPLE_STREAM, first), gamma=cfg.qmix.gamma)
            yield first, episodes, stats


def reached(every: int, first: int, last: int) -> bool:
    """Whether episodes ``first..last`` reached a multiple of ``every`` (0: never)."""
    return bool(every) and (last + 1) // every > first // every


def add_spent(spent: dict[str, int], tokens: int, calls: int) -> None:
    """Count ``tokens`` and ``calls`` into ``spent`` (``{"tokens", "calls"}``, in place)."""
    spent["tokens"] += int(tokens)
    spent["calls"] += int(calls)


def budget_reached(cfg: ExperimentConfig, spent: dict[str, int]) -> str | None:
    """Which budget ``spent`` (``{"tokens", "calls"}``, training and validation) has reached, in
    words, or None: ``train.token_budget`` and ``train.call_budget`` (0: none)."""
    for what, budget in (("tokens", cfg.train.token_budget), ("calls", cfg.train.call_budget)):
        if budget and spent[what] >= budget:
            return f"{'token' if what == 'tokens' else 'call'} budget reached ({spent[what]} {what} >= {budget})"
    return None


def stop_at_budget(cfg: ExperimentConfig, spent: dict[str, int], stop: GracefulStop, source: EpisodeSource) -> int:
    """Where a budget is reached and no stop was requested yet: request one and say so. Returns
    the episodes then in flight (started before the budget was reached, they finish and add their
    tokens and calls: the overshoot), else 0."""
    budget = budget_reached(cfg, spent)
    if not budget or stop.requested:
        return 0
    overshoot = source.in_flight()
    print(f"\n{budget}"
          + (f"; finishing the {overshoot} episode(s) already in flight (started before it was "
             "reached), which add their tokens and calls" if overshoot else ""), file=sys.stderr)
    stop.requested = True
    return overshoot


def say_stopped(run: TrainingRun, overshoot: int) -> None:
    """The closing lines of a run stopped by Ctrl-C or a budget, checkpointed at ``run.committed``."""
    cfg, spent = run.cfg, run.record.spent
    if overshoot:
        print(f"spent {spent['tokens']} tokens (budget {cfg.train.token_budget or 'none'}) and "
              f"{spent['calls']} calls (budget {cfg.train.call_budget or 'none'}), the overshoot from the "
              f"{overshoot} episode(s) started before the budget was reached", file=sys.stderr)
    budget = budget_reached(cfg, spent)
    if budget is None:
        say_stopped_in(run, "training")
        return
    go_on = "" if run.continue_with else (  # another program runs it: the budget is its planned end
        f"; to train on, give a larger budget: {resume_command(run.out_dir)} --set train.token_budget=N "
        "(or train.call_budget=N)")
    print(f"\nstopped in training: {budget}; the checkpoint at episode {run.saved} in {run.out_dir} stands{go_on}",
          flush=True)
    run.stopped, run.stop_reason = True, "budget"


def backend_failed(run: TrainingRun, err: Exception) -> RunError:
    """The one-line error of a run whose team's backend failed in training; first saves a
    checkpoint of the completed episodes where the learner and the replay hold exactly those."""
    if run.untouched:
        save_checkpoint(run, run.committed)
        kept = f"saved a checkpoint after the {run.committed} completed episodes"
    else:
        kept = "the last periodic checkpoint stands"
    return RunError(f"the team's backend failed in training episode {run.committed + 1} ({err}); {kept} in "
                    f"{run.out_dir}: once it serves again, {continue_hint(run)} (add --set "
                    "env.backend.base_url=... if its address changed)")


def keep_if_best(run: TrainingRun, episode: int, figures: dict) -> None:
    """A validation check's bookkeeping: its reward into the history and TensorBoard
    (``validation/reward``), and a copy of the network if it scored best so far."""
    validation = run.record.validation
    validation["history"].append({"episode": episode, "reward": figures["reward"]})
    run.writer.add_scalar("validation/reward", figures["reward"], episode)
    if validation["best"] is None or figures["reward"] > validation["best"]["reward"]:
        validation["best"] = {"episode": episode, "reward": figures["reward"],
                              "agent": copy.deepcopy(run.learner.agent.state_dict())}
