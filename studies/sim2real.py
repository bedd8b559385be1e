"""From a real team to a learned controller on a budget of real LLM calls: the sim-to-real route.

    python train_qmix.py --config C.yaml --sim2real --real-calls 10000 --out DIR

``C.yaml``'s env is the real team: an LLM backend, or a simulated team standing in for one
(``env.profile: real.yaml``), whose parameters are never read for training: only its traces and
rewards, as with an LLM team. The route:

1. **record**: episodes of uniform random joint actions on the real team's train tasks
   (:func:`topo_env.fitting.explore.record_exploration`), as many as the budget allows (an episode
   makes at most ``2 N T + 1`` calls), into ``DIR/traces.jsonl``;
2. **fit** a simulated team to them (:func:`topo_env.fitting.fit.fit_traces`, from the domain's built-in
   profile), written to ``DIR/fitted.yaml``, its report and predictive check to
   ``DIR/fit_report.json``;
3. **train** at simulator scale on the fitted team (:func:`learners.training.train_and_evaluate`):
   ``configs/default.yaml``'s sections (teacher, batches, noise samples) with the real team's layout (agents, rounds, roles, reward,
   encoder), into ``DIR/sim_run`` (``--sim-set`` overrides them, ``--episodes`` its TD episodes);
4. **fine-tune** (``--finetune-calls C``): the one-episode loop on the real team from the sim run's
   networks within C more real calls, into ``DIR/finetune``;
5. **evaluate** the greedy policy on the real team's held-out tasks against every fixed topology
   (a simulated real team: also its headroom references, read for this score only).

``DIR/results.json`` holds ``sim2real`` (``real_calls``: every real call spent on training, at most
the budget; ``record``, ``fitted_profile``, ``fit``, ``sim_run``, ``finetune``, and
``predicted_vs_measured``: what the fitted team predicts for each fixed topology, from
:data:`PREDICTION_EPISODES` simulated held-out episodes, against what the real team scored) and
``eval`` / ``qmix_minus`` on the real team as a training run's results.json does.

    python -m studies.sim2real DIR      # the closing tables of a finished run again (from DIR/results.json)
"""
from __future__ import annotations

import dataclasses
import json
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import torch

from learners.config import DEFAULT_CONFIG, ExperimentConfig, load_experiment, with_overrides
from learners.runner import space_dims
from learners.training import RunOptions, train_and_evaluate
from learners.evaluation import (OBSERVATION_LAYOUT, QMIXPolicy, agent_from_checkpoint,
                                 held_out_comparison, layout_difference, load_checkpoint, score_on_simulator)
from topo_env.engine.cli import OneLineParser, RunError, closing_note, format_table, points, run_main, standard_error_note
from topo_env.references.baselines import BASELINES
from topo_env.engine.seeding import held_out_seed
from topo_env.frontends.env_config import EnvConfig
from topo_env.engine.config_checks import ConfigError
from topo_env.frontends.parallel_env import TopologyParallelEnv
from topo_env.fitting.explore import default_pool, record_exploration
from topo_env.fitting.fit import DEFAULT_BASE, fit_traces, write_profile

TEAM_KEYS = ("n_agents", "rounds", "roles", "personas", "encoder", "embed_dim", "w_acc", "w_tok", "max_tokens",
             "reward_mode", "target_rule", "adversarial_agents", "adversary_position", "n_adversaries",
             "disabled_actions")
"""The real team's env keys the simulated training copies: the episode, the reward and the observation layout."""
PROG = "python -m studies.sim2real"
PREDICTION_EPISODES = 20_000
"""Simulated held-out episodes per fixed topology behind the fitted team's predictions (their SE is
well under a point)."""
RECORD_CHUNK = 64
"""Exploration episodes recorded per call of record_exploration, the budget checked between calls."""


def max_episode_calls(n_agents: int, rounds: int) -> int:
    """The most LLM calls one episode can make: a draft and a revision per agent and round, and the
    decision node's."""
    return 2 * n_agents * rounds + 1


def record(real: ExperimentConfig, path: Path, budget: int, seed: int) -> dict:
    """Exploration episodes on the real team's train split until the next chunk could pass
    ``budget`` calls: chunks of at most :data:`RECORD_CHUNK` episodes on one task pool (tasks recur
    across chunks, so the fit sees several episodes of each). Returns episodes, calls, tokens."""
    bound = max_episode_calls(real.env.n_agents, real.env.rounds)
    pool = default_pool(max(1, budget // bound))
    env = TopologyParallelEnv(dataclasses.replace(real.env, split="train"))
    spent = {"episodes": 0, "calls": 0, "tokens": 0}
    try:
        for chunk in range(1 << 30):
            episodes = min(RECORD_CHUNK, (budget - spent["calls"]) // bound)
            if episodes < 1:
                break
            part = record_exploration(env, path, episodes, seed=seed * 1_000_003 + chunk, pool=pool)
            for key in spent:
                spent[key] += int(part[key])
    finally:
        env.close()
    return {**spent, "pool": pool, "max_calls_per_episode": bound}


def sim_training_config(real: ExperimentConfig, fitted: Path, episodes: int | None,
                        sim_sets: Sequence[str]) -> ExperimentConfig:
    """The training on the fitted team: the default config (:data:`learners.config.DEFAULT_CONFIG`)
    with the real team's layout (:data:`TEAM_KEYS`), the fitted profile and the real run's seed, then
    ``sim_sets`` (``section.key=value``) and ``episodes`` (its TD episodes; None: the default's)."""
    base = load_experiment(DEFAULT_CONFIG)
    team = {key: value for key, value in real.env.to_dict().items() if key in TEAM_KEYS}
    env = EnvConfig.from_dict({**base.env.to_dict(), **team, "backend": {"kind": "sim", "profile": str(fitted)}})
    cfg = with_overrides(dataclasses.replace(base, env=env, train=dataclasses.replace(base.train, seed=real.train.seed)),
                         sim_sets)
    return cfg if not episodes else dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, episodes=episodes))


def run(real: ExperimentConfig, out: Path, real_calls: int, finetune_calls: int = 0, sim_sets: Sequence[str] = (),
        sim_episodes: int | None = None, progress: bool = True) -> int:
    """The sim-to-real route (module docstring) for the real team ``real`` into ``out`` on
    ``real_calls`` real LLM calls, ``finetune_calls`` of them for fine-tuning; ``sim_sets`` and
    ``sim_episodes`` change the training on the fitted team. Returns 0."""
    seed, bound = real.train.seed, max_episode_calls(real.env.n_agents, real.env.rounds)
    finetune = int(finetune_calls or 0)
    record_budget = real_calls - finetune
    if record_budget < 4 * bound:
        raise ConfigError(f"--real-calls {real_calls} (with --finetune-calls {finetune}): recording needs at least "
                          f"{4 * bound} calls (4 episodes of at most {bound}); give a larger budget")
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()

    # 1. record the real team
    traces = out / "traces.jsonl"
    traces.unlink(missing_ok=True)  # a rerun records afresh
    say(f"sim2real: recording exploration episodes on the real team (budget {record_budget} calls)")
    recorded = record(real, traces, record_budget, seed)

    # 2. fit a simulated team to its traces
    domain = real.env.resolved_domain
    base = DEFAULT_BASE.get(domain, "mmlu_pro")
    say(f"sim2real: fitting a simulated team to {recorded['episodes']} episodes ({recorded['calls']} calls), "
        f"from the built-in {base!r}")
    profile, report = fit_traces(traces, base, seed=seed, config=simulated_team(real, base))
    fitted = out / "fitted.yaml"
    write_profile(profile, fitted)
    (out / "fit_report.json").write_text(json.dumps(report, indent=1, default=str))

    # 3. train at simulator scale on the fitted team
    sim_run = out / "sim_run"
    say(f"sim2real: training on the fitted team ({sim_run})")
    quiet = RunOptions(progress=False, pictures=False, source=f"the fitted team {fitted}")
    if train_and_evaluate(sim_training_config(real, fitted, sim_episodes, sim_sets), sim_run, quiet) != 0:
        raise RunError(f"training on the fitted team stopped early; its checkpoint is in {sim_run}")
    policy_run, finetune_report = sim_run, None

    # 4. fine-tune on the real team with the calls left (optional)
    if finetune:
        spare = max(1, real_calls - recorded["calls"] - bound)  # the episode that reaches the budget still finishes
        ft_run = out / "finetune"
        say(f"sim2real: fine-tuning on the real team within {spare} calls ({ft_run})")
        ft_cfg = dataclasses.replace(real, train=dataclasses.replace(real.train, episodes=spare, call_budget=spare))
        # stops at its call budget with a checkpoint (STOPPED), or ends at its episodes
        train_and_evaluate(ft_cfg, ft_run, dataclasses.replace(quiet, init_from=sim_run,
                                                               source=f"the real team, from {sim_run}"))
        ft = load_checkpoint(ft_run)[1]
        finetune_report = {"run": str(ft_run), "episodes": int(ft["episode"]), "calls": int(ft["calls_spent"])}
        policy_run = ft_run

    # 5. the greedy policy on the real team's held-out tasks
    say(f"sim2real: the greedy policy and every fixed topology on {real.train.eval_episodes} held-out tasks")
    results, paired, headroom = evaluate_on_real(real, policy_run, progress=progress)
    spent_calls = recorded["calls"] + (finetune_report["calls"] if finetune_report else 0)
    summary = {"config": real.to_dict(), "eval": {**results, **headroom}, "qmix_minus": paired,
               "sim2real": {"real_calls": spent_calls, "budget": real_calls, "record": recorded,
                            "fitted_profile": str(fitted), "fit_report": str(out / "fit_report.json"),
                            "fit": fit_summary(report), "sim_run": str(sim_run), "finetune": finetune_report,
                            "predicted_vs_measured": predicted_vs_measured(real, fitted, results),
                            "seconds": time.perf_counter() - started}}
    (out / "results.json").write_text(json.dumps(summary, indent=2, default=str))
    print_table(summary, real, out)
    return 0


def evaluate_on_real(real: ExperimentConfig, run: Path, progress: bool = True) -> tuple[dict, dict, dict]:
    """The greedy policy of the training run in ``run`` against every fixed topology on the real
    team's held-out tasks (:func:`learners.evaluation.held_out_comparison`): ``(results, paired,
    headroom)``. The run's network is built from its own config; it must read the real team's
    observations (:data:`learners.evaluation.OBSERVATION_LAYOUT`)."""
    run_cfg, checkpoint = load_checkpoint(run)
    differs = layout_difference(real, run_cfg, OBSERVATION_LAYOUT)
    if differs:
        raise ConfigError(f"the trained network does not read the real team's observations: {differs}")
    eval_env = TopologyParallelEnv(dataclasses.replace(real.env, split="eval"))
    agent = agent_from_checkpoint(checkpoint, run_cfg, space_dims(eval_env)[0])
    results, _, _, paired, headroom = held_out_comparison(real, [QMIXPolicy(agent, torch.device("cpu"))], eval_env,
                                                          progress=progress)
    return results, paired, headroom


def simulated_team(real: ExperimentConfig, profile: str | Path, split: str = "train") -> EnvConfig:
    """The real team's layout (agents, rounds, roles, reward, encoder) as a simulated team of ``profile``."""
    team = {k: v for k, v in real.env.to_dict().items() if k not in ("backend", "domain", "profile", "split", "render_mode")}
    return EnvConfig.from_dict({**team, "profile": str(profile), "split": split})


def predicted_vs_measured(real: ExperimentConfig, fitted: Path, measured: dict,
                          episodes: int = PREDICTION_EPISODES) -> list[dict]:
    """Per fixed topology (and the random policy) in ``measured`` (the real team's held-out
    figures): the fitted team's accuracy and tokens per task over ``episodes`` simulated held-out
    episodes against the real team's, the standard error of the difference (both samples'), and
    ``miss``: the difference is beyond 2 SE."""
    env = TopologyParallelEnv(simulated_team(real, fitted, split="eval"))
    try:
        predicted, _ = score_on_simulator(env, episodes, held_out_seed(real.train.seed), progress=False,
                                          references=False)
    finally:
        env.close()
    rows = []
    for name in BASELINES:
        if name not in measured:
            continue
        p, n, q = measured[name]["accuracy"], measured[name]["episodes"], predicted[name]["accuracy"]
        se = math.sqrt(p * (1 - p) / max(n - 1, 1) + q * (1 - q) / (episodes - 1))
        rows.append({"policy": name, "predicted_accuracy": q, "measured_accuracy": p, "se": se,
                     "difference": p - q, "miss": abs(p - q) > 2 * se,
                     "predicted_tokens": predicted[name]["tokens_per_task"],
                     "measured_tokens": measured[name]["tokens_per_task"]})
    return rows


def fit_summary(report: dict) -> dict:
    """What results.json keeps of the fit's report: parameters per status, and the check's fixed
    topologies (fitted team against the traces)."""
    statuses: dict[str, int] = {}
    for row in report.get("parameters", []):
        statuses[row["status"]] = statuses.get(row["status"], 0) + 1
    return {"parameters": statuses, "check": (report.get("check") or {}).get("topologies")}


def print_table(summary: dict, real: ExperimentConfig, out: Path) -> None:
    """The closing table: every policy on the real team's held-out tasks, and what training spent."""
    results, paired = summary["eval"], summary["qmix_minus"]
    rows = [{"policy": name, "reward": v["reward"], "accuracy (pts)": points(v["accuracy"]),
             "tokens/task": v.get("tokens_per_task", ""),
             "qmix - policy (SE)": f"{paired[name]['mean']:+.4f} ({paired[name]['se']:.4f})" if name in paired else ""}
            for name, v in results.items() if isinstance(v, dict)]
    s2r = summary["sim2real"]
    print(f"\nThe real team's held-out tasks ({real.train.eval_episodes} episodes, N={real.env.n_agents}, "
          f"T={real.env.rounds}):")
    print(format_table(rows, ("policy", "reward", "accuracy (pts)", "tokens/task", "qmix - policy (SE)")))
    if results.get("headroom_share") is not None:
        print(f"headroom share on the real team: {results['headroom_share']:+.2f} (headroom {results['headroom']:+.4f})")
    notes = [f"real LLM calls spent on training: {s2r['real_calls']} of {s2r['budget']} ({s2r['record']['calls']} recording "
             f"{s2r['record']['episodes']} exploration episodes"
             + (f", {s2r['finetune']['calls']} fine-tuning" if s2r["finetune"] else "") + "); the held-out evaluation's "
             "calls are not training spend.", standard_error_note("qmix - policy (SE)")]
    prediction = s2r.get("predicted_vs_measured")
    if prediction:
        print("\nThe fitted simulated team's prediction for each fixed topology against the real team (accuracy in "
              "points; SE of the difference, both samples):")
        print(format_table([{"policy": r["policy"], "predicted": points(r["predicted_accuracy"]),
                             "measured": points(r["measured_accuracy"]),
                             "measured - predicted (SE)": f"{100 * r['difference']:+.2f} ({100 * r['se']:.2f})",
                             "beyond 2 SE": "yes" if r["miss"] else "no",
                             "tokens/task predicted": f"{r['predicted_tokens']:.0f}",
                             "tokens/task measured": f"{r['measured_tokens']:.0f}"} for r in prediction],
                           ("policy", "predicted", "measured", "measured - predicted (SE)", "beyond 2 SE",
                            "tokens/task predicted", "tokens/task measured")))
    print("\n" + closing_note(f"sim2real from {real.env.team_label}",
                              notes, [("results", out / "results.json"), ("fitted team", Path(s2r["fitted_profile"])),
                                      ("fit report", Path(s2r["fit_report"])), ("training run", Path(s2r["sim_run"]))]))


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def show(argv: Sequence[str] | None = None) -> int:
    """``python -m studies.sim2real DIR``: the closing tables of a finished run, from
    ``DIR/results.json``; a run from before the prediction table gets it computed and saved."""
    parser = OneLineParser(prog=PROG, description="The closing tables of a finished --sim2real run.")
    parser.add_argument("run", help="the run's --out folder (holds results.json)")
    out = Path(parser.parse_args(argv).run)
    if not (out / "results.json").is_file():
        raise ConfigError(f"{out}: no results.json there; give the --out folder of a finished --sim2real run")
    summary = json.loads((out / "results.json").read_text())
    real = ExperimentConfig.from_dict(summary["config"])
    s2r = summary["sim2real"]
    if "predicted_vs_measured" not in s2r:
        s2r["predicted_vs_measured"] = predicted_vs_measured(real, Path(s2r["fitted_profile"]), summary["eval"])
        (out / "results.json").write_text(json.dumps(summary, indent=2, default=str))
    print_table(summary, real, out)
    return 0


if __name__ == "__main__":
    sys.exit(run_main(show, PROG))
