"""Means over seeds (learners/seeds.py): figures by hand, and seeds whose validation kept the final network."""
from __future__ import annotations

import math

import pytest

from learners.seeds import format_seeds, summarize_seeds


def seed_result(qmix: float, solo: float, last: float | None, share: float) -> dict:
    """A results.json reduced to what the summary reads; ``last`` None: validation kept the final
    network, so the run reports no ``qmix_last``."""
    def figures(reward: float) -> dict:
        return {"reward": reward, "accuracy": reward / 2, "tokens_per_task": 1000 * reward, "density": 0.5}

    evaluation = {"qmix": figures(qmix), "solo": figures(solo), "headroom_share": share, "headroom": 0.04}
    minus = {"solo": {"mean": qmix - solo}}
    if last is not None:
        evaluation["qmix_last"] = figures(last)
        minus["qmix_last"] = {"mean": qmix - last}
    return {"eval": evaluation, "qmix_minus": minus, "train": {"seconds": 100.0}}


def test_means_and_standard_errors_over_seeds():
    summary = summarize_seeds({0: seed_result(0.90, 0.80, 0.89, 0.8), 1: seed_result(0.94, 0.80, 0.93, 0.6)})
    reward = summary["policies"]["qmix"]["reward"]
    assert reward["mean"] == pytest.approx(0.92)
    assert reward["se"] == pytest.approx(math.sqrt(0.02 ** 2 * 2) / math.sqrt(2))  # SD 0.0283 over 2 seeds
    assert summary["qmix_minus"]["solo"]["mean"] == pytest.approx(0.12)
    assert summary["headroom_share"]["mean"] == pytest.approx(0.7) and summary["headroom_share"]["se"] == pytest.approx(0.1)
    assert "headroom share" in format_seeds(summary)


def test_a_seed_that_kept_its_final_network_counts_it_as_qmix_last():
    """Seed 1 validated best at its last check: its qmix_last is its qmix, at no difference."""
    summary = summarize_seeds({0: seed_result(0.90, 0.80, 0.86, 0.8), 1: seed_result(0.94, 0.80, None, 0.6),
                               2: seed_result(0.92, 0.80, 0.91, 0.7)})
    assert summary["policies"]["qmix_last"]["reward"]["values"] == pytest.approx([0.86, 0.94, 0.91])
    assert summary["qmix_minus"]["qmix_last"]["values"] == pytest.approx([0.04, 0.0, 0.01])
    first_without = summarize_seeds({0: seed_result(0.94, 0.80, None, 0.6), 1: seed_result(0.90, 0.80, 0.86, 0.8)})
    assert first_without["policies"]["qmix_last"]["reward"]["values"] == pytest.approx([0.94, 0.86])
