"""Training throughput at simulator scale: the batched path against the one-episode loop.

    python benchmarks/bench_training.py [--config configs/default.yaml] [--loop-config tests/data/one_episode.yaml]
                                        [--loop-episodes 1000] [--batched-episodes 32768] [--device cpu|cuda]

Trains QMIX twice on the simulated team, in this process: once through the one-episode PettingZoo
loop with ``--loop-config`` (default: the settings the default config had before training moved to
simulator scale: one update of 32 episodes after every episode) and once batched with ``--config``
(its ``sim_scale.batch``, or 1024 if it has none; its noise samples and privileged mixer state kept, its
teacher left out: it runs before training and is timed apart). Prints each run's training episodes
per second *including its updates* (:func:`learners.training.train`'s own training time: no teacher, held-out evaluation,
references, validation or pictures), how the batched run's time splits between rollouts and
updates, and the ratio; a third run without the noise samples and the privileged state shows what those
cost. Issue 35's target: the batched run at least 25x the loop on 2 cores.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from learners.config import load_experiment  # noqa: E402
from learners.training import RunOptions, train  # noqa: E402


def timed_run(config: str, episodes: int, sets: list[str], device: str) -> dict:
    """One training run (no evaluation); returns its episodes, training seconds, updates, time
    split and wall time."""
    cfg = load_experiment(config, [f"train.episodes={episodes}", "train.references=false", "train.curve_every=0",
                                   "train.validate_every=0", f"runtime.device={device}", *sets])
    with tempfile.TemporaryDirectory() as out:
        started = time.perf_counter()
        run = train(cfg, out, RunOptions(progress=False, pictures=False))
        wall = time.perf_counter() - started
        run.writer.close()
    return {"episodes": episodes, "seconds": run.seconds, "updates": run.learner.updates,
            "time_split": {**run.time_split, "other": run.seconds - sum(run.time_split.values())}, "wall": wall}


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
    batch = cfg.sim_scale.batch or 1024
    loop = timed_run(args.loop_config, args.loop_episodes, ["sim_scale.batch=0"], args.device)
    common = [f"sim_scale.batch={batch}", "sim_scale.teacher_episodes=0"]
    runs = {"one-episode loop (sim_scale.batch 0)": loop,
            f"batched (sim_scale.batch {batch})": timed_run(args.config, args.batched_episodes, common, args.device),
            "batched, no noise samples or privileged state": timed_run(
                args.config, args.batched_episodes, common + ["sim_scale.noise_samples=0", "sim_scale.privileged_state=false"],
                args.device)}
    print(f"loop: {args.loop_config}; batched: {args.config}; device {args.device}, "
          f"runtime.torch_threads {cfg.runtime.torch_threads}")
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
