"""Calls per second of the small real team's local serving setups (SmolLM2-135M, 2 CPU cores):
today's two one-thread llama-cpp-python servers against llama.cpp's own ``llama-server`` with parallel
slots and continuous batching (``agents_llm.local_server --engine native``)::

    python -m agents_llm.llama_build                        # once: builds llama-server (~17 min on 2 busy cores)
    python benchmarks/bench_serving.py --calls 60 --seeds 0 1 2 --layouts 2x1 --parallel 1 2 4 8
    python benchmarks/bench_serving.py --calls 60 --seeds 0 1 2 --layouts 1x2 --parallel 2 4 8

(the two runs of the measured table in docs/llm-teams.md, "Serving more calls per
second"; on 2 shared cores a two-thread llama.cpp process (1x2) stalls whenever another program takes a core).

Settings (all on the same cores):

* ``python 2x1t``: what configs/small_team.yaml runs today: two ``--threads 1`` Python servers,
  requests spread over both (``replica_urls``), 4 in flight (``max_concurrency: 4``);
* ``native SxT pN``: S ``llama-server`` processes of T threads each (``--layouts``; ``1x2`` by
  default) with N slots each (``--parallel N``, continuous batching, its prompt cache on as by
  default), S*N requests in flight, spread over the servers.

The workload is the small team's (``bench_local_server.workload``): a solver's system prompt and a
small_math task, greedy (temperature 0), at most 48 completion tokens, no response cache. Seed s plays
tasks s*calls .. (s+1)*calls-1 of a fixed shuffle; every setting meets the same tasks, each setting starts
its own servers, and the order of the settings rotates from seed to seed (paired within a seed). The
table gives mean (standard error over seeds) of calls/s and completion tokens/s, the speedup over
``python 2x1t`` (the paired per-seed ratio), and how many greedy answers differ from that setting's
(batched and unbatched llama.cpp can round differently).
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agents_llm.client import LLMClient  # noqa: E402
from agents_llm.config import LLMSettings  # noqa: E402
from agents_llm.local_server import MODEL_ALIAS, LocalLlamaServer, find_native_binary, smollm2_model_path  # noqa: E402
from benchmarks.bench_local_server import mean_se, workload  # noqa: E402

BASELINE = "python 2x1t"


@dataclass(frozen=True)
class Setting:
    name: str
    engine: str
    servers: int
    threads: int
    parallel: int
    in_flight: int
    cache_reuse: int = 0


@dataclass
class Result:
    calls_per_s: float
    tokens_per_s: float
    answers: list[str]
    completion_tokens: int


def settings(parallels: list[int], layouts: list[str], cache_reuse: int) -> list[Setting]:
    """Today's setup, then every native layout ("SxT": S servers of T threads) with every slot count."""
    rows = [Setting(BASELINE, "python", servers=2, threads=1, parallel=1, in_flight=4)]
    for layout in layouts:
        servers, threads = (int(x) for x in layout.split("x"))
        for n in parallels:
            name = f"native {layout} p{n}"
            rows.append(Setting(name, "native", servers=servers, threads=threads, parallel=n, in_flight=servers * n))
            if cache_reuse:
                rows.append(Setting(f"{name} reuse{cache_reuse}", "native", servers=servers, threads=threads,
                                    parallel=n, in_flight=servers * n, cache_reuse=cache_reuse))
    return rows


async def _run(client: LLMClient, requests: list[list[dict[str, str]]]) -> tuple[float, list]:
    start = time.perf_counter()
    results = await asyncio.gather(*(client.complete(m) for m in requests))  # the client caps calls in flight
    return time.perf_counter() - start, results


def measure(setting: Setting, requests: list[list[dict[str, str]]], binary: str | None) -> Result:
    with contextlib.ExitStack() as stack:
        urls = []
        for _ in range(setting.servers):
            kwargs = dict(engine="native", server_binary=binary, parallel=setting.parallel,
                          cache_reuse=setting.cache_reuse) if setting.engine == "native" else {}
            server = stack.enter_context(LocalLlamaServer(n_ctx=2048, n_threads=setting.threads, **kwargs))
            urls.append(server.base_url)
        client = LLMClient(LLMSettings(model=MODEL_ALIAS, base_url=urls[0], replica_urls=urls[1:], temperature=0.0,
                                       max_tokens=48, timeout_s=300, max_concurrency=setting.in_flight,
                                       cache_path=None))

        async def run() -> tuple[float, list]:
            try:
                warm = [[{"role": "user", "content": f"Say {i}."}] for i in range(setting.in_flight)]
                await _run(client, warm)  # warm-up: connections, first graphs, every slot
                return await _run(client, requests)
            finally:
                await client.aclose()

        seconds, results = asyncio.run(run())
    tokens = sum(r.completion_tokens for r in results)
    return Result(len(requests) / seconds, tokens / seconds, [r.content for r in results], tokens)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=60)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--parallel", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--layouts", nargs="+", default=["1x2"], help="native servers x threads each: 1x2 (one "
                        "server of 2 threads, the default), 2x1 (two of one thread, requests spread over both)")
    parser.add_argument("--cache-reuse", type=int, default=0, help="also run each native setting with this "
                        "--cache-reuse chunk size (0: not)")
    parser.add_argument("--server-binary", default=None, help="llama-server (default: python -m agents_llm.llama_build's)")
    parser.add_argument("--json", default=None, help="also write every setting's per-seed figures and answers here")
    args = parser.parse_args()
    binary = str(find_native_binary(args.server_binary))
    rows = settings(args.parallel, args.layouts, args.cache_reuse)
    results: dict[str, list[Result]] = {s.name: [] for s in rows}
    started = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    for i, seed in enumerate(args.seeds):
        requests = workload(seed, args.calls)
        shift = i % len(rows)
        for setting in rows[shift:] + rows[:shift]:  # rotate the order from seed to seed
            results[setting.name].append(measure(setting, requests, binary))
            print(f"seed {seed}, {setting.name}: {results[setting.name][-1].calls_per_s:.2f} calls/s", file=sys.stderr,
                  flush=True)
    finished = time.strftime("%H:%M:%S %Z")
    base = results[BASELINE]
    total = args.calls * len(args.seeds)
    print(f"\nServing SmolLM2-135M ({smollm2_model_path().name}) on {os.cpu_count()} CPU cores "
          f"({platform.processor() or platform.machine()}), {started} - {finished}; {args.calls} calls per seed, "
          f"seeds {' '.join(map(str, args.seeds))}, greedy, max_tokens 48; mean (SE over seeds)")
    print(f"llama-server: {binary}")
    header = (f"{'setting':<24}{'servers x threads':>18}{'in flight':>10}{'calls/s':>15}{'tokens/s':>16}"
              f"{'tokens/call':>12}{'speedup':>15}{'differ: python':>16}{'differ: p-first':>17}")
    print(header)
    first_native: dict[tuple[int, int], str] = {}
    for s in rows:
        if s.engine == "native":
            first_native.setdefault((s.servers, s.threads), s.name)

    def differ(a: list[Result], b: list[Result]) -> str:
        return f"{sum(x != y for u, v in zip(a, b) for x, y in zip(u.answers, v.answers))}/{total}"

    for s in rows:
        values = results[s.name]
        speed = [v.calls_per_s / b.calls_per_s for v, b in zip(values, base)]
        ref = first_native.get((s.servers, s.threads)) if s.engine == "native" else None
        per_call = sum(v.completion_tokens for v in values) / total
        print(f"{s.name:<24}{f'{s.servers} x {s.threads}':>18}{s.in_flight:>10}"
              f"{mean_se([v.calls_per_s for v in values]):>15}{mean_se([v.tokens_per_s for v in values], 1):>16}"
              f"{per_call:>12.1f}{mean_se(speed):>15}{differ(values, base):>16}"
              f"{(differ(values, results[ref]) if ref else '-'):>17}")
    print("speedup: calls/s over python 2x1t's in the same seed (paired); tokens/call: completion tokens per call; "
          "differ: greedy replies not identical to python 2x1t's / to the same layout's first native setting's "
          "(batched vs less batched) for the same task")
    if args.json:
        Path(args.json).write_text(json.dumps({"started": started, "calls": args.calls, "seeds": args.seeds,
                                               "binary": binary, "results": {
                                                   name: [vars(v) for v in values] for name, values in results.items()}},
                                              indent=1))


if __name__ == "__main__":
    main()
