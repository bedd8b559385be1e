"""Training throughput at simulator scale: the batched path against the one-episode loop.

    python benchmarks/bench_training.py [--config configs/default.yaml] [--loop-config tests/data/one_episode.yaml]
                                        [--loop-episodes 1000] [--batched-episodes 32768] [--device cpu|cuda]

Trains QMIX twice on the simulated team, in this process: once through the one-episode PettingZoo
loop with ``--loop-config`` (default: the settings the default config had before training moved to
simulator scale: one update of 32 episodes after every episode) and once batched with ``--config``
(its ``train.sim_batch``, or 1024 if it has none; its replicas and privileged mixer state kept, its
teacher left out: it runs before training and is timed apart). Prints each run's training episodes
per second *including its updates* (train_qmix's own training time: no teacher, held-out evaluation,
references, validation or pictures), how the batched run's time splits between rollouts and
updates, and the ratio; a third run without the replicas and the privileged state shows what those
cost. Issue 35's target: the batched run at least 25x the loop on 2 cores.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import train_qmix  # noqa: E402
from learners.config import load_experiment  # noqa: E402


def timed_run(config: str, episodes: int, sets: list[str], device: str) -> dict:
    """One training run; returns its results.json ``train`` section and the wall time."""
    with tempfile.TemporaryDirectory() as out:
        argv = ["--config", config, "--episodes", str(episodes), "--out", out, "--no-progress", "--no-pictures",
                "--set", "train.references=false", "--set", "train.eval_episodes=1", "--set", "train.curve_every=0",
                "--set", "train.validate_every=0", "--set", f"learner.device={device}"]
        for text in sets:
            argv += ["--set", text]
        started = time.perf_counter()
        train_qmix.main(argv)
        wall = time.perf_counter() - started
        summary = json.loads((Path(out) / "results.json").read_text())["train"]
    return {**summary, "wall": wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=str(ROOT / "configs" / "default.yaml"))
    parser.add_argument("--loop-config", default=str(ROOT / "tests" / "data" / "one_episode.yaml"))
    parser.add_argument("--loop-episodes", type=int, default=1000)
    parser.add_argument("--batched-episodes", type=int, default=32768)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    args = parser.parse_args()
    cfg = load_experiment(args.config)
    if cfg.env.backend.kind != "sim":
        parser.error(f"--config {args.config}: the benchmark trains a simulated team (backend kind "
                     f"{cfg.env.backend.kind!r})")
    batch = cfg.train.sim_batch or 1024
    loop = timed_run(args.loop_config, args.loop_episodes, ["train.sim_batch=0"], args.device)
    common = [f"train.sim_batch={batch}", "learner.teacher_episodes=0"]
    runs = {"one-episode loop (sim_batch 0)": loop,
            f"batched (sim_batch {batch})": timed_run(args.config, args.batched_episodes, common, args.device),
            "batched, no replicas or privileged state": timed_run(
                args.config, args.batched_episodes, common + ["learner.replicas=0", "learner.privileged_state=false"],
                args.device)}
    print(f"loop: {args.loop_config}; batched: {args.config}; device {args.device}, "
          f"learner.torch_threads {cfg.learner.torch_threads}")
    print(f"{'path':<44}{'episodes':>10}{'train s':>10}{'updates':>10}{'episodes/s':>12}{'x loop':>8}"
          f"{'rollouts s':>12}{'updates s':>11}{'other s':>9}")
    loop_rate = loop["episodes"] / loop["seconds"]
    for name, run in runs.items():
        rate = run["episodes"] / run["seconds"]
        split = run.get("time_split") or {}
        parts = "".join(f"{split[k]:>{w}.1f}" if k in split else f"{'-':>{w}}"
                        for k, w in (("rollouts", 12), ("updates", 11), ("other", 9)))
        print(f"{name:<44}{run['episodes']:>10}{run['seconds']:>10.1f}{run['updates']:>10}{rate:>12.1f}"
              f"{rate / loop_rate:>8.1f}{parts}")
    print("x loop: training episodes per second, updates included, over the one-episode loop's "
          "(issue 35's target: >= 25x on 2 cores)")


if __name__ == "__main__":
    main()
