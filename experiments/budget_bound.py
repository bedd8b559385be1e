"""How much of the headroom an idealised learner can earn from E training episodes.

The learner is given far more than QMIX: it reads each task's subject as a Bayes-optimal reader
of the cue words would (``experiments.observable_headroom.map_reading``), it is told a short list
of good candidate sequences up front (the best fixed sequence and every context-only reference
policy, ``topo_env.references.headroom.select_references``), and it spreads its E episodes evenly over
(subject read, candidate) cells, then plays per subject the candidate with the best mean reward.
What it earns on the held-out episodes, as a share of the headroom (adaptive - best fixed), bounds
what a learner with E episodes can be expected to reach with this kind of data: its only
handicap is the noise of E episodes.

    python -m experiments.budget_bound --profile mmlu_pro --episodes 1000 2000 4000 8000 --seeds 0 1 2
"""
from __future__ import annotations

import argparse
from collections.abc import Sequence

import numpy as np

from experiments.observable_headroom import map_reading
from topo_env.sim.profiles import profile_argument
from topo_env.references.headroom import (
    hidden_context, index_policies, play_policies, play_references, select_references,
)
from topo_env.references.oracle import sample_episodes
from topo_env.sim.batch import BatchSimulator
from topo_env.sim.profiles import get_profile


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--profile", type=profile_argument, default="mmlu_pro")
    p.add_argument("--episodes", type=int, nargs="+", default=[1000, 2000, 4000, 8000])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--held-out", type=int, default=20000)
    p.add_argument("--arms", type=int, default=0,
                   help="give the learner only the best fixed sequence and the K context-only policies that cover "
                        "the largest share of contexts (0: all of them)")
    p.add_argument("--library", action="store_true",
                   help="instead of the references' policies, the 25 open-loop sequences of the fixed baselines' "
                        "joint actions (exploration.topology_explore's library, one per round)")
    p.add_argument("--shrink", type=float, default=0.0,
                   help="shrink each (subject, candidate) mean toward the candidate's mean over all subjects "
                        "with this many pseudo-episodes (empirical Bayes; 0: raw means)")
    args = p.parse_args(argv)
    profile = get_profile(args.profile)
    sim = BatchSimulator(profile, 3, 2)
    refs, _ = select_references(sim, seed=0, progress=False)
    held = sample_episodes(sim, args.held_out, 0, "eval")
    played = play_references(sim, refs, *held)
    fixed, adaptive = played["best_fixed"].reward, played["adaptive"].reward
    headroom = adaptive.mean() - fixed.mean()
    fixed_policy = refs.policies("best_fixed", refs.contexts[:1], sim)
    arms = np.unique(np.concatenate([refs.context_only, fixed_policy]), axis=0)
    if args.library:
        from learners.runner import topology_library
        from topo_env.references.oracle import joint_actions
        table = joint_actions(3)
        rows = [int(np.flatnonzero((table == joint).all(axis=1))[0]) for joint in topology_library(3, sim.roles)]
        arms = index_policies(np.array([[a] + [b] * 5 for a in rows for b in rows], dtype=np.int64), sim)
    elif args.arms:
        share = np.zeros(len(refs.contexts))
        ctx_rows = hidden_context(held[0], held[2])
        for c, row in enumerate(refs.contexts):
            share[c] = (ctx_rows == row).all(axis=1).mean()
        weight = {a.tobytes(): 0.0 for a in arms}  # a policy's bytes -> the held-out share of its contexts
        for c, policy in enumerate(refs.context_only):
            weight[policy.tobytes()] += share[c]
        fixed_key = fixed_policy[0].tobytes()
        weight[fixed_key] = -1.0
        ranked = [k for k in sorted(weight, key=weight.get, reverse=True) if k != fixed_key][:args.arms]
        arms = np.stack([fixed_policy[0]] + [np.frombuffer(k, np.int64).reshape(fixed_policy[0].shape) for k in ranked])
    prior = np.asarray(profile.subject_probs)
    n_subjects = len(prior)

    def read(tasks, rng):
        return map_reading(tasks.subject, prior, profile.subject_cue_words, profile.subject_cue_fidelity, rng)

    print(f"{args.profile}: best fixed {fixed.mean():.4f}, adaptive {adaptive.mean():.4f}, headroom {headroom:+.4f}; "
          f"{len(arms)} candidate policies given to the learner")
    for episodes in args.episodes:
        shares = []
        for seed in args.seeds:
            rng = np.random.default_rng([seed, 77])
            tasks, noise = sim.sample(rng, episodes)
            seen = read(tasks, rng)
            arm = np.zeros(episodes, dtype=np.int64)
            for s in range(n_subjects):  # even spread over the candidates within each subject read
                rows = np.flatnonzero(seen == s)
                arm[rows] = rng.permutation(len(rows)) % len(arms)
            reward = play_policies(sim, arms[arm], tasks, noise, np.zeros((episodes, 3), bool)).reward
            total = np.zeros((n_subjects, len(arms)))
            count = np.zeros((n_subjects, len(arms)))
            np.add.at(total, (seen, arm), reward)
            np.add.at(count, (seen, arm), 1)
            overall = total.sum(axis=0) / np.maximum(count.sum(axis=0), 1)
            means = (total + args.shrink * overall) / np.maximum(count + args.shrink, 1e-9)
            means = np.where(count + args.shrink > 0, means, -np.inf)
            choice = means.argmax(axis=1)
            held_seen = read(held[0], np.random.default_rng([seed, 78]))
            learned = play_policies(sim, arms[choice[held_seen]], *held).reward
            shares.append((learned.mean() - fixed.mean()) / headroom)
        shares = np.array(shares)
        print(f"  {episodes:6d} episodes: headroom share {shares.mean():.3f} "
              f"(SE {shares.std(ddof=1) / np.sqrt(len(shares)) if len(shares) > 1 else 0:.3f}; seeds {np.round(shares, 3).tolist()})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
