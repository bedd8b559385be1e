"""Training throughput at simulator scale: the batched path against the one-episode loop.

    python benchmarks/bench_training.py [--config configs/default.yaml] [--loop-episodes 1000]
                                        [--batched-episodes 65536] [--device cpu|cuda]

Trains QMIX twice on the config's simulated team, in this process, with the config's own learner
settings: once through the one-episode PettingZoo loop (``train.sim_batch: 0``, the path LLM teams
take) and once batched (the config's ``train.sim_batch``, or 1024 if it has none). Prints each
run's training episodes per second *including its updates* (train_qmix's own training time: no
held-out evaluation, no references, no pictures), how the batched run's time splits between
rollouts and updates, and the ratio. Issue 35's target: the batched run at least 25x the loop on
2 cores. The batched run keeps the config's replicas and privileged state; the loop cannot run
them and drops them.
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
    parser.add_argument("--loop-episodes", type=int, default=1000)
    parser.add_argument("--batched-episodes", type=int, default=65536)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    args = parser.parse_args()
    cfg = load_experiment(args.config)
    if cfg.env.backend.kind != "sim":
        parser.error(f"--config {args.config}: the benchmark trains a simulated team (backend kind "
                     f"{cfg.env.backend.kind!r})")
    batch = cfg.train.sim_batch or 1024
    loop = timed_run(args.config, args.loop_episodes, ["train.sim_batch=0", "learner.replicas=0",
                                                       "learner.privileged_state=false"], args.device)
    batched = timed_run(args.config, args.batched_episodes, [f"train.sim_batch={batch}"], args.device)
    rate = {name: run["episodes"] / run["seconds"] for name, run in (("loop", loop), ("batched", batched))}
    print(f"config {args.config}, device {args.device}, learner.torch_threads {cfg.learner.torch_threads}")
    print(f"{'path':<34}{'episodes':>10}{'train s':>10}{'updates':>10}{'episodes/s':>12}")
    print(f"{'one-episode loop (sim_batch 0)':<34}{loop['episodes']:>10}{loop['seconds']:>10.1f}{loop['updates']:>10}"
          f"{rate['loop']:>12.1f}")
    print(f"{f'batched (sim_batch {batch})':<34}{batched['episodes']:>10}{batched['seconds']:>10.1f}"
          f"{batched['updates']:>10}{rate['batched']:>12.1f}")
    split = batched.get("time_split")
    if split:
        print(f"batched time: rollouts {split['rollouts']:.1f} s, updates {split['updates']:.1f} s, "
              f"other {split['other']:.1f} s")
    print(f"ratio batched / loop: {rate['batched'] / rate['loop']:.1f}x (target >= 25x on 2 cores)")


if __name__ == "__main__":
    main()
