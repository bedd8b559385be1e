"""Tests for topo_env.references.oracle: exhaustive open-loop search with common random numbers."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from topo_env.references import oracle
from topo_env.frontends.comm_actions import ACTION_NAMES
from topo_env.references.baselines import FIXED_BASELINES, open_loop_actions
from topo_env.frontends.comm_batch import CommBatchSimulator
from topo_env.sim.profiles import get_profile
from topo_env.engine.tasks import DIFFICULTY_BUCKETS

REPO_ROOT = Path(__file__).resolve().parents[1]


def test_sequence_index_inverts_sequence_actions():
    for k in (0, 1, 215, 216, 46655, 12345):
        assert oracle.sequence_index(oracle.sequence_actions(k, 2)) == k


def test_baselines_always_compete_in_reranking():
    """Even with a shortlist of one, the fixed oracle is at least every baseline on the
    re-ranking samples (baselines are always re-ranked too)."""
    res = oracle.search("mmlu_pro", rounds=1, samples=60, seed=2, progress=False, shortlist=1)
    for name, b in res["baselines"].items():
        assert res["fixed"]["reward_selection"] >= b["reward_selection"] - 1e-12, name


def test_sequence_indexing_round_trips():
    table = oracle.joint_actions()
    assert table.shape == (216, 3) and len({tuple(r) for r in table}) == 216
    np.testing.assert_array_equal(table[6 * 6 * 1 + 6 * 2 + 3], [1, 2, 3])
    k = 216 * 17 + 101
    np.testing.assert_array_equal(oracle.sequence_actions(k, 2), table[[17, 101]])
    np.testing.assert_array_equal(oracle.sequence_actions(17, 1), table[[17]])
    assert oracle.sequence_names(table[[17]]) == [[ACTION_NAMES[a] for a in table[17]]]


@pytest.mark.parametrize("profile,adversarial", [("aime25", ()), ("mmlu_pro", (0,))])
def test_scores_equal_direct_simulation(profile, adversarial):
    """Dedup + replication must give exactly what CommBatchSimulator.run gives per sequence."""
    sim = CommBatchSimulator(get_profile(profile), 3, 2, adversarial_agents=adversarial)
    tasks, noise = oracle.draw_samples(sim, 8, seed=3, split="train")
    sums = oracle.score_sequences(sim, tasks, noise, progress=False, chunk_rows=500)
    assert sums.shape == (216 * 216, 3)
    rng = np.random.default_rng(0)
    picks = list(rng.integers(0, len(sums), 12)) + [int(np.argmax(sums.sum(axis=1)))]
    for s in picks:
        reward = sim.run(oracle.sequence_actions(s, 2), tasks, noise).reward
        want = [reward[tasks.bucket == b].sum() for b in range(3)]
        np.testing.assert_allclose(sums[s], want, atol=1e-9)


@pytest.fixture(scope="module")
def tiny_search():
    return oracle.search("humaneval", rounds=1, samples=150, seed=4, progress=False, shortlist=216)


def test_fixed_oracle_beats_every_baseline_on_selection_samples(tiny_search):
    """With a shortlist covering all 216 sequences, re-ranking is exhaustive: the chosen
    sequence is at least as good as every baseline on the re-ranking samples."""
    res = tiny_search
    sim = CommBatchSimulator(get_profile("humaneval"), 3, 1)
    tasks, noise = oracle.draw_samples(sim, 4 * 150, seed=4, split="rerank")
    for name in FIXED_BASELINES:
        baseline = float(sim.run(open_loop_actions(name, 3, 1), tasks, noise).reward.mean())
        assert res["fixed"]["reward_selection"] >= baseline - 1e-9, name
        assert res["baselines"][name]["reward_selection"] == pytest.approx(baseline, abs=1e-12)
    names = np.array([[ACTION_NAMES.index(a) for a in row] for row in res["fixed"]["sequence"]])
    assert names.shape == (1, 3)
    chosen = float(sim.run(names, tasks, noise).reward.mean())
    assert chosen == pytest.approx(res["fixed"]["reward_selection"], abs=1e-9)


def test_bucket_oracle_at_least_fixed_on_selection(tiny_search):
    res = tiny_search
    assert res["bucket"]["reward_selection"] >= res["fixed"]["reward_selection"] - 1e-9
    buckets = res["bucket"]["buckets"]
    assert list(buckets) == list(DIFFICULTY_BUCKETS)
    assert sum(b["share"] for b in buckets.values()) == pytest.approx(1.0)
    weighted = sum(b["share"] * b["reward"] for b in buckets.values() if b["share"] > 0)
    assert res["bucket"]["reward"] == pytest.approx(weighted, abs=1e-9)
    for b in buckets.values():
        assert len(b["sequence"]) == 1 and all(a in ACTION_NAMES for a in b["sequence"][0])
    assert res["sequences"] == 216
    json.dumps(res, allow_nan=False)  # plain, strict-JSON values


def test_search_is_reproducible(tiny_search):
    again = oracle.search("humaneval", rounds=1, samples=150, seed=4, progress=False, shortlist=216)
    again.pop("seconds")
    first = dict(tiny_search)
    first.pop("seconds")
    assert again == first


def test_selection_and_eval_samples_differ():
    sim = CommBatchSimulator(get_profile("mmlu_pro"), 3, 1)
    streams = [oracle.draw_samples(sim, 20, seed=0, split=s)[0].difficulty for s in ("train", "rerank", "eval")]
    for a in range(3):
        for b in range(a + 1, 3):
            assert not np.array_equal(streams[a], streams[b])


def test_shortlist_keeps_the_stage_one_leaders():
    """A small shortlist re-ranks only stage-1 leaders (and the baselines): the chosen fixed
    sequence is one of the `shortlist` best on the first-stage samples or a baseline."""
    sim = CommBatchSimulator(get_profile("mmlu_pro"), 3, 1)
    tasks, noise = oracle.draw_samples(sim, 120, seed=1, split="train")
    sums = oracle.score_sequences(sim, tasks, noise, progress=False)
    leaders = np.argsort(-sums.sum(axis=1), kind="stable")[:5]
    res = oracle.search("mmlu_pro", rounds=1, samples=120, seed=1, progress=False, shortlist=5)
    chosen = np.array([[ACTION_NAMES.index(a) for a in row] for row in res["fixed"]["sequence"]])
    allowed = [oracle.sequence_actions(k, 1) for k in leaders]
    allowed += [open_loop_actions(name, 3, 1) for name in FIXED_BASELINES]
    assert any(np.array_equal(chosen, a) for a in allowed)


@pytest.mark.parametrize("kwargs,match", [
    ({"n_agents": 4}, "N=3"),
    ({"rounds": 3}, "rounds"),
    ({"rounds": 0}, "rounds"),
    ({"samples": 0}, "samples"),
])
def test_search_rejects_bad_settings(kwargs, match):
    with pytest.raises(ValueError, match=match):
        oracle.search("mmlu_pro", **{"rounds": 1, "samples": 5, "progress": False, **kwargs})


def test_search_rejects_unknown_profile():
    with pytest.raises(ValueError, match="gsm8k"):
        oracle.search("gsm8k", rounds=1, samples=5, progress=False)


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "topo_env.references.oracle_cli", *args], capture_output=True, text=True,
                          cwd=REPO_ROOT, timeout=120)


def test_oracle_cli_json():
    proc = run_cli("--profile", "mmlu_pro", "--rounds", "1", "--samples", "40", "--adversarial", "1", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert {"fixed", "bucket"} <= set(data)
    assert {"reward", "reward_selection", "sequence"} <= set(data["fixed"])
    assert set(data["bucket"]["buckets"]) == {"easy", "medium", "hard"}
    assert data["adversarial_agents"] == [1] and data["samples"] == 40


def test_oracle_cli_readable():
    proc = run_cli("--profile", "aime25", "--rounds", "1", "--samples", "30", "--no-progress")
    assert proc.returncode == 0, proc.stderr
    assert "fixed oracle" in proc.stdout and "bucket oracle" in proc.stdout and "baseline chain" in proc.stdout


@pytest.mark.parametrize("args,named", [
    (["--profile", "mmlu_pro", "--rounds", "3"], "rounds=3"),
    (["--profile", "mmlu_pro", "--n-agents", "4"], "n_agents=4"),
    (["--profile", "nope"], "nope"),
    (["--profile", "missing.yaml"], "'missing.yaml' does not exist"),
    (["--profile", "mmlu_pro", "--rounds", "1", "--adversarial", "3"], "3"),
])
def test_oracle_cli_bad_arguments(args, named):
    proc = run_cli(*args)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert len(proc.stderr.splitlines()) == 1 and named in proc.stderr


def test_group_sums_follow_round_one_outcomes():
    """Groups that depend on what the first round did (here: did the agents all agree) sum exactly
    what CommBatchSimulator.run gives per sequence, with a per-episode adversary mask."""
    sim = CommBatchSimulator(get_profile("mmlu_pro"), 3, 2, adversary_position="random", n_adversaries=1)
    tasks, noise, adversaries = oracle.sample_episodes(sim, 10, seed=5, split="train")

    def agreed(state):
        labels = state.previous.label
        return (labels == labels[:, :1]).all(axis=1).astype(np.int64)

    sums, counts = oracle.sequence_group_sums(sim, tasks, noise, agreed, 2, adversaries=adversaries, progress=False,
                                              chunk_rows=700)
    assert sums.shape == (216, 216, 2) and counts.shape == (216, 2)
    assert (counts.sum(axis=1) == 10).all()
    table = oracle.joint_actions()
    for first, second in ((0, 0), (17, 101), (215, 3), (88, 215)):
        state = sim.run_round(sim.initial_state(10, adversaries), np.broadcast_to(table[first], (10, 3)).copy(),
                              tasks, noise)
        group = agreed(state)
        reward = sim.run(table[[first, second]], tasks, noise, adversaries).reward
        np.testing.assert_allclose(sums[first, second], [reward[group == g].sum() for g in (0, 1)], atol=1e-9)
        np.testing.assert_array_equal(counts[first], np.bincount(group, minlength=2))


def test_draw_samples_are_the_episodes_without_adversaries():
    sim = CommBatchSimulator(get_profile("mmlu_pro"), 3, 1, adversary_position="random", n_adversaries=1)
    tasks, noise = oracle.draw_samples(sim, 30, seed=2, split="eval")
    tasks2, noise2, adversaries = oracle.sample_episodes(sim, 30, seed=2, split="eval")
    np.testing.assert_array_equal(tasks.latent, tasks2.latent)
    np.testing.assert_array_equal(noise.decision, noise2.decision)
    assert adversaries.shape == (30, 3) and (adversaries.sum(axis=1) == 1).all()
