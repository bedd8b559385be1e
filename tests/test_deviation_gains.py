"""experiments/deviation_gains.py: the gains it reports are the simulator's, on common episodes."""
from __future__ import annotations

import numpy as np
import pytest

from experiments import deviation_gains
from topo_env.frontends.comm_actions import CommAction
from topo_env.references.oracle import draw_samples
from topo_env.frontends.comm_batch import CommBatchSimulator
from topo_env.sim.profiles import get_profile


def test_every_single_agent_deviation_is_scored_against_the_base_on_the_same_episodes():
    mean, spread, rows = deviation_gains.deviation_gains("mmlu_pro", "solo", samples=3000, seed=5, adversarial=(0,))
    assert len(rows) == 2 * 3 * 5  # rounds x agents x other actions
    assert {(r["round"], r["agent"]) for r in rows} == {(t, i) for t in (1, 2) for i in range(3)}
    assert "solo_process" not in {r["action"] for r in rows}
    gains = [r["gain"] for r in rows]
    assert gains == sorted(gains, reverse=True)
    # one row recomputed by hand: agent 1 execute_verify in round 2, against all solo, same samples
    sim = CommBatchSimulator(get_profile("mmlu_pro"), 3, 2, adversarial_agents=(0,))
    tasks, noise = draw_samples(sim, 3000, 5, "eval")
    base = sim.run(np.zeros((2, 3), np.int64), tasks, noise).reward
    dev = np.zeros((2, 3), np.int64)
    dev[1, 1] = CommAction.EXECUTE_VERIFY
    diff = sim.run(dev, tasks, noise).reward - base
    row = next(r for r in rows if (r["round"], r["agent"], r["action"]) == (2, 1, "execute_verify"))
    assert row["gain"] == pytest.approx(diff.mean())
    assert row["paired_se"] == pytest.approx(diff.std() / np.sqrt(3000))
    assert (mean, spread) == (pytest.approx(base.mean()), pytest.approx(base.std()))
    for r in rows:
        if r["gain"] > 0:
            assert r["episodes_needed"] == round((2 * spread / r["gain"]) ** 2)
        else:
            assert r["episodes_needed"] == "-"


def test_expected_deviation_rounds_follow_the_epsilon_schedule():
    # epsilon 1 -> 0.05 over 100 episodes, then 0.05: each round deviates with epsilon * share, 1 in 3 x 5 of them this one
    over = ["train.episodes=200", "exploration.eps_anneal_episodes=100", "exploration.deviation_explore=0.5"]
    epsilon_sum = 100 * (1.0 + 0.05) / 2 + (1.0 - 0.05) / 2 + 100 * 0.05  # episodes 0..99 annealing, then the floor
    assert deviation_gains.expected_deviation_rounds(None, over) == pytest.approx([epsilon_sum * 0.5 / 15] * 5)
    assert (deviation_gains.expected_deviation_rounds(None, ["train.episodes=200"]) == 0.0).all()
    # ranked deviations: the k-th best other action gets 0.5^k / (1 + 0.5 + ... + 0.5^4) of an agent's deviations
    ranked = deviation_gains.expected_deviation_rounds(None, over + ["exploration.deviation_rank_decay=0.5"])
    assert ranked == pytest.approx(epsilon_sum * 0.5 / 3 * 0.5 ** np.arange(5) / 1.9375)


def test_every_team_sequence_is_scored_against_the_best_on_the_same_episodes():
    best, spread, rows = deviation_gains.team_sequence_gaps("aime26", samples=2000, seed=3)
    assert len(rows) == 6 ** 2 and len({r["sequence"] for r in rows}) == 36
    rewards = [r["reward"] for r in rows]
    assert rewards == sorted(rewards, reverse=True) and rows[0]["gap"] == 0.0 and best == rows[0]["reward"]
    # one row recomputed by hand: everyone execute_verify in round 1, everyone solo in round 2
    sim = CommBatchSimulator(get_profile("aime26"), 3, 2)
    tasks, noise = draw_samples(sim, 2000, 3, "eval")
    top = np.array([[CommAction[name.upper()]] * 3 for name in rows[0]["sequence"].split(" / ")])
    top_reward = sim.run(top, tasks, noise).reward
    mine = np.array([[CommAction.EXECUTE_VERIFY] * 3, [CommAction.SOLO_PROCESS] * 3])
    diff = top_reward - sim.run(mine, tasks, noise).reward
    row = next(r for r in rows if r["sequence"] == "execute_verify / solo_process")
    assert row["gap"] == pytest.approx(diff.mean()) and row["gap"] > 0
    assert row["paired_se"] == pytest.approx(diff.std() / np.sqrt(2000))
    assert spread == pytest.approx(top_reward.std())
    assert row["episodes_needed"] == round((2 * spread / row["gap"]) ** 2)
