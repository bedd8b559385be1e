"""Rollouts on Ray workers (``runtime.ray``, learners/distributed.py), on a real 2-CPU local Ray
cluster: 2 workers play the single-process run's episodes (bit for bit where the policy versions
agree, and within a stated bound of its learner otherwise); a worker killed mid-run is restarted,
its unfinished episodes are re-run and every episode index is stored exactly once; a bad
``runtime.ray`` is a one-line ConfigError before anything runs."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import train_qmix
from run_checks import ONE_EPISODE_CONFIG, assert_same_learner_and_replay, read_checkpoint
from learners.config import load_experiment
from topo_env.engine.config_checks import ConfigError
from topo_env.frontends.parallel_env import TopologyParallelEnv

ray = pytest.importorskip("ray")
from learners.distributed import RayRollouts  # noqa: E402

# costly module fixtures: pytest-xdist (--dist loadgroup, pyproject.toml) builds them once, on one worker
pytestmark = pytest.mark.xdist_group("test_distributed")

torch.set_num_threads(1)

EPISODES = 64
SMALL = {"train.eval_episodes": 200, "train.references": False, "train.warmup_episodes": 8, "qmix.batch_size": 8,
         "train.checkpoint_every": 1000, "train.log_every": 16, "qmix.hidden_dim": 32, "exploration.eps_start": 0.1,
         "exploration.eps_end": 0.0, "exploration.eps_anneal_episodes": 32, "qmix.lr": 0.003,
         "qmix.target_update_interval": 20, "qmix.updates_per_episode": 4, "runtime.device": "cpu"}
ROLLOUTS = {"runtime.ray.address": "local", "runtime.ray.workers": 2}
REWARD_BOUND = 0.05
"""How far apart the held-out reward of greedy QMIX may be between a 2-worker run and the
single-process run (mean over the 200 held-out episodes, rewards in [-0.1, 1.25]): the runs store
the same episodes, played with policies up to ``W x K + sync_every - 2`` commits staler."""


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING")
    yield
    ray.shutdown()


def train(out: Path, **settings) -> int:
    sets = [x for key, value in {**SMALL, **settings}.items() for x in ("--set", f"{key}={value}")]
    return train_qmix.main(["--config", ONE_EPISODE_CONFIG, *sets, "--episodes", str(EPISODES), "--out", str(out),
                            "--no-progress", "--no-pictures"])


def held_out_reward(out: Path) -> float:
    return json.loads((out / "results.json").read_text())["eval"]["qmix"]["reward"]


@pytest.fixture(scope="module")
def single(tmp_path_factory) -> Path:
    """The single-process run (K = 1)."""
    out = tmp_path_factory.mktemp("single")
    assert train(out) == 0
    return out


@pytest.fixture(scope="module")
def two_workers(cluster, tmp_path_factory) -> Path:
    """2 workers x K = 2 episodes in flight, weights shipped every 2 committed episodes."""
    out = tmp_path_factory.mktemp("ray")
    assert train(out, **ROLLOUTS, **{"runtime.episodes_in_flight": 2, "runtime.sync_every": 2}) == 0
    return out


def test_two_workers_play_the_single_process_episodes(single, two_workers):
    """The same episode per index (its task and noise: the first round's observations and state,
    which no action has touched yet), each with the policy version the batch rule gives (batch b
    of K = 2 episodes launched with the last sync, every 2 commits, once batch b - 2 is
    committed), and a final learner within REWARD_BOUND of the single-process one."""
    a, b = read_checkpoint(single), read_checkpoint(two_workers)
    assert a["buffer"]["size"] == b["buffer"]["size"] == EPISODES
    first = {name: (a["buffer"]["data"][name][:EPISODES, 0], b["buffer"]["data"][name][:EPISODES, 0])
             for name in ("obs", "state", "mask")}
    for name, (x, y) in first.items():
        assert np.array_equal(x, y), f"round-1 {name} of some episode differs: another task or noise"
    assert len({x.tobytes() for x in first["state"][0]}) > EPISODES // 2  # they are distinct episodes
    versions = b["buffer"]["policy_version"][:EPISODES].tolist()
    assert versions == [max(0, 2 * (j // 2) - 2) for j in range(EPISODES)]
    # the policies differ (staler on Ray), so the actions do somewhere; where an episode's actions
    # agree, so do its rewards (same noise)
    same = np.all(a["buffer"]["data"]["actions"][:EPISODES] == b["buffer"]["data"]["actions"][:EPISODES], axis=(1, 2))
    assert 0 < same.sum() < EPISODES
    assert np.array_equal(a["buffer"]["data"]["reward"][:EPISODES][same], b["buffer"]["data"]["reward"][:EPISODES][same])
    assert a["learner"]["updates"] == b["learner"]["updates"]
    assert any(not torch.equal(t, b["learner"]["agent"][k]) for k, t in a["learner"]["agent"].items())  # other learners
    assert abs(held_out_reward(single) - held_out_reward(two_workers)) <= REWARD_BOUND


def test_two_workers_k1_is_the_single_process_k2_run_bit_for_bit(cluster, tmp_path):
    """2 workers x K = 1, weights shipped after every episode: episode j is launched once j - 2 is
    committed, as with K = 2 in one process: the same replay, versions and weights exactly."""
    assert train(tmp_path / "ray", **ROLLOUTS) == 0
    assert train(tmp_path / "k2", **{"runtime.episodes_in_flight": 2}) == 0
    a, b = read_checkpoint(tmp_path / "ray"), read_checkpoint(tmp_path / "k2")
    assert_same_learner_and_replay(a, b)
    assert a["buffer"]["policy_version"][:EPISODES].tolist() == [max(0, j - 1) for j in range(EPISODES)]


def test_a_killed_worker_is_restarted_and_nothing_is_lost_or_stored_twice(two_workers, tmp_path, monkeypatch):
    """SIGKILL worker 1's process just after it is sent training episodes 18-19: Ray restarts it,
    the driver re-runs those episodes on it, the run completes, each index is handed to the
    learner once in order, and replay and weights equal the undisturbed run's bit for bit."""
    made, handed, killed = [], [], []
    original_init, original_launch, original_play = RayRollouts.__init__, RayRollouts._launch, RayRollouts.play

    def init(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        self.pids_at_start = self.worker_pids()  # via the actors' pid() method
        made.append(self)

    def launch(self, b, indices):
        original_launch(self, b, indices)
        if indices[0] == 18 and not killed:
            os.kill(self.pids_at_start[b % self.w], signal.SIGKILL)
            killed.append(b % self.w)

    def play(self, *args, **kwargs):
        for j, result in original_play(self, *args, **kwargs):
            handed.append(j)
            if j == EPISODES - 1:
                made[-1].pids_at_end = self.worker_pids()
            yield j, result

    monkeypatch.setattr(RayRollouts, "__init__", init)
    monkeypatch.setattr(RayRollouts, "_launch", launch)
    monkeypatch.setattr(RayRollouts, "play", play)
    out = tmp_path / "killed"
    assert train(out, **ROLLOUTS, **{"runtime.episodes_in_flight": 2, "runtime.sync_every": 2}) == 0
    rollouts = made[-1]
    assert killed == [1] and rollouts.reruns == [(1, [18, 19])]
    assert rollouts.pids_at_end[1] != rollouts.pids_at_start[1]  # restarted: a new process
    assert rollouts.pids_at_end[0] == rollouts.pids_at_start[0]
    assert handed == list(range(EPISODES))
    got = read_checkpoint(out)
    assert got["buffer"]["size"] == EPISODES
    assert_same_learner_and_replay(got, read_checkpoint(two_workers))


def test_a_budget_stops_launching_and_stores_every_episode_in_flight(two_workers, tmp_path, monkeypatch, capsys):
    """A call budget reached mid-run: nothing is launched after it, and every episode launched
    (those in flight when it was reached included) is stored, as in the undisturbed run."""
    launched, original_launch = [], RayRollouts._launch

    def launch(self, b, indices):
        launched.extend(indices)
        original_launch(self, b, indices)

    monkeypatch.setattr(RayRollouts, "_launch", launch)
    out = tmp_path / "budget"
    assert train(out, **ROLLOUTS, **{"runtime.episodes_in_flight": 2, "runtime.sync_every": 2,
                                     "train.call_budget": 60}) == 130
    got, want = read_checkpoint(out), read_checkpoint(two_workers)
    stored = got["episode"]
    assert stored < EPISODES and launched == list(range(stored)) and got["buffer"]["size"] == stored
    in_flight = int(capsys.readouterr().err.split("finishing the ")[1].split(" episode")[0])
    assert 0 < in_flight <= 4  # at most W x K in flight
    for name, values in got["buffer"]["data"].items():
        assert np.array_equal(values[:stored], want["buffer"]["data"][name][:stored]), name


@pytest.mark.parametrize("override, words", [
    ("runtime.ray.workers=0", ["runtime.ray.workers=0"]),
    ("runtime.ray.address=cloud", ["runtime.ray.address='cloud'"]),
    ("runtime.ray=4", ["runtime.ray=4"]),
    ("runtime.ray.speed=2", ["runtime.ray", "speed"]),
    ("runtime.sync_every=0", ["runtime.sync_every=0"]),
])
def test_bad_ray_config_is_a_one_line_error_before_anything_runs(tmp_path, override, words, monkeypatch):
    started = []
    monkeypatch.setattr(TopologyParallelEnv, "__init__", lambda *a, **k: started.append(1))
    out = tmp_path / "never"
    with pytest.raises(ConfigError) as err:
        train_qmix.main(["--set", override, "--out", str(out), "--no-progress"])
    assert "\n" not in str(err.value)
    for word in words:
        assert word in str(err.value), (word, str(err.value))
    assert not started and not out.exists()


def test_ray_config_round_trips_and_the_default_path_loads_no_ray():
    cfg = load_experiment(None, ["runtime.ray.workers=4", "runtime.sync_every=8"])
    assert (cfg.runtime.ray.address, cfg.runtime.ray.workers, cfg.runtime.sync_every) == ("local", 4, 8)
    assert load_experiment(None, [f"runtime.ray={json.dumps(cfg.to_dict()['runtime']['ray'])}"]).runtime.ray \
        == cfg.runtime.ray
    assert load_experiment(None).runtime.ray is None
    code = "import train_qmix, learners.distributed, sys; print('ray' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], cwd=Path(train_qmix.__file__).parent, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.split() == ["False"], proc.stderr[-2000:]
