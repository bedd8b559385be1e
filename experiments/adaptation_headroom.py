"""How much can adapting to the task and to round 1 gain over the best fixed topology?

The open-loop oracle (``python -m topo_env.oracle``) plays one joint-action sequence for every
task. This script measures the headroom of two kinds of adaptation on the simulated team
(N = 3, T = 2), with common random numbers and a selection / evaluation split of the sample
episodes (so the winner's curse does not inflate the figures):

* ``fixed``: the best open-loop sequence (selected on the first half, scored on the second);
* ``closed_loop``: for each first-round joint action, the best second-round joint action
  *per class* of what the team saw after round 1: the difficulty bucket of the task x the
  round-1 agreement pattern (all agree / two agree / all differ), a richer policy class than
  any open-loop sequence; the best first-round action is picked on the selection half too.

Usage: ``python -m experiments.adaptation_headroom --profile mmlu_pro [--episodes 8000]
[--adversarial 0]``. Prints both rewards on the evaluation half and their difference.
"""
from __future__ import annotations

import argparse

import numpy as np
from tqdm import tqdm

from topo_env.oracle import draw_samples, joint_actions, round_keys, sequence_names
from topo_env.sim.batch import BatchSimulator
from topo_env.sim.profiles import PROFILES, get_profile
from topo_env.targets import choose_targets

MIN_CLASS_EPISODES = 30  # a class seen less often in selection falls back to the open-loop action


def second_round_rewards(sim: BatchSimulator, state, tasks, noise, table: np.ndarray) -> np.ndarray:
    """(M, 6^N) reward of every second-round joint action after ``state``, per episode."""
    m, n_joint = state.tokens.shape[0], len(table)
    targets = choose_targets(sim.target_rule, state.previous.label, state.previous.conf, sim.n)
    rewards = np.zeros((m, n_joint))
    step = max(1, 60_000 // n_joint)
    for start in range(0, m, step):
        ep = np.arange(start, min(m, start + step))
        pair_ep, pair_act = np.repeat(ep, n_joint), np.tile(np.arange(n_joint), len(ep))
        keys = round_keys(sim, table[pair_act], targets[pair_ep])
        _, reps, inverse = np.unique(pair_ep.astype(np.int64) << 16 | keys, return_index=True, return_inverse=True)
        rows = pair_ep[reps]
        after = sim.run_round(state.take(rows), table[pair_act[reps]], tasks.take(rows), noise.take(rows))
        reward = sim.finish(after, tasks.take(rows), noise.take(rows)).reward
        rewards[ep] = reward[inverse.reshape(-1)].reshape(len(ep), n_joint)
    return rewards


def measure(profile: str, episodes: int, seed: int = 0, adversarial: tuple[int, ...] = ()) -> dict:
    sim = BatchSimulator(get_profile(profile), 3, 2, adversarial_agents=adversarial)
    tasks, noise = draw_samples(sim, episodes, seed, "train")
    table = joint_actions(3)
    ring = np.broadcast_to(choose_targets(sim.target_rule, None, None, 3)[0], (len(table), 3))
    _, first_reps, _ = np.unique(round_keys(sim, table, ring), return_index=True, return_inverse=True)
    select = np.arange(episodes) < episodes // 2
    evaluate = ~select
    best_fixed = best_closed = None
    for first in tqdm(first_reps, desc=f"{profile}: first-round graphs", unit="graph"):
        state = sim.run_round(sim.initial_state(episodes), np.broadcast_to(table[first], (episodes, 3)).copy(),
                              tasks, noise)
        rewards = second_round_rewards(sim, state, tasks, noise, table)
        labels = state.previous.label
        n_distinct = np.array([len(set(row)) for row in labels.tolist()])
        classes = tasks.bucket * 3 + (n_distinct - 1)
        open_loop = int(rewards[select].mean(axis=0).argmax())
        fixed = (rewards[select, open_loop].mean(), rewards[evaluate, open_loop].mean(), first, open_loop)
        chosen = np.full(episodes, open_loop)
        for c in np.unique(classes):
            in_sel = select & (classes == c)
            if in_sel.sum() >= MIN_CLASS_EPISODES:
                chosen[classes == c] = rewards[in_sel].mean(axis=0).argmax()
        picked = rewards[np.arange(episodes), chosen]
        closed = (picked[select].mean(), picked[evaluate].mean(), first)
        if best_fixed is None or fixed[0] > best_fixed[0]:
            best_fixed = fixed
        if best_closed is None or closed[0] > best_closed[0]:
            best_closed = closed
    return {
        "profile": profile, "episodes": episodes, "adversarial": list(adversarial),
        "fixed_reward": float(best_fixed[1]),
        "fixed_sequence": sequence_names(table[[best_fixed[2], best_fixed[3]]]),
        "closed_loop_reward": float(best_closed[1]),
        "closed_loop_first_round": sequence_names(table[[best_closed[2]]])[0],
        "headroom": float(best_closed[1] - best_fixed[1]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", default="mmlu_pro", choices=sorted(PROFILES))
    parser.add_argument("--episodes", type=int, default=8000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--adversarial", type=int, nargs="*", default=[])
    args = parser.parse_args()
    r = measure(args.profile, args.episodes, args.seed, tuple(args.adversarial))
    half = args.episodes - args.episodes // 2
    print(f"{r['profile']}: evaluation half ({half} episodes)")
    print(f"  best fixed sequence     {r['fixed_reward']:.4f}  {r['fixed_sequence']}")
    print(f"  closed loop (bucket x round-1 agreement)  {r['closed_loop_reward']:.4f}  "
          f"first round {r['closed_loop_first_round']}")
    print(f"  headroom                {r['headroom']:+.4f}")


if __name__ == "__main__":
    main()
