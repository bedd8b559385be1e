"""What the reference search costs: scoring a climb's candidates, and a whole search.

    python benchmarks/bench_references.py [--profile mmlu_pro] [--n-agents 3] [--rounds 3] [--rows 250 1000 4000]
                                          [--search --samples 4000 --rerank-samples 20000]

Prints CPU seconds (``time.process_time``: this process only, so a busy machine slows the figures less
than the wall clock) of one whole-joint-action move of the adaptive search: every joint action of the
block library (216 at N = 3) tried in round 0 of a random policy and played to the end on R "train"
episodes, one batch per candidate (the search before 2026-11-30) against
:func:`topo_env.references.headroom.play_trials`'s batches of up to 60,000 rows (the search now); the two
give the same rewards to the last bit. A climb's moves play between a hundred episodes (one outcome class
of a context set) and all 4,000 of a run's "train" episodes. With ``--search``, the whole searched
references of the team (hidden context) as a training run finds them at these sample sizes (a run's
defaults: 4,000 and 20,000).
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from topo_env.frontends.comm_actions import N_ACTIONS
from topo_env.frontends.comm_batch import CommBatchSimulator
from topo_env.references import headroom
from topo_env.references.oracle import sample_episodes
from topo_env.sim.profiles import get_profile


def bench_block_move(sim: CommBatchSimulator, rows: int) -> tuple[float, float, int]:
    """CPU seconds of one block move's candidates on ``rows`` episodes, played one batch each, then all
    through ``play_trials``, and the number of candidates; raises if the two disagree."""
    tasks, noise, adversaries = sample_episodes(sim, rows, 0, "train")
    library = headroom.joint_library(sim)
    n_class = len(headroom.outcome_names(sim.n))
    current = np.random.default_rng(0).integers(0, N_ACTIONS, (1, sim.rounds, n_class, sim.n))  # one policy
    trials = np.repeat(current[None], len(library), axis=0)
    trials[:, 0, 0, 0] = library  # round 0's joint action (its other classes are never read)
    state, outcome, policy_of = sim.initial_state(rows, adversaries), np.zeros(rows, np.int64), np.zeros(rows, np.int64)
    start = time.process_time()
    alone = np.stack([headroom.play_rounds(sim, state, trial, policy_of, outcome, 0, tasks, noise).reward
                      for trial in trials])
    one_each = time.process_time() - start
    start = time.process_time()
    together = headroom.play_trials(sim, state, trials, policy_of, outcome, 0, tasks, noise)
    batched = time.process_time() - start
    if not np.array_equal(alone, together):
        raise AssertionError("play_trials disagrees with playing each candidate alone")
    return one_each, batched, len(library)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="mmlu_pro")
    parser.add_argument("--n-agents", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rows", type=int, nargs="+", default=[250, 1000, 4000], help="episodes a move plays")
    parser.add_argument("--search", action="store_true", help="also time the whole search (minutes to hours)")
    parser.add_argument("--samples", type=int, default=4000, help="the search's train episodes")
    parser.add_argument("--rerank-samples", type=int, default=20000)
    args = parser.parse_args()
    sim = CommBatchSimulator(get_profile(args.profile), args.n_agents, args.rounds)
    print(f"{args.profile}, N={args.n_agents}, T={args.rounds}: one block move (every joint action of the library "
          f"in round 0, played to the end), CPU s")
    print(f"{'episodes':>9} {'candidates':>11} {'one batch each':>15} {'play_trials':>12} {'speed-up':>9}")
    for rows in args.rows:
        one_each, batched, candidates = bench_block_move(sim, rows)
        print(f"{rows:>9,} {candidates:>11} {one_each:>15.2f} {batched:>12.2f} {one_each / batched:>8.1f}x")
    if args.search:
        start = time.process_time()
        _, selection = headroom.select_searched_references(sim, 0, args.samples, args.rerank_samples, progress=True)
        print(f"whole search (hidden context, {args.rerank_samples:,} re-ranking episodes): "
              f"{time.process_time() - start:,.0f} CPU s; on the re-ranking episodes best fixed "
              f"{selection['selection']['best_fixed']:.4f}, adaptive {selection['selection']['adaptive']:.4f}")


if __name__ == "__main__":
    main()
