"""What does one agent's change of action gain over a fixed sequence, and can a learner see it?

Every single-agent deviation from a base open-loop sequence (one agent, one round, one other
action: T x N x 5 of them) is scored on the simulated team with common random numbers, so the
paired standard error of each gain is small. A learner sees no such pairing: each episode's
reward is one draw with the spread ``reward_std`` of the base sequence, so to tell a gain g from
zero at two standard errors it needs about ``(2 * reward_std / g)^2`` episodes of that deviation
(``episodes_needed``). With ``--config`` the script also prints how many deviation rounds of
each (round, agent, action) that training config's exploration plays in expectation:
``sum over episodes of epsilon * exploration.deviation_explore / (N * 5)``; with
``exploration.deviation_rank_decay`` d < 1, the deviating agent's k-th best action gets a share
``d^k / sum_j d^j`` of its deviations instead of 1 / 5, and the script prints the best-ranked
and the worst-ranked action's count.

With ``--team-sequences`` it scores instead every sequence of team actions (all agents play
the same action in a round: 6^T of them, what team exploration tries) and prints, best first,
each one's gap below the best and the episodes a learner needs to tell that gap from zero: how
flat the landscape around the optimum is that a learner has to resolve.

Usage: ``python -m experiments.deviation_gains --profile mmlu_pro --adversarial 0 [--base solo]
[--samples 100000] [--top 10] [--config configs/qmix_long.yaml --set exploration.deviation_explore=0.5]``;
``python -m experiments.deviation_gains --profile aime26 --team-sequences [--top 12]``.
"""
from __future__ import annotations

import argparse
import itertools

import numpy as np

from learners.config import load_experiment
from learners.schedules import epsilon_at
from topo_env.frontends.comm_actions import ACTION_NAMES, N_ACTIONS
from topo_env.references.baselines import FIXED_BASELINES, open_loop_actions
from topo_env.engine.cli import format_table
from topo_env.references.oracle import draw_samples
from topo_env.frontends.comm_batch import CommBatchSimulator
from topo_env.sim.profiles import PROFILES, get_profile


def _episodes_needed(spread: float, gap: float) -> int | str:
    """Unpaired episodes to tell ``gap`` from zero at two standard errors ("-" if it is not positive)."""
    return int(round((2 * spread / gap) ** 2)) if gap > 0 else "-"


def deviation_gains(profile: str, base: str = "solo", rounds: int = 2, n_agents: int = 3, samples: int = 100_000,
                    seed: int = 0, adversarial: tuple[int, ...] = ()) -> tuple[float, float, list[dict]]:
    """(base mean reward, base per-episode reward std, one row per deviation sorted by gain):
    each row has ``round``, ``agent``, ``action``, ``gain`` (mean reward minus the base's, same
    episodes), ``paired_se`` and ``episodes_needed`` (unpaired, two standard errors)."""
    sim = CommBatchSimulator(get_profile(profile), n_agents, rounds, adversarial_agents=adversarial)
    tasks, noise = draw_samples(sim, samples, seed, "eval")
    base_actions = open_loop_actions(base, n_agents, rounds, sim.roles)
    base_reward = sim.run(base_actions, tasks, noise).reward
    spread = float(base_reward.std())
    rows = []
    for t in range(rounds):
        for i in range(n_agents):
            for a in range(N_ACTIONS):
                if a == base_actions[t, i]:
                    continue
                actions = base_actions.copy()
                actions[t, i] = a
                diff = sim.run(actions, tasks, noise).reward - base_reward
                gain = float(diff.mean())
                rows.append({"round": t + 1, "agent": i, "action": ACTION_NAMES[a], "gain": gain,
                             "paired_se": float(diff.std() / np.sqrt(samples)),
                             "episodes_needed": _episodes_needed(spread, gain)})
    rows.sort(key=lambda r: -r["gain"])
    return float(base_reward.mean()), spread, rows


def team_sequence_gaps(profile: str, rounds: int = 2, n_agents: int = 3, samples: int = 100_000, seed: int = 0,
                       adversarial: tuple[int, ...] = ()) -> tuple[float, float, list[dict]]:
    """(best mean reward, the best sequence's per-episode reward std, one row per team sequence,
    best first): every sequence where the whole team plays one action per round, scored on the
    same episodes. Each row has ``sequence`` (round actions joined by " / "), ``reward``, ``gap``
    (the best's mean reward minus this one's, same episodes), ``paired_se`` and
    ``episodes_needed`` (unpaired, two standard errors, with the best's spread)."""
    sim = CommBatchSimulator(get_profile(profile), n_agents, rounds, adversarial_agents=adversarial)
    tasks, noise = draw_samples(sim, samples, seed, "eval")
    scored = [(sequence, sim.run(np.repeat(np.array(sequence)[:, None], n_agents, axis=1), tasks, noise).reward)
              for sequence in itertools.product(range(N_ACTIONS), repeat=rounds)]
    scored.sort(key=lambda item: -item[1].mean())
    best = scored[0][1]
    spread = float(best.std())
    rows = []
    for sequence, reward in scored:
        diff = best - reward
        gap = float(diff.mean())
        rows.append({"sequence": " / ".join(ACTION_NAMES[a] for a in sequence), "reward": float(reward.mean()),
                     "gap": gap, "paired_se": float(diff.std() / np.sqrt(samples)),
                     "episodes_needed": _episodes_needed(spread, gap)})
    return float(best.mean()), spread, rows


def expected_deviation_rounds(config: str | None, overrides: list[str], n_agents: int = 3) -> np.ndarray:
    """Expected deviation rounds of one (round, agent, action) over a training run of ``config``,
    by the action's rank among the agent's N_ACTIONS - 1 non-greedy ones (best first; all equal
    when ``exploration.deviation_rank_decay`` is 1)."""
    cfg = load_experiment(config, overrides)
    epsilon_sum = sum(epsilon_at(k, cfg) for k in range(cfg.train.episodes))
    weights = cfg.exploration.deviation_rank_decay ** np.arange(N_ACTIONS - 1)
    return epsilon_sum * cfg.exploration.deviation_explore / n_agents * weights / weights.sum()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", default="mmlu_pro", choices=sorted(PROFILES))
    parser.add_argument("--base", default="solo", choices=FIXED_BASELINES, help="the fixed sequence deviated from")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--samples", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--adversarial", type=int, nargs="*", default=[])
    parser.add_argument("--top", type=int, default=10, help="rows to print (best gains first)")
    parser.add_argument("--team-sequences", action="store_true",
                        help="score every team-action sequence (one action for the whole team per round) instead")
    parser.add_argument("--config", default=None, help="a training config whose deviation rounds to count")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="overrides for --config")
    args = parser.parse_args()
    if args.team_sequences:
        best, spread, rows = team_sequence_gaps(args.profile, args.rounds, samples=args.samples, seed=args.seed,
                                                adversarial=tuple(args.adversarial))
        print(f"{args.profile}, adversaries {args.adversarial or 'none'}: best team sequence reward {best:.4f}, "
              f"per-episode std {spread:.3f} ({args.samples} episodes, common random numbers); "
              f"{sum(r['gap'] <= 0.01 for r in rows)} of {len(rows)} sequences within 0.01 of it")
        print(format_table(rows[:args.top], ["sequence", "reward", "gap", "paired_se", "episodes_needed"]))
        return
    mean, spread, rows = deviation_gains(args.profile, args.base, args.rounds, samples=args.samples, seed=args.seed,
                                         adversarial=tuple(args.adversarial))
    print(f"{args.profile}, adversaries {args.adversarial or 'none'}: base '{args.base}' reward {mean:.4f}, "
          f"per-episode std {spread:.3f} ({args.samples} episodes, common random numbers)")
    print(format_table(rows[:args.top], ["round", "agent", "action", "gain", "paired_se", "episodes_needed"]))
    if args.config is not None or args.set:
        rounds = expected_deviation_rounds(args.config, args.set)
        counts = f"{rounds[0]:.0f}" if np.ptp(rounds) == 0 else \
            f"{rounds[0]:.0f} for an agent's best-ranked other action, {rounds[-1]:.0f} for its worst"
        print(f"deviation rounds of one (round, agent, action) in training ({args.config or 'defaults'} "
              f"{' '.join(args.set)}): {counts}")


if __name__ == "__main__":
    main()
