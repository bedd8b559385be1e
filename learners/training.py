"""Training QMIX as a library call: :func:`train` trains one run from its config, :func:`evaluate`
scores the trained network against every fixed topology on the held-out episodes, and
:func:`train_and_evaluate` does both, writes results.json and the pictures, and prints the closing
table (what ``python train_qmix.py`` runs)::

    from learners.config import load_experiment
    from learners.training import RunOptions, train_and_evaluate
    cfg = load_experiment("configs/default.yaml", ["train.episodes=4096"])
    train_and_evaluate(cfg, "runs/mine", RunOptions(progress=False))

:func:`train` reads top to bottom: seed every stream, build the envs, the learner and the replay,
(distil the teacher), then the loop over the training episodes: store, update, validate, log,
checkpoint. Where the episodes come from (batched simulated team, episodes in flight, Ray) is
:class:`learners.training_run.EpisodeSource`; the report (TensorBoard, results.json, pictures, the
table) is :mod:`learners.report`. :func:`learners.child.train_in_child` runs
:func:`train_and_evaluate` in a child process (the seeds runner and the QMIX controller use it).

Writes to ``out_dir``: TensorBoard logs, ``config.json``, ``checkpoint.pt`` (every
``train.checkpoint_every`` episodes and at the end), and after the evaluation ``results.json`` and
the PNG pictures (:func:`learners.report.write_pictures`).
"""
from __future__ import annotations

import copy
import dataclasses
import json
import random
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm

from learners.batch_runner import BatchStats, EpisodeBatch
from learners.buffer import EpisodeReplayBuffer, ReplayEpisode
from learners.config import ExperimentConfig, moved_key
from learners.distributed import require_ray  # imports Ray only when runtime.ray is set
from learners.evaluation import QMIXPolicy, evaluate as evaluate_policy, load_checkpoint, references_apply
from topo_env.frontends.inflight import sibling_envs
from learners.learner import QMIXLearner
from learners.report import HeldOut, LogWindow, add_curve_point, curve_episodes, evaluate_held_out, print_report, save_results
from learners.runner import EpisodeRunner, space_dims
from learners.schedules import epsilon_at, lr_at
from learners.teacher import imitate_teacher
from learners.training_run import (EpisodeSource, GracefulStop, RunRecord, TrainingRun, add_spent, backend_failed,
                                   keep_if_best, load_init_from, pick_device, reached, restore, save_checkpoint,
                                   say_stopped, say_stopped_in, set_aside_earlier_run, stop_at_budget)
from topo_env.engine.backend_registry import BackendFailed, BackendUnavailable
from topo_env.engine.cli import INTERRUPTED_STATUS
from topo_env.engine.config_checks import ConfigError
from topo_env.engine.user_files import output_dir, write_text_atomically
from topo_env.engine.seeding import REPLAY_STREAM, VALIDATION_SEED_OFFSET, episode_rng, held_out_seed
from topo_env.engine.threads import limit_blas_threads
from topo_env.frontends.comm_actions import N_ACTIONS
from topo_env.frontends.parallel_env import TopologyParallelEnv
from topo_env.frontends.vector_env import SimVectorEnv
from topo_env.references.headroom import search_in_background
from topo_env.references.reading import cached_posterior_policy

STOPPED = INTERRUPTED_STATUS
"""The exit status of a run stopped early, by Ctrl-C in any stage or by a budget (130, as a shell
reports SIGINT)."""


@dataclasses.dataclass(frozen=True)
class RunOptions:
    """How a run executes and reports, beside its config; none of it changes what it learns.

    ``checkpoint``: a loaded ``checkpoint.pt`` to continue from (a resumed run; its config is the
    run's, :func:`resumed_config`); ``init_from``: another run's folder whose
    networks the new run starts from; ``trace_out``: a JSONL file every training episode is appended
    to (one-episode loop only); ``progress``: progress bars; ``pictures``: the PNGs at the end;
    ``source``: what the closing lines name as where the config came from; ``command``: the
    command line that started the run (what a stop before the first checkpoint says to run
    again); ``continue_with``: the command that continues the run after a stop (None:
    ``python train_qmix.py --resume OUT_DIR``, or ``command`` where nothing was saved yet)."""

    checkpoint: dict | None = None
    init_from: str | Path | None = None
    trace_out: str | Path | None = None
    progress: bool = True
    pictures: bool = True
    source: str = "the given config"
    command: str | None = None
    continue_with: str | None = None


def train_and_evaluate(cfg: ExperimentConfig, out_dir: str | Path, options: RunOptions = RunOptions()) -> int:
    """Train (:func:`train`), evaluate on the held-out episodes (:func:`evaluate`), write
    results.json and the pictures, print the closing table. Returns 0, or :data:`STOPPED` when
    a stage stopped early (Ctrl-C in any stage, or a budget), after one line saying where and the
    command that continues (:func:`learners.training_run.say_stopped_in`)."""
    run = train(cfg, out_dir, options)
    if run.stopped:
        return STOPPED
    try:
        held_out = evaluate(run, progress=options.progress)
        pictures = save_results(run, held_out, options.init_from, pictures=options.pictures)
    except KeyboardInterrupt:  # training is complete and checkpointed: a resumed run only evaluates
        say_stopped_in(run, "the held-out evaluation")
        return STOPPED
    print_report(run, held_out, pictures, options.source, options.trace_out)
    return 0


def train(cfg: ExperimentConfig, out_dir: str | Path, options: RunOptions = RunOptions()) -> TrainingRun:
    """Train QMIX on ``cfg`` into ``out_dir`` from episode 0 (or ``options.checkpoint``'s) to
    ``train.episodes``, then a last validation check, learning-curve point and checkpoint for the
    final network. Returns the run; ``run.stopped`` (after one line saying where and how to go on)
    when Ctrl-C or a budget stopped it first: in TD training at the end of the episodes in flight,
    checkpointed; a second Ctrl-C there, or one in the teacher stage or the final checks, at once
    (the last checkpoint stands). A new run first moves an earlier run's files in ``out_dir``
    aside (:func:`learners.training_run.set_aside_earlier_run`). A backend that fails in training
    is a one-line RunError; an ``out_dir`` that cannot be a folder a one-line ConfigError."""
    cfg = effective_config(cfg, options)
    out_dir = output_dir(out_dir)
    if options.checkpoint is None:
        set_aside_earlier_run(out_dir)
    setting_up = GracefulStop()  # Ctrl-C while setting up (a second one: at once): stop once it is set up
    try:
        run = build(cfg, out_dir, options)
    finally:
        setting_up.restore()
    if setting_up.requested:
        say_stopped_in(run, "setting up the run")
        return run
    if references_apply(cfg):  # the held-out yardstick, searched on another core while the run trains
        run.reference_search = search_in_background(cfg.env)
        if run.reference_search is not None and options.progress:
            print("references: searching the held-out headroom references in a second process while the run "
                  "trains (cached for later runs)", file=sys.stderr)
    if cfg.sim_scale.teacher_episodes and options.checkpoint is None and not options.init_from:  # before TD learning
        try:
            distil_teacher(run, options.progress)
        except KeyboardInterrupt:
            say_stopped_in(run, "the teacher stage")
            return run
    bar = tqdm(initial=run.start, total=cfg.train.episodes, desc="train", disable=not options.progress,
               file=sys.stderr)
    if cfg.runtime.compile:
        print("runtime.compile: the first update compiles it (about 30 s on 2 cores; inductor caches the result "
              "for later runs)", file=sys.stderr)
    run.started = time.perf_counter()
    stop = GracefulStop()  # Ctrl-C finishes the episodes in flight, checkpoints, and returns
    run.committed, run.untouched = run.start, True
    source = EpisodeSource(run, stop)
    try:
        if cfg.train.curve_every and run.start == 0:
            curve_point(run, 0)  # the untrained network (or the teacher's student)
        if cfg.train.validate_every and run.start == 0 and run.record.teacher is not None:  # the teacher's student too
            validate(run, 0)
        play(run, source, stop, LogWindow(run.writer, cfg.env.rounds, bar, run.record.window), bar)
    except KeyboardInterrupt:  # a second Ctrl-C: the episodes in flight are lost, the last checkpoint stands
        say_stopped_in(run, "training")
    except BackendUnavailable:  # no server from the start: nothing to keep; its own one-line message
        raise
    except BackendFailed as err:  # the team's server went down: keep what completed, say how to go on
        raise backend_failed(run, err) from None
    finally:
        source.close()  # cancels the episodes still in flight, if any
        bar.close()
        stop.restore()
    if run.stopped:
        return run
    record, last = run.record, cfg.train.episodes
    record.seconds, run.started = run.seconds, 0.0  # the TD training's wall time, over the whole run
    try:
        if cfg.train.validate_every and (not record.validation["history"]
                                         or record.validation["history"][-1]["episode"] != last):
            validate(run, last)
        if cfg.train.curve_every and (not record.held_out_curve or record.held_out_curve[-1]["episode"] != last):
            curve_point(run, last)  # the last network
        save_checkpoint(run, last)
    except KeyboardInterrupt:
        say_stopped_in(run, "the final checks of the trained network")
    return run


def search_references_once(cfg: ExperimentConfig) -> None:
    """The references a run of ``cfg`` searches (the held-out headroom ones where :func:`references_apply`,
    the teacher's with ``sim_scale.teacher_episodes``), searched here, the two at once (the headroom ones
    in a second process), or found in the cache: seeds trained at once then find them cached instead of
    each searching them (minutes for a large team)."""
    cfg = cfg.effective()[0]
    headroom_search = search_in_background(cfg.env) if references_apply(cfg) else None
    try:
        if cfg.sim_scale.teacher_episodes:
            cached_posterior_policy(cfg.env, progress=False)
    finally:
        if headroom_search is not None:
            headroom_search.join()


def evaluate(run: TrainingRun, progress: bool = True) -> HeldOut:
    """The trained run's held-out comparison: its network (the validation's pick, and the last
    one where they differ), every fixed topology and the references on the same
    ``train.eval_episodes`` held-out episodes of its seed (:func:`learners.report.evaluate_held_out`),
    after the references' search beside the training (if any) ends."""
    if run.reference_search is not None:
        run.reference_search.join()
    return evaluate_held_out(run, progress=progress)


RESUME_OVERRIDABLE = frozenset({
    "train.token_budget", "train.call_budget", "train.eval_episodes", "train.checkpoint_every", "train.references",
    "runtime.episodes_in_flight", "runtime.ray", "runtime.ray.address", "runtime.ray.workers", "runtime.sync_every",
    "env.backend.base_url", "env.backend.timeout_s", "env.backend.max_retries", "env.backend.backoff_s",
    "env.backend.max_concurrency"})
"""Keys that ``--set`` may change on a resumed run: budgets and reporting, and where and how
patiently the team's server is reached (the rest would make it another experiment)."""


def resumed_config(out_dir: str | Path, overrides: Sequence[str] = (),
                   episodes: int | None = None) -> tuple[ExperimentConfig, dict]:
    """A resumed run: the config saved in ``out_dir``'s checkpoint with the ``--set`` keys a
    resumed run may change (:data:`RESUME_OVERRIDABLE`) and a new ``train.episodes`` (not below
    the episodes trained: a one-line ConfigError); and the checkpoint (for :class:`RunOptions`)."""
    out_dir = Path(out_dir)
    for text in overrides:  # a resumed run is the same experiment: only its bookkeeping may change
        key = ".".join(moved_key(tuple(text.split("=", 1)[0].split("."))))
        if key not in RESUME_OVERRIDABLE:
            raise ConfigError(f"--set {key}=... with --resume: only {sorted(RESUME_OVERRIDABLE)} may change")
    if not (out_dir / "checkpoint.pt").is_file():
        what = "has no checkpoint.pt" if out_dir.is_dir() else "does not exist"
        raise ConfigError(f"--resume {str(out_dir)!r}: the directory {what}; give the --out directory of a "
                          "train_qmix.py run that saved a checkpoint")
    cfg, checkpoint = load_checkpoint(out_dir, [*overrides, *([f"train.episodes={episodes}"] if episodes else [])])
    trained = int(checkpoint["episode"])
    if cfg.train.episodes < trained:
        raise ConfigError(f"--resume {str(out_dir)!r} --episodes {cfg.train.episodes}: the run has trained {trained} "
                          f"episodes already; give --episodes {trained} or more (or leave it out: "
                          f"{checkpoint['config']['train']['episodes']})")
    return cfg, checkpoint


def effective_config(cfg: ExperimentConfig, options: RunOptions) -> ExperimentConfig:
    """``cfg`` as its team runs it (:meth:`ExperimentConfig.effective`; its notes to stderr), a new
    run's schedules fixed to its length (so that resuming it with more episodes does not move
    them), and the combinations that cannot run refused in one line."""
    cfg, notes = cfg.effective()
    if options.checkpoint is None:
        cfg = dataclasses.replace(
            cfg, qmix=dataclasses.replace(cfg.qmix, lr_anneal_episodes=cfg.qmix.lr_anneal_episodes or cfg.train.episodes),
            exploration=dataclasses.replace(cfg.exploration, eps_anneal_episodes=cfg.exploration.eps_anneal_episodes
                                            or cfg.train.episodes))
    for note in notes:
        print(note, file=sys.stderr)
    require_ray(cfg)
    if options.checkpoint is not None and options.init_from:
        raise ConfigError("--init-from with --resume: a resumed run continues from its own checkpoint")
    if cfg.runtime.ray is not None and options.trace_out:
        raise ConfigError("--trace-out with runtime.ray: the Ray workers record no traces; drop one of them")
    if cfg.sim_scale.batched and options.trace_out:
        raise ConfigError(f"--trace-out with sim_scale.batch={cfg.sim_scale.batch}: the batched simulated team records "
                          "no traces; add --set sim_scale.batch=0 to play (and record) one episode at a time")
    return cfg


def build(cfg: ExperimentConfig, out_dir: Path, options: RunOptions) -> TrainingRun:
    """Seed every random stream, then the envs (K = ``runtime.episodes_in_flight`` of each kind),
    the learner and the replay; load ``init_from``'s networks or the checkpoint; write
    config.json, open TensorBoard."""
    seed, n, rounds, k = cfg.train.seed, cfg.env.n_agents, cfg.env.rounds, cfg.runtime.episodes_in_flight
    torch.set_num_threads(cfg.runtime.torch_threads)
    limit_blas_threads(cfg.runtime.torch_threads)  # numpy's BLAS too: a reference search may run beside
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    device = pick_device(cfg.runtime.device)
    train_env = TopologyParallelEnv(dataclasses.replace(cfg.env, split="train"))
    eval_env = TopologyParallelEnv(dataclasses.replace(cfg.env, split="eval"))
    obs_dim, state_dim = space_dims(train_env)
    if cfg.sim_scale.privileged_state:  # the mixer's state also holds the simulator's hidden variables
        state_dim += SimVectorEnv(cfg.env, encoder=train_env.encoder).privileged_dim
    learner = QMIXLearner(obs_dim, state_dim, n, N_ACTIONS, cfg.qmix, device,
                          return_targets=cfg.sim_scale.noise_samples > 0, compile=cfg.runtime.compile)
    buffer = EpisodeReplayBuffer(cfg.qmix.buffer_size, rounds, n, obs_dim, state_dim, N_ACTIONS)
    if options.trace_out:
        train_env.record(options.trace_out)
    # K episodes in flight: K envs of each kind sharing one client; training episodes play on a
    # snapshot of the weights taken at their launch (topo_env.frontends.inflight)
    train_envs, eval_envs = sibling_envs(train_env, k), sibling_envs(eval_env, k)
    runners = [EpisodeRunner(env, copy.deepcopy(learner.agent), device) for env in train_envs]
    # validation episodes run on their own env instances, so training episodes are untouched
    validation_envs = (sibling_envs(TopologyParallelEnv(dataclasses.replace(cfg.env, split="train")), k)
                       if cfg.train.validate_every else [])
    if options.init_from:
        load_init_from(learner, cfg, options.init_from)
    start, record = 0, RunRecord()
    if options.checkpoint is not None:
        start, record = restore(learner, buffer, options.checkpoint), RunRecord.of_checkpoint(options.checkpoint)
    write_text_atomically(out_dir / "config.json", json.dumps(cfg.to_dict(), indent=2))
    return TrainingRun(cfg, out_dir, device, learner, buffer, train_envs, eval_envs, validation_envs, runners,
                       writer=SummaryWriter(str(out_dir)), start=start, record=record,
                       saved=start if options.checkpoint is not None else None, command=options.command,
                       continue_with=options.continue_with)


def distil_teacher(run: TrainingRun, progress: bool) -> None:
    """The teacher stage of a new run (``sim_scale.teacher_*``): distil the teacher's policy into
    the agent network (:func:`learners.teacher.imitate_teacher`) before TD learning."""
    cfg, record = run.cfg, run.record
    record.teacher = imitate_teacher(cfg.env, cfg.sim_scale, run.learner.agent, cfg.train.seed, run.device,
                                     progress=progress)
    run.learner.sync_targets(1.0)
    # the teacher's search and demonstrations: simulator episodes
    record.spent["simulator_episodes"] += (record.teacher["demonstrations"] + record.teacher["search_episodes"]
                                           + record.teacher["value_episodes"])


def play(run: TrainingRun, source: EpisodeSource, stop: GracefulStop, window: LogWindow, bar) -> None:
    """The training loop over ``source``'s episodes: store, update (:func:`learn`), keep the record
    (:func:`keep_record`), checkpoint every ``train.checkpoint_every`` episodes. Ends early once a
    requested stop has no episode left in flight: checkpointed, ``run.stopped``."""
    overshoot = 0  # episodes in flight when a budget was reached (they finish: their tokens and calls are spent)
    mark = time.perf_counter()
    for first, episodes, stats in source:
        run.time_split["rollouts"] += time.perf_counter() - mark
        run.untouched = False
        last = first + len(stats.reward) - 1  # episodes first..last, in index order
        window.losses.extend(learn(run, first, last, episodes, bar))
        overshoot = keep_record(run, first, last, stats, window, stop, source) or overshoot
        stopping = stop.requested and not source.in_flight()
        if reached(run.cfg.train.checkpoint_every, first, last) or stopping:
            save_checkpoint(run, last + 1)
        run.committed, run.untouched = last + 1, True
        if stopping:
            say_stopped(run, overshoot)
            return
        mark = time.perf_counter()


def learn(run: TrainingRun, first: int, last: int, episodes: EpisodeBatch | ReplayEpisode, bar) -> list[dict]:
    """Store episodes ``first..last`` in the replay, then run each one's learning-rate schedule and
    updates as in the one-episode loop: once the replay holds the warm-up, on every
    ``qmix.episodes_per_update``-th episode j ``qmix.updates_per_episode`` updates on batches
    drawn with j's replay stream. Returns the updates' losses."""
    cfg, learner, buffer = run.cfg, run.learner, run.buffer
    warmup = max(cfg.train.warmup_episodes, cfg.qmix.batch_size)
    size_before = len(buffer)
    if cfg.sim_scale.batched:  # an EpisodeBatch from the batch simulator, else one ReplayEpisode
        buffer.add_batch(episodes)
    else:
        buffer.add(episodes)
    bar.update(last + 1 - first)
    updating, losses = time.perf_counter(), []
    for j in range(first, last + 1):
        learner.set_lr(lr_at(j, cfg))
        if min(size_before + j - first + 1, buffer.capacity) >= warmup and j % cfg.qmix.episodes_per_update == 0:
            sample_rng = episode_rng(cfg.train.seed, REPLAY_STREAM, j)
            for _ in range(cfg.qmix.updates_per_episode):
                losses.append(learner.update(buffer.sample(cfg.qmix.batch_size, sample_rng)))
    run.time_split["updates"] += time.perf_counter() - updating
    return losses


def keep_record(run: TrainingRun, first: int, last: int, stats: BatchStats, window: LogWindow, stop: GracefulStop,
                source: EpisodeSource) -> int:
    """After episodes ``first..last``: validation check, spend, learning-curve point, budgets, log
    window, each when its turn comes. Returns the overshoot where a budget stopped the run now
    (:func:`learners.training_run.stop_at_budget`), else 0."""
    cfg, spent = run.cfg, run.record.spent
    if reached(cfg.train.validate_every, first, last):
        validate(run, last + 1)
    window.stats.append(stats)
    add_spent(spent, stats.tokens.sum(), stats.calls.sum())
    # each round of a batched episode is also played on noise_samples copies of it
    spent["simulator_episodes"] += len(stats.reward) * cfg.sim_scale.noise_samples * cfg.env.rounds
    if reached(cfg.train.curve_every, first, last):
        curve_point(run, last + 1)
    overshoot = stop_at_budget(cfg, spent, stop, source)
    if stop.requested:  # a budget or a Ctrl-C: launch nothing more, finish what is in flight
        source.stop_launching()
    if reached(cfg.train.log_every, first, last):
        run.record.curves.append(window.log(epsilon_at(last, cfg), last + 1))
    return overshoot


def validate(run: TrainingRun, episode: int) -> None:
    """Score the greedy policy of the current network on the validation episodes (train-split
    tasks, the same seeds every time) and keep a copy of it if it is the best so far
    (:func:`learners.training_run.keep_if_best`); the tokens and LLM calls the check spent count
    toward ``train.token_budget`` and ``train.call_budget``. The network of the last check (the
    agent network waits out the mixer's warm-up) keeps its figures, and spends nothing."""
    cfg, envs = run.cfg, run.validation_envs
    figures = unchanged_figures(run, "validation")
    if figures is None:
        figures, _ = evaluate_policy(envs[0], QMIXPolicy(run.learner.agent, run.device), cfg.train.validate_episodes,
                                     seed=cfg.train.seed + VALIDATION_SEED_OFFSET, split="train", progress=False,
                                     siblings=envs[1:])
        remember_check(run, "validation", figures)
        add_spent(run.record.spent, int(figures["total_tokens"]), round(figures["calls_per_task"] * figures["episodes"]))
    keep_if_best(run, episode, figures)


def curve_point(run: TrainingRun, episode: int) -> None:
    """The learning curve's point after ``episode`` training episodes: the greedy policy of now on
    the first ``curve_episodes`` held-out episodes (reporting only: no run decision reads it, and
    its calls count toward no budget; :func:`learners.report.add_curve_point`). The network of the last
    point keeps its figures."""
    cfg, envs = run.cfg, run.eval_envs
    figures = unchanged_figures(run, "curve")
    if figures is None:
        figures, _ = evaluate_policy(envs[0], QMIXPolicy(run.learner.agent, run.device), curve_episodes(cfg),
                                     seed=held_out_seed(cfg.train.seed), split="eval", progress=False,
                                     siblings=envs[1:])
        remember_check(run, "curve", figures)
    add_curve_point(run, episode, figures)


def unchanged_figures(run: TrainingRun, check: str) -> dict | None:
    """The figures of ``check``'s last run where the agent network has not changed since, else None."""
    updates, figures = run.record.checked.get(check, (None, None))
    return figures if updates == run.learner.agent_updates else None


def remember_check(run: TrainingRun, check: str, figures: dict) -> None:
    """Keep ``check``'s figures with the agent network's update count (the checkpoint saves them)."""
    run.record.checked[check] = (run.learner.agent_updates,
                                 {key: float(figures[key]) for key in ("reward", "accuracy", "tokens_per_task")})


__all__ = ["RESUME_OVERRIDABLE", "STOPPED", "RunOptions", "evaluate", "resumed_config", "train", "train_and_evaluate"]
