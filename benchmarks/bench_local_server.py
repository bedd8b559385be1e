"""Calls per second of the local llama.cpp server (SmolLM2-135M) with weight repacking on and off:
what loading the weights without llama.cpp's extra CPU buffers (the AMX guard of
``agents_llm.local_server``) costs on this machine, with the llama.cpp build this Python has.

    python benchmarks/bench_local_server.py [--calls 40] [--seeds 0 1 2] [--threads 1] [--repack on off]

The workload is the small real team's (configs/small_team.yaml): a solver's system prompt and a
small_math task, greedy, at most 48 completion tokens, one call at a time (llama.cpp's server
answers one request at a time), no cache. Seed s plays tasks s*calls .. (s+1)*calls-1 of a fixed
shuffle; every setting meets the same tasks, settings alternate within a seed. To compare builds,
run it with the Python of another environment (a venv with another llama-cpp-python build).
"""
from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import time

from agents_llm.client import LLMClient
from agents_llm.config import LLMSettings
from agents_llm.local_server import MODEL_ALIAS, LocalLlamaServer, build_features, smollm2_model_path
from agents_llm.prompts import system_prompt
from agents_llm.small_math import generate


def workload(seed: int, calls: int) -> list[list[dict[str, str]]]:
    tasks = generate()
    random.Random(0).shuffle(tasks)
    system = system_prompt("math", "specialist", "MathSolver", adversarial=False)
    return [[{"role": "system", "content": system}, {"role": "user", "content": t.prompt}]
            for t in tasks[seed * calls:(seed + 1) * calls]]


async def timed_calls(client: LLMClient, requests: list[list[dict[str, str]]]) -> tuple[float, int]:
    """Seconds for ``requests`` one after another, and the completion tokens they returned."""
    start, tokens = time.perf_counter(), 0
    for messages in requests:
        tokens += (await client.complete(messages)).completion_tokens
    return time.perf_counter() - start, tokens


def measure(repack: str, threads: int, requests: list[list[dict[str, str]]]) -> tuple[float, float]:
    """(calls per second, completion tokens per second) of one server start."""
    with LocalLlamaServer(n_ctx=2048, n_threads=threads, repack=repack) as server:
        client = LLMClient(LLMSettings(model=MODEL_ALIAS, base_url=server.base_url, temperature=0.0, max_tokens=48,
                                       timeout_s=120, cache_path=None))

        async def run() -> tuple[float, int]:
            await timed_calls(client, requests[:2])  # warm-up: first connection, first graph
            try:
                return await timed_calls(client, requests)
            finally:
                await client.aclose()

        seconds, tokens = asyncio.run(run())
    return len(requests) / seconds, tokens / seconds


def mean_se(values: list[float], digits: int = 2) -> str:
    """'mean (standard error)' of ``values`` with ``digits`` decimals."""
    se = statistics.stdev(values) / len(values) ** 0.5 if len(values) > 1 else float("nan")
    return f"{statistics.fmean(values):.{digits}f} ({se:.{digits}f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repack", nargs="+", choices=("on", "off"), default=["on", "off"])
    args = parser.parse_args()
    features = build_features()
    build = ", ".join(k for k, v in features.items() if v == "1")
    print(f"llama.cpp build: {build}", file=sys.stderr)
    rows: dict[str, list[tuple[float, float]]] = {r: [] for r in args.repack}
    for seed in args.seeds:
        requests = workload(seed, args.calls)
        for repack in args.repack:
            rows[repack].append(measure(repack, args.threads, requests))
            print(f"seed {seed}, repack {repack}: {rows[repack][-1][0]:.2f} calls/s", file=sys.stderr)
    print(f"\nLocal server, {smollm2_model_path().name}, {args.threads} thread(s), {args.calls} calls per seed, seeds "
          f"{' '.join(map(str, args.seeds))}: mean (SE over seeds)")
    print(f"{'weight repacking':<20}{'calls/s':>16}{'tokens/s':>16}")
    for repack, values in rows.items():
        print(f"{repack:<20}{mean_se([v[0] for v in values]):>16}{mean_se([v[1] for v in values]):>16}")
    if set(rows) == {"on", "off"}:  # the same tasks in the same seed: a paired difference
        diff = [(off[0] - on[0]) / on[0] * 100 for on, off in zip(rows["on"], rows["off"])]
        print(f"{'off vs on (%)':<20}{mean_se(diff):>16}")


if __name__ == "__main__":
    main()
