"""Tests for topo_env.references.baselines (fixed-topology policies, evaluate_policy) and the evaluate CLI."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import re

import numpy as np
import pytest

import topo_env
from topo_env.frontends.comm_actions import CommAction
from topo_env.references.baselines import (
    BASELINES, DEFAULT_ROUNDS, FIXED_BASELINES, analyzer_index, default_rounds, evaluate_open_loop, evaluate_policy,
    fixed_joint_action, make_baseline, open_loop_actions,
)
from topo_env.sim.batch import TaskArrays
from topo_env.frontends.comm_batch import CommBatchSimulator
from topo_env.sim.model import EpisodeNoise

REPO_ROOT = Path(__file__).resolve().parents[1]
S, B, Q, A, V, D = (int(a) for a in CommAction)


def edges_to_adjacency(n: int, edges: list[tuple[int, int]]) -> np.ndarray:
    adj = np.zeros((n, n), dtype=np.int8)
    for u, v in edges:
        adj[u, v] = 1
    return adj


# Hand-written round-0 graphs (ring targets in round 0); u -> v means u's output reaches v.
EXPECTED = {
    3: {
        "solo": ([S, S, S], []),
        "full": ([B, B, B], [(0, 1), (0, 2), (1, 0), (1, 2), (2, 0), (2, 1)]),
        "chain": ([V, V, S], [(0, 1), (1, 2)]),
        "star": ([S, S, A], [(0, 2), (1, 2)]),
        "debate": ([D, D, D], [(0, 1), (1, 0), (1, 2), (2, 1), (2, 0), (0, 2)]),
    },
    4: {
        "solo": ([S, S, S, S], []),
        "full": ([B, B, B, B], [(u, v) for u in range(4) for v in range(4) if u != v]),
        "chain": ([V, V, V, S], [(0, 1), (1, 2), (2, 3)]),
        "star": ([S, S, S, A], [(0, 3), (1, 3), (2, 3)]),
        "debate": ([D, D, D, D], [(0, 1), (1, 0), (1, 2), (2, 1), (2, 3), (3, 2), (3, 0), (0, 3)]),
    },
}


@pytest.mark.parametrize("n", [3, 4])
@pytest.mark.parametrize("name", FIXED_BASELINES)
def test_fixed_baseline_actions_and_graph(n, name):
    expected_actions, expected_edges = EXPECTED[n][name]
    env = topo_env.parallel_env(n_agents=n, rounds=2, profile="mmlu_pro")
    policy = make_baseline(name)
    observations, infos = env.reset(seed=3)
    policy.reset(3)
    for t in range(env.rounds):
        actions = policy.act(observations, infos)
        assert actions == {f"agent_{i}": a for i, a in enumerate(expected_actions)}
        observations, *_ = env.step(actions)
        if t == 0 or name != "debate":  # debate targets follow the disagree rule after round 0
            np.testing.assert_array_equal(env.adjacency, edges_to_adjacency(n, expected_edges))
    np.testing.assert_array_equal(open_loop_actions(name, n, 3), np.array([expected_actions] * 3))


def test_star_centre_is_last_analyzer():
    assert analyzer_index(3, ("analyzer", "specialist", "specialist")) == 0
    assert analyzer_index(4, ("analyzer", "specialist", "analyzer", "specialist")) == 2
    assert analyzer_index(3, ("specialist",) * 3) == 2
    assert analyzer_index(3, None) == 2
    env = topo_env.parallel_env(roles=["analyzer", "specialist", "specialist"])
    observations, infos = env.reset(seed=0)
    actions = make_baseline("star", roles=env.config.roles).act(observations, infos)
    assert actions == {"agent_0": A, "agent_1": S, "agent_2": S}
    env.step(actions)
    np.testing.assert_array_equal(env.adjacency, edges_to_adjacency(3, [(1, 0), (2, 0)]))


def test_random_respects_mask_and_is_reproducible():
    env = topo_env.parallel_env(rounds=3, disabled_actions=["broadcast_all", "debate_check"])

    def play(seed: int) -> list[dict[str, int]]:
        policy = make_baseline("random", seed=seed)
        played = []
        for episode in range(20):
            observations, infos = env.reset(seed=episode)
            while env.agents:
                actions = policy.act(observations, infos)
                played.append(actions)
                observations, *_ = env.step(actions)
        return played

    first = play(7)
    used = {a for actions in first for a in actions.values()}
    assert used == {S, Q, A, V}
    assert play(7) == first
    assert play(8) != first
    policy = make_baseline("random")
    policy.reset(11)
    observations, infos = env.reset(seed=0)
    again = make_baseline("random", seed=11)
    assert policy.act(observations, infos) == again.act(observations, infos)


def test_fixed_baseline_with_disabled_action_raises():
    env = topo_env.parallel_env(disabled_actions=["execute_verify"])
    observations, infos = env.reset(seed=0)
    make_baseline("full").act(observations, infos)  # unaffected
    with pytest.raises(ValueError, match=r"'chain'.*'execute_verify'"):
        make_baseline("chain").act(observations, infos)
    with pytest.raises(ValueError, match=r"'chain'.*'execute_verify'"):
        evaluate_policy(env, make_baseline("chain"), 2, progress=False)


def test_bad_names_raise():
    with pytest.raises(ValueError, match=r"'tree'.*solo.*random"):
        make_baseline("tree")
    with pytest.raises(ValueError, match="random"):
        open_loop_actions("random", 3, 2)
    with pytest.raises(ValueError, match="tree"):
        open_loop_actions("tree", 3, 2)
    with pytest.raises(ValueError, match="rounds"):
        open_loop_actions("solo", 3, 0)
    with pytest.raises(ValueError, match="n_agents"):
        fixed_joint_action("solo", 1)
    with pytest.raises(ValueError, match="episodes"):
        evaluate_policy(topo_env.parallel_env(), make_baseline("solo"), 0, progress=False)
    with pytest.raises(ValueError, match="split"):
        evaluate_policy(topo_env.parallel_env(), make_baseline("solo"), 1, split="test", progress=False)
    assert set(BASELINES) == set(FIXED_BASELINES) | {"random"}


def test_default_rounds_by_domain():
    assert DEFAULT_ROUNDS == {"math": 3, "code": 2, "reasoning": 2}
    assert default_rounds("aime25") == 3 and default_rounds("humaneval") == 2 and default_rounds("mmlu_pro") == 2


def manual_loop(env, policy, episodes, seed, split):
    returns, accuracy, tokens, density = [], [], [], []
    for k in range(episodes):
        observations, infos = env.reset(seed=seed + k, options={"split": split})
        policy.reset(seed + k)
        total, dens = 0.0, []
        while env.agents:
            observations, rewards, _, _, infos = env.step(policy.act(observations, infos))
            total += rewards["agent_0"]
            dens.append(infos["agent_0"]["density"])
        returns.append(total)
        accuracy.append(infos["agent_0"]["accuracy"])
        tokens.append(infos["agent_0"]["team_tokens"])
        density.append(np.mean(dens))
    return {"reward": np.mean(returns), "accuracy": np.mean(accuracy), "tokens_per_task": np.mean(tokens),
            "density": np.mean(density)}


@pytest.mark.parametrize("name", ["random", "debate"])
@pytest.mark.parametrize("reward_mode", ["sparse", "shaped"])
def test_evaluate_policy_matches_manual_loop(name, reward_mode):
    env = topo_env.parallel_env(profile="humaneval", rounds=3, reward_mode=reward_mode)
    got = evaluate_policy(env, make_baseline(name, seed=0), 12, seed=5, split="train", progress=False)
    want = manual_loop(env, make_baseline(name, seed=0), 12, seed=5, split="train")
    assert got["episodes"] == 12
    for key, value in want.items():
        assert got[key] == pytest.approx(value, abs=1e-12), key
    assert all(type(got[k]) is float for k in ("reward", "reward_std", "accuracy", "tokens_per_task", "density"))


@pytest.mark.parametrize("profile,n_agents,rounds,adversarial", [
    ("mmlu_pro", 3, 2, ()), ("aime25", 4, 3, ()), ("humaneval", 3, 2, (1,)),
])
def test_open_loop_batch_matches_env(profile, n_agents, rounds, adversarial):
    episodes, seed = 25, 100
    env = topo_env.parallel_env(profile=profile, n_agents=n_agents, rounds=rounds, adversarial_agents=list(adversarial))
    tasks, noises = [], []
    for k in range(episodes):
        env.reset(seed=seed + k, options={"split": "eval"})
        tasks.append(env.task)
        noises.append(env.backend.noise)
    task_arrays = TaskArrays.from_tasks(tasks)
    noise = EpisodeNoise.concatenate(noises)
    sim = CommBatchSimulator.from_config(env.config)
    for name in FIXED_BASELINES:
        result = sim.run(open_loop_actions(name, n_agents, rounds, env.config.roles), task_arrays, noise)
        via_env = evaluate_policy(env, make_baseline(name), episodes, seed=seed, split="eval", progress=False)
        assert via_env["reward"] == pytest.approx(float(result.reward.mean()), abs=1e-12), name
        assert via_env["accuracy"] == pytest.approx(float(result.accuracy.mean()), abs=1e-12), name
        assert via_env["tokens_per_task"] == pytest.approx(float(result.tokens.mean()), abs=1e-9), name
        assert via_env["density"] == pytest.approx(float(result.density.mean()), abs=1e-12), name


def test_evaluate_open_loop_runs():
    out = evaluate_open_loop("chain", "mmlu_pro", 200, seed=1)
    assert out["episodes"] == 200 and out["density"] == pytest.approx(2 / 6)
    assert out == evaluate_open_loop("chain", "mmlu_pro", 200, seed=1)


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "topo_env.references.baselines_cli", *args], capture_output=True, text=True,
                          cwd=REPO_ROOT, timeout=120)


def test_evaluate_cli_json():
    proc = run_cli("--policy", "star", "--profile", "humaneval", "--episodes", "5", "--seed", "2", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert {"reward", "accuracy", "tokens_per_task", "density"} <= set(data)
    assert set(data) <= {"reward", "accuracy", "tokens_per_task", "density", "episodes", "policy", "profile"}
    env = topo_env.parallel_env(profile="humaneval", rounds=2)
    want = evaluate_policy(env, make_baseline("star"), 5, seed=2, progress=False)
    for key in ("reward", "accuracy", "tokens_per_task", "density"):
        assert data[key] == pytest.approx(want[key], abs=1e-12)


def test_evaluate_cli_table_and_options():
    proc = run_cli("--policy", "random", "--profile", "aime25", "--episodes", "3", "--rounds", "2",
                   "--n-agents", "4", "--adversarial", "0", "3")
    assert proc.returncode == 0, proc.stderr
    header = re.split(r"\s{2,}", proc.stdout.splitlines()[0].strip())
    assert header == ["policy", "profile", "episodes", "accuracy (pts)", "reward", "reward SE", "tokens_per_task", "density"]
    assert "random" in proc.stdout and "aime25" in proc.stdout


@pytest.mark.parametrize("args,named", [
    (["--policy", "tree", "--profile", "aime25", "--episodes", "2"], "tree"),
    (["--policy", "solo", "--profile", "gsm8k", "--episodes", "2"], "gsm8k"),
    (["--policy", "solo", "--profile", "aime25", "--episodes", "0"], "'0'"),
    (["--policy", "solo", "--profile", "aime25", "--episodes", "2", "--adversarial", "7"], "7"),
    (["--policy", "solo", "--profile", "aime25", "--episodes", "2", "--n-agents", "1"], "1"),
])
def test_evaluate_cli_bad_arguments(args, named):
    proc = run_cli(*args)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert named in proc.stderr.splitlines()[-1]
