"""Training throughput of QMIX on the default config.

    python benchmarks/bench_learner.py [--episodes 500] [--batch 32] [--rounds 3] [--threads 1,2] [--compile]
                                        [--device cpu|cuda]

Prints (1) the time of one gradient update at the given batch size (N=3, T=rounds), for each
torch thread count in ``--threads`` (the median of 7 timed blocks of 40 updates), next to the
matmul-bound floor: the update's floating-point operations (counted by torch's FlopCounterMode)
divided by the speed of one of its own matmuls (288 x 128 by 128 x 384) on this machine, and the
time of the update's own matmuls replayed alone at their own shapes (a floor no program made of
them can beat: small products run well below the reference matmul's speed); with
``--compile`` also the update with ``runtime.compile: true`` (its timed blocks alternating with
the eager update's) and the time its first call takes,
(2) a short training run's episodes/s and updates/s and how its time splits between the env
(rollouts) and the learner (updates). Targets: update of batch 32 (N=3, T=3) < 12 ms; 2,000
episodes of the default config in <= 3 minutes.
"""
from __future__ import annotations

import argparse
import dataclasses
import time

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

from learners.buffer import EpisodeReplayBuffer
from learners.config import load_experiment
from learners.learner import QMIXLearner
from learners.runner import EpisodeRunner
from topo_env.frontends.comm_actions import N_ACTIONS
from topo_env.frontends.parallel_env import TopologyParallelEnv


def matmul_gflops(device: torch.device, repeats: int = 2000) -> float:
    """Speed of a (288 x 128) @ (128 x 384) float32 matmul, the shape of a GRU gate product over
    the 288 nodes of a batch-32, T=3, N=3 update, in GFLOP/s at the current thread count."""
    x, w = torch.randn(288, 128, device=device), torch.randn(128, 384, device=device)
    for _ in range(100):
        x @ w
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(repeats):
        x @ w
    if device.type == "cuda":
        torch.cuda.synchronize()
    return 2 * 288 * 128 * 384 * repeats / (time.perf_counter() - start) / 1e9


MATMULS = {torch.ops.aten.mm.default, torch.ops.aten.addmm.default, torch.ops.aten.bmm.default,
            torch.ops.aten.baddbmm.default}


class MatmulRecorder(TorchDispatchMode):
    """Records every matrix product an update runs (forward and backward), with its operands."""

    def __init__(self):
        super().__init__()
        self.calls: list[tuple] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in MATMULS:
            self.calls.append((func, tuple(a.detach().clone() if isinstance(a, torch.Tensor) else a for a in args),
                               dict(kwargs or {})))
        return func(*args, **(kwargs or {}))


def own_matmul_ms(calls: list[tuple], repeats: int = 200) -> float:
    """The update's own matmuls replayed alone, back to back, at their own shapes and strides
    (ms): what the update would cost if everything but its matrix products were free. Small
    products run far below the speed of the reference matmul, so this floor is the one a
    program made of nothing but this update's matmuls could reach."""
    for func, args, kwargs in calls:
        func(*args, **kwargs)
    start = time.perf_counter()
    for _ in range(repeats):
        for func, args, kwargs in calls:
            func(*args, **kwargs)
    return (time.perf_counter() - start) / repeats * 1000


def time_updates(learners: dict[str, QMIXLearner], buffer: EpisodeReplayBuffer, batch: int,
                 rng: np.random.Generator, blocks: int = 7, block_updates: int = 40) -> dict[str, float]:
    """Milliseconds per update of each learner at the current thread count: the median of
    ``blocks`` blocks of ``block_updates`` updates. The learners' blocks alternate, so that on a
    shared machine they meet the same load."""
    for learner in learners.values():
        for _ in range(20):  # warm-up
            learner.update(buffer.sample(batch, rng))
    times: dict[str, list[float]] = {name: [] for name in learners}
    for _ in range(blocks):
        for name, learner in learners.items():
            start = time.perf_counter()
            for _ in range(block_updates):
                learner.update(buffer.sample(batch, rng))
            times[name].append((time.perf_counter() - start) / block_updates * 1000)
    return {name: float(np.median(t)) for name, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=500)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--config", default="configs/default.yaml")
    parser.add_argument("--threads", default="1,2",
                        help="comma-separated torch thread counts for the update timing (default 1,2); "
                             "the training run uses runtime.torch_threads")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="where the networks run")
    parser.add_argument("--compile", action="store_true",
                        help="also time the update with runtime.compile: true (torch.compile; about 30 s to compile)")
    args = parser.parse_args()
    cfg = load_experiment(args.config)
    try:
        thread_counts = [int(t) for t in args.threads.split(",")]
    except ValueError:
        thread_counts = []
    if not thread_counts or min(thread_counts) < 1:
        parser.error(f"--threads {args.threads!r}: give thread counts >= 1, e.g. 1,2")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device is visible to torch")
    device = torch.device(args.device)
    if device.type == "cuda":
        thread_counts = thread_counts[:1]  # the host's thread count does not matter for CUDA kernels
    torch.manual_seed(0)

    # (1) one update, N=3, T=args.rounds, batch args.batch
    env = TopologyParallelEnv(dataclasses.replace(cfg.env, rounds=args.rounds))
    d, s = env.obs_builder.dim, env.obs_builder.state_dim
    learner = QMIXLearner(d, s, env.n_agents, N_ACTIONS, cfg.qmix, device)
    buffer = EpisodeReplayBuffer(1000, args.rounds, env.n_agents, d, s, N_ACTIONS)
    runner = EpisodeRunner(env, learner.agent, device)
    rng = np.random.default_rng(0)
    for k in range(200):
        buffer.add(runner.run(1.0, rng, seed=k)[0])
    with FlopCounterMode(display=False) as counter:
        learner.update(buffer.sample(args.batch, rng))
    update_gflop = counter.get_total_flops() / 1e9
    with MatmulRecorder() as recorder:
        learner.update(buffer.sample(args.batch, rng))
    update_ms, floor_ms, own_ms, compile_s = {}, {}, {}, {}
    for threads in thread_counts:
        torch.set_num_threads(threads)
        learners = {"eager": learner}
        if args.compile:
            # inductor writes the thread count into the C++ kernels it generates: compile anew for each
            torch._dynamo.reset()
            compiled = QMIXLearner(d, s, env.n_agents, N_ACTIONS, cfg.qmix, device, compile=True)
            compiled.load_state_dict(learner.state_dict())
            start = time.perf_counter()
            compiled.update(buffer.sample(args.batch, rng))
            compile_s[threads] = time.perf_counter() - start
            learners["compiled"] = compiled
        update_ms[threads] = time_updates(learners, buffer, args.batch, rng)
        floor_ms[threads] = update_gflop / matmul_gflops(device) * 1000
        own_ms[threads] = own_matmul_ms(recorder.calls)
    torch.set_num_threads(cfg.runtime.torch_threads)

    # (2) a short training run on the config as is (rollout + 1 update per episode)
    env = TopologyParallelEnv(cfg.env)
    d, s = env.obs_builder.dim, env.obs_builder.state_dim
    learner = QMIXLearner(d, s, env.n_agents, N_ACTIONS, cfg.qmix, device)
    buffer = EpisodeReplayBuffer(cfg.qmix.buffer_size, env.rounds, env.n_agents, d, s, N_ACTIONS)
    runner = EpisodeRunner(env, learner.agent, device)
    env_time = learn_time = 0.0
    updates = 0
    for k in range(args.episodes):
        t0 = time.perf_counter()
        buffer.add(runner.run(max(0.05, 1 - k / args.episodes), rng, seed=k)[0])
        t1 = time.perf_counter()
        if len(buffer) >= cfg.qmix.batch_size:
            learner.update(buffer.sample(cfg.qmix.batch_size, rng))
            updates += 1
        t2 = time.perf_counter()
        env_time += t1 - t0
        learn_time += t2 - t1
    total = env_time + learn_time
    print(f"{'measure':<52}{'value':>12}{'target':>12}")
    print(f"{'floating-point work of one update (GFLOP)':<52}{update_gflop:>12.3f}")
    def where(threads: int) -> str:
        return f"{threads} thread(s)" if device.type == "cpu" else "cuda"

    for threads, ms in update_ms.items():
        print(f"{'update, batch %d, N=3, T=%d, %s (ms)' % (args.batch, args.rounds, where(threads)):<52}"
              f"{ms['eager']:>12.2f}{'< 12':>12}")
        if "compiled" in ms:
            print(f"{'  with runtime.compile: true (ms)':<52}{ms['compiled']:>12.2f}{'< 12':>12}")
            print(f"{'  its first update, compiling included (s)':<52}{compile_s[threads]:>12.1f}")
        print(f"{'  matmul-bound floor at this speed (ms)':<52}{floor_ms[threads]:>12.2f}")
        best = min(ms.values())
        print(f"{'  fastest update / floor (issue 27: within 1.5x)':<52}{best / floor_ms[threads]:>12.2f}{'<= 1.5':>12}")
        print(f"{'  its %d matmuls alone, at their own shapes (ms)' % len(recorder.calls):<52}{own_ms[threads]:>12.2f}")
        print(f"{'  those matmuls alone / floor':<52}{own_ms[threads] / floor_ms[threads]:>12.2f}")
        print(f"{'  fastest update / its matmuls alone':<52}{best / own_ms[threads]:>12.2f}")
    print(f"{'training episodes/s (default config)':<52}{args.episodes / total:>12.1f}{'>= 11.1':>12}")
    print(f"{'gradient updates/s':<52}{updates / learn_time:>12.1f}")
    print(f"{'time in env rollouts (incl. action selection)':<52}{env_time / total:>11.0%}")
    print(f"{'time in learner updates':<52}{learn_time / total:>11.0%}")
    print(f"{'projected time for 2,000 episodes (s)':<52}{2000 * total / args.episodes:>12.0f}{'<= 180':>12}")


if __name__ == "__main__":
    main()
