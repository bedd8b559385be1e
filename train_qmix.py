"""Train Agent Q-Mix (QMIX over communication actions) on the topology env, then compare the
learned policy with every fixed topology on held-out tasks.

    python train_qmix.py                                   # configs/default.yaml, simulated team
    python train_qmix.py --config configs/math.yaml --set learner.lr=1e-3 --episodes 3000 --out runs/math
    python train_qmix.py --resume runs/math                # continue an interrupted run
    python train_qmix.py --config C.yaml --sim2real --real-calls 10000 --out DIR   # C.yaml's team as the real one

Writes to --out: TensorBoard logs, checkpoint.pt (every train.checkpoint_every episodes and at
the end), config.json, results.json and PNG pictures (learning_curves.png, action_distribution.png,
topology_examples.png; see studies.qmix_report.write_pictures); prints a comparison table at the
end (accuracy in points), with QMIX's reward minus each policy's on the same held-out episodes and
its paired standard error (results.json["qmix_minus"]), then what it scored and every file it
wrote. With ``train.validate_every`` the evaluated "qmix" is the network that scored best on the
validation episodes (train split), and "qmix_last" the final one.

Reads top to bottom: :func:`main` parses, configures, builds, trains, evaluates and saves. The
training loop's pieces are in studies/qmix_training.py, the held-out evaluation and the report in
studies/qmix_report.py; what scores the network during training (validation, learning curve) and
the TD updates are here.
"""
from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import random
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm

from studies import sim2real
from studies.qmix_report import (LogWindow, add_curve_point, curve_episodes, evaluate_held_out, print_report,
                                 save_results)
from studies.qmix_training import (EpisodeSource, GracefulStop, RunRecord, TrainingRun, add_spent, backend_failed,
                                   keep_if_best, load_init_from, pick_device, reached, restore, save_checkpoint,
                                   say_stopped, stop_at_budget)
from learners.buffer import EpisodeReplayBuffer
from learners.config import DEFAULT_CONFIG, ExperimentConfig, load_experiment
from learners.distributed import require_ray  # imports Ray only when train.ray is set
from learners.evaluation import QMIXPolicy, evaluate, references_apply
from learners.inflight import sibling_envs
from learners.evaluation import config_overrides as _flatten  # a saved config as --set overrides (--resume)
from learners.learner import QMIXLearner
from learners.batch_runner import BatchStats, EpisodeBatch
from learners.runner import EpisodeRunner, space_dims
from learners.schedules import epsilon_at, lr_at
from learners.teacher import imitate_teacher
from learners.seeds import format_seeds, run_seeds
from topo_env.frontends.comm_actions import N_ACTIONS
from topo_env.engine.backend_registry import BackendFailed, BackendUnavailable
from topo_env.engine.cli import OneLineParser, positive_int, run_main
from topo_env.engine.config_checks import ConfigError
from topo_env.frontends.parallel_env import TopologyParallelEnv
from topo_env.engine.seeding import EVAL_SEED_OFFSET, REPLAY_STREAM, VALIDATION_SEED_OFFSET, episode_rng
from topo_env.frontends.vector_env import SimVectorEnv


RESUME_OVERRIDABLE = frozenset({"train.token_budget", "train.call_budget", "train.eval_episodes", "train.checkpoint_every",
                                "train.episodes_in_flight", "train.ray", "train.ray.address", "train.ray.workers", "train.sync_every",
                                "train.references", "env.backend.base_url", "env.backend.timeout_s",
                                "env.backend.max_retries", "env.backend.backoff_s", "env.backend.max_concurrency"})
"""Keys that ``--set`` may change on ``--resume``: budgets and reporting, and where and how patiently
the team's server is reached (the rest would make it another experiment)."""
PROG = "python train_qmix.py"
CONFIG_KEYS_HELP = """\
where every config key is documented:
  env:          topo_env/frontends/env_config.py, class EnvConfig (team, rounds, reward, adversaries, ...)
  env.backend:  topo_env/engine/backend_registry.py (sim: SimBackendConfig; llm: LLMBackendConfig: model, base_url, dataset, ...)
  learner:      learners/config.py, class LearnerConfig (QMIX hyperparameters)
  train:        learners/config.py, class TrainConfig (episodes, seed, evaluation, checkpoints)
examples: --set learner.lr=1e-3   --set env.backend.base_url=http://127.0.0.1:8080/v1
"""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = OneLineParser(prog=PROG, description=__doc__.split("\n\n")[0], epilog=CONFIG_KEYS_HELP,
                      formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default=str(DEFAULT_CONFIG),
                   help="YAML with env/learner/train sections (default: the repository's configs/default.yaml)")
    p.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override a config key; nested keys with dots (env.backend.model=...); values are YAML")
    p.add_argument("--episodes", type=positive_int, help="training episodes (overrides train.episodes)")
    p.add_argument("--seed", type=int, help="seed (overrides train.seed)")
    p.add_argument("--seeds", type=int, nargs="+", metavar="S",
                   help="train each of these seeds in its own process (--out DIR: DIR/seed<S>/) and report means over "
                        "seeds with their standard errors (DIR/seeds.json)")
    p.add_argument("--jobs", type=positive_int, help="with --seeds: processes at once (default: the CPU count)")
    p.add_argument("--out", help="output directory (default runs/qmix-<profile>-seed<seed>)")
    p.add_argument("--resume", metavar="DIR", help="continue the run in DIR from its checkpoint")
    p.add_argument("--init-from", metavar="RUN_DIR",
                   help="start from another run's networks (its validation-best agent network if it validated, and "
                        "its mixer); the observation layout and the network sizes must match")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--no-pictures", action="store_true", help="write no PNG pictures at the end")
    p.add_argument("--trace-out", metavar="PATH",
                   help="append every training episode to this JSONL trace file (schema: topo_env/engine/traces.py)")
    s2r = p.add_argument_group("sim to real (sim2real.py): --config's team is the real one")
    s2r.add_argument("--sim2real", action="store_true",
                     help="record the real team, fit a simulated team to it, train on that, evaluate on the real team")
    s2r.add_argument("--real-calls", type=positive_int, metavar="N", help="budget of real LLM calls for training")
    s2r.add_argument("--finetune-calls", type=positive_int, metavar="N",
                     help="of the budget, calls for fine-tuning on the real team after the simulator (default: none)")
    s2r.add_argument("--sim-set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                     help="override a key of the training on the fitted team (configs/default.yaml's)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """One training run from its command line: parse, configure, build, train, evaluate on the
    held-out tasks, save and report. Returns the exit code: 0 done, 130 stopped (Ctrl-C or a
    budget: checkpointed) or interrupted (a second Ctrl-C: the last checkpoint stands). ``--seeds``
    runs one process per seed (:func:`main_seeds`), ``--sim2real`` the sim-to-real route
    (studies/sim2real.py, which trains through this function)."""
    args = parse_args(argv)
    if args.sim2real:
        return sim2real.run(args, train=main)
    if args.real_calls or args.finetune_calls or args.sim_set:
        raise ConfigError("--real-calls, --finetune-calls and --sim-set belong to --sim2real")
    if args.seeds:
        return main_seeds(args)
    cfg, out_dir, checkpoint = configure(args)
    run = build(cfg, args, out_dir, checkpoint)
    stopped = train(run, progress=not args.no_progress)
    if stopped is not None:
        return stopped
    held_out = evaluate_held_out(run, progress=not args.no_progress)
    pictures = save_results(run, held_out, args)
    print_report(run, held_out, pictures, args)
    return 0


# -- configure ----------------------------------------------------------------------------------


def configure(args: argparse.Namespace) -> tuple[ExperimentConfig, Path, dict | None]:
    """The run's effective config (notes on what it turned off go to stderr), its output
    directory and, with ``--resume``, its checkpoint; a one-line ConfigError for what cannot go
    together."""
    if args.resume and args.init_from:
        raise ConfigError("--init-from with --resume: a resumed run continues from its own checkpoint")
    cfg, out_dir, checkpoint = resumed_config(args) if args.resume else (*new_config(args), None)
    cfg, notes = cfg.effective()  # simulator-only options off where the team is not the batched simulated one
    for note in notes:
        print(note, file=sys.stderr)
    require_ray(cfg)
    if cfg.train.ray is not None and args.trace_out:
        raise ConfigError("--trace-out with train.ray: the Ray workers record no traces; drop one of them")
    if cfg.batched and args.trace_out:
        raise ConfigError(f"--trace-out with train.sim_batch={cfg.train.sim_batch}: the batched simulated team records "
                          "no traces; add --set train.sim_batch=0 to play (and record) one episode at a time")
    return cfg, out_dir, checkpoint


def resumed_config(args: argparse.Namespace) -> tuple[ExperimentConfig, Path, dict]:
    """``--resume DIR``: the config saved in DIR's checkpoint, with the ``--set`` keys a resumed run
    may change (:data:`RESUME_OVERRIDABLE`) and ``--episodes``; DIR; the checkpoint."""
    out_dir = Path(args.resume)
    for text in args.set:  # a resumed run is the same experiment: only its bookkeeping may change
        key = text.split("=", 1)[0]
        if key not in RESUME_OVERRIDABLE:
            raise ConfigError(f"--set {key}=... with --resume: only {sorted(RESUME_OVERRIDABLE)} may change")
    if not (out_dir / "checkpoint.pt").is_file():
        what = "has no checkpoint.pt" if out_dir.is_dir() else "does not exist"
        raise ConfigError(f"--resume {str(out_dir)!r}: the directory {what}; give the --out directory of a "
                          "train_qmix.py run that saved a checkpoint")
    checkpoint = torch.load(out_dir / "checkpoint.pt", weights_only=False)
    overrides = list(args.set) + ([f"train.episodes={args.episodes}"] if args.episodes else [])
    return load_experiment(None, overrides=_flatten(checkpoint["config"]) + overrides), out_dir, checkpoint


def new_config(args: argparse.Namespace) -> tuple[ExperimentConfig, Path]:
    """A new run: ``--config`` with ``--set``, ``--episodes`` and ``--seed``, its schedules fixed to
    its length; ``--out`` (default ``runs/qmix-<setting>-seed<seed>``)."""
    overrides = list(args.set)
    overrides += [f"train.episodes={args.episodes}"] if args.episodes is not None else []
    overrides += [f"train.seed={args.seed}"] if args.seed is not None else []
    cfg = load_experiment(args.config, overrides)
    # fix the schedules now: --resume --episodes must not move them
    spans = {k: cfg.train.episodes for k in ("eps_anneal_episodes", "lr_anneal_episodes")
             if getattr(cfg.learner, k) is None}
    cfg = dataclasses.replace(cfg, learner=dataclasses.replace(cfg.learner, **spans))
    return cfg, Path(args.out or f"runs/qmix-{cfg.env.team_label}-seed{cfg.train.seed}")


# -- build ------------------------------------------------------------------------------------------


def build(cfg: ExperimentConfig, args: argparse.Namespace, out_dir: Path, checkpoint: dict | None) -> TrainingRun:
    """Seed every random stream, then the envs (K = ``train.episodes_in_flight`` of each kind),
    the learner and the replay; load ``--init-from``'s networks or the ``--resume`` checkpoint, or
    distil the teacher into a new run's agent network; write config.json, open TensorBoard."""
    out_dir.mkdir(parents=True, exist_ok=True)
    seed, n, rounds, k = cfg.train.seed, cfg.env.n_agents, cfg.env.rounds, cfg.train.episodes_in_flight
    torch.set_num_threads(cfg.learner.torch_threads)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    device = pick_device(cfg.learner.device)
    train_env = TopologyParallelEnv(dataclasses.replace(cfg.env, split="train"))
    eval_env = TopologyParallelEnv(dataclasses.replace(cfg.env, split="eval"))
    obs_dim, state_dim = space_dims(train_env)
    if cfg.learner.privileged_state:  # the mixer's state also holds the simulator's hidden variables
        state_dim += SimVectorEnv(cfg.env, encoder=train_env.encoder).privileged_dim
    learner = QMIXLearner(obs_dim, state_dim, n, N_ACTIONS, cfg.learner, device)
    buffer = EpisodeReplayBuffer(cfg.learner.buffer_size, rounds, n, obs_dim, state_dim, N_ACTIONS)
    if args.trace_out:
        train_env.record(args.trace_out)
    # K episodes in flight: K envs of each kind sharing one client; training episodes play on a
    # snapshot of the weights taken at their launch (learners.inflight)
    train_envs, eval_envs = sibling_envs(train_env, k), sibling_envs(eval_env, k)
    runners = [EpisodeRunner(env, copy.deepcopy(learner.agent), device) for env in train_envs]
    # validation episodes run on their own env instances, so training episodes are untouched
    validation_envs = (sibling_envs(TopologyParallelEnv(dataclasses.replace(cfg.env, split="train")), k)
                       if cfg.train.validate_every else [])
    if args.init_from:
        load_init_from(learner, cfg, args.init_from)
    start, record = 0, RunRecord()
    if checkpoint is not None:
        start, record = restore(learner, buffer, checkpoint), RunRecord.of_checkpoint(checkpoint)
    elif cfg.learner.teacher_episodes and not args.init_from:  # before TD learning
        record.teacher = imitate_teacher(cfg.env, cfg.learner, learner.agent, seed, device,
                                         progress=not args.no_progress)
        learner.sync_targets(1.0)
        # the teacher's search and demonstrations: simulator episodes
        record.spent["simulator_episodes"] += record.teacher["demonstrations"] + record.teacher["search_episodes"]
    (out_dir / "config.json").write_text(json.dumps(cfg.to_dict(), indent=2))
    return TrainingRun(cfg, out_dir, device, learner, buffer, train_envs, eval_envs, validation_envs, runners,
                       writer=SummaryWriter(str(out_dir)), start=start, record=record)


# -- train ------------------------------------------------------------------------------------------


def train(run: TrainingRun, progress: bool = True) -> int | None:
    """Train ``run.learner`` from episode ``run.start`` to ``train.episodes`` (:func:`play`), then
    a last validation check and learning-curve point for the final network, and the final
    checkpoint. Returns None when it trained to the end, else the exit code 130: stopped by Ctrl-C
    or a budget (checkpointed at the end of the batch) or interrupted by a second Ctrl-C (the last
    checkpoint stands). A backend that fails in training is a one-line RunError."""
    cfg, record = run.cfg, run.record
    bar = tqdm(initial=run.start, total=cfg.train.episodes, desc="train", disable=not progress, file=sys.stderr)
    if cfg.learner.compile:
        print("learner.compile: the first update compiles it (about 30 s on 2 cores; inductor caches the result "
              "for later runs)", file=sys.stderr)
    started = time.perf_counter()
    stop = GracefulStop()  # Ctrl-C finishes the episodes in flight, checkpoints, and exits
    run.committed, run.untouched = run.start, True
    if cfg.train.curve_every and run.start == 0:
        curve_point(run, 0)  # the untrained network (or the teacher's student)
    if cfg.train.validate_every and run.start == 0 and record.teacher is not None:  # the teacher's student too
        validate(run, 0)
    source = EpisodeSource(run, stop)
    try:
        stopped = play(run, source, stop, LogWindow(run.writer, cfg.env.rounds, bar), bar)
    except KeyboardInterrupt:  # a second Ctrl-C: the episodes in flight are lost, the last checkpoint stands
        print(f"\ninterrupted; continue from the last checkpoint with --resume {run.out_dir}")
        return 130
    except BackendUnavailable:  # no server from the start: nothing to keep; its own one-line message
        raise
    except BackendFailed as err:  # the team's server went down: keep what completed, say how to go on
        raise backend_failed(run, err) from None
    finally:
        source.close()  # cancels the episodes still in flight, if any
        bar.close()
        stop.restore()
    if stopped is not None:
        return stopped
    run.seconds = time.perf_counter() - started
    if cfg.train.validate_every and (not record.validation["history"]
                                     or record.validation["history"][-1]["episode"] != cfg.train.episodes):
        validate(run, cfg.train.episodes)
    if cfg.train.curve_every and (not record.held_out_curve or record.held_out_curve[-1]["episode"] != cfg.train.episodes):
        curve_point(run, cfg.train.episodes)  # the last network
    save_checkpoint(run, cfg.train.episodes)
    return None


def play(run: TrainingRun, source: EpisodeSource, stop: GracefulStop, window: LogWindow, bar) -> int | None:
    """The training loop over ``source``'s episodes: store, update (:func:`learn`), keep the record
    (:func:`keep_record`), checkpoint every ``train.checkpoint_every`` episodes. Returns 130 once a
    requested stop has no episode left in flight (checkpointed), None at the end."""
    overshoot = 0  # episodes in flight when a budget was reached (they finish: their tokens and calls are spent)
    mark = time.perf_counter()
    for first, episodes, stats in source:
        run.time_split["rollouts"] += time.perf_counter() - mark
        run.untouched = False
        last = first + len(stats.reward) - 1  # episodes first..last, in index order
        window.losses += learn(run, first, last, episodes, bar)
        overshoot = keep_record(run, first, last, stats, window, stop, source) or overshoot
        stopping = stop.requested and not source.in_flight()
        if reached(run.cfg.train.checkpoint_every, first, last) or stopping:
            save_checkpoint(run, last + 1)
        run.committed, run.untouched = last + 1, True
        if stopping:
            say_stopped(run, overshoot)
            return 130
        mark = time.perf_counter()
    return None


def learn(run: TrainingRun, first: int, last: int, episodes, bar) -> list[dict]:
    """Store episodes ``first..last`` in the replay, then run each one's learning-rate schedule and
    updates as in the one-episode loop: once the replay holds the warm-up, on every
    ``learner.episodes_per_update``-th episode j ``learner.updates_per_episode`` updates on batches
    drawn with j's replay stream. Returns the updates' losses."""
    cfg, learner, buffer = run.cfg, run.learner, run.buffer
    warmup = max(cfg.train.warmup_episodes, cfg.learner.batch_size)
    size_before = len(buffer)
    if isinstance(episodes, EpisodeBatch):
        buffer.add_batch(episodes)
    else:
        buffer.add(episodes)
    bar.update(last + 1 - first)
    updating, losses = time.perf_counter(), []
    for j in range(first, last + 1):
        learner.set_lr(lr_at(j, cfg))
        if min(size_before + j - first + 1, buffer.capacity) >= warmup and j % cfg.learner.episodes_per_update == 0:
            sample_rng = episode_rng(cfg.train.seed, REPLAY_STREAM, j)
            for _ in range(cfg.learner.updates_per_episode):
                losses.append(learner.update(buffer.sample(cfg.learner.batch_size, sample_rng)))
    run.time_split["updates"] += time.perf_counter() - updating
    return losses


def keep_record(run: TrainingRun, first: int, last: int, stats: BatchStats, window: LogWindow, stop: GracefulStop,
                source: EpisodeSource) -> int:
    """After episodes ``first..last``: validation check, spend, learning-curve point, budgets, log
    window, each when its turn comes. Returns the overshoot where a budget stopped the run now
    (:func:`studies.qmix_training.stop_at_budget`), else 0."""
    cfg, spent = run.cfg, run.record.spent
    if reached(cfg.train.validate_every, first, last):
        validate(run, last + 1)
    window.stats.append(stats)
    add_spent(spent, stats.tokens.sum(), stats.calls.sum())
    spent["simulator_episodes"] += len(stats.reward) * cfg.learner.replicas * cfg.env.rounds  # replicas: forks per round
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
    (:func:`studies.qmix_training.keep_if_best`); the tokens and LLM calls the check spent count
    toward ``train.token_budget`` and ``train.call_budget``."""
    cfg, envs = run.cfg, run.validation_envs
    figures, _ = evaluate(envs[0], QMIXPolicy(run.learner.agent, run.device), cfg.train.validate_episodes,
                          seed=cfg.train.seed + VALIDATION_SEED_OFFSET, split="train", progress=False, siblings=envs[1:])
    keep_if_best(run, episode, figures)
    add_spent(run.record.spent, int(figures["total_tokens"]), round(figures["calls_per_task"] * figures["episodes"]))


def curve_point(run: TrainingRun, episode: int) -> None:
    """The learning curve's point after ``episode`` training episodes: the greedy policy of now on
    the first ``curve_episodes`` held-out episodes (reporting only: no run decision reads it, and
    its calls count toward no budget; :func:`studies.qmix_report.add_curve_point`)."""
    cfg, envs = run.cfg, run.eval_envs
    figures, _ = evaluate(envs[0], QMIXPolicy(run.learner.agent, run.device), curve_episodes(cfg),
                          seed=cfg.train.seed + EVAL_SEED_OFFSET, split="eval", progress=False, siblings=envs[1:])
    add_curve_point(run, episode, figures)


# -- several seeds ----------------------------------------------------------------------------------


def main_seeds(args: argparse.Namespace) -> int:
    """``--seeds``: each seed in its own process (learners.seeds), then the means over seeds."""
    for flag, value in (("--resume", args.resume), ("--seed", args.seed), ("--trace-out", args.trace_out)):
        if value is not None:
            raise ConfigError(f"{flag} cannot be combined with --seeds: give each seed's run its own command")
    if len(set(args.seeds)) != len(args.seeds):
        raise ConfigError(f"--seeds {args.seeds}: each seed once")
    cfg = load_experiment(args.config, list(args.set))  # a bad config fails here, once, not in every process
    out_dir = Path(args.out or f"runs/qmix-{cfg.env.team_label}-seeds{'-'.join(map(str, args.seeds))}")
    child = ["--config", args.config, *[x for text in args.set for x in ("--set", text)]]
    child += ["--episodes", str(args.episodes)] if args.episodes else []
    child += ["--no-pictures"] if args.no_pictures else []
    child += ["--init-from", args.init_from] if args.init_from else []
    if references_apply(cfg):  # select and cache them once here, not once in every seed's process
        from topo_env.references.headroom import cached_references
        cached_references(cfg.env, progress=not args.no_progress)
    summary = run_seeds(child, args.seeds, out_dir, args.jobs, progress=not args.no_progress,
                        script=Path(__file__).resolve())
    print(f"\n{cfg.env.team_label} (N={cfg.env.n_agents}, T={cfg.env.rounds}), {cfg.train.episodes if not args.episodes else args.episodes} "
          f"training episodes, {cfg.train.eval_episodes} held-out episodes per seed:")
    print(format_seeds(summary))
    print(f"Wrote: {out_dir / 'seeds.json'} (the summary) and each seed's run in {out_dir}/seed<S>/")
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main, PROG))
