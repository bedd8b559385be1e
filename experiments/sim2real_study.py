"""Issue 35, section 3: the sim-to-real route on real teams that are perturbed copies of built-in profiles.

For each team and seed: a perturbed copy of the built-in profile (``experiments.fit_recovery.perturb``:
abilities, subject offsets, permuted verifiabilities, conformity, trap pull, confidence, tokens) is
written to a profile file and stands in for the real team; the sim-to-real route
(:func:`studies.sim2real.run`, what ``python train_qmix.py --sim2real --real-calls N`` runs) records it, fits a simulated team, trains on that and scores the greedy policy on
the real team's held-out tasks against its best fixed sequence and its adaptive reference. The
route never reads the real team's parameters for training (only traces); the references are the
real team's, for scoring.

    python -m experiments.sim2real_study --teams mmlu_pro --seeds 0 1 2 --real-calls 10000 --out runs/sim2real

Prints per team and seed the real calls spent, QMIX, best_fixed, adaptive and the headroom share,
then the means over seeds with standard errors, and the fitted parameters furthest from the truth
(in their standard errors) where a share falls short of 0.5. Writes ``study.json`` in ``--out``.
"""
from __future__ import annotations

import argparse
import contextlib
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from experiments.fit_recovery import perturb
from learners.config import ExperimentConfig
from studies import sim2real
from topo_env.engine.cli import format_table
from topo_env.fitting.fit import write_profile
from topo_env.fitting.fit_report import truth_values

def run_one(team: str, seed: int, out: Path, real_calls: int, sim_sets: Sequence[str]) -> dict:
    """The route on the perturbed copy ``seed`` of ``team`` (its output in ``out/route.log``); returns
    its results.json (and the run's fitted-vs-true parameters)."""
    out.mkdir(parents=True, exist_ok=True)
    base, truth = perturb(team, 100 + seed)
    real = out / "real.yaml"
    write_profile(truth, real)
    config = ExperimentConfig.from_dict({"env": {"profile": str(real), "embed_dim": 512},
                                         "train": {"eval_episodes": 20000, "seed": seed}})
    with open(out / "route.log", "w") as log, contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        code = sim2real.run(config, out / "run", real_calls, sim_sets=sim_sets, progress=False)
    if code != 0:  # stopped (Ctrl-C): rerunning the study continues each route where it stopped
        raise SystemExit(f"the route of {team} seed {seed} stopped (exit {code}; {out / 'route.log'}); rerun to continue")
    result = json.loads((out / "run" / "results.json").read_text())
    report = json.loads((out / "run" / "fit_report.json").read_text())
    truths = truth_values(truth, base, report, 3)
    missed = []
    for row in report["parameters"]:
        if row["status"] != "fitted" or not row.get("se") or row["parameter"] not in truths:
            continue
        if abs(row["value"] - truths[row["parameter"]]) > 1e-6 * max(1.0, abs(truths[row["parameter"]])):  # equal ones are no miss
            missed.append((abs(row["value"] - truths[row["parameter"]]) / row["se"], row["parameter"], row["value"],
                           truths[row["parameter"]]))
    result["missed"] = sorted(missed, reverse=True)[:5]
    return result


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--teams", nargs="+", default=["mmlu_pro"])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--real-calls", type=int, default=10000)
    p.add_argument("--out", default="runs/sim2real")
    p.add_argument("--sim-set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override a key of the training on the fitted team (as train_qmix.py --sim-set)")
    args = p.parse_args(argv)
    rows, study = [], {}
    for team in args.teams:
        shares = []
        for seed in args.seeds:
            result = run_one(team, seed, Path(args.out) / f"{team}-seed{seed}", args.real_calls, args.sim_set)
            e = result["eval"]
            shares.append(e.get("headroom_share"))
            study[f"{team}/{seed}"] = {"real_calls": result["sim2real"]["real_calls"], "qmix": e["qmix"]["reward"],
                                       "best_fixed": e["best_fixed"]["reward"], "adaptive": e["adaptive"]["reward"],
                                       "headroom_share": e.get("headroom_share"),
                                       "qmix_minus_best_fixed": result["qmix_minus"]["best_fixed"],
                                       "missed": result["missed"]}
            rows.append({"team": team, "seed": seed, "real calls": result["sim2real"]["real_calls"],
                         "qmix": e["qmix"]["reward"], "best fixed": e["best_fixed"]["reward"],
                         "adaptive": e["adaptive"]["reward"], "share": e.get("headroom_share")})
            print(format_table(rows[-1:], list(rows[-1])), flush=True)
        shares = np.array(shares, dtype=float)
        rows.append({"team": team, "seed": "mean", "real calls": "", "qmix": "", "best fixed": "", "adaptive": "",
                     "share": f"{shares.mean():+.2f} ({shares.std(ddof=1) / np.sqrt(len(shares)) if len(shares) > 1 else 0:.2f})"})
    print(format_table(rows, list(rows[0])))
    for key, entry in study.items():
        if entry["headroom_share"] is None or entry["headroom_share"] < 0.5:
            print(f"{key}: share {entry['headroom_share']}; fitted parameters furthest from the truth (|z|, name, "
                  f"fitted, true): {entry['missed']}")
    (Path(args.out) / "study.json").write_text(json.dumps(study, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
