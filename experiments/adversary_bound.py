"""How far any topology can cut an adversary's harm on the simulated team (issue 27, section 5).

Every open-loop sequence of joint actions (6^(N*T), N = 3, T = 2) is scored on the same episodes
for accuracy (reward with w_acc = 1, w_tok = 0), once clean and once with the adversary at each
position. Prints, in accuracy points:

- the fully connected team's and all-solo's drop from clean to attacked (adversary position
  uniform over the three);
- the best clean sequence's accuracy, and the best attacked accuracy any controller that KNOWS
  the adversary's position could reach with an open-loop sequence (the max over sequences per
  position, averaged over positions: optimistic, since the max is taken on the scoring episodes);
- the same when the controller learns the position only after round 1 (the first round's joint
  action is the same for every position, the second may depend on it): the most a policy that
  identifies the adversary perfectly from round 1's outputs can reach;
- how often round 1's outputs (every agent alone) name the adversary: the agent whose answer
  differs from the two others' when they agree, else the most confident one (an observable rule);
- the clean accuracy a policy may have at most for its drop to be at most half the fully
  connected team's: that attacked accuracy + half the fully connected team's drop.

    python -m experiments.adversary_bound --profile mmlu_pro --samples 2000
"""
from __future__ import annotations

import argparse

import numpy as np

from topo_env.references.baselines import open_loop_actions
from topo_env.references.oracle import sample_episodes, draw_samples, score_sequences, sequence_index
from topo_env.frontends.comm_batch import CommBatchSimulator
from topo_env.sim.profiles import get_profile

AGENTS, ROUNDS = 3, 2


def sequence_accuracy(profile: str, adversary: int | None, samples: int, seed: int) -> np.ndarray:
    """(6^(N*T),) accuracy of every open-loop sequence on ``samples`` episodes (the same tasks and
    noise for every adversary position)."""
    sim = CommBatchSimulator(get_profile(profile), AGENTS, ROUNDS, w_acc=1.0, w_tok=0.0,
                         adversarial_agents=() if adversary is None else (adversary,))
    tasks, noise = draw_samples(sim, samples, seed, "train")
    return score_sequences(sim, tasks, noise).sum(axis=1) / samples


def identification_rate(profile: str, samples: int, seed: int) -> float:
    """Share of episodes (one adversary at a random position, everyone solo in round 1) in which
    the odd one out (else the most confident agent) after round 1 is the adversary."""
    sim = CommBatchSimulator(get_profile(profile), AGENTS, ROUNDS, adversary_position="random", n_adversaries=1)
    tasks, noise, adversaries = sample_episodes(sim, samples, seed, "eval")
    solo = np.zeros((samples, AGENTS), dtype=np.int64)
    state = sim.run_round(sim.initial_state(samples, adversaries), solo, tasks, noise)
    label, conf = state.previous.label, state.previous.conf
    guess = conf.argmax(axis=1)
    for i in range(AGENTS):
        j, k = (x for x in range(AGENTS) if x != i)
        odd = (label[:, j] == label[:, k]) & (label[:, i] != label[:, j])
        guess[odd] = i
    return float((guess == adversaries.argmax(axis=1)).mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", default="mmlu_pro")
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    clean = sequence_accuracy(args.profile, None, args.samples, args.seed)
    attacked = np.stack([sequence_accuracy(args.profile, p, args.samples, args.seed) for p in range(AGENTS)])
    full = sequence_index(open_loop_actions("full", AGENTS, ROUNDS))
    solo = sequence_index(open_loop_actions("solo", AGENTS, ROUNDS))
    drop = {name: 100 * (clean[k] - attacked[:, k].mean()) for name, k in (("fully_connected", full), ("all_solo", solo))}
    best_clean = 100 * clean.max()
    best_attacked = 100 * attacked.max(axis=1).mean()
    # sequence index = first joint action * 6^N + second joint action (topo_env.references.oracle.sequence_actions)
    per_round = attacked.reshape(AGENTS, -1, 6 ** AGENTS)
    known_after_round_1 = 100 * per_round.max(axis=2).mean(axis=0).max()
    least_drop = 100 * (clean - attacked.mean(axis=0)).min()
    print(f"profile {args.profile}, N={AGENTS}, T={ROUNDS}, {args.samples} episodes, seed {args.seed}; accuracy in points")
    print(f"{'fully connected: clean / attacked / drop':<64}{100 * clean[full]:7.1f}{100 * attacked[:, full].mean():7.1f}"
          f"{drop['fully_connected']:7.1f}")
    print(f"{'all solo: clean / attacked / drop':<64}{100 * clean[solo]:7.1f}{100 * attacked[:, solo].mean():7.1f}"
          f"{drop['all_solo']:7.1f}")
    print(f"{'smallest drop of any open-loop sequence':<64}{least_drop:21.1f}")
    print(f"{'best clean accuracy of any sequence':<64}{best_clean:21.1f}")
    print(f"{'best attacked accuracy, adversary position known':<64}{best_attacked:21.1f}")
    print(f"{'best attacked accuracy, position known after round 1':<64}{known_after_round_1:21.1f}")
    rate = identification_rate(args.profile, 20000, args.seed)
    print(f"{'adversary named by round 1 (odd one out, else most confident), %':<64}{100 * rate:21.1f}")
    half = drop["fully_connected"] / 2
    print(f"{'most clean accuracy with a drop <= half the full team drop':<64}{best_attacked + half:21.1f}")
    print(f"{'  the same, position known after round 1':<64}{known_after_round_1 + half:21.1f}")


if __name__ == "__main__":
    main()
