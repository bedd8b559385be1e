"""Tests for topo_env.references.headroom: the privileged adaptive reference against the best fixed sequence."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from topo_env.references import headroom
from topo_env.references import oracle
from topo_env.frontends.comm_batch import CommBatchSimulator
from topo_env.sim.profiles import get_profile

REPO_ROOT = Path(__file__).resolve().parents[1]
SMALL = {"samples": 120, "rerank_samples": 600, "episodes": 600, "shortlist": 8, "context_shortlist": 3,
         "progress": False}


def test_agreement_class_names_the_pattern():
    labels = np.array([[0, 0, 0], [1, 0, 0], [0, 2, 0], [3, 3, 1], [0, 1, 2], [-1, -1, -1]])
    np.testing.assert_array_equal(headroom.agreement_class(labels), [0, 1, 2, 3, 4, 0])
    assert headroom.outcome_names(3) == ["all agree", "agent 0 alone", "agent 1 alone", "agent 2 alone", "all differ"]


def test_hidden_context_columns():
    sim = CommBatchSimulator(get_profile("mmlu_pro"), 3, 1, adversary_position="random", n_adversaries=1)
    tasks, _, adversaries = oracle.sample_episodes(sim, 300, seed=0, split="train")
    values = headroom.hidden_context(tasks, adversaries)
    assert values.shape == (300, len(headroom.CONTEXT_VARIABLES))
    np.testing.assert_array_equal(values[:, 0], tasks.subject)
    np.testing.assert_array_equal(values[:, 1], tasks.bucket)
    np.testing.assert_array_equal(values[:, 2], 1 << adversaries.argmax(axis=1))
    described = headroom.context_description(values[0], sim.profile.subject_names)
    assert described["adversaries"] == [int(adversaries[0].argmax())]
    assert described["subject"] == sim.profile.subject_names[tasks.subject[0]]
    assert described["difficulty_bucket"] in ("easy", "medium", "hard")


def test_policy_candidates_find_the_context_preference():
    """Synthetic selection sums: context 0 (most episodes) prefers sequence (1, 2), context 1 prefers
    (3, 0) open loop, and in context 1 after first round 3 outcome class 1 prefers second round 2."""
    n_first, n_second, n_context, n_class = 4, 3, 2, 2
    sums = np.zeros((n_first, n_second, n_context, n_class))
    counts = np.full((n_first, n_context, n_class), 100)
    sums[1, 2, 0] = [50.0, 40.0]  # the best fixed sequence overall
    sums[3, 0, 1] = [9.0, 5.0]
    sums[3, 2, 1] = [0.0, 8.0]
    totals = sums.sum(axis=(2, 3)).reshape(-1)
    assert np.argmax(totals) == 1 * n_second + 2
    cand = headroom.policy_candidates(sums, counts, shortlist=2)
    assert cand.shape == (n_context, 4, 1 + n_class)
    np.testing.assert_array_equal(cand[0, 0], [1, 2, 2])  # best open loop, context 0
    np.testing.assert_array_equal(cand[1, 0], [3, 0, 0])  # best open loop, context 1: not the fixed one
    np.testing.assert_array_equal(cand[1, 2], [3, 0, 2])  # best closed loop: second round per class
    counts[3, 1, 1] = headroom.MIN_CLASS_EPISODES - 1  # a rare class falls back to the context's best second round
    np.testing.assert_array_equal(headroom.policy_candidates(sums, counts, shortlist=2)[1, 2], [3, 0, 0])


def test_play_policies_replays_open_loop_sequences_exactly():
    sim = CommBatchSimulator(get_profile("humaneval"), 3, 2)
    tasks, noise, adversaries = oracle.sample_episodes(sim, 40, seed=1, split="eval")
    for index in (0, 216 * 100 + 7, 46655):
        actions = oracle.sequence_actions(index, 2)
        policy = np.broadcast_to(headroom.open_loop_policy(actions, 5), (40, 2, 5, 3))
        played = headroom.play_policies(sim, policy, tasks, noise, adversaries).reward
        direct = sim.run(actions, tasks, noise, adversaries).reward
        np.testing.assert_array_equal(played, direct)
        indexed = headroom.index_policies(np.array([index // 216] + [index % 216] * 5), sim)
        np.testing.assert_array_equal(indexed, policy[0])


def test_a_closed_loop_policy_plays_round_two_by_round_one_outcome():
    """Each episode's second round is the joint action its round-1 outcome class names."""
    sim = CommBatchSimulator(get_profile("mmlu_pro"), 3, 2)
    tasks, noise, adversaries = oracle.sample_episodes(sim, 200, seed=2, split="eval")
    policy = headroom.index_policies(np.array([0, 215, 100, 50, 7, 3]), sim)  # (2, 5, 3)
    played = headroom.play_policies(sim, np.broadcast_to(policy, (200, 2, 5, 3)), tasks, noise, adversaries).reward
    first = sim.run_round(sim.initial_state(200, adversaries), np.broadcast_to(policy[0, 0], (200, 3)).copy(),
                          tasks, noise)
    outcome = headroom.agreement_class(first.previous.label)
    expected = sim.finish(sim.run_round(first, policy[1, outcome], tasks, noise), tasks, noise).reward
    np.testing.assert_array_equal(played, expected)
    assert len(set(outcome.tolist())) > 1


@pytest.fixture(scope="module")
def small_result():
    return headroom.measure_headroom("mmlu_pro", rounds=2, seed=3, **SMALL)


def test_adaptive_never_below_best_fixed_on_selection(small_result):
    sel = small_result["selection"]
    assert sel["adaptive"] >= sel["best_fixed"] - 1e-12
    assert sel["adaptive"] >= sel["context_only"] - 1e-12
    assert sel["context_only"] >= sel["best_fixed"] - 1e-12


def test_held_out_figures_are_paired_on_common_episodes(small_result):
    res = small_result
    sim = CommBatchSimulator(get_profile("mmlu_pro"), 3, 2)
    tasks, noise, adversaries = oracle.sample_episodes(sim, SMALL["episodes"], seed=3, split="eval")
    fixed = oracle.actions_from_names(res["best_fixed_sequence"])
    assert res["best_fixed"] == pytest.approx(sim.run(fixed, tasks, noise, adversaries).reward.mean(), abs=1e-12)
    assert res["headroom"] == pytest.approx(res["adaptive"] - res["best_fixed"], abs=1e-12)
    assert res["context_only_headroom"] == pytest.approx(res["context_only"] - res["best_fixed"], abs=1e-12)
    assert 0 <= res["headroom_se"] < 0.05
    assert sum(c["share"] for c in res["contexts"]) == pytest.approx(1.0)
    weighted = sum(c["share"] * c["adaptive"] for c in res["contexts"] if c["share"] > 0)
    assert res["adaptive"] == pytest.approx(weighted, abs=1e-9)
    for c in res["contexts"]:
        assert set(c["policy"]["second_round"]) == set(headroom.outcome_names(3))


def test_result_is_plain_json_with_the_promised_keys(small_result):
    data = json.loads(json.dumps(small_result, allow_nan=False))
    assert {"profile", "best_fixed", "adaptive", "headroom", "headroom_se", "episodes", "seconds"} <= set(data)
    assert data["episodes"] == SMALL["episodes"] and data["profile"] == "mmlu_pro"
    assert data["context_variables"] == list(headroom.CONTEXT_VARIABLES)


def test_same_seed_same_numbers(small_result):
    again = headroom.measure_headroom("mmlu_pro", rounds=2, seed=3, **SMALL)
    first = dict(small_result)
    first.pop("seconds"), again.pop("seconds")
    assert again == first


def test_random_adversary_is_part_of_the_context():
    res = headroom.measure_headroom("mmlu_pro", rounds=1, adversary="random", seed=0, **SMALL)
    seen = {tuple(c["context"]["adversaries"]) for c in res["contexts"]}
    assert seen == {(0,), (1,), (2,)}
    assert res["selection"]["adaptive"] >= res["selection"]["best_fixed"] - 1e-12
    assert res["outcome_classes"] == [] and res["adversary"] == "random"


@pytest.mark.parametrize("kwargs,named", [
    ({"adversary": "fixed"}, "adversary='fixed'"),
    ({"adversary": "random", "adversarial_agents": (0,)}, "adversarial_agents=[0]"),
    ({"episodes": 0}, "episodes=0"),
    ({"rounds": 0}, "rounds=0"),
    ({"context_shortlist": 0}, "context_shortlist=0"),
])
def test_bad_settings_name_the_value(kwargs, named):
    with pytest.raises(ValueError, match=named.replace("[", r"\[").replace("]", r"\]")):
        headroom.measure_headroom("mmlu_pro", **{**SMALL, "rounds": 1, **kwargs})


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "topo_env.references.oracle_cli", *args], capture_output=True, text=True,
                          cwd=REPO_ROOT, timeout=120)


def test_cli_json_is_one_object():
    proc = run_cli("--profile", "aime25", "--headroom", "--rounds", "1", "--samples", "60", "--rerank-samples", "200",
                   "--episodes", "200", "--json", "--no-progress")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert {"profile", "best_fixed", "adaptive", "headroom", "headroom_se", "episodes", "seconds"} <= set(data)
    assert data["episodes"] == 200 and data["samples"] == 60 and data["rounds"] == 1


def test_cli_table():
    proc = run_cli("--profile", "humaneval", "--headroom", "--rounds", "1", "--samples", "60", "--rerank-samples",
                   "200", "--episodes", "200", "--adversary", "random", "--no-progress")
    assert proc.returncode == 0, proc.stderr
    assert "best fixed" in proc.stdout and "adaptive" in proc.stdout and "adversary=random" in proc.stdout


@pytest.mark.parametrize("args,named", [
    (["--headroom", "--adversary", "always"], "always"),
    (["--adversary", "random"], "--adversary random"),
    (["--headroom", "--adversary", "random", "--adversarial", "0"], "adversarial_agents=[0]"),
    (["--headroom", "--episodes", "0"], "'0'"),
])
def test_cli_bad_flags(args, named):
    proc = run_cli("--profile", "mmlu_pro", "--rounds", "1", *args)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert len(proc.stderr.splitlines()) == 1 and named in proc.stderr
