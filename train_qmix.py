"""Train Agent Q-Mix (QMIX over communication actions) on the topology env, then compare the
learned policy with every fixed topology on held-out tasks.

    python train_qmix.py                                   # configs/default.yaml, simulated team
    python train_qmix.py --config configs/math.yaml --set learner.lr=1e-3 --episodes 3000 --out runs/math
    python train_qmix.py --resume runs/math                # continue an interrupted run
    python train_qmix.py --config C.yaml --sim2real --real-calls 10000 --out DIR   # C.yaml's team as the real one

Writes to --out: TensorBoard logs, checkpoint.pt (every train.checkpoint_every episodes and at
the end), config.json, results.json and PNG pictures (learning_curves.png, action_distribution.png,
topology_examples.png; see write_pictures); prints a comparison table at the end (accuracy in
points), with QMIX's reward minus each policy's on the same held-out episodes and its paired
standard error (results.json["qmix_minus"]), then what it scored and every file it wrote. With
``train.validate_every`` the evaluated "qmix" is the network that scored best on the validation
episodes (train split), and "qmix_last" the final one.
"""
from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import random
import signal
import sys
import time
from pathlib import Path

import numpy as np
import torch
from matplotlib.image import imread
from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm

from studies import sim2real
from learners.buffer import EpisodeReplayBuffer
from learners.config import DEFAULT_CONFIG, ExperimentConfig, load_experiment
from learners.distributed import RayRollouts, require_ray  # imports Ray only when train.ray is set
from learners.evaluation import (AGENT_LAYOUT, MIXER_LAYOUT, QMIXPolicy, evaluate, held_out_comparison,
                                 layout_difference, load_checkpoint, references_apply)
from learners.inflight import EpisodesInFlight, sibling_envs
from learners.evaluation import config_overrides as _flatten  # a saved config as --set overrides (--resume)
from learners.learner import QMIXLearner
from learners.batch_runner import BatchEpisodeRunner, BatchStats, EpisodeBatch
from learners.runner import EpisodeRunner
from learners.schedules import epsilon_at, lr_at
from learners.teacher import imitate_teacher
from learners.seeds import format_seeds, run_seeds
from topo_env.frontends.comm_actions import N_ACTIONS
from topo_env.references.baselines import FIXED_BASELINES
from topo_env.engine.backend_registry import BackendFailed, BackendUnavailable
from topo_env.engine.cli import (OneLineParser, RunError, closing_note, format_table, points, positive_int, run_main,
                          standard_error_note)
from topo_env.engine.config_checks import ConfigError
from topo_env.frontends.parallel_env import TopologyParallelEnv
from topo_env.engine.seeding import (EVAL_SEED_OFFSET, EXPLORATION_STREAM, REPLAY_STREAM, REPLICA_STREAM,
                              VALIDATION_SEED_OFFSET, episode_rng, training_env_seed)
from topo_env.frontends.vector_env import SimVectorEnv
from topo_env.frontends.plots import (draw_episodes, plot_action_distribution, plot_learning_curves, plot_sample_efficiency,
                            save_figure)


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


def setting_name(cfg: ExperimentConfig) -> str:
    """The simulated profile, or ``<backend kind>-<domain>`` for another team (``llm-reasoning``)."""
    return cfg.env.profile if cfg.env.backend.kind == "sim" else f"{cfg.env.backend.kind}-{cfg.env.domain}"


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
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("learner.device='cuda' but no CUDA device is available")
    return torch.device(name)


def validate(envs: list[TopologyParallelEnv], learner: QMIXLearner, cfg: ExperimentConfig, validation: dict,
             episode: int, device: torch.device, writer: SummaryWriter) -> tuple[int, int]:
    """Score the greedy policy of the current network on the validation episodes (train-split
    tasks, the same seeds every time; ``envs``: the env and its siblings, one per episode in
    flight) and keep a copy of the network if it is the best so far.
    ``validation``: ``{"history": [{"episode", "reward"}, ...], "best": {"episode", "reward",
    "agent": state_dict} or None}``, updated in place. Returns the tokens and LLM calls the checks
    spent (they count toward ``train.token_budget`` and ``train.call_budget``)."""
    figures, _ = evaluate(envs[0], QMIXPolicy(learner.agent, device), cfg.train.validate_episodes,
                          seed=cfg.train.seed + VALIDATION_SEED_OFFSET, split="train", progress=False, siblings=envs[1:])
    validation["history"].append({"episode": episode, "reward": figures["reward"]})
    writer.add_scalar("validation/reward", figures["reward"], episode)
    if validation["best"] is None or figures["reward"] > validation["best"]["reward"]:
        validation["best"] = {"episode": episode, "reward": figures["reward"],
                              "agent": copy.deepcopy(learner.agent.state_dict())}
    return int(figures["total_tokens"]), round(figures["calls_per_task"] * figures["episodes"])


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


def save_checkpoint(path: Path, cfg: ExperimentConfig, learner: QMIXLearner, buffer: EpisodeReplayBuffer,
                    episode: int, curves: list[dict] = (), spent: dict[str, int] | None = None,
                    validation: dict | None = None, held_out_curve: list[dict] = (), teacher: dict | None = None) -> None:
    spent = spent or {"tokens": 0, "calls": 0}
    state = {"config": cfg.to_dict(), "learner": learner.state_dict(), "episode": episode, "curves": list(curves),
             "tokens_spent": int(spent["tokens"]), "calls_spent": int(spent["calls"]),
             "simulator_episodes_spent": int(spent.get("simulator_episodes", 0)), "teacher": teacher,
             "validation": validation,
             "held_out_curve": list(held_out_curve),
             "torch_rng": torch.get_rng_state(), "numpy_rng": np.random.get_state(), "python_rng": random.getstate(),
             "buffer": buffer.state_dict() if cfg.train.save_buffer else None}
    tmp = path.with_suffix(".tmp")
    try:
        torch.save(state, tmp)
        tmp.replace(path)  # never leave a half-written checkpoint behind
    except OSError as err:
        tmp.unlink(missing_ok=True)
        kept = f"the previous checkpoint {path} is intact" if path.exists() else "no earlier checkpoint exists"
        raise RunError(f"could not write the checkpoint of episode {episode} to {path} "
                       f"({err.strerror or err}); {kept}: make room, then continue with --resume {path.parent}") from None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.sim2real:
        return sim2real.run(args, train=main)
    if args.real_calls or args.finetune_calls or args.sim_set:
        raise ConfigError("--real-calls, --finetune-calls and --sim-set belong to --sim2real")
    if args.seeds:
        return main_seeds(args)

    # -- configuration ---------------------------------------------------------------------
    if args.resume and args.init_from:
        raise ConfigError("--init-from with --resume: a resumed run continues from its own checkpoint")
    if args.resume:
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
        cfg = load_experiment(None, overrides=_flatten(checkpoint["config"]) + overrides)
    else:
        overrides = list(args.set)
        overrides += [f"train.episodes={args.episodes}"] if args.episodes is not None else []
        overrides += [f"train.seed={args.seed}"] if args.seed is not None else []
        cfg = load_experiment(args.config, overrides)
        # fix the schedules now: --resume --episodes must not move them
        spans = {k: cfg.train.episodes for k in ("eps_anneal_episodes", "lr_anneal_episodes")
                 if getattr(cfg.learner, k) is None}
        cfg = dataclasses.replace(cfg, learner=dataclasses.replace(cfg.learner, **spans))
        out_dir = Path(args.out or f"runs/qmix-{setting_name(cfg)}-seed{cfg.train.seed}")
        checkpoint = None
    cfg, notes = cfg.effective()  # simulator-only options off where the team is not the batched simulated one
    for note in notes:
        print(note, file=sys.stderr)
    require_ray(cfg)
    if cfg.train.ray is not None and args.trace_out:
        raise ConfigError("--trace-out with train.ray: the Ray workers record no traces; drop one of them")
    if cfg.batched and args.trace_out:
        raise ConfigError(f"--trace-out with train.sim_batch={cfg.train.sim_batch}: the batched simulated team records "
                          "no traces; add --set train.sim_batch=0 to play (and record) one episode at a time")
    out_dir.mkdir(parents=True, exist_ok=True)
    seed, n, rounds = cfg.train.seed, cfg.env.n_agents, cfg.env.rounds
    torch.set_num_threads(cfg.learner.torch_threads)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    device = pick_device(cfg.learner.device)

    # -- env, learner, replay ----------------------------------------------------------------
    train_env = TopologyParallelEnv(dataclasses.replace(cfg.env, split="train"))
    eval_env = TopologyParallelEnv(dataclasses.replace(cfg.env, split="eval"))
    obs_dim, state_dim = train_env.obs_builder.dim, train_env.obs_builder.state_dim
    if cfg.learner.privileged_state:  # the mixer's state also holds the simulator's hidden variables
        state_dim += SimVectorEnv(cfg.env, encoder=train_env.encoder).privileged_dim
    learner = QMIXLearner(obs_dim, state_dim, n, N_ACTIONS, cfg.learner, device)
    buffer = EpisodeReplayBuffer(cfg.learner.buffer_size, rounds, n, obs_dim, state_dim, N_ACTIONS)
    if args.trace_out:
        train_env.record(args.trace_out)
    # K episodes in flight: K envs of each kind sharing one client; training episodes play on a
    # snapshot of the weights taken at their launch (learners.inflight)
    k_in_flight = cfg.train.episodes_in_flight
    train_envs, eval_envs = sibling_envs(train_env, k_in_flight), sibling_envs(eval_env, k_in_flight)
    runners = [EpisodeRunner(env, copy.deepcopy(learner.agent), device) for env in train_envs]
    # validation episodes run on their own env instances, so training episodes are untouched
    validation_envs = (sibling_envs(TopologyParallelEnv(dataclasses.replace(cfg.env, split="train")), k_in_flight)
                       if cfg.train.validate_every else [])
    validation = {"history": [], "best": None}
    start = 0
    if args.init_from:
        init_cfg, init_checkpoint = load_checkpoint(args.init_from)
        differs = layout_difference(cfg, init_cfg, AGENT_LAYOUT)
        if differs:
            raise ConfigError(f"--init-from {args.init_from}: its networks do not fit this run: {differs}")
        best = (init_checkpoint.get("validation") or {}).get("best")
        mixer_differs = layout_difference(cfg, init_cfg, MIXER_LAYOUT)
        learner.load_networks(init_checkpoint["learner"], agent=best["agent"] if best else None,
                              mixer=mixer_differs is None)
        if mixer_differs:  # e.g. a mixer trained on the simulator's privileged state: the agents' networks only
            print(f"--init-from {args.init_from}: its agent network; the mixer starts afresh ({mixer_differs})",
                  file=sys.stderr)
    if checkpoint is not None:
        learner.load_state_dict(checkpoint["learner"])
        if checkpoint["buffer"] is not None:
            buffer.load_state_dict(checkpoint["buffer"])
        torch.set_rng_state(checkpoint["torch_rng"])
        np.random.set_state(checkpoint["numpy_rng"])
        random.setstate(checkpoint["python_rng"])
        start = int(checkpoint["episode"])
        validation = checkpoint.get("validation") or validation
    teacher = checkpoint.get("teacher") if checkpoint is not None else None
    if cfg.learner.teacher_episodes and checkpoint is None and not args.init_from:  # before TD learning
        teacher = imitate_teacher(cfg.env, cfg.learner, learner.agent, seed, device, progress=not args.no_progress)
        learner.sync_targets(1.0)
    (out_dir / "config.json").write_text(json.dumps(cfg.to_dict(), indent=2))
    writer = SummaryWriter(str(out_dir))

    # -- training -------------------------------------------------------------------------
    window: list[BatchStats] = []
    curves: list[dict] = list(checkpoint.get("curves", [])) if checkpoint is not None else []  # log_window's points
    losses: list[dict] = []
    warmup = max(cfg.train.warmup_episodes, cfg.learner.batch_size)
    bar = tqdm(initial=start, total=cfg.train.episodes, desc="train", disable=args.no_progress, file=sys.stderr)
    if cfg.learner.compile:
        print("learner.compile: the first update compiles it (about 30 s on 2 cores; inductor caches the result "
              "for later runs)", file=sys.stderr)
    started = time.perf_counter()
    stop = GracefulStop()  # Ctrl-C finishes the episodes in flight, checkpoints, and exits
    # toward train.token_budget and train.call_budget: training and validation episodes
    spent = {"tokens": int(checkpoint.get("tokens_spent", 0)), "calls": int(checkpoint.get("calls_spent", 0)),
             "simulator_episodes": int(checkpoint.get("simulator_episodes_spent", 0))} \
        if checkpoint is not None else {"tokens": 0, "calls": 0, "simulator_episodes": 0}
    if teacher is not None and checkpoint is None:  # the teacher's search and demonstrations: simulator episodes
        spent["simulator_episodes"] += teacher["demonstrations"] + teacher["search_episodes"]
    overshoot = 0  # episodes in flight when a budget was reached (they finish: their tokens and calls are spent)
    committed, untouched = start, True  # untouched: learner and replay hold exactly `committed` episodes
    eval_seed = seed + EVAL_SEED_OFFSET
    held_out_curve: list[dict] = list(checkpoint.get("held_out_curve", [])) if checkpoint is not None else []

    curve_episodes = min(cfg.train.curve_episodes, cfg.train.eval_episodes)

    def curve_point(episode: int) -> dict:
        """The learning curve's point after ``episode`` training episodes: the greedy policy of now
        on the first ``curve_episodes`` held-out episodes (reporting only: no run decision reads
        it, and its calls count toward no budget)."""
        figures, _ = evaluate(eval_env, QMIXPolicy(learner.agent, device), curve_episodes, seed=eval_seed,
                              split="eval", progress=False, siblings=eval_envs[1:])
        writer.add_scalar("held_out/reward", figures["reward"], episode)
        writer.add_scalar("held_out/reward_by_calls", figures["reward"], spent["calls"])
        return {"episode": episode, "calls": spent["calls"], "tokens": spent["tokens"], "reward": figures["reward"],
                "accuracy": figures["accuracy"], "tokens_per_task": figures["tokens_per_task"]}

    if cfg.train.curve_every and start == 0:
        held_out_curve.append(curve_point(0))  # the untrained network (or the teacher's student)
    if cfg.train.validate_every and start == 0 and teacher is not None:  # the teacher's student is a candidate too
        add_spent(spent, *validate(validation_envs, learner, cfg, validation, 0, device, writer))

    def launch(env: TopologyParallelEnv, slot: int, j: int):
        """Episode j, launched once episode j - K is committed: played with the weights of now."""
        runner = runners[slot]
        runner.agent.load_state_dict(learner.agent.state_dict())
        return runner.arun(epsilon_at(j, cfg), episode_rng(seed, EXPLORATION_STREAM, j), seed=training_env_seed(seed, j),
                           team_explore=cfg.learner.team_explore, deviation_explore=cfg.learner.deviation_explore,
                           deviation_rank_decay=cfg.learner.deviation_rank_decay, policy_version=committed,
                           topology_explore=cfg.learner.topology_explore)

    def batches():
        """The batched simulated team: ``train.sim_batch`` episodes at a time, each batch played with
        the weights after the batches before it (learners.batch_runner), until a stop is requested."""
        lc, size = cfg.learner, cfg.train.sim_batch
        for first in range(start, cfg.train.episodes, size):
            if stop.requested:
                return
            js = range(first, min(first + size, cfg.train.episodes))
            episodes, stats = batch_runner.run(
                [training_env_seed(seed, j) for j in js], np.array([epsilon_at(j, cfg) for j in js]),
                episode_rng(seed, EXPLORATION_STREAM, first), "train", lc.team_explore, lc.deviation_explore,
                lc.deviation_rank_decay, lc.topology_explore, policy_version=first, replicas=lc.replicas,
                replica_rng=episode_rng(seed, REPLICA_STREAM, first), gamma=lc.gamma)
            yield first, episodes, stats

    if cfg.batched:  # consecutive episodes in index order, a batch at a time
        batch_runner = BatchEpisodeRunner(SimVectorEnv(dataclasses.replace(cfg.env, split="train"),
                                                       encoder=train_env.encoder),
                                          learner.agent, device, privileged=cfg.learner.privileged_state)
        rollouts, source = None, batches()
        played = source
    else:  # one episode at a time, each as a batch of one
        if cfg.train.ray is None:
            rollouts = EpisodesInFlight(train_envs)
            source = rollouts.play(range(start, cfg.train.episodes), launch)  # episodes in index order
        else:  # W Ray workers, K in flight each, weights shipped every train.sync_every episodes (learners.distributed)
            rollouts = RayRollouts(cfg, weights=learner.agent.state_dict)
            source = rollouts.play(range(start, cfg.train.episodes), start_version=start)  # also in index order
        played = ((j, record, BatchStats.of_episodes([stats])) for j, (record, stats) in source)
    in_flight = (lambda: 0) if rollouts is None else (lambda: rollouts.in_flight)
    time_split = {"rollouts": 0.0, "updates": 0.0}  # seconds waiting for episodes, and in gradient updates
    mark = time.perf_counter()
    try:
        for first, episodes, stats in played:
            time_split["rollouts"] += time.perf_counter() - mark
            untouched = False
            last = first + len(stats.reward) - 1  # episodes first..last, in index order
            size_before = len(buffer)
            if isinstance(episodes, EpisodeBatch):
                buffer.add_batch(episodes)
            else:
                buffer.add(episodes)
            bar.update(last + 1 - first)
            updating = time.perf_counter()
            for j in range(first, last + 1):  # each episode's schedule and updates, as in the one-episode loop
                learner.set_lr(lr_at(j, cfg))
                if min(size_before + j - first + 1, buffer.capacity) >= warmup and j % cfg.learner.episodes_per_update == 0:
                    sample_rng = episode_rng(seed, REPLAY_STREAM, j)
                    for _ in range(cfg.learner.updates_per_episode):
                        losses.append(learner.update(buffer.sample(cfg.learner.batch_size, sample_rng)))
            time_split["updates"] += time.perf_counter() - updating
            epsilon = epsilon_at(last, cfg)

            def reached(every: int) -> bool:
                """Whether these episodes reached a multiple of ``every`` (0: never)."""
                return bool(every) and (last + 1) // every > first // every

            if reached(cfg.train.validate_every):
                add_spent(spent, *validate(validation_envs, learner, cfg, validation, last + 1, device, writer))
            window.append(stats)
            add_spent(spent, stats.tokens.sum(), stats.calls.sum())
            spent["simulator_episodes"] += len(stats.reward) * cfg.learner.replicas * rounds  # replicas: forks per round
            if reached(cfg.train.curve_every):
                held_out_curve.append(curve_point(last + 1))
            budget = budget_reached(cfg, spent)
            if budget and not stop.requested:
                overshoot = in_flight()  # episodes started before the budget was reached
                print(f"\n{budget}"
                      + (f"; finishing the {overshoot} episode(s) already in flight (started before it was "
                         "reached), which add their tokens and calls" if overshoot else ""), file=sys.stderr)
                stop.requested = True
            if stop.requested and rollouts is not None:  # a budget or a Ctrl-C: launch nothing more, finish what is in flight
                rollouts.stop_launching()
            if reached(cfg.train.log_every):
                curves.append(log_window(writer, window, losses, epsilon, last + 1, rounds))
                rewards_seen = np.concatenate([w.reward for w in window])
                bar.set_postfix(reward=f"{rewards_seen.mean():.3f}",
                                acc=f"{np.concatenate([w.accuracy for w in window]).mean():.2f}",
                                tokens=f"{np.concatenate([w.tokens for w in window]).mean():.0f}", eps=f"{epsilon:.2f}")
                window, losses = [], []
            stopping = stop.requested and not in_flight()
            if reached(cfg.train.checkpoint_every) or stopping:
                save_checkpoint(out_dir / "checkpoint.pt", cfg, learner, buffer, last + 1, curves, spent,
                                validation, held_out_curve, teacher)
            committed, untouched = last + 1, True
            if stopping:
                if overshoot:
                    print(f"spent {spent['tokens']} tokens (budget {cfg.train.token_budget or 'none'}) and "
                          f"{spent['calls']} calls (budget {cfg.train.call_budget or 'none'}), the overshoot from the "
                          f"{overshoot} episode(s) started before the budget was reached", file=sys.stderr)
                print(f"\nstopped: checkpoint at episode {last + 1} in {out_dir}; continue with --resume {out_dir}")
                return 130
            mark = time.perf_counter()
    except KeyboardInterrupt:  # a second Ctrl-C: the episodes in flight are lost, the last checkpoint stands
        print(f"\ninterrupted; continue from the last checkpoint with --resume {out_dir}")
        return 130
    except BackendUnavailable:  # no server from the start: nothing to keep; its own one-line message
        raise
    except BackendFailed as err:  # the team's server went down: keep what completed, say how to go on
        if untouched:
            save_checkpoint(out_dir / "checkpoint.pt", cfg, learner, buffer, committed, curves, spent, validation,
                            held_out_curve, teacher)
            kept = f"saved a checkpoint after the {committed} completed episodes"
        else:
            kept = "the last periodic checkpoint stands"
        raise RunError(f"the team's backend failed in training episode {committed + 1} ({err}); {kept} in {out_dir}: "
                       f"continue with --resume {out_dir} once it serves again (add --set "
                       "env.backend.base_url=... if its address changed)") from None
    finally:
        played.close()
        source.close()  # cancels the episodes still in flight, if any
        bar.close()
        stop.restore()
    train_seconds = time.perf_counter() - started
    if cfg.train.validate_every and (not validation["history"] or validation["history"][-1]["episode"] != cfg.train.episodes):
        add_spent(spent, *validate(validation_envs, learner, cfg, validation, cfg.train.episodes, device, writer))
    if cfg.train.curve_every and (not held_out_curve or held_out_curve[-1]["episode"] != cfg.train.episodes):
        held_out_curve.append(curve_point(cfg.train.episodes))  # the last network
    save_checkpoint(out_dir / "checkpoint.pt", cfg, learner, buffer, cfg.train.episodes, curves, spent,
                    validation, held_out_curve, teacher)
    # the evaluated policy: the network that validated best (with validation), else the last one
    policy_agent = learner.agent
    if validation["best"] is not None and validation["best"]["episode"] != cfg.train.episodes:
        policy_agent = copy.deepcopy(learner.agent)
        policy_agent.load_state_dict(validation["best"]["agent"])

    # -- evaluation on held-out tasks -------------------------------------------------------
    # every policy through one loop and one summary (learners.evaluation): the same keys for all
    qmix_policies = [QMIXPolicy(policy_agent, device)]
    if policy_agent is not learner.agent:  # what validation gained: the last network, on the same episodes
        qmix_policies.append(QMIXPolicy(learner.agent, device, name="qmix_last"))
    try:
        results, traces, rewards, paired, headroom = held_out_comparison(
            cfg, qmix_policies, eval_env, eval_envs[1:], progress=not args.no_progress)
    except BackendUnavailable:
        raise
    except BackendFailed as err:
        raise RunError(f"training finished and its checkpoint is in {out_dir}, but the held-out evaluation failed "
                       f"({err}): rerun it with --resume {out_dir} once the backend serves again") from None
    summary = {"config": cfg.to_dict(), "eval": {**results, **headroom}, "qmix_minus": paired,
               "train": {"episodes": cfg.train.episodes, "seconds": train_seconds, "updates": learner.updates,
                         "time_split": {**time_split, "other": train_seconds - sum(time_split.values())},
                         "tokens": spent["tokens"], "calls": spent["calls"],
                         "simulator_episodes": spent["simulator_episodes"], "teacher": teacher, "curves": curves,
                         **({"init_from": str(args.init_from)} if args.init_from else {})}}
    if held_out_curve:
        summary["learning_curve"] = {
            "every": cfg.train.curve_every, "episodes": curve_episodes, "points": held_out_curve,
            # the references on the curve's own episodes (the first of the held-out ones)
            "references": {name: float(rewards[name][:curve_episodes].mean()) for name in ("best_fixed", "adaptive")
                           if name in rewards}}
    if cfg.train.validate_every:
        summary["validation"] = {"every": cfg.train.validate_every, "episodes": cfg.train.validate_episodes,
                                 "history": validation["history"], "selected_episode": validation["best"]["episode"],
                                 "selected_reward": validation["best"]["reward"]}
    (out_dir / "results.json").write_text(json.dumps(summary, indent=2))
    pictures = [] if args.no_pictures else write_pictures(out_dir, cfg, curves, results, traces["qmix"][:12], writer,
                                                          summary.get("learning_curve"))
    writer.close()

    rows = [{"policy": k, "reward": v["reward"], "accuracy (pts)": points(v["accuracy"]),
             "tokens/task": v.get("tokens_per_task", ""), "density": v.get("density", ""),
             "qmix - policy (SE)": f"{paired[k]['mean']:+.4f} ({paired[k]['se']:.4f})" if k in paired else ""}
            for k, v in results.items()]
    print(f"\nHeld-out evaluation ({cfg.train.eval_episodes} episodes, {setting_name(cfg)}, N={n}, T={rounds}):")
    print(format_table(rows, ("policy", "reward", "accuracy (pts)", "tokens/task", "density", "qmix - policy (SE)")))
    if headroom.get("headroom_share") is not None:
        print(f"headroom share: (qmix - best_fixed) / (adaptive - best_fixed) = {headroom['headroom_share']:+.2f} "
              f"(headroom {headroom['headroom']:+.4f}; topo_env/references/headroom.py)")
    if cfg.train.validate_every:
        best = validation["best"]
        print(f"qmix: the network of episode {best['episode']} (best of {len(validation['history'])} validation "
              f"checks, reward {best['reward']:.4f} on {cfg.train.validate_episodes} train-split episodes)"
              + ("; qmix_last: the network at the end of training" if policy_agent is not learner.agent else ""))
    source = f"the run resumed from {args.resume}" if args.resume else f"config {args.config}"
    notes = [f"reward = {cfg.env.w_acc:g} x accuracy - {cfg.env.w_tok:g} x min(tokens / {cfg.env.max_tokens}, 1) per "
             "episode: higher is better; accuracy in points (0-100).",
             standard_error_note("qmix - policy (SE)") + " Above 0: QMIX scored higher."]
    written = [("results", out_dir / "results.json"), ("config", out_dir / "config.json"),
               ("checkpoint (continue or evaluate it: --resume / python robustness.py --checkpoint)",
                out_dir / "checkpoint.pt"),
               ("TensorBoard logs (tensorboard --logdir)", out_dir)] + [("picture", p) for p in pictures]
    if args.trace_out:
        written.append(("training episodes' traces (JSONL, topo_env/engine/traces.py)", args.trace_out))
    print("\n" + closing_note(f"{source} on {setting_name(cfg)} (N={n}, T={rounds}, {cfg.train.episodes} training "
                              f"episodes, seed {seed})", notes, written))
    return 0


def main_seeds(args: argparse.Namespace) -> int:
    """``--seeds``: each seed in its own process (learners.seeds), then the means over seeds."""
    for flag, value in (("--resume", args.resume), ("--seed", args.seed), ("--trace-out", args.trace_out)):
        if value is not None:
            raise ConfigError(f"{flag} cannot be combined with --seeds: give each seed's run its own command")
    if len(set(args.seeds)) != len(args.seeds):
        raise ConfigError(f"--seeds {args.seeds}: each seed once")
    cfg = load_experiment(args.config, list(args.set))  # a bad config fails here, once, not in every process
    out_dir = Path(args.out or f"runs/qmix-{setting_name(cfg)}-seeds{'-'.join(map(str, args.seeds))}")
    child = ["--config", args.config, *[x for text in args.set for x in ("--set", text)]]
    child += ["--episodes", str(args.episodes)] if args.episodes else []
    child += ["--no-pictures"] if args.no_pictures else []
    child += ["--init-from", args.init_from] if args.init_from else []
    if references_apply(cfg):  # select and cache them once here, not once in every seed's process
        from topo_env.references.headroom import cached_references
        cached_references(cfg.env, progress=not args.no_progress)
    summary = run_seeds(child, args.seeds, out_dir, args.jobs, progress=not args.no_progress,
                        script=Path(__file__).resolve())
    print(f"\n{setting_name(cfg)} (N={cfg.env.n_agents}, T={cfg.env.rounds}), {cfg.train.episodes if not args.episodes else args.episodes} "
          f"training episodes, {cfg.train.eval_episodes} held-out episodes per seed:")
    print(format_seeds(summary))
    print(f"Wrote: {out_dir / 'seeds.json'} (the summary) and each seed's run in {out_dir}/seed<S>/")
    return 0


def log_window(writer: SummaryWriter, window: list[BatchStats], losses: list[dict], epsilon: float,
               step: int, rounds: int) -> dict:
    """TensorBoard: episode figures, learner diagnostics, actions and graphs per round, of the
    episodes in ``window``.

    Returns the window's learning-curve point: ``episode`` (= step) and the window means of
    ``reward``, ``accuracy``, ``tokens_per_task``, ``density``, plus ``epsilon`` and ``loss``
    (None before learning starts)."""
    def column(name: str) -> np.ndarray:
        return np.concatenate([getattr(w, name) for w in window])

    point = {"episode": step, "reward": float(np.mean(column("reward"))), "accuracy": float(np.mean(column("accuracy"))),
             "tokens_per_task": float(np.mean(column("tokens"))), "density": float(np.mean(column("density"))),
             "epsilon": float(epsilon), "loss": float(np.mean([x["loss"] for x in losses])) if losses else None}
    writer.add_scalar("episode/return", point["reward"], step)
    writer.add_scalar("episode/accuracy", point["accuracy"], step)
    writer.add_scalar("episode/tokens_per_task", point["tokens_per_task"], step)
    writer.add_scalar("episode/density", point["density"], step)
    writer.add_scalar("train/epsilon", epsilon, step)
    if losses:
        for key in losses[0]:
            writer.add_scalar(f"train/{key}", np.mean([x[key] for x in losses]), step)
    writer.add_scalar("train/q_chosen", np.mean(column("q_values").mean(axis=(1, 2))), step)
    actions, graphs = column("actions"), column("graphs")  # (E, T, N), (E, T, N, N)
    for t in range(rounds):
        writer.add_histogram(f"actions/round_{t + 1}", actions[:, t].reshape(-1), step, bins=np.arange(N_ACTIONS + 1) - 0.5)
        image = np.kron(graphs[:, t].mean(axis=0), np.ones((16, 16)))  # mean adjacency, 16 px per cell
        writer.add_image(f"adjacency/round_{t + 1}", image[None].astype(np.float32), step)
    return point


def write_pictures(out_dir: Path, cfg: ExperimentConfig, curves: list[dict], results: dict, episodes: list,
                   writer: SummaryWriter, learning_curve: dict | None = None) -> list[Path]:
    """PNGs of a finished run in ``out_dir``: ``sample_efficiency.png`` (with ``train.curve_every``:
    held-out reward against training episodes and LLM calls), ``learning_curves.png`` (the log windows' means,
    with the best fixed baseline's held-out figures as reference lines; only when at least one
    window was logged), ``action_distribution.png`` (greedy QMIX's action shares per round on
    the held-out episodes, next to the oracles' where they ran) and ``topology_examples.png``
    (the graphs of the first held-out episode of each difficulty bucket, also logged to
    TensorBoard as ``topology/eval_examples``). Returns the paths written."""
    written = []
    fixed = {name: results[name] for name in FIXED_BASELINES if name in results}
    best = max(fixed, key=lambda name: fixed[name]["reward"]) if fixed else None
    if curves:
        columns = {key: [point[key] for point in curves] for key in curves[0]}
        references = {} if best is None else {
            metric: {f"{best} (best fixed, held-out)": fixed[best][key]}
            for metric, key in (("reward", "reward"), ("accuracy", "accuracy"), ("tokens_per_task", "tokens_per_task"))}
        fig = plot_learning_curves(columns, title=f"QMIX training, {setting_name(cfg)} (means per {cfg.train.log_every} "
                                                  "episodes, epsilon-greedy)", references=references)
        written.append(save_figure(fig, out_dir / "learning_curves.png"))
    if learning_curve:
        fig = plot_sample_efficiency(learning_curve["points"], learning_curve["references"],
                                     title=f"Greedy QMIX on the first {learning_curve['episodes']} held-out episodes, "
                                           f"{setting_name(cfg)}")
        written.append(save_figure(fig, out_dir / "sample_efficiency.png"))
    shares = {name: results[name]["action_distribution_by_round"] for name in ("qmix", "qmix_last")
              if "action_distribution_by_round" in results.get(name, {})}
    if shares:
        fig = plot_action_distribution(shares, title=f"Actions per round on {results['qmix']['episodes']} held-out episodes")
        written.append(save_figure(fig, out_dir / "action_distribution.png"))
    if episodes:
        roles = [f"{p} ({r})" for p, r in zip(cfg.env.personas, cfg.env.roles)] if cfg.env.personas else list(cfg.env.roles)
        fig = draw_episodes(episodes, roles, cfg.env.adversarial_agents, title="Greedy QMIX on held-out episodes")
        written.append(save_figure(fig, out_dir / "topology_examples.png"))
        writer.add_image("topology/eval_examples", imread(written[-1])[..., :3], cfg.train.episodes, dataformats="HWC")
    return written


if __name__ == "__main__":
    sys.exit(run_main(main, PROG))
