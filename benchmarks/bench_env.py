"""Throughput of the topology env (simulated team): both front-ends and the batch simulator.

    python benchmarks/bench_env.py [--episodes 3000] [--batch 20000]

Prints rounds/s through the PettingZoo API (N=3, T=2, random actions, resets included), through
the orchestrator env (the same joint actions' RoundSpecs as graph actions), and episode-rounds/s
of the batch simulator from CommActions and from batched RoundSpecs. Targets (one core): >= 5,000
PettingZoo rounds/s, the orchestrator within 20% of it, >= 500,000 batch episode-rounds/s.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

import topo_env
from topo_env.sim.batch import BatchRoundSpec
from topo_env.frontends.comm_batch import CommBatchSimulator
from topo_env.sim.profiles import get_profile


def bench_api(episodes: int, profile: str, rounds: int) -> float:
    env = topo_env.parallel_env(profile=profile, rounds=rounds)
    rng = np.random.default_rng(0)
    env.reset(seed=0)
    actions = rng.integers(6, size=(episodes, rounds, env.n_agents)).tolist()
    names = env.possible_agents
    steps = 0
    start = time.process_time()
    for ep in range(episodes):
        env.reset()
        for t in range(rounds):
            env.step(dict(zip(names, actions[ep][t])))
            steps += 1
    return steps / (time.process_time() - start)


def bench_orchestrator(episodes: int, profile: str, rounds: int) -> float:
    env = topo_env.orchestrator_env(profile=profile, rounds=rounds)
    rng = np.random.default_rng(0)
    n = env.n_agents
    graphs = rng.random((episodes, rounds, n, n)) < 0.5
    graphs[:, :, np.arange(n), np.arange(n)] = False
    verify = (rng.random((episodes, rounds, n)) < 0.2).astype(np.int8)
    active = np.ones(n, np.int8)
    plan = [[{"adjacency": graphs[ep, t].astype(np.int8), "active": active, "verify": verify[ep, t], "halt": 0}
             for t in range(rounds)] for ep in range(episodes)]
    env.reset(seed=0)
    steps = 0
    start = time.process_time()
    for ep in range(episodes):
        env.reset()
        for t in range(rounds):
            env.step(plan[ep][t])
            steps += 1
    return steps / (time.process_time() - start)


def bench_batch_specs(batch: int, profile: str, rounds: int) -> float:
    sim = CommBatchSimulator(get_profile(profile), 3, rounds)
    rng = np.random.default_rng(0)
    tasks, noise = sim.sample(rng, batch)
    specs = []
    for _ in range(rounds):
        adj = (rng.random((batch, 3, 3)) < 0.5).astype(np.int8)
        adj[:, np.arange(3), np.arange(3)] = 0
        specs.append(BatchRoundSpec(adj, np.ones((batch, 3), bool), rng.random((batch, 3)) < 0.2))
    start = time.process_time()
    sim.run_specs(specs, tasks, noise)
    return batch * rounds / (time.process_time() - start)


def bench_batch(batch: int, profile: str, rounds: int) -> float:
    sim = CommBatchSimulator(get_profile(profile), 3, rounds)
    rng = np.random.default_rng(0)
    tasks, noise = sim.sample(rng, batch)
    actions = rng.integers(6, size=(batch, rounds, 3))
    sim.run(actions[:100], tasks.take(np.arange(100)), noise.take(np.arange(100)))  # warm the plan cache
    start = time.process_time()
    sim.run(actions, tasks, noise)
    return batch * rounds / (time.process_time() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=3000)
    parser.add_argument("--batch", type=int, default=20000)
    parser.add_argument("--profile", default="mmlu_pro")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    api = bench_api(args.episodes, args.profile, args.rounds)
    orchestrator = bench_orchestrator(args.episodes, args.profile, args.rounds)
    batch = bench_batch(args.batch, args.profile, args.rounds)
    batch_specs = bench_batch_specs(args.batch, args.profile, args.rounds)
    print(f"{'measure (CPU time, one process)':<48}{'value':>14}{'target':>12}")
    print(f"{'PettingZoo API rounds/s (N=3, T=%d)' % args.rounds:<48}{api:>14,.0f}{5000:>12,}")
    print(f"{'orchestrator env rounds/s (graph mode)':<48}{orchestrator:>14,.0f}{0.8 * api:>12,.0f}")
    print(f"{'batch simulator episode-rounds/s (CommActions)':<48}{batch:>14,.0f}{500000:>12,}")
    print(f"{'batch simulator episode-rounds/s (RoundSpecs)':<48}{batch_specs:>14,.0f}{500000:>12,}")


if __name__ == "__main__":
    main()
