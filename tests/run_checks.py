"""Checks shared by the tests that compare whole training runs (in flight, on Ray workers)."""
from __future__ import annotations

import numpy as np
import torch


def assert_same_learner_and_replay(a: dict, b: dict) -> None:
    """Two train_qmix.py checkpoints hold bitwise the same networks, update count, replay and the
    policy versions that played each stored episode."""
    assert a["episode"] == b["episode"] and a["learner"]["updates"] == b["learner"]["updates"]
    for part in ("agent", "mixer", "target_agent", "target_mixer"):
        for name, tensor in a["learner"][part].items():
            assert torch.equal(tensor, b["learner"][part][name]), f"{part}.{name} differs"
    for name, values in a["buffer"]["data"].items():
        assert np.array_equal(values, b["buffer"]["data"][name]), f"replay {name} differs"
    assert np.array_equal(a["buffer"]["policy_version"], b["buffer"]["policy_version"])
