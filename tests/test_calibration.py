"""The simulated team reproduces the paper's Table 1 (accuracy) and Table 3 (tokens)."""
import numpy as np
import pytest

from topo_env.sim.batch import BatchSimulator
from topo_env.sim.calibrate import measure
from topo_env.sim.profiles import PROFILES

SAMPLES = 20000  # standard error ~0.3 points at p = 0.8


@pytest.mark.parametrize("name", sorted(n for n, p in PROFILES.items() if p.base_accuracy is not None))
def test_direct_and_debate_accuracy_match_table_1(name):
    p = PROFILES[name]
    m = measure(p, SAMPLES, seed=2024)
    assert abs(m["direct_accuracy"] - p.base_accuracy) <= 0.02, m
    assert abs(m["full_accuracy"] - p.debate_accuracy) <= 0.02, m


def test_profiles_without_table_1_rows_have_no_targets():
    """mmlu_pro_mixed is a team of other models on MMLU-Pro: Table 1 has no row for it."""
    assert PROFILES["mmlu_pro_mixed"].debate_accuracy is None
    assert PROFILES["mmlu_pro_mixed"].subjects == PROFILES["mmlu_pro"].subjects


def test_token_ranges_match_table_3():
    m = measure(PROFILES["mmlu_pro"], 5000, seed=7)
    assert 1200 <= m["direct_tokens"] <= 1600  # Lobster single agent: 97K / 70 items = 1.39K
    assert m["full_tokens"] >= 6700  # dense multi-agent methods: 471K / 70 items and up
    assert m["solo_tokens"] < m["full_tokens"]


def test_tokens_grow_with_in_degree():
    p = PROFILES["mmlu_pro"]
    sim = BatchSimulator(p, 3, 1)
    tasks, noise = sim.sample(np.random.default_rng(5), 5000)
    solo = sim.run(np.array([[0, 0, 0]]), tasks, noise)
    star = sim.run(np.array([[0, 0, 3]]), tasks, noise)  # agent 2 aggregates from both others
    assert star.agent_tokens[:, 2].mean() > solo.agent_tokens[:, 2].mean() + 250
    np.testing.assert_array_equal(star.agent_tokens[:, :2], solo.agent_tokens[:, :2])
