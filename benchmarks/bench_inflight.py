"""Episodes in flight against one LLM server: throughput of LLM-team episodes against an
OpenAI-compatible test server that answers each call after a fixed latency L and serves at most
C calls at once (more queue), for K = 1, 2, 4, ... episodes in flight (``runtime.episodes_in_flight``;
:mod:`topo_env.frontends.inflight`), compared with the bound C / (calls per episode x L).

    python benchmarks/bench_inflight.py [--latency 0.1] [--capacity 16] [--ks 1,2,4,8,16,32]

The episodes are held-out evaluations (:func:`learners.evaluation.evaluate`, the same machinery
as training) of a fixed policy (``--policy``, default ``solo``), on K envs sharing one LLM client
with ``max_concurrency`` = 4 C. Target: at least 80% of the bound for K large enough.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import topo_env  # noqa: E402
from fake_openai_server import FakeOpenAIServer  # noqa: E402
from learners.evaluation import evaluate  # noqa: E402
from topo_env.frontends.inflight import sibling_envs  # noqa: E402
from topo_env.references.baselines import BASELINES, make_baseline  # noqa: E402
from topo_env.engine.cli import format_table  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--latency", type=float, default=0.1, help="seconds per call (L)")
    parser.add_argument("--capacity", type=int, default=16, help="calls the server serves at once (C)")
    parser.add_argument("--ks", default="1,2,4,8,16,32", help="episodes in flight to measure")
    parser.add_argument("--policy", default="solo", choices=BASELINES)
    parser.add_argument("--seconds", type=float, default=6.0,
                        help="about how long each K runs (its episodes: that many seconds at the expected rate)")
    args = parser.parse_args()
    ks = [int(k) for k in args.ks.split(",")]
    rows = [{"id": f"q{i}", "domain": "reasoning", "prompt": f"Question {i}?", "choices": ["a", "b", "c"],
             "reference": "A"} for i in range(8)]
    reply = [("ok", "Answer: A\nConfidence: 0.7", {"prompt_tokens": 9, "completion_tokens": 4})]
    table = []
    with tempfile.TemporaryDirectory() as tmp, FakeOpenAIServer(reply, latency=args.latency,
                                                                capacity=args.capacity) as server:
        data = Path(tmp) / "tasks.jsonl"
        data.write_text("\n".join(json.dumps(r) for r in rows))
        env = topo_env.parallel_env(domain="reasoning", rounds=2, backend={
            "kind": "llm", "model": "m", "base_url": server.base_url, "cache_path": None,
            "max_concurrency": 4 * args.capacity, "dataset": str(data), "train_size": 4})
        envs = sibling_envs(env, max(ks))
        policy = make_baseline(args.policy)
        before, start = len(server.requests), time.perf_counter()
        evaluate(env, policy, 3, seed=10**6, split="train", progress=False)  # warm-up; calls and time per episode
        one = 3 / (time.perf_counter() - start)
        calls = (len(server.requests) - before) / 3
        bound = args.capacity / (calls * args.latency)
        for k in ks:
            episodes = max(2 * k, int(args.seconds * min(bound, k * one)))  # about --seconds each
            start = time.perf_counter()
            evaluate(env, policy, episodes, seed=0, split="train", progress=False, siblings=envs[1:k])
            rate = episodes / (time.perf_counter() - start)
            table.append({"K": k, "episodes": episodes, "episodes/s": f"{rate:.2f}",
                          "of bound": f"{100 * rate / bound:.0f}%"})
    print(f"server: latency L = {args.latency:g} s per call, capacity C = {args.capacity} calls at once; "
          f"policy {args.policy}: {calls:g} calls per episode")
    print(f"bound C / (calls per episode x L) = {bound:.2f} episodes/s (target: >= 80% for K large enough)\n")
    print(format_table(table, ("K", "episodes", "episodes/s", "of bound")))


if __name__ == "__main__":
    main()
