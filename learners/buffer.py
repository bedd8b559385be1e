"""Episode replay: whole episodes, sampled uniformly (pymarl-style)."""
from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np


@dataclass
class ReplayEpisode:
    """One finished episode, T rounds of N agents.

    ``obs[t]`` / ``state[t]`` / ``adjacency[t]`` / ``mask[t]`` are what the agents saw
    *before* choosing round t's actions (``adjacency[t]`` is the previous round's graph,
    zeros at t = 0); ``actions[t]`` what they chose; ``reward[t]`` the team reward of round t;
    ``terminated[t]`` True after the last round. ``policy_version``: the number of committed
    episodes whose updates were in the weights that played it (with K episodes in flight,
    ``max(0, j - K + 1)`` for episode j; :mod:`topo_env.frontends.inflight`).
    """

    obs: np.ndarray  # (T, N, D) float32
    state: np.ndarray  # (T, S) float32
    adjacency: np.ndarray  # (T, N, N) float32
    mask: np.ndarray  # (T, N, A) bool
    actions: np.ndarray  # (T, N) int64
    reward: np.ndarray  # (T,) float32
    terminated: np.ndarray  # (T,) bool
    policy_version: int = 0
    return_target: np.ndarray | None = None  # (T,) float32: returns averaged over noise samples (batched simulated team); zeros if not given

    def __post_init__(self) -> None:
        if self.return_target is None:
            self.return_target = np.zeros(np.shape(self.reward), np.float32)


class EpisodeReplayBuffer:
    """A ring buffer of ``capacity`` episodes; the oldest is overwritten when full."""

    FIELDS = ("obs", "state", "adjacency", "mask", "actions", "reward", "terminated", "return_target")

    def __init__(self, capacity: int, rounds: int, n_agents: int, obs_dim: int, state_dim: int, n_actions: int):
        if capacity < 1:
            raise ValueError(f"capacity={capacity!r}: must be >= 1")
        self.capacity = capacity
        t, n = rounds, n_agents
        self.data = {
            "obs": np.zeros((capacity, t, n, obs_dim), np.float32),
            "state": np.zeros((capacity, t, state_dim), np.float32),
            "adjacency": np.zeros((capacity, t, n, n), np.float32),
            "mask": np.zeros((capacity, t, n, n_actions), bool),
            "actions": np.zeros((capacity, t, n), np.int64),
            "reward": np.zeros((capacity, t), np.float32),
            "terminated": np.zeros((capacity, t), bool),
            "return_target": np.zeros((capacity, t), np.float32),
        }
        self.policy_version = np.zeros(capacity, np.int64)  # per slot, the version that played it
        self.position = 0  # where the next episode goes
        self.size = 0

    def __len__(self) -> int:
        return self.size

    def add(self, episode: ReplayEpisode) -> None:
        for name in self.FIELDS:
            self.data[name][self.position] = getattr(episode, name)
        self.policy_version[self.position] = episode.policy_version
        self.position = (self.position + 1) % self.capacity
        self.size = min(self.size + 1, self.capacity)

    def add_batch(self, episodes) -> None:
        """Store B episodes in order, as B calls of :meth:`add` would: ``episodes`` has the
        :attr:`FIELDS` with a leading batch dimension and one ``policy_version``
        (:class:`learners.batch_runner.EpisodeBatch`)."""
        b = len(episodes.reward)
        keep = min(b, self.capacity)  # more than fit: the last ``capacity`` ones survive, as with add()
        slots = (self.position + b - keep + np.arange(keep)) % self.capacity
        for name in self.FIELDS:
            self.data[name][slots] = getattr(episodes, name)[b - keep:]
        self.policy_version[slots] = episodes.policy_version
        self.position = (self.position + b) % self.capacity
        self.size = min(self.size + b, self.capacity)

    def sample(self, batch_size: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
        """``batch_size`` stored episodes drawn uniformly with replacement: arrays with a
        leading batch dimension."""
        if self.size == 0:
            raise ValueError("cannot sample from an empty replay buffer")
        idx = rng.integers(self.size, size=batch_size)
        return {name: arr[idx] for name, arr in self.data.items()}

    def state_dict(self) -> dict:
        """The stored episodes, each field zlib-compressed (lossless: observations are mostly
        zeros, and a full default buffer is about 0.9 GB raw, 60 MB packed)."""
        return {"position": self.position, "size": self.size,
                "data": {k: _pack(v[: self.size]) for k, v in self.data.items()},
                "policy_version": self.policy_version[: self.size].copy()}

    def load_state_dict(self, state: dict) -> None:
        size = int(state["size"])
        if size > self.capacity:
            raise ValueError(f"buffer state holds {size} episodes, capacity is {self.capacity}")
        for k, v in state["data"].items():  # older checkpoints have no return_target: zeros
            self.data[k][:size] = _unpack(v)
        self.policy_version[:size] = state.get("policy_version", np.zeros(size, np.int64))  # older checkpoints: 0
        self.position, self.size = int(state["position"]), size


def unpacked(state: dict) -> dict:
    """A :meth:`EpisodeReplayBuffer.state_dict` with its fields as arrays (for reading a
    checkpoint's replay without building a buffer)."""
    return {**state, "data": {k: _unpack(v) for k, v in state["data"].items()}}


def _pack(array: np.ndarray) -> dict:
    array = np.ascontiguousarray(array)
    return {"zlib": zlib.compress(array.tobytes(), 1), "dtype": array.dtype.str, "shape": array.shape}


def _unpack(packed) -> np.ndarray:
    """An array from :func:`_pack`; older checkpoints stored the array itself."""
    if not isinstance(packed, dict):
        return np.asarray(packed)
    flat = np.frombuffer(zlib.decompress(packed["zlib"]), dtype=np.dtype(packed["dtype"]))
    return flat.reshape(packed["shape"])
