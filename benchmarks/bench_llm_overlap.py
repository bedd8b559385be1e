"""Do the calls of one execution layer overlap? Wall time of LLM-team episodes against an
OpenAI-compatible test server that answers every call after a fixed delay, compared with
the critical path (per layer, the slowest call of each phase; plus the decision node).

    python benchmarks/bench_llm_overlap.py [--delay 0.2] [--episodes 6]

Target: wall time <= 1.15 x critical path.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import topo_env  # noqa: E402
from fake_openai_server import FakeOpenAIServer  # noqa: E402

JOINT_ACTIONS = [[(0, 0, 0), (1, 1, 1)], [(2, 3, 0), (5, 0, 1)], [(1, 0, 0), (0, 3, 3)]]


def critical_path(env, delay: float) -> float:
    """Sum over rounds and layers of the slowest call per phase, plus FinalRefer."""
    total = delay  # the decision node
    for res in env.history:
        for layer in res.plan:
            total += delay * (2 if any(len(c) > 1 for c in layer) else 1)
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--delay", type=float, default=0.2)
    parser.add_argument("--episodes", type=int, default=6)
    args = parser.parse_args()
    rows = [{"id": f"q{i}", "domain": "reasoning", "prompt": f"Question {i}?", "choices": ["a", "b", "c"],
             "reference": "A"} for i in range(8)]
    with tempfile.TemporaryDirectory() as tmp, FakeOpenAIServer([("delay", args.delay, "Answer: A\nConfidence: 0.7")]) as srv:
        data = Path(tmp) / "tasks.jsonl"
        data.write_text("\n".join(json.dumps(r) for r in rows))
        env = topo_env.parallel_env(domain="reasoning", rounds=2,
                                    backend={"kind": "llm", "model": "m", "base_url": srv.base_url, "cache_path": None,
                                             "max_concurrency": 8, "dataset": str(data), "train_size": 2})
        env.reset(seed=999)  # warm-up: the client's first connection is not part of the measure
        for joint in JOINT_ACTIONS[0]:
            env.step({f"agent_{i}": a for i, a in enumerate(joint)})
        ratios = []
        for ep in range(args.episodes):
            env.reset(seed=ep)
            start = time.perf_counter()
            for joint in JOINT_ACTIONS[ep % len(JOINT_ACTIONS)]:
                env.step({f"agent_{i}": a for i, a in enumerate(joint)})
            wall = time.perf_counter() - start
            ratios.append(wall / critical_path(env, args.delay))
    print(f"{'measure':<44}{'value':>10}{'target':>10}")
    print(f"{'wall time / critical path (mean)':<44}{sum(ratios) / len(ratios):>10.3f}{'<= 1.15':>10}")
    print(f"{'wall time / critical path (worst episode)':<44}{max(ratios):>10.3f}")


if __name__ == "__main__":
    main()
