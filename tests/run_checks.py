"""Checks and a test backend shared by the tests that compare runs (in flight, on Ray workers, the leaderboard)."""
from __future__ import annotations

import asyncio
import random

import numpy as np
import torch

from pathlib import Path

from learners.buffer import unpacked
from topo_env.engine.backend_registry import make_backend

ONE_EPISODE_CONFIG = str(Path(__file__).resolve().parent / "data" / "one_episode.yaml")
"""The config of the one-episode loop's tests (``sim_scale.batch: 0``; tests/data/one_episode.yaml)."""


def train_tiny_run(out: Path) -> Path:
    """A real 4-episode train_qmix.py run of :data:`ONE_EPISODE_CONFIG` into ``out`` (a second or
    two; small networks, no references), with its checkpoint.pt and results.json; returns ``out``."""
    import train_qmix
    assert train_qmix.main(["--config", ONE_EPISODE_CONFIG, "--no-progress", "--no-pictures", "--out", str(out),
                            "--episodes", "4", "--set", "qmix.hidden_dim=16", "--set", "qmix.batch_size=2",
                            "--set", "qmix.buffer_size=8", "--set", "train.warmup_episodes=2",
                            "--set", "train.eval_episodes=2", "--set", "train.references=false",
                            "--set", "train.curve_every=0", "--set", "train.checkpoint_every=4",
                            "--set", "train.log_every=4"]) == 0
    return out


def read_checkpoint(path: Path) -> dict:
    """A train_qmix.py checkpoint (a run directory or the file) with its replay as arrays."""
    path = Path(path)
    saved = torch.load(path / "checkpoint.pt" if path.is_dir() else path, weights_only=False)
    if "buffer" in saved:
        saved["buffer"] = unpacked(saved["buffer"])
    return saved


def assert_same_learner_and_replay(a: dict, b: dict) -> None:
    """Two train_qmix.py checkpoints hold bitwise the same networks, update count, replay and the
    policy versions that played each stored episode."""
    assert a["episode"] == b["episode"] and a["learner"]["updates"] == b["learner"]["updates"]
    for part in ("agent", "mixer", "target_agent", "target_mixer"):
        for name, tensor in a["learner"][part].items():
            assert torch.equal(tensor, b["learner"][part][name]), f"{part}.{name} differs"
    replay_a, replay_b = unpacked(a["buffer"])["data"], unpacked(b["buffer"])["data"]
    for name, values in replay_a.items():
        assert np.array_equal(values, replay_b[name]), f"replay {name} differs"
    assert np.array_equal(a["buffer"]["policy_version"], b["buffer"]["policy_version"])


class DelayedBackend:
    """A simulated team whose calls each wait a random few milliseconds (drawn from ``delays``),
    so that episodes in flight complete in an order set by ``delays``, not by their index;
    ``finished`` records the tasks in completion order."""

    concurrent = True

    def __init__(self, config, delays: random.Random, finished: list):
        self.config, self.inner, self.delays, self.finished = config, make_backend(config), delays, finished

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def sibling(self) -> "DelayedBackend":
        return DelayedBackend(self.config, self.delays, self.finished)

    async def call_agent(self, call):
        await asyncio.sleep(self.delays.uniform(0.0, 0.003))
        return await self.inner.call_agent(call)

    async def verify(self, call, reply, phase_index):
        return await self.inner.verify(call, reply, phase_index)

    async def decide(self, task, finals):
        await asyncio.sleep(self.delays.uniform(0.0, 0.003))
        decision = await self.inner.decide(task, finals)
        self.finished.append(task.id)
        return decision
