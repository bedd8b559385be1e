"""Does the fit predict teams it has never seen, from traces that hold no hidden task variable? (issue 48)

Each held-back team is the default team (``mmlu_pro``) moved by :func:`held_back_team` further than the
recovery study's :func:`experiments.fit_recovery.perturb` moves its teams: on top of that, the difficulty
slope beta, the task and blind-spot spreads, the trap slope, the anchoring and the decision node's and
self-revision's parameters. Per team and seed: about ``--real-calls`` calls of exploration (the sim-to-real
route's recorder, :func:`topo_env.fitting.explore.record_exploration`, on its pool of
:data:`studies.sim2real.DISTINCT_TASKS` times the episodes; the traces hold what a real team's would, the
truth goes to its own file), the fit from the default start (the built-in ``mmlu_pro``), then
every fixed topology played by the fitted team and by the true one on the same ``--episodes`` held-out
episodes (common random numbers, the batch simulator): the accuracy each predicts, the difference, its
paired standard error, and whether the fitted team orders every pair of topologies that differ by more
than a point as the true team does. The fitted task difficulties are compared with the truth kept apart.

    python -m experiments.held_back --out runs/held_back --teams 11 12 --seeds 0 1 2 [--explore-fixed P]

prints a table per team and writes ``OUT/held_back.json``.
"""
from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

import topo_env
from experiments.fit_recovery import perturb
from studies.sim2real import DISTINCT_TASKS, max_episode_calls
from topo_env.engine.traces import read_truth
from topo_env.fitting.explore import record_exploration
from topo_env.fitting.fit import fit_records, load_traces, write_profile
from topo_env.references.baselines import FIXED_BASELINES, open_loop_actions
from topo_env.sim.profiles import get_profile
from topo_env.frontends.vector_env import SimVectorEnv

BASE = "mmlu_pro"


def held_back_team(seed: int):
    """A team the fit has never seen: :func:`perturb` of the default team, then beta x 0.6..1.5,
    task_spread and blind_spread x 0.6..1.6, trap_slope + -0.15..0.2, w_fresh x 0.6..1.6, decide_tau and
    contradicted_weight x 0.6..1.6, drift_wc x 0.5..2, all drawn from ``seed``."""
    _, team = perturb(BASE, seed)
    rng = np.random.default_rng(10_000 + seed)
    u = lambda lo, hi: float(rng.uniform(lo, hi))  # noqa: E731
    return replace(team, name=f"held-back-{seed}", beta=team.beta * u(0.6, 1.5),
                   task_spread=team.task_spread * u(0.6, 1.6), blind_spread=team.blind_spread * u(0.6, 1.6),
                   trap_slope=max(0.0, team.trap_slope + u(-0.15, 0.2)), w_fresh=team.w_fresh * u(0.6, 1.6),
                   decide_tau=team.decide_tau * u(0.6, 1.6),
                   contradicted_weight=team.contradicted_weight * u(0.6, 1.6), drift_wc=team.drift_wc * u(0.5, 2.0))


def fixed_accuracies(profile_path: Path, episodes: int, seed: int) -> dict[str, np.ndarray]:
    """Per fixed topology the (episodes,) accuracy of the team of ``profile_path`` on held-out episodes
    ``seed + k`` (the same tasks and noise for any profile of the same task set)."""
    env = topo_env.parallel_env(profile=str(profile_path), rounds=2)
    config = env.unwrapped.config
    venv = SimVectorEnv(config, encoder=env.unwrapped.encoder)
    drawn, _ = venv.sample_episodes(range(seed, seed + episodes), "eval")
    env.close()
    return {name: venv.sim.run(open_loop_actions(name, config.n_agents, config.rounds, config.roles),
                               drawn.tasks, drawn.noise, drawn.adversaries).accuracy
            for name in FIXED_BASELINES}


def run_one(team_seed: int, seed: int, out: Path, real_calls: int, episodes: int, explore_fixed: float = 0.0) -> dict:
    folder = out / f"team{team_seed}-seed{seed}"
    folder.mkdir(parents=True, exist_ok=True)
    truth = write_profile(held_back_team(team_seed), folder / "truth.yaml")
    traces, hidden = folder / "traces.jsonl", folder / "hidden.jsonl"
    traces.unlink(missing_ok=True), hidden.unlink(missing_ok=True)
    env = topo_env.parallel_env(profile=str(folder / "truth.yaml"), rounds=2)
    try:
        recorded = real_calls // max_episode_calls(3, 2)  # as sim-to-real's recording affords them
        made = record_exploration(env, traces, recorded, seed=1000 * team_seed + seed, pool=DISTINCT_TASKS * recorded,
                                  truth=hidden, fixed_share=explore_fixed)
    finally:
        env.close()
    fitted = fit_records(load_traces([traces]), get_profile(BASE), seed=seed)
    write_profile(fitted.profile, folder / "fitted.yaml")
    truth_of = read_truth(hidden)
    d_true = np.array([truth_of[t.key]["difficulty"] for t in fitted.data.tasks])
    trap_hits = [t.trap == truth_of[t.key]["trap"] for t in fitted.data.tasks if t.trap is not None]
    real = fixed_accuracies(folder / "truth.yaml", episodes, 7_000_000 + seed)
    pred = fixed_accuracies(folder / "fitted.yaml", episodes, 7_000_000 + seed)
    rows = []
    for name in FIXED_BASELINES:
        diff = pred[name] - real[name]
        rows.append({"topology": name, "real": float(real[name].mean()), "predicted": float(pred[name].mean()),
                     "difference": float(diff.mean()), "se": float(diff.std(ddof=1) / np.sqrt(len(diff)))})
    wrong_order = [(a["topology"], b["topology"]) for a in rows for b in rows
                   if a["real"] - b["real"] > 0.01 and a["predicted"] <= b["predicted"]]
    return {"team": team_seed, "seed": seed, "recorded": made, "rows": rows, "wrong_order": wrong_order,
            "max_abs_difference": max(abs(r["difference"]) for r in rows),
            "difficulty_correlation": float(np.corrcoef(d_true, fitted.data.difficulty)[0, 1]),
            "trap_hits": float(np.mean(trap_hits)) if trap_hits else None,
            "truth": {k: getattr(truth, k) for k in ("alpha", "beta", "task_spread", "blind_spread", "trap_base",
                                                      "trap_slope", "w_fresh", "w_peer", "decide_tau")},
            "fitted": {k: getattr(fitted.profile, k) for k in ("alpha", "beta", "task_spread", "blind_spread",
                                                               "trap_base", "trap_slope", "w_fresh", "w_peer",
                                                               "decide_tau")}}


def print_team(results: list[dict]) -> None:
    team = results[0]["team"]
    print(f"\nheld-back team {team}: accuracy of each fixed topology, real and predicted by the fitted team "
          f"(mean over seeds {[r['seed'] for r in results]}; per seed the paired SE of the difference)")
    print(f"{'topology':<12}{'real':>8}{'predicted':>11}{'difference':>12}{'SE over seeds':>15}")
    for k, name in enumerate(r["topology"] for r in results[0]["rows"]):
        real = np.array([r["rows"][k]["real"] for r in results])
        diff = np.array([r["rows"][k]["difference"] for r in results])
        se = diff.std(ddof=1) / np.sqrt(len(diff)) if len(diff) > 1 else results[0]["rows"][k]["se"]
        print(f"{name:<12}{real.mean():>8.4f}{real.mean() + diff.mean():>11.4f}{diff.mean():>+12.4f}{se:>15.4f}")
    for r in results:
        print(f"  seed {r['seed']}: largest |difference| {r['max_abs_difference']:.4f}; pairs out of order "
              f"{r['wrong_order'] or 'none'}; difficulty corr {r['difficulty_correlation']:.2f}; traps right "
              f"{r['trap_hits']:.2f}; {r['recorded']['calls']} calls")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.held_back", description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("runs/held_back"))
    parser.add_argument("--teams", type=int, nargs="+", default=[11, 12])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--real-calls", type=int, default=10_000)
    parser.add_argument("--episodes", type=int, default=20_000)
    parser.add_argument("--explore-fixed", type=float, default=0.0,
                        help="share of exploration episodes that play a fixed topology (record_exploration)")
    args = parser.parse_args(argv)
    results = []
    for team in args.teams:
        per_team = [run_one(team, seed, args.out, args.real_calls, args.episodes, args.explore_fixed)
                    for seed in args.seeds]
        print_team(per_team)
        results.extend(per_team)
    (args.out / "held_back.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
