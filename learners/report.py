"""What a training run reports (:mod:`learners.training`): the log windows and the learning curve
during training (TensorBoard), then the held-out evaluation of the trained network against every
fixed topology, results.json, the pictures and the closing table."""
from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import NamedTuple

import numpy as np
from matplotlib.image import imread
from torch.utils.tensorboard import SummaryWriter

from learners.batch_runner import BatchStats
from learners.config import ExperimentConfig
from learners.evaluation import QMIXPolicy, held_out_comparison
from learners.training_run import TrainingRun
from topo_env.engine.backend_registry import BackendFailed, BackendUnavailable
from topo_env.engine.cli import RunError, closing_note, format_table, points, standard_error_note
from topo_env.engine.user_files import write_text_atomically
from topo_env.frontends.comm_actions import N_ACTIONS
from topo_env.frontends.plots import (draw_episodes, plot_action_distribution, plot_learning_curves,
                                      plot_sample_efficiency, save_figure)
from topo_env.references.baselines import FIXED_BASELINES

TABLE_COLUMNS = ("policy", "reward", "accuracy (pts)", "tokens/task", "density", "qmix - policy (SE)")
"""The closing table's columns."""


# -- during training ------------------------------------------------------------------------------


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


class LogWindow:
    """The training episodes' figures (``stats``) and the learner's losses (``losses``) since the
    last log point; :meth:`log` writes them (:func:`log_window`, and the progress bar's figures)
    and starts a new window. ``pending``: a run record's ``window`` (``{"stats", "losses"}``),
    kept in place, so that a checkpoint holds the window and a resumed run goes on with it."""

    def __init__(self, writer: SummaryWriter, rounds: int, bar, pending: dict[str, list] | None = None):
        self.writer, self.rounds, self.bar = writer, rounds, bar
        pending = pending if pending is not None else {"stats": [], "losses": []}
        # the run record's lists themselves, so that a checkpoint saves the window as it stands
        self.stats: list[BatchStats] = pending["stats"]
        self.losses: list[dict] = pending["losses"]

    def log(self, epsilon: float, step: int) -> dict:
        """Log the window at episode ``step``; returns its learning-curve point (:func:`log_window`)."""
        point = log_window(self.writer, self.stats, self.losses, epsilon, step, self.rounds)
        rewards_seen = np.concatenate([w.reward for w in self.stats])
        self.bar.set_postfix(reward=f"{rewards_seen.mean():.3f}",
                             acc=f"{np.concatenate([w.accuracy for w in self.stats]).mean():.2f}",
                             tokens=f"{np.concatenate([w.tokens for w in self.stats]).mean():.0f}", eps=f"{epsilon:.2f}")
        self.stats.clear()
        self.losses.clear()
        return point


def curve_episodes(cfg: ExperimentConfig) -> int:
    """The learning curve's episodes: the first ``train.curve_episodes`` of the held-out ones."""
    return min(cfg.train.curve_episodes, cfg.train.eval_episodes)


def add_curve_point(run: TrainingRun, episode: int, figures: dict) -> None:
    """Record the learning curve's point after ``episode`` training episodes (``figures``: the
    greedy policy's on the curve's episodes) with the tokens and calls spent so far, also in
    TensorBoard (``held_out/reward``, and ``held_out/reward_by_calls`` against the calls)."""
    spent = run.record.spent
    run.writer.add_scalar("held_out/reward", figures["reward"], episode)
    run.writer.add_scalar("held_out/reward_by_calls", figures["reward"], spent["calls"])
    run.record.held_out_curve.append({"episode": episode, "calls": spent["calls"], "tokens": spent["tokens"],
                                      "reward": figures["reward"], "accuracy": figures["accuracy"],
                                      "tokens_per_task": figures["tokens_per_task"]})


# -- after training -------------------------------------------------------------------------------


class HeldOut(NamedTuple):
    """The held-out comparison (:func:`learners.evaluation.held_out_comparison`)."""
    results: dict
    traces: dict
    rewards: dict
    paired: dict
    headroom: dict


def evaluated_policies(run: TrainingRun) -> list[QMIXPolicy]:
    """``qmix``: the network that validated best (with validation), else the last one; and, where
    those differ, ``qmix_last``: the last one (what validation gained, on the same episodes)."""
    best, learner = run.record.validation["best"], run.learner
    if best is None or best["episode"] == run.cfg.train.episodes:
        return [QMIXPolicy(learner.agent, run.device)]
    policy_agent = copy.deepcopy(learner.agent)
    policy_agent.load_state_dict(best["agent"])
    return [QMIXPolicy(policy_agent, run.device), QMIXPolicy(learner.agent, run.device, name="qmix_last")]


def evaluate_held_out(run: TrainingRun, progress: bool = True) -> HeldOut:
    """The evaluated policies (:func:`evaluated_policies`), every baseline and the references on
    the same held-out episodes; a backend that fails on the way is a one-line RunError."""
    try:
        return HeldOut(*held_out_comparison(run.cfg, evaluated_policies(run), run.eval_envs[0], run.eval_envs[1:],
                                            progress=progress))
    except BackendUnavailable:
        raise
    except BackendFailed as err:
        raise RunError(f"training finished and its checkpoint is in {run.out_dir}, but the held-out evaluation failed "
                       f"({err}): rerun it with --resume {run.out_dir} once the backend serves again") from None


def results_summary(run: TrainingRun, held_out: HeldOut, init_from: str | Path | None = None) -> dict:
    """results.json: ``config``, ``eval`` (every policy's figures and the headroom), ``qmix_minus``
    (paired differences), ``train`` (time, spend, teacher, log windows), and where they ran
    ``learning_curve`` and ``validation``."""
    cfg, record = run.cfg, run.record
    spent, seconds = record.spent, run.seconds
    summary = {"config": cfg.to_dict(), "eval": {**held_out.results, **held_out.headroom}, "qmix_minus": held_out.paired,
               "train": {"episodes": cfg.train.episodes, "seconds": seconds, "updates": run.learner.updates,
                         "time_split": {**run.time_split, "other": seconds - sum(run.time_split.values())},
                         "tokens": spent["tokens"], "calls": spent["calls"],
                         "simulator_episodes": spent["simulator_episodes"], "teacher": record.teacher,
                         "curves": record.curves, **({"init_from": str(init_from)} if init_from else {})}}
    if record.held_out_curve:
        episodes = curve_episodes(cfg)
        summary["learning_curve"] = {
            "every": cfg.train.curve_every, "episodes": episodes, "points": record.held_out_curve,
            # the references on the curve's own episodes (the first of the held-out ones)
            "references": {name: float(held_out.rewards[name][:episodes].mean()) for name in ("best_fixed", "adaptive")
                           if name in held_out.rewards}}
    if cfg.train.validate_every:
        validation = record.validation
        summary["validation"] = {"every": cfg.train.validate_every, "episodes": cfg.train.validate_episodes,
                                 "history": validation["history"], "selected_episode": validation["best"]["episode"],
                                 "selected_reward": validation["best"]["reward"]}
    return summary


def save_results(run: TrainingRun, held_out: HeldOut, init_from: str | Path | None = None,
                 pictures: bool = True) -> list[Path]:
    """Write ``results.json`` (:func:`results_summary`) and, with ``pictures``, the pictures
    (:func:`write_pictures`) into ``run.out_dir``, then close the TensorBoard writer. Returns the
    pictures written."""
    summary = results_summary(run, held_out, init_from)
    write_text_atomically(run.out_dir / "results.json", json.dumps(summary, indent=2))
    pictures = [] if not pictures else write_pictures(run.out_dir, run.cfg, run.record.curves, held_out.results,
                                                          held_out.traces["qmix"][:12], run.writer,
                                                          summary.get("learning_curve"))
    run.writer.close()
    return pictures


def write_pictures(out_dir: Path, cfg: ExperimentConfig, curves: list[dict], results: dict, episodes: list,
                   writer: SummaryWriter, learning_curve: dict | None = None) -> list[Path]:
    """PNGs of a finished run in ``out_dir``: ``sample_efficiency.png`` (with ``train.curve_every``:
    held-out reward against training episodes and LLM calls), ``learning_curves.png`` (the log windows' means;
    reference lines at the held-out figures of the top-scoring topology of :data:`FIXED_BASELINES`,
    not the table's ``best_fixed``, which is a searched joint-action sequence; only when at least one
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
            metric: {f"{best} (top fixed topology, held-out)": fixed[best][key]}
            for metric, key in (("reward", "reward"), ("accuracy", "accuracy"), ("tokens_per_task", "tokens_per_task"))}
        fig = plot_learning_curves(columns, title=f"QMIX training, {cfg.env.team_label} (means per {cfg.train.log_every} "
                                                  "episodes, epsilon-greedy)", references=references)
        written.append(save_figure(fig, out_dir / "learning_curves.png"))
    if learning_curve:
        fig = plot_sample_efficiency(learning_curve["points"], learning_curve["references"],
                                     title=f"Greedy QMIX on the first {learning_curve['episodes']} held-out episodes, "
                                           f"{cfg.env.team_label}")
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


def print_report(run: TrainingRun, held_out: HeldOut, pictures: list[Path], source: str,
                 trace_out: str | Path | None = None) -> None:
    """The closing table (every policy on the held-out episodes, with QMIX's paired difference to
    each), the headroom share, which network was evaluated, and every file the run wrote
    (``source``: where the config came from; ``trace_out``: the training episodes' traces)."""
    cfg, out_dir, paired = run.cfg, run.out_dir, held_out.paired
    n, rounds, headroom = cfg.env.n_agents, cfg.env.rounds, held_out.headroom
    rows = [{"policy": k, "reward": v["reward"], "accuracy (pts)": points(v["accuracy"]),
             "tokens/task": v.get("tokens_per_task", ""), "density": v.get("density", ""),
             "qmix - policy (SE)": f"{paired[k]['mean']:+.4f} ({paired[k]['se']:.4f})" if k in paired else ""}
            for k, v in held_out.results.items()]
    print(f"\nHeld-out evaluation ({cfg.train.eval_episodes} episodes, {cfg.env.team_label}, N={n}, T={rounds}):")
    print(format_table(rows, TABLE_COLUMNS))
    if headroom.get("headroom_share") is not None:
        print(f"headroom share: (qmix - best_fixed) / (adaptive - best_fixed) = {headroom['headroom_share']:+.2f} "
              f"(headroom {headroom['headroom']:+.4f}; topo_env/references/headroom.py)")
    if cfg.train.validate_every:
        validation = run.record.validation
        best = validation["best"]
        print(f"qmix: the network of episode {best['episode']} (best of {len(validation['history'])} validation "
              f"checks, reward {best['reward']:.4f} on {cfg.train.validate_episodes} train-split episodes)"
              + ("; qmix_last: the network at the end of training" if "qmix_last" in held_out.results else ""))
    notes = [f"reward = {cfg.env.w_acc:g} x accuracy - {cfg.env.w_tok:g} x min(tokens / {cfg.env.max_tokens}, 1) per "
             "episode: higher is better; accuracy in points (0-100).",
             standard_error_note("qmix - policy (SE)") + " Above 0: QMIX scored higher."]
    written = [("results", out_dir / "results.json"), ("config", out_dir / "config.json"),
               ("checkpoint (continue or evaluate it: --resume / python -m studies.robustness --checkpoint)",
                out_dir / "checkpoint.pt"),
               ("TensorBoard logs (tensorboard --logdir)", out_dir)] + [("picture", p) for p in pictures]
    if trace_out:
        written.append(("training episodes' traces (JSONL, topo_env/engine/traces.py)", Path(trace_out)))
    print("\n" + closing_note(f"{source} on {cfg.env.team_label} (N={n}, T={rounds}, {cfg.train.episodes} training "
                              f"episodes, seed {cfg.train.seed})", notes, written))
