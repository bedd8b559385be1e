"""The best open-loop sequence of a team of any size and any number of rounds, found without enumerating.

The exhaustive oracle (:mod:`topo_env.references.oracle`) scores all 6^(N*T) sequences, which is
feasible for N = 3 and T <= 2 only (46,656 sequences; N = 5, T = 3 has 4.7e11). This search climbs
instead: **coordinate ascent with common random numbers**. Every candidate is scored on the same M
"train" episodes of the oracle (:func:`topo_env.references.oracle.sample_episodes`: the same tasks, noise
and adversary placements), so two candidates' difference carries no task-to-task noise. From a start,
one coordinate (round t, agent i) at a time takes the best of its 6 actions with the others held (the
6 candidates in one batch of 6 M episodes); sweeps over every coordinate repeat until a sweep changes
nothing (or :data:`MAX_SWEEPS`). The starts are the fixed baselines and the uniform sequences (every
agent the same action every round), of which the ``starts`` best by their train score are climbed.

As the oracle does, the winner is not taken on the episodes that chose it (the winner's curse): the
``shortlist`` best sequences met on the climbs and the fixed baselines are re-scored on R fresh
"rerank" episodes, the best there is the result, and its figures are measured on E more ("eval").

Where both run (N = 3, T <= 2) the exhaustive optimum checks it: ``tests/test_search.py`` (T = 1) and
``python -m topo_env.references.search --profile mmlu_pro --rounds 2 --check`` (T = 2).

    python -m topo_env.references.search --profile mmlu_pro --n-agents 5 --rounds 3 [--samples M] [--seed S] [--json]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
from tqdm import tqdm

from topo_env.engine.cli import OneLineParser, fail, positive_int, run_main
from topo_env.frontends.comm_actions import N_ACTIONS
from topo_env.frontends.comm_batch import CommBatchSimulator
from topo_env.references.baselines import FIXED_BASELINES, open_loop_actions
from topo_env.references import oracle
from topo_env.references.oracle import sample_episodes, sequence_names, standard_error
from topo_env.sim.batch import TaskArrays
from topo_env.sim.model import EpisodeNoise
from topo_env.sim.profiles import get_profile

MAX_SWEEPS = 6
DEFAULT_STARTS = 3
DEFAULT_SAMPLES = 2000
DEFAULT_SHORTLIST = 16
PROG = "python -m topo_env.references.search"

Episodes = tuple[TaskArrays, EpisodeNoise, np.ndarray]
"""Tasks, noise and (M, N) adversary masks of M episodes (:func:`~topo_env.references.oracle.sample_episodes`)."""


def chosen_actions(result: dict[str, Any]) -> np.ndarray:
    """The (T, N) actions of :func:`best_fixed_sequence`'s chosen sequence."""
    return oracle.actions_from_names(result["fixed"]["sequence"])


def mean_rewards(sim: CommBatchSimulator, sequences: np.ndarray, episodes: Episodes) -> np.ndarray:
    """(K,) mean reward of each of the K open-loop sequences ``sequences`` (K, T, N) on the same M
    episodes (common random numbers): one batch of K M episodes."""
    tasks, noise, adversaries = episodes
    k, m = len(sequences), len(tasks.difficulty)
    rows = np.tile(np.arange(m), k)
    result = sim.run(np.repeat(sequences, m, axis=0), tasks.take(rows), noise.take(rows), adversaries[rows])
    return result.reward.reshape(k, m).mean(axis=1)


def starting_sequences(sim: CommBatchSimulator) -> np.ndarray:
    """(S, T, N): the fixed baselines' sequences and the uniform ones, without repeats."""
    starts = [open_loop_actions(name, sim.n, sim.rounds, sim.roles) for name in FIXED_BASELINES]
    starts += [np.full((sim.rounds, sim.n), a, dtype=np.int64) for a in range(N_ACTIONS)]
    return np.unique(np.stack(starts), axis=0)


def climb(sim: CommBatchSimulator, start: np.ndarray, episodes: Episodes, seen: dict[bytes, float],
          max_sweeps: int = MAX_SWEEPS) -> np.ndarray:
    """Coordinate ascent from ``start`` (T, N) on ``episodes`` (module docstring); every sequence scored is
    added to ``seen`` (its bytes -> train mean). Returns the sequence it ends on."""
    current = np.array(start, dtype=np.int64)
    for _ in range(max_sweeps):
        changed = False
        for t in range(sim.rounds):
            for i in range(sim.n):
                candidates = np.repeat(current[None], N_ACTIONS, axis=0)
                candidates[:, t, i] = np.arange(N_ACTIONS)
                scores = mean_rewards(sim, candidates, episodes)
                for seq, score in zip(candidates, scores):
                    seen[seq.tobytes()] = float(score)
                best = int(np.argmax(scores))  # the first best: the current action wins a tie only if it is first
                if scores[best] > scores[current[t, i]]:
                    current, changed = candidates[best].copy(), True
        if not changed:
            break
    return current


def best_fixed_sequence(sim: CommBatchSimulator, seed: int = 0, samples: int = DEFAULT_SAMPLES,
                        rerank_samples: int | None = None, eval_samples: int | None = None,
                        starts: int = DEFAULT_STARTS, shortlist: int = DEFAULT_SHORTLIST,
                        progress: bool = True) -> dict[str, Any]:
    """The best open-loop sequence of ``sim``'s team (module docstring), on the oracle's samples of
    ``seed``: ``samples`` "train" episodes for the climbs, ``rerank_samples`` (default 4 M) to choose,
    ``eval_samples`` (default 4 M) to report. Returns ``fixed`` ({"reward" (eval), "reward_se",
    "reward_selection" (rerank), "accuracy", "tokens_per_task", "sequence": action names per round}),
    ``baselines`` ({name: {"reward", "reward_selection"}}), ``climbs`` (each start's sequence names and
    end score), ``evaluated`` (distinct sequences scored), ``seconds``."""
    started = time.perf_counter()
    m = int(samples)
    train = sample_episodes(sim, m, seed, "train")
    seen: dict[bytes, float] = {}
    pool = starting_sequences(sim)
    first = mean_rewards(sim, pool, train)
    climbs = []
    best_starts = np.argsort(-first, kind="stable")[:starts]
    for k in tqdm(best_starts, desc=f"search {sim.profile.name} N={sim.n} T={sim.rounds}",
                  disable=not progress, file=sys.stderr, unit="climb"):
        end = climb(sim, pool[k], train, seen)
        climbs.append({"start": sequence_names(pool[k]), "end": sequence_names(end), "train": seen[end.tobytes()]})
    shape = (sim.rounds, sim.n)
    leaders = sorted(seen, key=seen.__getitem__, reverse=True)[:shortlist]
    baselines = {name: open_loop_actions(name, sim.n, sim.rounds, sim.roles) for name in FIXED_BASELINES}
    candidates = np.unique(np.concatenate([np.stack([np.frombuffer(b, dtype=np.int64).reshape(shape) for b in leaders]),
                                           np.stack(list(baselines.values()))]), axis=0)
    rerank = sample_episodes(sim, 4 * m if rerank_samples is None else int(rerank_samples), seed, "rerank")
    rerank_scores = mean_rewards(sim, candidates, rerank)
    winner = candidates[int(np.argmax(rerank_scores))]
    tasks, noise, adversaries = sample_episodes(sim, 4 * m if eval_samples is None else int(eval_samples), seed, "eval")
    result = sim.run(winner, tasks, noise, adversaries)
    return {
        "fixed": {"reward": float(result.reward.mean()), "reward_se": standard_error(result.reward),
                  "reward_selection": float(rerank_scores.max()), "accuracy": float(result.accuracy.mean()),
                  "tokens_per_task": float(result.tokens.mean()), "sequence": sequence_names(winner)},
        "baselines": {name: {"reward": float(sim.run(acts, tasks, noise, adversaries).reward.mean()),
                             "reward_selection": float(mean_rewards(sim, acts[None], rerank)[0])}
                      for name, acts in baselines.items()},
        "climbs": climbs, "evaluated": len(seen), "seconds": round(time.perf_counter() - started, 2),
    }


def check_against_exhaustive(sim: CommBatchSimulator, profile: str, result: dict[str, Any], seed: int,
                             samples: int, progress: bool = True) -> dict[str, Any]:
    """The exhaustive oracle's best fixed sequence (:func:`topo_env.references.oracle.search`, N = 3, T <= 2,
    the same seed and sample sizes) against ``result``'s (:func:`best_fixed_sequence`), both played on the
    same eval episodes: ``exhaustive`` (its reward, sequence), ``difference`` (search - exhaustive, mean
    over the paired episodes) and its ``se``."""
    exhaustive = oracle.search(profile, rounds=sim.rounds, samples=samples, seed=seed, progress=progress,
                               n_agents=sim.n)
    tasks, noise, adversaries = sample_episodes(sim, 4 * samples, seed, "eval")
    ours, theirs = (sim.run(oracle.actions_from_names(names), tasks, noise, adversaries).reward
                    for names in (result["fixed"]["sequence"], exhaustive["fixed"]["sequence"]))
    return {"exhaustive": {"reward": float(theirs.mean()), "sequence": exhaustive["fixed"]["sequence"],
                           "sequences": exhaustive["sequences"]},
            "difference": float((ours - theirs).mean()), "se": standard_error(ours - theirs)}


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog=PROG, description="The best open-loop sequence of any team size and number of rounds, "
                                             "by coordinate ascent with common random numbers.")
    p.add_argument("--profile", default="mmlu_pro", help="a built-in profile or a profile YAML")
    p.add_argument("--n-agents", type=positive_int, default=3)
    p.add_argument("--rounds", type=positive_int, default=2)
    p.add_argument("--samples", type=positive_int, default=DEFAULT_SAMPLES, help="train episodes (rerank, eval: 4x)")
    p.add_argument("--starts", type=positive_int, default=DEFAULT_STARTS, help="climbs, from the best starts")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--check", action="store_true", help="N = 3, T <= 2: also the exhaustive optimum, on the same "
                                                        "eval episodes")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        sim = CommBatchSimulator(get_profile(args.profile), args.n_agents, args.rounds)
        if args.check:
            oracle.check_setting(args.n_agents, args.rounds)
    except ValueError as err:
        fail(PROG, str(err))
    result = best_fixed_sequence(sim, seed=args.seed, samples=args.samples, starts=args.starts, progress=not args.json)
    if args.check:
        result["check"] = check_against_exhaustive(sim, args.profile, result, args.seed, args.samples, not args.json)
    if args.json:
        print(json.dumps(result))
        return 0
    fixed = result["fixed"]
    print(f"{args.profile}, N={args.n_agents}, T={args.rounds}: {result['evaluated']} sequences scored "
          f"in {result['seconds']} s")
    print(f"best fixed sequence: reward {fixed['reward']:.4f} ({fixed['reward_se']:.4f}), accuracy "
          f"{100 * fixed['accuracy']:.1f}%, {fixed['tokens_per_task']:,.0f} tokens/task")
    for t, names in enumerate(fixed["sequence"]):
        print(f"  round {t + 1}: {' '.join(names)}")
    for name, row in result["baselines"].items():
        print(f"  {name:<7} reward {row['reward']:.4f}")
    if args.check:
        check = result["check"]
        print(f"exhaustive optimum ({check['exhaustive']['sequences']:,} sequences): reward "
              f"{check['exhaustive']['reward']:.4f}; search - exhaustive {check['difference']:+.4f} "
              f"(paired SE {check['se']:.4f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main, PROG))
