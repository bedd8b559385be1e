"""Throughput of the orchestrator env's vector form (simulated team) against Gymnasium's SyncVectorEnv.

    python benchmarks/bench_orchestrator_vector.py [--seconds 10] [--mode graph] [--halt 0.3]

Prints env-steps/s (rows stepped per second, autoreset steps included) and episodes/s (terminations per
second) of :class:`topo_env.frontends.orchestrator_vector_env.OrchestratorVectorEnv` at num_envs = 1, 64 and
1024 and of ``gymnasium.vector.SyncVectorEnv([lambda: orchestrator_env(...)] * 8)``, both driven by the same
kind of random actions (graph mode: random graphs, active sets, verification and recalls, halting with
probability ``--halt``; next-agent mode: random next agents and stops), NEXT_STEP autoreset, N=3, T=2. CPU time
of one process, about ``--seconds`` per row (about a minute in all).
"""
from __future__ import annotations

import argparse
import time

import numpy as np
from gymnasium.vector import SyncVectorEnv

import topo_env
from topo_env.frontends.orchestrator_vector_env import orchestrator_vector_env


def action_pool(mode: str, b: int, n: int, halt: float, size: int = 16) -> list:
    """``size`` batched actions to cycle through (drawn once: the loop times the env, not the sampling)."""
    rng = np.random.default_rng(0)
    if mode == "next_agent":
        return [rng.integers(0, n + 1, b) for _ in range(size)]
    return [{"adjacency": (rng.random((b, n, n)) < 0.5).astype(np.int8),
             "active": (rng.random((b, n)) < 0.7).astype(np.int8),
             "verify": (rng.random((b, n)) < 0.2).astype(np.int8),
             "halt": (rng.random(b) < halt).astype(np.int64),
             "recall": (rng.random((b, n, n)) < 0.2).astype(np.int8)} for _ in range(size)]


def bench(envs, mode: str, halt: float, seconds: float) -> tuple[float, float]:
    """(env-steps/s, episodes/s) of ``envs`` stepped for about ``seconds`` of CPU time."""
    b = envs.num_envs
    pool = action_pool(mode, b, 3, halt)
    envs.reset(seed=0)
    steps = episodes = 0
    start = time.process_time()
    while time.process_time() - start < seconds:
        for action in pool:
            episodes += int(envs.step(action)[2].sum())
        steps += len(pool)
    elapsed = time.process_time() - start
    return steps * b / elapsed, episodes / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="CPU seconds per row of the table")
    parser.add_argument("--mode", default="graph", choices=["graph", "next_agent"])
    parser.add_argument("--halt", type=float, default=0.3, help="graph mode: probability of halt=1 per row and step")
    parser.add_argument("--profile", default="mmlu_pro")
    args = parser.parse_args()
    cfg = dict(profile=args.profile, rounds=2)
    rows = []
    for b in (1, 64, 1024):
        envs = orchestrator_vector_env(b, mode=args.mode, **cfg)
        rows.append((f"OrchestratorVectorEnv num_envs={b}", *bench(envs, args.mode, args.halt, args.seconds)))
    sync = SyncVectorEnv([lambda: topo_env.orchestrator_env(mode=args.mode, **cfg)] * 8)
    rows.append(("SyncVectorEnv(orchestrator_env) num_envs=8", *bench(sync, args.mode, args.halt, args.seconds)))
    base = rows[-1][1]
    print(f"{args.mode} mode, N=3, T=2, {args.profile}; CPU time, one process")
    print(f"{'env':<46}{'env-steps/s':>14}{'episodes/s':>14}{'vs Sync':>10}")
    for name, steps, episodes in rows:
        print(f"{name:<46}{steps:>14,.0f}{episodes:>14,.0f}{steps / base:>9.1f}x")


if __name__ == "__main__":
    main()
