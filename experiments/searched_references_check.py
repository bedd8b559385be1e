"""The searched headroom references against the enumerated ones where both run (N = 3, T <= 2; issue 49).

Both searches select on the same "train" and "rerank" episodes of ``--seed``; each reference of each is
then played on the same held-out "eval" episodes (common random numbers), and the searched minus the
enumerated is reported with its paired standard error, on each episode set (on "train" a searched
reference below the enumerated one means the climb missed an optimum; on "eval" only what generalises
counts).

    python -m experiments.searched_references_check --profile mmlu_pro --seed 0
"""
from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence

import numpy as np

from topo_env.frontends.comm_batch import CommBatchSimulator
from topo_env.references import headroom
from topo_env.references.oracle import DEFAULT_HEADROOM_SAMPLES, DEFAULT_LARGE_SAMPLES, sample_episodes
from topo_env.sim.profiles import get_profile


def check(profile: str, seed: int, rounds: int = 2, progress: bool = False, **search_options) -> dict:
    """Both searches on ``profile``'s N = 3 team (``search_options``: keywords of
    :func:`~topo_env.references.headroom.select_searched_references`) and each reference played by both."""
    sim = CommBatchSimulator(get_profile(profile), 3, rounds)
    found = {}
    for name, select in (("enumerated", headroom.select_references), ("searched", headroom.select_searched_references)):
        started = time.perf_counter()
        options = search_options if name == "searched" else {}
        found[name], _ = select(sim, seed=seed, samples=DEFAULT_HEADROOM_SAMPLES, rerank_samples=DEFAULT_LARGE_SAMPLES,
                                progress=progress, **options)
        found[f"{name}_seconds"] = round(time.perf_counter() - started, 1)
    out = {"profile": profile, "seed": seed, "seconds": {k: found[f"{k}_seconds"] for k in ("enumerated", "searched")}}
    for split, size in (("train", DEFAULT_HEADROOM_SAMPLES), ("rerank", DEFAULT_LARGE_SAMPLES), ("eval", DEFAULT_LARGE_SAMPLES)):
        episodes = sample_episodes(sim, size, seed, split)
        played = {name: headroom.play_references(sim, found[name], *episodes) for name in ("enumerated", "searched")}
        out[split] = {}
        for ref in headroom.REFERENCE_NAMES:
            a, b = played["searched"][ref].reward, played["enumerated"][ref].reward
            d = a - b
            out[split][ref] = {"searched": float(a.mean()), "enumerated": float(b.mean()), "difference": float(d.mean()),
                               "se": float(d.std(ddof=1) / np.sqrt(len(d)))}
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.searched_references_check", description=__doc__.split("\n\n")[0])
    p.add_argument("--profile", default="mmlu_pro")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--context-starts", type=int, help="open-loop climbs (default: the search's)")
    p.add_argument("--adaptive-starts", type=int, help="closed-loop climbs (default: the search's)")
    args = p.parse_args(argv)
    options = {k: v for k, v in (("context_starts", args.context_starts), ("adaptive_starts", args.adaptive_starts))
               if v is not None}
    result = check(args.profile, args.seed, args.rounds, **options)
    for split in ("train", "rerank", "eval"):
        for ref, row in result[split].items():
            print(f"{split:<6} {ref:<12} searched {row['searched']:.4f}  enumerated {row['enumerated']:.4f}  "
                  f"difference {row['difference']:+.4f} ({row['se']:.4f})")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
