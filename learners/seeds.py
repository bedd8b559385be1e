"""Several seeds of one run: ``python train_qmix.py --seeds 0 1 2`` trains each seed in its own
process (as many at once as ``--jobs``, default the CPU count), then reports every figure as the
mean over seeds with its standard error (the SD over seeds / sqrt(seeds)).

Layout of ``--out DIR``: ``DIR/seed<s>/`` holds seed s's run (results.json, checkpoint, logs;
its output in ``DIR/seed<s>/train.log``), and ``DIR/seeds.json`` the summary
(:func:`summarize_seeds`)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

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
    lines.append(f"means over seeds {summary['seeds']}, (standard error over seeds); each seed scored on its own "
                 f"held-out episodes; training took {cell(summary['train_seconds'], 1, 0)} s per seed")
    return "\n".join(lines)


def run_seeds(child_args: Sequence[str], seeds: Sequence[int], out_dir: Path, jobs: int | None = None,
              progress: bool = True, script: str | Path = "train_qmix.py") -> dict[str, Any]:
    """Train ``seeds`` with ``python script *child_args --seed s --out out_dir/seed<s>``, ``jobs`` at
    once, then summarise. Raises RunError naming the seeds that failed and where their logs are."""
    out_dir.mkdir(parents=True, exist_ok=True)
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(seeds)))

    def train(seed: int) -> int:
        run_dir = out_dir / f"seed{seed}"
        run_dir.mkdir(parents=True, exist_ok=True)
        with open(run_dir / "train.log", "w") as log:
            return subprocess.run([sys.executable, str(script), *child_args, "--seed", str(seed), "--out", str(run_dir),
                                   "--no-progress"], stdout=log, stderr=subprocess.STDOUT).returncode

    with ThreadPoolExecutor(jobs) as pool:
        codes = list(tqdm(pool.map(train, seeds), total=len(seeds), desc=f"seeds ({jobs} at once)",
                          disable=not progress, file=sys.stderr))
    failed = [s for s, code in zip(seeds, codes) if code != 0]
    if failed:
        raise RunError(f"seed(s) {failed} failed: see {', '.join(str(out_dir / f'seed{s}' / 'train.log') for s in failed)}")
    results = {s: json.loads((out_dir / f"seed{s}" / "results.json").read_text()) for s in seeds}
    summary = summarize_seeds(results)
    (out_dir / "seeds.json").write_text(json.dumps(summary, indent=2))
    return summary
