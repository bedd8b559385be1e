"""Several seeds of one run: ``python train_qmix.py --seeds 0 1 2`` (:func:`run_seeds`) trains each
seed in its own child process (as many at once as ``--jobs``, default the CPU count), then reports
every figure as the mean over seeds with its standard error (the SD over seeds / sqrt(seeds)).
Each seed is scored on its own held-out episodes (disjoint across seeds,
:func:`topo_env.engine.seeding.held_out_seed`), so that standard error holds the held-out
episodes' noise as well as training's.

Layout of ``--out DIR``: ``DIR/seed<s>/`` holds seed s's run (results.json, checkpoint, logs;
its output in ``DIR/seed<s>/train.log``), and ``DIR/seeds.json`` the summary
(:func:`summarize_seeds`)."""
from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
import sys
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from learners.config import ExperimentConfig
from learners.child import child_status, run_logged
from learners.training import RunOptions
from topo_env.engine.cli import RunError, format_table

FIGURES = ("reward", "accuracy", "tokens_per_task", "density")


def mean_and_se(values: Sequence[float]) -> dict[str, float]:
    """``{"mean", "se", "values"}`` over seeds (se 0 for one seed)."""
    v = np.asarray(values, dtype=np.float64)
    return {"mean": float(v.mean()), "se": float(v.std(ddof=1) / np.sqrt(len(v))) if len(v) > 1 else 0.0,
            "values": v.tolist()}


def summarize_seeds(results: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """Means over seeds of each seed's results.json: per policy its :data:`FIGURES`; QMIX minus
    each policy (each seed's paired difference); ``headroom_share`` and the training time where
    present."""
    seeds = sorted(results)
    policies = list(dict.fromkeys(k for s in seeds for k, v in results[s]["eval"].items() if isinstance(v, dict)))
    summary: dict[str, Any] = {"seeds": seeds, "policies": {}, "qmix_minus": {}}
    for name in policies:
        figures = [_figures(results[s]["eval"], name) for s in seeds]
        summary["policies"][name] = {f: mean_and_se([seed[f] for seed in figures]) for f in FIGURES if f in figures[0]}
    for name in dict.fromkeys(k for s in seeds for k in results[s]["qmix_minus"]):
        summary["qmix_minus"][name] = mean_and_se([_figures(results[s]["qmix_minus"], name, {"mean": 0.0})["mean"]
                                                   for s in seeds])
    shares = [results[s]["eval"].get("headroom_share") for s in seeds]
    if all(v is not None for v in shares):
        summary["headroom_share"] = mean_and_se(shares)
        summary["headroom"] = mean_and_se([results[s]["eval"]["headroom"] for s in seeds])
    summary["train_seconds"] = mean_and_se([results[s]["train"]["seconds"] for s in seeds])
    return summary


def _figures(section: dict[str, Any], name: str, same_network: dict | None = None) -> dict[str, Any]:
    """``section[name]``; a run whose validation kept its final network has no ``qmix_last``
    (it is ``qmix``): then qmix's own figures, or ``same_network`` for a difference with qmix."""
    if name in section:
        return section[name]
    if name == "qmix_last":
        return same_network if same_network is not None else section["qmix"]
    raise KeyError(f"policy {name!r} is missing from a seed's results")


def format_seeds(summary: dict[str, Any]) -> str:
    """The summary as a table: mean (SE over seeds) per policy."""
    def cell(d: dict[str, float], scale: float = 1.0, digits: int = 4) -> str:
        return f"{d['mean'] * scale:.{digits}f} ({d['se'] * scale:.{digits}f})"

    rows = []
    for name, figures in summary["policies"].items():
        minus = summary["qmix_minus"].get(name)
        rows.append({"policy": name, "reward": cell(figures["reward"]),
                     "accuracy (pts)": cell(figures["accuracy"], 100, 2),
                     "tokens/task": cell(figures["tokens_per_task"], 1, 0),
                     "qmix - policy": cell(minus) if minus else ""})
    lines = [format_table(rows, ("policy", "reward", "accuracy (pts)", "tokens/task", "qmix - policy"))]
    if "headroom_share" in summary:
        lines.append(f"headroom share (qmix - best_fixed) / (adaptive - best_fixed): {cell(summary['headroom_share'], 1, 2)}")
    lines.append(f"means over seeds {summary['seeds']}, (standard error over seeds: training's noise and the held-out "
                 f"episodes', each seed scored on its own); training took {cell(summary['train_seconds'], 1, 0)} s per seed")
    return "\n".join(lines)


def run_seeds(cfg: ExperimentConfig, seeds: Sequence[int], out_dir: Path, jobs: int | None = None,
              options: RunOptions = RunOptions()) -> dict[str, Any]:
    """Train and evaluate ``cfg`` once per seed in ``seeds`` (``train.seed`` replaced) into
    ``out_dir/seed<s>`` (:func:`learners.training.train_and_evaluate`, its output in
    ``out_dir/seed<s>/train.log``), ``jobs`` child processes at once (default: the CPU count),
    then summarise into ``out_dir/seeds.json``. Raises RunError naming the seeds that failed and
    where their logs are."""
    out_dir.mkdir(parents=True, exist_ok=True)
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(seeds)))
    child = dataclasses.replace(options, progress=False)
    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {}
        for seed in seeds:
            run_dir = out_dir / f"seed{seed}"
            run_dir.mkdir(parents=True, exist_ok=True)
            seeded = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, seed=int(seed)))
            futures[pool.submit(run_logged, seeded, run_dir, child, run_dir / "train.log")] = seed
        codes = {futures[f]: child_status(f) for f in tqdm(as_completed(futures), total=len(seeds),
                                                             desc=f"seeds ({jobs} at once)",
                                                             disable=not options.progress, file=sys.stderr)}
    failed = [s for s in seeds if codes[s] != 0]
    if failed:
        raise RunError(f"seed(s) {failed} failed: see {', '.join(str(out_dir / f'seed{s}' / 'train.log') for s in failed)}")
    results = {s: json.loads((out_dir / f"seed{s}" / "results.json").read_text()) for s in seeds}
    summary = summarize_seeds(results)
    (out_dir / "seeds.json").write_text(json.dumps(summary, indent=2))
    return summary
