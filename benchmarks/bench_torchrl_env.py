"""Throughput of the topology env in TorchRL: the vectorised env against the PettingZoo wrapper.

    python benchmarks/bench_torchrl_env.py [--seconds 8] [--batches 1 64 1024 4096] [--rounds 2]

Prints env-steps/s (an env-step: one row's round; B per step of a vectorised env), in CPU time of
one process on one torch thread, of :class:`~topo_env.interop.torchrl_env.TopologyTorchRLEnv` at
each batch size B and of TorchRL's ``PettingZooWrapper`` over the PettingZoo env (batch 1, the
path of LLM teams), with the ratio to the wrapper. Both play the simulated team (N=3, default
profile) with one fixed joint action of valid actions, resets included
(``step_and_maybe_reset``), for about ``--seconds`` each. Target: B=1024 at least 50x the wrapper.
"""
from __future__ import annotations

import argparse
import time

import torch
from torchrl.envs import EnvBase, PettingZooWrapper

from topo_env.frontends.env_config import EnvConfig
from topo_env.frontends.parallel_env import TopologyParallelEnv
from topo_env.interop.torchrl_env import TopologyTorchRLEnv

TARGET_BATCH, TARGET_RATIO = 1024, 50.0


def env_steps_per_second(env: EnvBase, seconds: float, rounds: int) -> float:
    """Whole episodes of one fixed valid joint action until ``seconds`` of CPU time have passed."""
    torch.manual_seed(0)
    td = env.reset()
    td.set(("agent", "action"), env.full_action_spec["agent", "action"].rand())
    actions = td.get(("agent", "action")).clone()
    steps = 0
    start = time.process_time()
    while time.process_time() - start < seconds:
        for _ in range(rounds):
            td.set(("agent", "action"), actions)
            _, td = env.step_and_maybe_reset(td)
        steps += rounds
    return steps * max(env.batch_size.numel(), 1) / (time.process_time() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=8.0, help="CPU seconds per measurement")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 64, 1024, 4096])
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(1)
    config = EnvConfig(rounds=args.rounds)
    wrapper = PettingZooWrapper(env=TopologyParallelEnv(config), return_state=True, categorical_actions=True,
                                use_mask=True, seed=0)
    rows = [("PettingZooWrapper (one episode)", 1, env_steps_per_second(wrapper, args.seconds, args.rounds))]
    for batch in args.batches:
        env = TopologyTorchRLEnv(config, num_envs=batch, seed=0)
        rows.append(("TopologyTorchRLEnv", batch, env_steps_per_second(env, args.seconds, args.rounds)))
    base = rows[0][2]
    print(f"{'env (CPU time, one process, one thread)':<40}{'B':>6}{'env-steps/s':>14}{'x wrapper':>11}")
    for name, batch, rate in rows:
        print(f"{name:<40}{batch:>6}{rate:>14,.0f}{rate / base:>11.1f}")
    print(f"target: B={TARGET_BATCH} at least {TARGET_RATIO:.0f}x the wrapper")


if __name__ == "__main__":
    main()
