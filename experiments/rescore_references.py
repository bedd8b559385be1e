"""A finished simulated-team run's headroom share against the references the current search finds.

A run's results.json holds QMIX's reward on its held-out episodes and the references of the search it
ran with. When the search improves (issue 49: the searched adaptive reference, beyond N = 3, T = 2),
the references are searched again (or read from the cache) and played on the same held-out episodes
(the batch simulator, common random numbers), and the share is recomputed with QMIX's recorded reward.

    python -m experiments.rescore_references runs/n5t3-s0 runs/n5t3-s1 runs/n5t3-s2
"""
from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

from learners.config import ExperimentConfig
from learners.evaluation import score_on_simulator
from topo_env.engine.seeding import held_out_seed
from topo_env.frontends.parallel_env import TopologyParallelEnv


def rescore(run: Path, progress: bool = True) -> dict:
    """``run``'s QMIX reward against the current ``best_fixed`` and ``adaptive`` on its held-out episodes."""
    summary = json.loads((run / "results.json").read_text())
    cfg = ExperimentConfig.from_dict(summary["config"])
    env = TopologyParallelEnv(cfg.env.__class__.from_dict({**cfg.env.to_dict(), "split": "eval"}))
    try:
        figures, _ = score_on_simulator(env, cfg.train.eval_episodes, held_out_seed(cfg.train.seed), progress=progress)
    finally:
        env.close()
    qmix, fixed, adaptive = summary["eval"]["qmix"]["reward"], figures["best_fixed"]["reward"], figures["adaptive"]["reward"]
    return {"run": str(run), "qmix": qmix, "best_fixed": fixed, "adaptive": adaptive,
            "headroom_share": (qmix - fixed) / (adaptive - fixed),
            "before": {k: summary["eval"][k]["reward"] for k in ("best_fixed", "adaptive")} |
                      {"headroom_share": summary["eval"].get("headroom_share")}}


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.rescore_references", description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", type=Path, help="train_qmix.py --out folders on a simulated team")
    p.add_argument("--no-progress", action="store_true")
    args = p.parse_args(argv)
    for run in args.runs:
        row = rescore(run, progress=not args.no_progress)
        print(json.dumps(row))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
