"""Does the fit find teams it did not generate? Recovery of perturbed copies of the built-in profiles.

Issue 38. Each of :data:`TEAMS` is a built-in profile changed by :func:`perturb` (its own seed):
the agents' abilities and verbosities, every subject's offset moved and the
verifiabilities reshuffled among the subjects, conformity (w_peer, tau), recognition and trap pull
(rho, rho_v, theta, theta_v, trap_base), confidence, drift and token costs rescaled. Per team and
seed, traces are recorded the way the sim-to-real route records a real team
(:func:`topo_env.fitting.explore.record_exploration`: uniform random joint actions, the domain's rounds)
or, for the reasoning teams, with the probe protocol (:class:`agents_llm.probe.Prober` against the
simulated team), then fitted from the built-in profile (:func:`topo_env.fitting.fit.fit_records`) and
checked against the truth:

* every estimated parameter (status fitted, at bound or not identified) within 3 standard errors
  of the truth in the fit's terms (:func:`topo_env.fitting.fit_report.truth_values`) or within its
  tolerance (:func:`tolerance`);
* the fitted team's accuracy, tokens and reward on solo, full, star and debate within 2 standard
  errors of the true team's, on the traces' tasks (the SE combines the fitted team's, with the fit's
  uncertainty, and the true team's simulation SE).

    python -m experiments.fit_recovery --out runs/fit_recovery [--episodes 1000] [--seeds 0 1 2]
        [--probe-tasks 160] [--teams mmlu_pro humaneval ...]

prints, per team and trace source, the mean over seeds (with its SE) of the parameters checked, those
outside both 3 SE and tolerance, the largest |z|, and per topology the fitted and true rewards; it
writes everything to ``OUT/recovery.json``. ``tests/test_fit_recovery.py`` runs one seed of three cases
(one per domain and trace source) at :data:`TEST_EPISODES` episodes.
"""
from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from experiments.transfer import record_traces
from topo_env.frontends.env_config import EnvConfig
from topo_env.fitting.fit import fit_records, load_traces, write_profile
from topo_env.fitting.fit_check import TOPOLOGIES, predictive_check, topology_figures, trace_tasks
from topo_env.fitting.fit_report import ESTIMATED, FITTED, truth_values
from topo_env.sim.profiles import get_profile
from topo_env.engine.tasks import DEFAULT_ROUNDS

TEAMS: dict[str, int] = {"mmlu_pro": 1, "mmlu_pro_mixed": 2, "humaneval": 3, "livecodebench": 4, "aime25": 5}
PROBE_TEAMS = ("mmlu_pro", "mmlu_pro_mixed")  # the probe's answer formats need letter choices (reasoning)
TEST_EPISODES = 1000
PROBE_TASKS = 160  # 62 calls per task with 3 agents: about 10,000 calls, as many as TEST_EPISODES episodes
TRUTH_EPISODES = 20000  # per topology, the true team's figures
Z_PARAMETER, Z_TOPOLOGY = 3.0, 2.0
EXACT = ("sys_tokens", "header_tokens", "verdict_tokens")  # deterministic in the model: no z (their SE is ~0)
# Absolute tolerances at about 1,000 episodes (10,000 calls); a parameter passes within 3 SE or within these.
TOLERANCE: dict[str, float] = dict(
    alpha=0.4, beta=2.0, task_spread=0.5, blind_spread=0.5, debug_gain=0.8, trap_base=0.12, trap_slope=0.25,
    w_fresh=0.3, w_peer=0.12, rho=0.8, rho_v=1.0, theta=0.4, theta_v=0.8, tau=0.12, drift_cw=0.03, drift_wc=0.05,
    mu_correct=0.12, mu_wrong=0.12, kappa=0.35, sigma_conf=0.06, decide_tau=0.08, contradicted_weight=0.3,
    verify_pass_correct=0.05, verify_detect=0.1, p_wrote_code=0.1, content_mean=15.0, reason_mean=60.0,
    revisit=0.08, reemit=0.02, decide_factor=0.05, conflict=0.25, sys_tokens=2.0, header_tokens=2.0,
    verdict_tokens=3.0, diff_a=0.5, diff_b=0.5, task_tokens_mean=20.0, subject_offset=0.6, skill_dev=0.6,
    verifiability=0.5, verbosity=0.1, p_invent=0.03, p_invent_decide=0.05, p_unreadable=0.01,
    p_unreadable_decide=0.03)


def tolerance(name: str) -> float:
    """The absolute tolerance of parameter ``name`` (per-subject ones by their prefix)."""
    return TOLERANCE[name.split("[")[0]]


def perturb(name: str, seed: int) -> tuple[object, object]:
    """(the built-in profile ``name``, a perturbed copy of it) with changes drawn from ``seed``: each agent's
    ability moved by N(0, 0.35) and its verbosity scaled by 0.8..1.25 (its per-subject pattern of
    strengths, a draw per model name, stays: see "Limits" in docs/llm-teams.md), alpha moved
    by 0.25..0.5 logits either way, every subject's offset by N(0, 0.35), the verifiabilities permuted
    among the subjects (plus N(0, 0.15), clipped to [-1, 1]), w_peer x 0.6..1.8, tau x 0.7..1.4,
    rho + -0.2..0.4, rho_v and theta_v x 0.7..1.3, theta x 0.6..1.6, trap_base + -0.1..0.1, mu_correct
    and mu_wrong + -0.25..0.25, kappa x 0.7..1.3, drift_cw x 0.5..2, content_mean and reason_mean x
    0.7..1.4, sys_tokens + -40..40, revisit x 0.8..1.25. The copy draws its tasks as the built-in does."""
    base = get_profile(name)
    rng = np.random.default_rng(seed)
    u = lambda lo, hi: float(rng.uniform(lo, hi))  # noqa: E731
    team = tuple(replace(m, ability=m.ability + float(rng.normal(0, 0.35)), verbosity=m.verbosity * u(0.8, 1.25))
                 for m in base.team_models(3))
    perm = rng.permutation(len(base.subjects))
    verif = [s[3] for s in base.subjects]
    subjects = tuple((s[0], s[1], float(s[2] + rng.normal(0, 0.35)),
                      float(np.clip(verif[perm[k]] + rng.normal(0, 0.15), -1, 1))) for k, s in enumerate(base.subjects))
    truth = replace(
        base, name=f"{name}-perturbed-{seed}", task_set=base.task_set or base.name, team=team, subjects=subjects,
        alpha=base.alpha + float(rng.choice([-1, 1])) * u(0.25, 0.5), w_peer=base.w_peer * u(0.6, 1.8),
        tau=base.tau * u(0.7, 1.4), rho=base.rho + u(-0.2, 0.4), rho_v=base.rho_v * u(0.7, 1.3),
        theta=base.theta * u(0.6, 1.6), theta_v=base.theta_v * u(0.7, 1.3), trap_base=base.trap_base + u(-0.1, 0.1),
        mu_correct=base.mu_correct + u(-0.25, 0.25), mu_wrong=base.mu_wrong + u(-0.25, 0.25),
        kappa=base.kappa * u(0.7, 1.3), drift_cw=base.drift_cw * u(0.5, 2.0),
        content_mean=base.content_mean * u(0.7, 1.4), reason_mean=base.reason_mean * u(0.7, 1.4),
        sys_tokens=int(base.sys_tokens + rng.integers(-40, 41)), revisit=base.revisit * u(0.8, 1.25), source=None)
    return base, truth


def env_config(truth) -> EnvConfig:
    """The env the team is recorded and scored in: 3 agents, the domain's rounds, default reward."""
    return EnvConfig.from_dict({"n_agents": 3, "rounds": DEFAULT_ROUNDS[truth.domain], "profile": truth.task_set})


def record(truth_path: Path, truth, path: Path, episodes: int, seed: int) -> dict:
    """Exploration traces of the team in ``truth_path`` (the sim-to-real route's recording, the domain's rounds)."""
    return record_traces(path, str(truth_path), episodes, seed, None, DEFAULT_ROUNDS[truth.domain])


def probe(truth, path: Path, tasks: int, seed: int) -> int:
    """The probe protocol (:class:`agents_llm.probe.Prober`) run against the simulated ``truth`` on the
    first ``tasks`` train tasks of its task set; traces appended to ``path``. Returns the episodes."""
    from agents_llm.probe import ProbeOptions, Prober
    from topo_env.sim.team import SimTeamBackend
    from topo_env.engine.traces import append_trace

    roles = env_config(truth).roles
    team = SimTeamBackend(truth, roles=roles)
    prober = Prober({truth.domain: team}, ProbeOptions(seed=seed), model=f"sim:{truth.name}")
    episodes = 0
    for index in range(tasks):
        for rec in asyncio.run(prober.run_task(team.task_at("train", index))):
            append_trace(path, rec)
            episodes += 1
    return episodes


def recovery(base, truth, records: list[dict], seed: int, draws: int | None = None) -> dict:
    """Fit ``records`` from ``base`` and compare with ``truth``: per estimated parameter its value, SE,
    status, the truth and whether it passes; per fixed topology the fitted and true figures."""
    fitted = fit_records(records, base, seed=seed)
    config = env_config(truth)
    check = predictive_check(fitted, config, seed=seed, **({} if draws is None else {"draws": draws}))
    expected = truth_values(truth, base, fitted.report, fitted.data.n_agents)
    params = []
    for r in fitted.report["parameters"]:
        name = r["parameter"]
        if r["status"] not in ESTIMATED or name not in expected:
            continue
        diff = r["value"] - expected[name]
        z = diff / r["se"] if r["se"] else None
        params.append({"parameter": name, "value": r["value"], "se": r["se"], "status": r["status"],
                       "calls": r["calls"], "truth": expected[name], "z": z,
                       "ok": bool((z is not None and abs(z) <= Z_PARAMETER) or abs(diff) <= tolerance(name))})
    tasks = trace_tasks(fitted.data, fitted.profile)
    true = topology_figures(truth, tasks, 3, config.rounds, tuple(config.roles), config, TRUTH_EPISODES,
                            np.random.default_rng(seed + 1000))
    topologies = []
    for row in check["topologies"]:
        name, out = row["topology"], {"topology": row["topology"]}
        for what in ("accuracy", "tokens", "reward"):
            f, t = row["fitted"][what], true[name][what]
            z = (f["mean"] - t["mean"]) / float(np.hypot(f["se"], t["se"]))
            out[what] = {"fitted": f, "truth": t, "z": z, "ok": bool(abs(z) <= Z_TOPOLOGY)}
        topologies.append(out)
    return {"parameters": params, "topologies": topologies, "check": check, "notes": fitted.report["notes"],
            "profile": fitted.profile}


def run_one(team: str, source: str, seed: int, out: Path, episodes: int, probe_tasks: int) -> dict:
    """Record (or probe) with seed 100 x the team's perturbation seed + ``seed``, fit and check one perturbed
    team; the fit's and the check's seed is ``seed``."""
    base, truth = perturb(team, TEAMS[team])
    folder = out / f"{team}-{source}-seed{seed}"
    folder.mkdir(parents=True, exist_ok=True)
    truth_path = folder / "truth.yaml"
    truth = write_profile(truth, truth_path)
    traces = folder / "traces.jsonl"
    traces.unlink(missing_ok=True)
    trace_seed = 100 * TEAMS[team] + seed  # every team's traces their own (tasks, actions, noise)
    if source == "explore":
        made = record(truth_path, truth, traces, episodes, trace_seed)
    else:
        made = {"episodes": probe(truth, traces, probe_tasks, trace_seed)}
    result = recovery(base, truth, load_traces([traces]), seed)
    write_profile(result.pop("profile"), folder / "fitted.yaml")
    result.update(team=team, source=source, seed=seed, recorded=made, rounds=env_config(truth).rounds)
    return result


def summary(results: list[dict]) -> list[dict]:
    """Per team and source: means over seeds (with SE) of the parameters checked, failing, largest |z|,
    and per topology the fitted and true rewards."""
    from learners.seeds import mean_and_se

    rows = []
    for key in sorted({(r["team"], r["source"]) for r in results}):
        group = [r for r in results if (r["team"], r["source"]) == key]
        fitted = [[p for p in r["parameters"] if p["status"] == FITTED] for r in group]
        row = {"team": key[0], "source": key[1], "seeds": [r["seed"] for r in group],
               "fitted": mean_and_se([len(f) for f in fitted]),
               "flagged": mean_and_se([len(r["parameters"]) - len(f) for r, f in zip(group, fitted)]),
               "failing": mean_and_se([sum(not p["ok"] for p in f) for f in fitted]),
               "max_abs_z": mean_and_se([max(abs(p["z"]) for p in f if p["parameter"].split("[")[0] not in EXACT)
                                         for f in fitted]),
               "failing_names": sorted({p["parameter"] for f in fitted for p in f if not p["ok"]}),
               "flagged_names": sorted({p["parameter"].split("[")[0] for r in group for p in r["parameters"]
                                        if p["status"] != FITTED})}
        for t in TOPOLOGIES:
            rr = [next(x for x in r["topologies"] if x["topology"] == t)["reward"] for r in group]
            row[t] = {"fitted": mean_and_se([x["fitted"]["mean"] for x in rr]),
                      "truth": mean_and_se([x["truth"]["mean"] for x in rr]),
                      "z": mean_and_se([x["z"] for x in rr]), "outside_2se": sum(not x["ok"] for x in rr)}
        rows.append(row)
    return rows


# parameter group: (its parameters' prefixes, a target standard error) for the calls-per-group table
TARGETS: dict[str, tuple[tuple[str, ...], float]] = {
    "ability (alpha)": (("alpha",), 0.1), "subject offsets": (("subject_offset",), 0.25),
    "agent skill deviations": (("skill_dev",), 0.25), "difficulty slope (beta)": (("beta",), 0.5),
    "task latent (task_spread)": (("task_spread",), 0.15), "trap (trap_base, trap_slope)": (("trap_base", "trap_slope"), 0.05),
    "conformity (w_peer)": (("w_peer",), 0.03), "anchoring (w_fresh)": (("w_fresh",), 0.1),
    "update noise (tau)": (("tau",), 0.02), "recognition, pull (rho, theta)": (("rho", "theta"), 0.15),
    "their slopes (rho_v, theta_v)": (("rho_v", "theta_v"), 0.3), "verifiabilities": (("verifiability",), 0.15),
    "drift (drift_cw, drift_wc)": (("drift_cw", "drift_wc"), 0.02), "confidence (mu_correct, mu_wrong)": (("mu_correct", "mu_wrong"), 0.05),
    "decision noise (decide_tau)": (("decide_tau",), 0.03), "agent verbosities": (("verbosity",), 0.05),
}


def calls_table(results: list[dict], episodes: int) -> list[dict]:
    """Per parameter group, over the exploration results of 3-agent, 2-round teams: the median standard
    error at ``episodes`` episodes, the median calls that informed one parameter of the group, and the
    episodes (and calls) that bring the median SE to the group's target (SE falls as 1 / sqrt(calls))."""
    rows = []
    runs = [r for r in results if r["source"] == "explore" and r["rounds"] == 2]
    per_episode = float(np.mean([r["recorded"]["calls"] / r["recorded"]["episodes"] for r in runs]))
    for group, (prefixes, target) in TARGETS.items():
        ps = [p for r in runs for p in r["parameters"]
              if p["parameter"].split("[")[0] in prefixes and p["status"] == "fitted" and p["se"]]
        if not ps:
            continue
        se = float(np.median([p["se"] for p in ps]))
        need = int(np.ceil(episodes * (se / target) ** 2))
        rows.append({"group": group, "target SE": target, f"SE at {episodes} episodes": round(se, 4),
                     "informing calls": int(np.median([p["calls"] for p in ps])), "episodes for target": need,
                     "calls for target": int(round(need * per_episode, -2))})
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="runs/fit_recovery")
    p.add_argument("--episodes", type=int, default=TEST_EPISODES)
    p.add_argument("--probe-tasks", type=int, default=PROBE_TASKS)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--teams", nargs="+", default=list(TEAMS), choices=list(TEAMS))
    p.add_argument("--no-probe", action="store_true")
    args = p.parse_args(argv)
    out = Path(args.out)
    results = []
    for team in args.teams:
        sources = ["explore"] + (["probe"] if team in PROBE_TEAMS and not args.no_probe else [])
        for source in sources:
            for seed in args.seeds:
                results.append(run_one(team, source, seed, out, args.episodes, args.probe_tasks))
    rows = summary(results)
    calls = calls_table(results, args.episodes)
    (out / "recovery.json").write_text(json.dumps({"results": results, "summary": rows, "calls": calls}, indent=1,
                                                  default=float))
    print(f"recovery of perturbed teams: {args.episodes} exploration episodes or {args.probe_tasks} probe tasks, "
          f"seeds {args.seeds}; mean (SE) over seeds")
    fmt = lambda m: f"{m['mean']:.3f} ({m['se']:.3f})" if m["se"] is not None else f"{m['mean']:.3f}"  # noqa: E731
    for r in rows:
        print(f"{r['team']:<16}{r['source']:<8} fitted {fmt(r['fitted'])}, outside 3 SE and tolerance "
              f"{fmt(r['failing'])} {r['failing_names']}, largest |z| {fmt(r['max_abs_z'])}; at bound or not "
              f"identified {fmt(r['flagged'])} {r['flagged_names']}")
        for t in TOPOLOGIES:
            x = r[t]
            print(f"    {t:<7} reward fitted {fmt(x['fitted'])}  true {fmt(x['truth'])}  z {fmt(x['z'])}  "
                  f"outside 2 SE in {x['outside_2se']} of {len(r['seeds'])} seeds")
    if calls:
        from topo_env.engine.cli import format_table

        print("calls a fit needs per parameter group (3 agents, 2 rounds, uniform random exploration):")
        print(format_table(calls, tuple(calls[0])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
