"""The simulated team reproduces the paper's Table 1 (accuracy) and Table 3 (tokens)."""
from pathlib import Path

import numpy as np
import pytest

from topo_env.frontends.comm_batch import CommBatchSimulator
from topo_env.sim.calibrate import measure
from topo_env.sim.profiles import PROFILES

DOCS_ENVIRONMENT = Path(__file__).resolve().parents[1] / "docs" / "environment.md"
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


def documented_calibration(profile: str) -> dict[str, float]:
    """The row of docs/environment.md's calibration table (``python -m topo_env.sim.calibrate``,
    20,000 tasks) for ``profile``, by column header; accuracies in points."""
    lines = DOCS_ENVIRONMENT.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| profile | direct |"))
    header = [c.strip() for c in lines[start].strip("|").split("|")]
    for line in lines[start + 2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells[0] == profile:
            return {h: float(c.replace(",", "")) for h, c in zip(header[1:], cells[1:]) if c != "-"}
    raise AssertionError(f"docs/environment.md: no calibration row for {profile}")


def test_token_ranges_match_table_3():
    """Within Table 3's ranges, and (upper and lower bounds alike) within 4 standard errors of what
    docs/environment.md publishes for the model."""
    samples, seed = 5000, 7
    m = measure(PROFILES["mmlu_pro"], samples, seed=seed)
    assert 1200 <= m["direct_tokens"] <= 1600  # Lobster single agent: 97K / 70 items = 1.39K
    assert m["full_tokens"] >= 6700  # dense multi-agent methods: 471K / 70 items and up
    assert m["solo_tokens"] < m["full_tokens"]
    sim = CommBatchSimulator(PROFILES["mmlu_pro"], 3, 2)  # measure()'s episodes again, for their spread
    tasks, noise = sim.sample(np.random.default_rng(seed), samples)
    per_task = {"direct": sim.direct(tasks, noise)[1], "solo team": sim.run(np.zeros((2, 3), np.int64), tasks, noise).tokens,
                "full team": sim.run(np.ones((2, 3), np.int64), tasks, noise).tokens}
    documented = documented_calibration("mmlu_pro")
    for name, tokens in per_task.items():
        assert tokens.mean() == m[f"{name.split()[0]}_tokens"]
        standard_error = tokens.std() / np.sqrt(samples) * np.sqrt(1 + samples / 20000)  # both measurements' noise
        assert abs(tokens.mean() - documented[f"tokens {name}"]) < 4 * standard_error + 0.5, name


def test_tokens_grow_with_in_degree():
    p = PROFILES["mmlu_pro"]
    sim = CommBatchSimulator(p, 3, 1)
    tasks, noise = sim.sample(np.random.default_rng(5), 5000)
    solo = sim.run(np.array([[0, 0, 0]]), tasks, noise)
    star = sim.run(np.array([[0, 0, 3]]), tasks, noise)  # agent 2 aggregates from both others
    assert star.agent_tokens[:, 2].mean() > solo.agent_tokens[:, 2].mean() + 250
    np.testing.assert_array_equal(star.agent_tokens[:, :2], solo.agent_tokens[:, :2])
