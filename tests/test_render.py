"""Render modes of every front-end: ``ansi`` (the transcript), ``rgb_array`` (the round's topology
picture from topo_env.frontends.plots) and ``human`` (that picture in a window, or a PNG where no display
exists); PettingZoo's own ``render_test``."""
from __future__ import annotations

import sys
import tempfile

import numpy as np
import pytest
from pettingzoo.test import render_test
from pettingzoo.utils.conversions import parallel_to_aec

import topo_env
from topo_env import CommAction
from topo_env.interop import TopologyGymmaEnv

MODES = {"ansi", "rgb_array", "human"}


@pytest.fixture
def headless(tmp_path, monkeypatch):
    """No display; the working and the temporary directory inside ``tmp_path``: a picture that
    ``human`` mode saves lands there."""
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def is_picture(frame) -> bool:
    return isinstance(frame, np.ndarray) and frame.dtype == np.uint8 and frame.ndim == 3 and frame.shape[2] == 3


def every_agent(env, action: CommAction) -> dict[str, int]:
    return {a: int(action) for a in env.agents}


def test_the_env_declares_the_three_modes():
    assert set(topo_env.TopologyParallelEnv.metadata["render_modes"]) == MODES
    assert TopologyGymmaEnv.metadata["render_modes"] == topo_env.TopologyParallelEnv.metadata["render_modes"]


def test_rgb_array_pictures_follow_the_rounds():
    env = topo_env.parallel_env(render_mode="rgb_array", rounds=2)
    env.reset(seed=0)
    before = env.render()
    assert is_picture(before)
    env.step(every_agent(env, CommAction.BROADCAST_ALL))
    broadcast = env.render()
    env.step(every_agent(env, CommAction.SOLO_PROCESS))
    solo = env.render()  # after the last round too
    assert all(is_picture(f) and f.shape == before.shape for f in (broadcast, solo))  # frames stack into a video
    assert not np.array_equal(broadcast, solo) and not np.array_equal(before, broadcast)


def test_human_mode_saves_a_png_without_a_display(headless):
    env = topo_env.parallel_env(render_mode="human", rounds=2)
    env.reset(seed=0)
    env.step(every_agent(env, CommAction.BROADCAST_ALL))
    assert env.render() is None
    written = sorted(headless.rglob("*.png"))
    assert written and all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in written)


def test_pettingzoo_render_test_passes(headless):
    render_test(lambda render_mode=None: parallel_to_aec(topo_env.parallel_env(render_mode=render_mode)))


def test_gymma_env_renders_in_the_envs_mode():
    env = TopologyGymmaEnv(render_mode="rgb_array")
    env.reset(seed=0)
    env.step([int(CommAction.BROADCAST_ALL)] * 3)
    assert is_picture(env.render())
    text = TopologyGymmaEnv(render_mode="ansi")
    text.reset(seed=0)
    assert isinstance(text.render(), str)


def test_orchestrator_env_renders_its_graphs():
    env = topo_env.orchestrator_env(render_mode="rgb_array", rounds=2)
    env.reset(seed=0)
    n = env.n_agents
    full = np.ones((n, n), np.int8) - np.eye(n, dtype=np.int8)
    frames = []
    for adjacency in (full, np.zeros((n, n), np.int8)):
        env.step({"adjacency": adjacency, "active": np.ones(n, np.int8), "verify": np.zeros(n, np.int8), "halt": 0})
        frames.append(env.render())
    assert all(is_picture(f) for f in frames) and frames[0].shape == frames[1].shape
    assert not np.array_equal(frames[0], frames[1])


def test_orchestrator_human_mode_saves_a_png_without_a_display(headless):
    env = topo_env.orchestrator_env(render_mode="human", rounds=2)
    env.reset(seed=0)
    n = env.n_agents
    env.step({"adjacency": np.zeros((n, n), np.int8), "active": np.ones(n, np.int8), "verify": np.ones(n, np.int8),
              "halt": 0})
    assert env.render() is None
    written = sorted(headless.rglob("*.png"))
    assert written and all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in written)
