"""AgentConductor: the YAML topology language (error classes, density, caps, decoding), GRPO, the
LLM-writer path and played episodes on the simulated team."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from controllers.agentconductor import (ENV_ROUNDS, TRAIN_EPISODES, AgentConductorConfig, AgentConductorController,
                                        build, group_advantages)
from controllers.base import play_episode
from controllers.topology_language import (ERROR_PENALTY, NODE_CAPS, build_prompt, check_plan, graph_term,
                                           s_complex)
from topo_env.frontends.orchestrator_env import orchestrator_env

torch.set_num_threads(1)

ROLES = ("specialist", "specialist", "analyzer")

VALID = """
- step: 1
  agents:
    - {name: a, agent: 0, ref: []}
    - {name: b, agent: specialist}
- step: 2
  agents:
    - {name: c, agent: analyzer, ref: [a, b]}
- step: 3
  agents:
    - {name: d, agent: 0, ref: [c, a]}
"""


def check(text, max_rounds=10, known=None):
    return check_plan(text, 3, ROLES, max_rounds, known)


# -- error classes (Table 1) ---------------------------------------------------------------
def test_valid_plan_has_no_penalty_and_its_size():
    result = check(VALID)
    assert (result.error, result.penalty) == (None, 0.0)
    plan = result.plan
    assert (plan.n_nodes, plan.n_edges, plan.n_steps) == (4, 4, 3)
    assert [n.agent for n in plan.nodes] == [0, 1, 2, 0]  # 'specialist' -> first free specialist


@pytest.mark.parametrize("text,error,reason", [
    ("", "no_yaml", "no YAML found"),
    ("   \n# only a comment\n", "no_yaml", "no YAML block"),
    ("I would call the coder first.", "no_yaml", "prose"),
    (None, "no_yaml", "no YAML found"),
    ("- step: 1\n  agents: [{name: a, agent: 0", "parse", "YAML parse failed"),
    ("```yaml\n- step: 1\n   agents: x\n  - bad\n```", "parse", "YAML parse failed"),
    ("steps: []", "schema", "non-empty list of steps"),
    ("- step: 1\n  agents: []", "schema", "non-empty list of nodes"),
    ("- step: 1\n  agents: [{name: a, agent: 0, role: coder}]", "schema", "unknown keys ['role']"),
    ("- step: 1\n  agents: [{name: a, agent: 3}]", "schema", "members 0..2"),
    ("- step: 1\n  agents: [{name: a, agent: coder}]", "schema", "names no team member"),
    ("- step: 1\n  agents: [{agent: 0}]", "schema", "needs both 'name' and 'agent'"),
    ("- step: one\n  agents: [{name: a, agent: 0}]", "schema", "must be an integer"),
    ("- step: 1\n  agents: [{name: a, agent: 0}]\n- step: 2\n  agents: [{name: b, agent: 1, ref: a}]", "schema",
     "must be a list of node names"),
    # logic: a ref to a later step
    ("- step: 1\n  agents: [{name: a, agent: 0}]\n- step: 2\n  agents: [{name: b, agent: 1, ref: [c]}, "
     "{name: c, agent: 2, ref: [a]}]", "logic", "not an earlier step"),
    # logic: a non-final node that no later node refs (conciseness)
    ("- step: 1\n  agents: [{name: a, agent: 0}, {name: b, agent: 1}]\n- step: 2\n  agents: "
     "[{name: c, agent: 2, ref: [a]}]", "logic", "conciseness"),
    ("- step: 1\n  agents: [{name: a, agent: 0, ref: [a]}]", "logic", "step 1 must have empty ref"),
    ("- step: 1\n  agents: [{name: a, agent: 0}, {name: b, agent: 0}]", "logic", "called twice in one step"),
    ("- step: 1\n  agents: [{name: a, agent: specialist}, {name: b, agent: specialist}, "
     "{name: c, agent: specialist}]", "logic", "every specialist is already called"),
    ("- step: 2\n  agents: [{name: a, agent: 0}]", "logic", "numbered [2]"),
    ("- step: 1\n  agents: [{name: a, agent: 0}]\n- step: 2\n  agents: [{name: a, agent: 1, ref: [a]}]", "logic",
     "used twice"),
    ("- step: 1\n  agents: [{name: a, agent: 0}]\n- step: 2\n  agents: [{name: b, agent: 1, ref: [zz]}]", "logic",
     "names no node"),
])
def test_error_classes(text, error, reason):
    result = check(text)
    assert result.error == error
    assert reason in result.reason
    assert result.penalty == {"no_yaml": -2.0, "parse": -1.5, "schema": -1.0, "logic": -0.5}[error]
    assert result.rounds == [] and result.plan is None


def test_plan_longer_than_the_turns_rounds_is_a_logic_error():
    assert check(VALID, max_rounds=2).error is None  # a, b | c | d -> rounds {0: a, b, c}, {1: d}
    result = check(VALID, max_rounds=1)
    assert result.error == "logic" and "needs 2 env rounds" in result.reason


def test_fenced_block_is_extracted():
    result = check("Here is the plan:\n```yaml\n- step: 1\n  agents: [{name: a, agent: 2}]\n```\nDone.")
    assert result.error is None and result.plan.nodes[0].agent == 2


def test_penalty_table():
    assert ERROR_PENALTY == {"no_yaml": -2.0, "parse": -1.5, "schema": -1.0, "logic": -0.5}


# -- density (Eqs. 6-7, 13) and caps (Eq. 12) ------------------------------------------------
def test_s_complex_exact_values():
    # one node: S_node = e^-1/4, S_edge = e^0 = 1, S_depth = 0
    assert s_complex(1, 0, 1, 4) == pytest.approx(16.099702331155697, abs=1e-12)
    assert s_complex(1, 0, 1, 4) == pytest.approx(math.exp(math.exp(-0.25) + 2.0), abs=1e-12)
    # a -> {b, c} (3 nodes, 2 edges, 2 steps), N_max 7
    assert s_complex(3, 2, 2, 7) == pytest.approx(12.386771239264235, abs=1e-12)
    # three parallel nodes in one step, N_max 10 and 4: exp(e^-0.3 + 2 + 2/3), exp(e^-0.75 + 2 + 2/3)
    assert s_complex(3, 0, 1, 10) == pytest.approx(30.18921940627044, abs=1e-12)
    assert s_complex(3, 0, 1, 4) == pytest.approx(23.081541282341544, abs=1e-12)
    # the VALID plan: |V| 4, |E| 4, s 3, N_max 7
    assert s_complex(4, 4, 3, 7) == pytest.approx(
        math.exp(math.exp(-4 / 7) + 2 * math.exp(-4 / (4 * 3.5)) + 0.25), abs=1e-12)


def test_graph_term_caps():
    assert NODE_CAPS == {"easy": 4, "medium": 7, "hard": 10}
    assert graph_term(4, 3, 2, 4) == s_complex(4, 3, 2, 4)  # at the cap: S_complex
    assert graph_term(5, 4, 2, 4) == pytest.approx(math.tanh(-1 / 4), abs=1e-15)  # over: tanh((4 - 5) / 4)
    assert graph_term(10, 9, 4, 7) == pytest.approx(-0.4041267397578591, abs=1e-12)
    assert graph_term(10, 9, 4, 10) > 0
    assert AgentConductorConfig.from_dict({"difficulty": "easy"}).n_max == 4
    assert AgentConductorConfig().n_max == 7


# -- decoding into RoundSpecs -------------------------------------------------------------
def test_decoder_adjacency_within_a_round_recall_across_rounds():
    result = check(VALID)
    assert result.placement == {"a": (0, 0), "b": (0, 1), "c": (0, 2), "d": (1, 0)}
    first, second = result.rounds
    expected_adj = np.zeros((3, 3), dtype=bool)
    expected_adj[0, 2] = expected_adj[1, 2] = True  # a -> c, b -> c in the same round
    np.testing.assert_array_equal(first.adjacency, expected_adj)
    np.testing.assert_array_equal(first.active, [True, True, True])
    np.testing.assert_array_equal(first.verify, [False, False, False])
    assert first.recall is None or not first.recall.any()
    # d (member 0, round 2) refs c (member 2, round 1): a recall; its ref to a (member 0 itself) is
    # the self-edge the executor gives anyway
    np.testing.assert_array_equal(second.adjacency, np.zeros((3, 3), dtype=bool))
    expected_recall = np.zeros((3, 3), dtype=bool)
    expected_recall[2, 0] = True
    np.testing.assert_array_equal(second.recall, expected_recall)
    np.testing.assert_array_equal(second.active, [True, False, False])
    np.testing.assert_array_equal(second.verify, [True, False, False])  # the final step is verified


def test_decoder_refs_to_the_previous_turn_are_recalls():
    text = "- step: 1\n  agents: [{name: x, agent: 1, ref: []}]\n- step: 2\n  agents: [{name: y, agent: 2, ref: [x]}]"
    plain = check(text)
    assert len(plain.rounds) == 1 and plain.rounds[0].adjacency[1, 2]
    known = {"old": (-1, 0)}
    text2 = ("- step: 1\n  agents: [{name: x, agent: 1, ref: []}]\n- step: 2\n  agents: "
             "[{name: y, agent: 2, ref: [x, old]}]")
    result = check(text2, known=known)
    assert result.error is None and result.plan.n_edges == 3 - 1  # x and old
    spec = result.rounds[0]
    assert spec.adjacency[1, 2] and spec.recall[0, 2] and spec.active.tolist() == [False, True, True]
    assert check(text2.replace("old", "older"), known=known).error == "logic"


# -- GRPO ------------------------------------------------------------------------------------
def test_group_advantages():
    adv = group_advantages([1, 2, 3, 4, 5, 6, 7, 8])
    std = math.sqrt(5.25)
    np.testing.assert_allclose(adv, (np.arange(1, 9) - 4.5) / std, atol=1e-12)
    assert adv[0] == pytest.approx(-1.5275252316519465, abs=1e-12)
    np.testing.assert_array_equal(group_advantages([2.0] * 8), np.zeros(8))


def _train(seed, episodes=96):
    env = orchestrator_env(mode="graph", profile="mmlu_pro", rounds=ENV_ROUNDS)
    controller = build(3, ENV_ROUNDS, seed, {"tasks_per_update": 1})
    report = controller.train(env, episodes, seed=seed)
    return controller, report


def test_training_is_reproducible_and_changes_the_policy():
    untrained = build(3, ENV_ROUNDS, 3)
    env = orchestrator_env(mode="graph", profile="mmlu_pro", rounds=ENV_ROUNDS)
    play_episode(env, untrained, 0, {"split": "eval"})  # builds the network (same generator as _train's)
    first, report = _train(3)
    second, _ = _train(3)
    assert report.episodes == 96
    a, b, init = first.state_dict()["policy"], second.state_dict()["policy"], untrained.state_dict()["policy"]
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert any(not torch.equal(a[k], init[k]) for k in a)
    # a different seed trains differently
    other, _ = _train(4)
    assert any(not torch.equal(a[k], other.state_dict()["policy"][k]) for k in a)
    restored = build(3, ENV_ROUNDS, 9)
    restored.load_state_dict(first.state_dict())
    assert all(torch.equal(restored.state_dict()["policy"][k], a[k]) for k in a)


def test_training_raises_the_turn_reward():
    """GRPO on Eq. 9's reward: after 960 episodes the greedy plans earn more of the YAML + graph
    terms (fewer invalid plans, denser-scored ones) on eval tasks than the untrained writer."""
    env = orchestrator_env(mode="graph", profile="mmlu_pro", rounds=ENV_ROUNDS)

    def mean_turn_return(controller):
        values = []
        for k in range(30):
            play_episode(env, controller, k, {"split": "eval"})
            values.append(controller.turn_return())
        return float(np.mean(values))

    controller = build(3, ENV_ROUNDS, 0)
    before = mean_turn_return(controller)
    controller.train(env, 960, seed=0)
    after = mean_turn_return(controller)
    assert after > before + 1.0, (before, after)


# -- the LLM orchestrator path -----------------------------------------------------------------
ONE_STEP = "```yaml\n- step: 1\n  agents:\n    - {name: p, agent: 0, ref: []}\n    - {name: q, agent: 2, ref: []}\n```"


def _llm_controller(responses, rounds=ENV_ROUNDS, **config):
    prompts = []

    def write_yaml(prompt):
        prompts.append(prompt)
        response = responses[min(len(prompts), len(responses)) - 1]
        if isinstance(response, Exception):
            raise response
        return response

    cfg = AgentConductorConfig.from_dict(config)
    return AgentConductorController(3, rounds, 0, cfg, write_yaml=write_yaml,
                                    task_text=lambda obs, info: "What is 2 + 2?"), prompts


def test_llm_path_runs_the_written_plan():
    controller, prompts = _llm_controller([ONE_STEP])
    env = orchestrator_env(mode="graph", profile="mmlu_pro", rounds=ENV_ROUNDS)
    assert controller.trainable is False
    obs, info = env.reset(seed=0, options={"split": "eval"})
    controller.begin(obs, info)
    action = controller.act(obs, info)
    np.testing.assert_array_equal(action["active"], [1, 0, 1])
    np.testing.assert_array_equal(action["verify"], [1, 0, 1])
    assert action["halt"] == 0
    obs, reward, done, _, info = env.step(action)
    assert info["calls"].tolist() == [1, 0, 1] and not done
    action = controller.act(obs, info)  # no verdict on mmlu_pro: turn 2 is not played, the episode halts
    assert action["halt"] == 1 and not action["active"].any()
    _, _, done, _, info = env.step(action)
    assert done
    controller.end(obs, reward, info)
    assert len(prompts) == 1 and "What is 2 + 2?" in prompts[0] and "empty `ref`" in prompts[0]
    [turn] = controller.turns
    assert (turn.error, turn.status, turn.n_nodes, turn.graph) == (None, "none", 2, s_complex(2, 0, 1, 7))


@pytest.mark.parametrize("bad,error", [
    ("Let me think about it.", "no_yaml"),
    ("- step: [1", "parse"),
    ("- step: 1\n  agents: [{name: a, agent: 7}]", "schema"),
    ("- step: 1\n  agents: [{name: a, agent: 0}]\n- step: 2\n  agents: [{name: b, agent: 1, ref: [b]}]", "logic"),
    (RuntimeError("server down"), "no_yaml"),
])
def test_llm_path_invalid_turn_is_penalised_skipped_and_retried(bad, error, caplog):
    controller, prompts = _llm_controller([bad, ONE_STEP])
    env = orchestrator_env(mode="graph", profile="mmlu_pro", rounds=ENV_ROUNDS)
    with caplog.at_level("WARNING", logger="controllers.agentconductor"):
        record = play_episode(env, controller, 1, {"split": "eval"})
    first, second = controller.turns
    assert first.error == error and first.status == "invalid" and first.graph == 0.0
    assert first.penalty == ERROR_PENALTY[error]
    assert second.error is None and record.rounds == 1  # only the valid turn ran
    assert "Turn 2" in prompts[1] and (error == "no_yaml" and isinstance(bad, Exception) or error in prompts[1])
    assert any("turn 1" in r.getMessage() for r in caplog.records)
    assert controller.turn_return() == pytest.approx(ERROR_PENALTY[error] + s_complex(2, 0, 1, 7))


def test_llm_path_all_turns_invalid_never_crashes():
    controller, _ = _llm_controller(["", ""])
    env = orchestrator_env(mode="graph", profile="mmlu_pro", rounds=ENV_ROUNDS)
    record = play_episode(env, controller, 2, {"split": "eval"})
    assert record.rounds == 0 and [t.error for t in controller.turns] == ["no_yaml", "no_yaml"]
    assert controller.turn_return() == -4.0


def test_llm_second_turn_after_a_failed_verdict_refs_the_first():
    turn2 = "- step: 1\n  agents: [{name: fix, agent: 1, ref: [p]}]"
    env = orchestrator_env(mode="graph", profile="humaneval", rounds=ENV_ROUNDS)
    for seed in range(40):
        controller, prompts = _llm_controller([ONE_STEP, turn2])
        record = play_episode(env, controller, seed, {"split": "eval"})
        if controller.turns[0].status == "failed":
            break
    else:
        pytest.fail("no failed verdict in 40 humaneval episodes")
    assert controller.turns[1].status in ("passed", "failed")  # turn 2's final node is verified too
    assert controller.turns[1].error is None and record.rounds == 2
    assert "FAILED" in prompts[1] and "p, q" in prompts[1]
    # turn 2's node (member 1) recalls p (member 0's turn-1 output)
    assert controller.turns[1].n_edges == 1


def test_prompt_builder():
    prompt = build_prompt("Sort a list.", 3, ROLES, 2, NODE_CAPS)
    assert "agent 2: <analyzer>" in prompt and "medium: at most 7 nodes" in prompt
    assert prompt.endswith("your output:") and "Turn" not in prompt
    later = build_prompt("Sort a list.", 3, ROLES, 2, NODE_CAPS, turn=2, feedback="agent 0: FAILED", previous_nodes=("a",))
    assert "### Turn 2" in later and "agent 0: FAILED" in later and "ref: a" in later


# -- played episodes -------------------------------------------------------------------------
@pytest.mark.parametrize("profile", ["mmlu_pro", "humaneval"])
def test_plays_episodes(profile):
    env = orchestrator_env(mode="graph", profile=profile, rounds=ENV_ROUNDS)
    controller = build(3, ENV_ROUNDS, 0)
    records = [play_episode(env, controller, k, {"split": "eval"}) for k in range(5)]
    again = [play_episode(env, controller, k, {"split": "eval"}) for k in range(5)]
    assert [r.reward for r in records] == [r.reward for r in again]  # greedy decoding: deterministic
    for r in records:
        assert 0 <= r.rounds <= ENV_ROUNDS and np.isfinite(r.reward) and 0.0 <= r.accuracy <= 1.0
    assert 1 <= len(controller.turns) <= 2


def test_config_and_constants():
    assert TRAIN_EPISODES == 110 * 8 * 8 and ENV_ROUNDS == 6
    cfg = AgentConductorConfig.from_dict({})
    assert (cfg.turns, cfg.group_size, cfg.tasks_per_update, cfg.difficulty) == (2, 8, 8, "medium")
    with pytest.raises(ValueError, match="unknown AgentConductor config key 'group'"):
        AgentConductorConfig.from_dict({"group": 8})
    with pytest.raises(ValueError, match="group_size=1"):
        AgentConductorConfig.from_dict({"group_size": 1})
    with pytest.raises(ValueError, match="difficulty='extreme'"):
        AgentConductorConfig.from_dict({"difficulty": "extreme"})
    with pytest.raises(ValueError, match="lr=0"):
        AgentConductorConfig.from_dict({"lr": 0})
    with pytest.raises(ValueError, match="gamma=1.5"):
        AgentConductorConfig.from_dict({"gamma": 1.5})
