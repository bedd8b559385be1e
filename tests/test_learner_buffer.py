"""Tests for the episode replay buffer: shapes/dtypes, wrap-around, uniform sampling, state round trip."""
from __future__ import annotations

import copy

import numpy as np
import pytest

from learners.buffer import ReplayEpisode, EpisodeReplayBuffer, unpacked

T, N, D, S, A = 2, 3, 5, 4, 6


def make_episode(marker: float, rng: np.random.Generator | None = None) -> ReplayEpisode:
    """An episode whose terminal reward is ``marker`` (and whose other fields are filled with it too)."""
    rng = rng or np.random.default_rng(int(marker))
    mask = rng.random((T, N, A)) < 0.7
    mask[..., 0] = True
    return ReplayEpisode(
        obs=np.full((T, N, D), marker, np.float32) + rng.normal(size=(T, N, D)).astype(np.float32),
        state=np.full((T, S), marker, np.float32),
        adjacency=(rng.random((T, N, N)) < 0.5).astype(np.float32),
        mask=mask,
        actions=rng.integers(A, size=(T, N)).astype(np.int64),
        reward=np.array([0.0, marker], np.float32),
        terminated=np.array([False, True]),
    )


def make_buffer(capacity: int) -> EpisodeReplayBuffer:
    return EpisodeReplayBuffer(capacity, T, N, D, S, A)


def stored_markers(buf: EpisodeReplayBuffer) -> list[float]:
    return [float(x) for x in buf.data["reward"][: buf.size, -1]]


def test_add_and_sample_shapes_and_dtypes():
    buf = make_buffer(10)
    assert len(buf) == 0
    episodes = [make_episode(k) for k in range(1, 5)]
    for ep in episodes:
        buf.add(ep)
    assert len(buf) == 4 and buf.size == 4 and buf.position == 4
    batch = buf.sample(7, np.random.default_rng(0))
    assert set(batch) == set(EpisodeReplayBuffer.FIELDS)
    want = {
        "obs": ((7, T, N, D), np.float32), "state": ((7, T, S), np.float32), "adjacency": ((7, T, N, N), np.float32),
        "mask": ((7, T, N, A), np.bool_), "actions": ((7, T, N), np.int64), "reward": ((7, T), np.float32),
        "terminated": ((7, T), np.bool_),
    }
    for name, (shape, dtype) in want.items():
        assert batch[name].shape == shape, name
        assert batch[name].dtype == dtype, name
    # each sampled row is one whole stored episode, fields kept together
    for k in range(7):
        marker = int(batch["reward"][k, -1])
        ep = episodes[marker - 1]
        for name in EpisodeReplayBuffer.FIELDS:
            assert np.array_equal(batch[name][k], getattr(ep, name)), name


def test_sample_returns_copies_not_views():
    buf = make_buffer(3)
    buf.add(make_episode(1))
    batch = buf.sample(2, np.random.default_rng(0))
    batch["reward"][:] = -7.0
    assert stored_markers(buf) == [1.0]


def test_wrap_around_keeps_the_newest_episodes():
    buf = make_buffer(3)
    positions = []
    for k in range(1, 6):
        buf.add(make_episode(k))
        positions.append(buf.position)
    assert positions == [1, 2, 0, 1, 2]
    assert len(buf) == 3 and buf.size == 3
    # slot 0 <- episode 4, slot 1 <- episode 5, slot 2 still episode 3
    assert stored_markers(buf) == [4.0, 5.0, 3.0]
    assert np.array_equal(buf.data["state"][:, 0, 0], [4.0, 5.0, 3.0])
    assert np.array_equal(buf.data["obs"][0], make_episode(4).obs)
    seen = set(buf.sample(500, np.random.default_rng(1))["reward"][:, -1].tolist())
    assert seen == {3.0, 4.0, 5.0}


def test_sampling_only_returns_stored_episodes_when_not_full():
    buf = make_buffer(8)
    for k in (11, 12):
        buf.add(make_episode(k))
    got = buf.sample(1000, np.random.default_rng(2))["reward"][:, -1]
    assert set(got.tolist()) == {11.0, 12.0}  # the zero-filled empty slots are never drawn


def test_sampling_is_uniform_over_stored_episodes():
    buf = make_buffer(6)
    for k in range(1, 9):  # wraps: holds 3..8
        buf.add(make_episode(k))
    draws = 30_000
    got = buf.sample(draws, np.random.default_rng(3))["reward"][:, -1]
    counts = np.array([(got == k).sum() for k in range(3, 9)])
    assert counts.sum() == draws
    expected = draws / 6
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 20.5, (counts, chi2)  # df = 5, p ~ 0.001
    # and a skewed sampler would fail the same test
    skewed = np.array([expected * 1.05] * 3 + [expected * 0.95] * 3)
    assert float(((skewed - expected) ** 2 / expected).sum()) > 20.5


def test_sampling_is_reproducible_with_the_same_rng_seed():
    buf = make_buffer(5)
    for k in range(1, 6):
        buf.add(make_episode(k))
    a = buf.sample(16, np.random.default_rng(42))
    b = buf.sample(16, np.random.default_rng(42))
    for name in EpisodeReplayBuffer.FIELDS:
        assert np.array_equal(a[name], b[name])


def test_sampling_from_empty_buffer_raises():
    with pytest.raises(ValueError, match="empty"):
        make_buffer(4).sample(2, np.random.default_rng(0))


def test_capacity_must_be_positive():
    with pytest.raises(ValueError, match="capacity"):
        make_buffer(0)


@pytest.mark.parametrize("n_added", [2, 3, 5])
def test_state_dict_round_trip(n_added):
    buf = make_buffer(3)
    for k in range(1, n_added + 1):
        buf.add(make_episode(k))
    state = copy.deepcopy(buf.state_dict())
    clone = make_buffer(3)
    clone.load_state_dict(state)
    assert (clone.size, clone.position) == (buf.size, buf.position)
    for name in EpisodeReplayBuffer.FIELDS:
        assert np.array_equal(clone.data[name][: buf.size], buf.data[name][: buf.size]), name
    a = buf.sample(20, np.random.default_rng(9))
    b = clone.sample(20, np.random.default_rng(9))
    for name in EpisodeReplayBuffer.FIELDS:
        assert np.array_equal(a[name], b[name]), name
    # both continue identically (the next add goes to the same slot)
    buf.add(make_episode(99))
    clone.add(make_episode(99))
    assert stored_markers(buf) == stored_markers(clone)


def test_state_dict_is_a_snapshot():
    buf = make_buffer(3)
    buf.add(make_episode(1))
    state = buf.state_dict()
    buf.add(make_episode(2))
    buf.data["reward"][0, -1] = -5.0
    assert state["size"] == 1 and state["position"] == 1
    assert unpacked(state)["data"]["reward"][0, -1] == 1.0


def test_state_dict_packs_the_replay_smaller_and_loses_nothing():
    """Mostly-zero observations (the hashed text embedding) pack to a fraction of their size; the
    unpacked arrays are the stored ones bit for bit, and checkpoints that stored plain arrays
    still load."""
    buf = EpisodeReplayBuffer(64, T, N, 512, S, A)
    rng = np.random.default_rng(0)
    for k in range(64):
        episode = make_episode(k + 1, rng)
        sparse = np.zeros((T, N, 512), np.float32)
        sparse[..., rng.integers(512, size=20)] = rng.normal(size=20).astype(np.float32)
        buf.add(ReplayEpisode(**{**vars(episode), "obs": sparse}))
    state = buf.state_dict()
    assert len(state["data"]["obs"]["zlib"]) < buf.data["obs"].nbytes / 5
    for name, array in unpacked(state)["data"].items():
        assert array.dtype == buf.data[name].dtype and np.array_equal(array, buf.data[name]), name
    plain = {**state, "data": {name: array[: buf.size].copy() for name, array in buf.data.items()}}
    for restored in (state, plain):
        clone = EpisodeReplayBuffer(64, T, N, 512, S, A)
        clone.load_state_dict(restored)
        for name in EpisodeReplayBuffer.FIELDS:
            assert np.array_equal(clone.data[name], buf.data[name]), name


def test_load_state_dict_into_a_smaller_buffer_raises():
    buf = make_buffer(4)
    for k in range(1, 5):
        buf.add(make_episode(k))
    with pytest.raises(ValueError, match="capacity"):
        make_buffer(2).load_state_dict(buf.state_dict())
