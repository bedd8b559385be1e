"""TacoMAS (controllers/tacomas.py): replicator weights, the rule-based judge, edit budgets and
validation, the rule-based proposer, the meta-LLM JSON path with stub callables, and a stream of
played episodes on the simulated team in which the graph changes."""
from __future__ import annotations

import json
import logging
import math
from collections import deque

import numpy as np
import pytest

from controllers import tacomas
from controllers.base import play_episode
from controllers.tacomas import (ANY_FREE_SLOT, EditRejected, TacoMASConfig, TeamGraph, TopologyEdit, has_cycle,
                                 judge_round, parse_meta_edit, replicator_update, rule_based_edit, validate_edit)
from topo_env.frontends.orchestrator_env import orchestrator_env

SINK3 = 3  # the sink's index for a team of 3


def graph_of(edges, alive=(1, 1, 1), died_at=None) -> TeamGraph:
    alive = np.asarray(alive, dtype=bool)
    died = np.where(alive, -1, 0) if died_at is None else np.asarray(died_at)
    return TeamGraph(np.asarray(edges, dtype=bool), alive, died.astype(np.int64))


STAR = [[0, 0, 1], [0, 0, 1], [0, 0, 0]]  # workers 0, 1 -> leader 2


def out(answer, confidence, verdict=0):
    return {"text": f"answer: {answer}", "answer": answer, "confidence": confidence, "verdict": verdict}


# -- fast loop -----------------------------------------------------------------------------------

def test_replicator_update_is_eq_12():
    pi = np.array([0.5, 0.3, 0.2])
    c = np.array([1.0, 0.0, 0.5])
    new = replicator_update(pi, c, eta=1.0)
    e = math.e
    z = 0.5 * e + 0.3 + 0.2 * math.sqrt(e)
    np.testing.assert_allclose(new, [0.5 * e / z, 0.3 / z, 0.2 * math.sqrt(e) / z], rtol=1e-12)
    np.testing.assert_allclose(new, [0.6833682, 0.1508383, 0.1657935], atol=1e-6)
    # eta scales the exponent; an unscored agent (NaN) and a dead one (pi = 0) keep their weight
    half = replicator_update(np.array([0.4, 0.4, 0.2, 0.0]), np.array([1.0, 0.0, np.nan, 1.0]), eta=0.5)
    g = math.exp(0.5)
    np.testing.assert_allclose(half, [0.8 * g / (g + 1), 0.8 / (g + 1), 0.2, 0.0], rtol=1e-12)


def test_judge_scores_confidence_weighted_agreement_credited_by_outcome():
    outputs = [out("B", 0.8), out("B", 0.6), out("C", 0.9)]
    called = np.array([True, True, True])
    mid = judge_round(outputs, called)  # B has 1.4 confidence, C 0.9
    assert mid.consensus == "B"
    np.testing.assert_allclose(mid.contributions, [0.9, 0.8, 0.05])
    assert mid.estimate == pytest.approx(1.4 / 2.3)
    right = judge_round(outputs, called, accuracy=1.0)
    np.testing.assert_allclose(right.contributions, [0.9, 0.8, 0.05])
    wrong = judge_round(outputs, called, accuracy=0.0)  # the consensus was wrong: the dissenter gets credit
    np.testing.assert_allclose(wrong.contributions, [0.1, 0.2, 0.95])
    # verifier gate, no answer, an agent not called
    gated = judge_round([out("x", 0.5, verdict=1), out("x", 0.5, verdict=-1), None], np.array([1, 1, 0], bool))
    np.testing.assert_allclose(gated.contributions[:2], [(0.75 + 1) / 2, 0.75 / 2])
    assert np.isnan(gated.contributions[2])
    assert gated.estimate == pytest.approx(0.5)  # the FAIL output does not back the consensus
    unanimous = judge_round([out("A", 0.7), out("A", 0.2), {"answer": None, "confidence": 0.0}], np.ones(3, bool))
    assert unanimous.estimate == 1.0 and unanimous.contributions[2] == 0.0


# -- edits: budgets, the sink, deaths, acyclicity ---------------------------------------------------

def test_has_cycle():
    assert not has_cycle(np.array(STAR))
    assert has_cycle(np.array([[0, 1, 0], [0, 0, 1], [1, 0, 0]]))
    assert not has_cycle(np.zeros((1, 1)))


def test_budgets_are_enforced_by_trimming_in_the_proposal_order():
    g = graph_of(STAR)
    # 3 pairs (B_V = 2) and 5 edge edits (B_E = 4); the items past the budgets would break the graph
    # (a 3rd death leaves nobody; the 5th edge closes the cycle 1 -> 2 -> 1), so only trimming passes
    edit = TopologyEdit(pairs=[(0, None), (None, None), (1, None)],
                        edge_ops=[("remove", 1, 2), ("add", 2, 1), ("remove", 2, 1), ("add", 1, 2), ("add", 2, 1)])
    new, applied, notes = validate_edit(edit, g, max_pairs=2, max_edge_edits=4)
    assert applied.pairs == [(0, None), (None, None)]
    assert applied.edge_ops == edit.edge_ops[:4]
    assert list(new.alive) == [False, True, True]
    assert new.edges.astype(int).tolist() == [[0, 0, 0], [0, 0, 1], [0, 0, 0]]
    assert notes == ["3 birth/death pairs over the budget of 2: kept the first 2",
                     "5 edge edits over the budget of 4: kept the first 4"]
    with pytest.raises(EditRejected, match="cycle"):  # the same proposal with room for all of it
        validate_edit(TopologyEdit(edge_ops=edit.edge_ops), g, max_pairs=3, max_edge_edits=5)
    with pytest.raises(EditRejected, match="no agent alive"):
        validate_edit(TopologyEdit(pairs=[(0, None), (1, None), (2, None)]), g, max_pairs=3, max_edge_edits=5)


def test_never_the_sink():
    g = graph_of(STAR)
    for edit, reason in [
        (TopologyEdit(pairs=[(SINK3, None)]), "sink"),
        (TopologyEdit(pairs=[(None, SINK3)]), "sink"),
        (TopologyEdit(edge_ops=[("remove", 2, SINK3)]), "sink reads every alive agent"),
        (TopologyEdit(edge_ops=[("add", SINK3, 0)]), "no outgoing edges"),
    ]:
        with pytest.raises(EditRejected, match=reason):
            validate_edit(edit, g, 2, 4)
    new, _, notes = validate_edit(TopologyEdit(edge_ops=[("add", 0, SINK3)]), g, 2, 4)
    assert (new.edges == g.edges).all() and "implied already" in notes[0]


def test_validation_rejects_cycles_unknown_agents_and_bad_births():
    g = graph_of([[0, 1, 0], [0, 0, 0], [0, 0, 0]], alive=(1, 1, 0))
    cases = [
        (TopologyEdit(edge_ops=[("add", 1, 0)]), "cycle"),
        (TopologyEdit(edge_ops=[("add", 0, 0)]), "self-loop"),
        (TopologyEdit(edge_ops=[("add", 0, 7)]), "unknown agent"),
        (TopologyEdit(edge_ops=[("add", 0, 2)]), "dead"),
        (TopologyEdit(edge_ops=[("flip", 0, 1)]), "unknown edge operation"),
        (TopologyEdit(pairs=[(2, None)]), "already dead"),
        (TopologyEdit(pairs=[(None, 0)]), "alive"),
        (TopologyEdit(pairs=[(0, 0)]), "dies in the same update"),
        (TopologyEdit(time_control="later"), "time_control"),
    ]
    for edit, reason in cases:
        with pytest.raises(EditRejected, match=reason):
            validate_edit(edit, g, 2, 4)
    # a valid birth into the dead slot, with an edge to it; a role-only birth takes the free slot
    new, applied, _ = validate_edit(TopologyEdit(pairs=[(None, 2)], edge_ops=[("add", 0, 2)]), g, 2, 4)
    assert new.alive.all() and new.edges[0, 2] and new.edges[0, 1]
    new, applied, notes = validate_edit(TopologyEdit(pairs=[(0, ANY_FREE_SLOT), (None, ANY_FREE_SLOT)]), g, 2, 4)
    assert applied.pairs == [(0, 2), (None, None)] and "no free slot" in notes[0]
    assert list(new.alive) == [False, True, True] and not new.edges.any()


def test_rule_based_proposer_on_a_hand_made_state():
    cfg = TacoMASConfig(death_window=4, rebirth_after=20, edge_margin=0.1)
    template = np.array(STAR, dtype=bool)
    # agents 0..3 of a team of 4: 0 is consistently low (mean 0.15 < 0.2), 1 at 0.25 survives,
    # 3 is dead since round 5 (served its 20 rounds at t = 30); edges 1 -> 2 and 0 -> 2
    g = TeamGraph(np.array([[0, 0, 1, 0], [0, 0, 1, 0], [0, 0, 0, 0], [0, 0, 0, 0]], bool),
                  np.array([1, 1, 1, 0], bool), np.array([-1, -1, -1, 5]))
    template4 = np.zeros((4, 4), bool)
    template4[[0, 1, 3], 2] = True
    recent = [deque([0.1, 0.2, 0.1, 0.2]), deque([0.25] * 4), deque([0.9] * 4), deque()]
    pi = np.array([0.2, 0.3, 0.5, 0.0])
    edit = rule_based_edit(g, recent, pi, template4, t=30, config=cfg)
    assert edit.pairs == [(0, 3)]
    # 3 gets its template edge back first; then 1 -> 2 goes (0.25 is 0.65 below 0.9); 0's edges die with it
    assert edit.edge_ops == [("add", 3, 2), ("remove", 1, 2)]
    new, applied, notes = validate_edit(edit, g, cfg.max_birth_death_pairs, cfg.max_edge_edits)
    assert notes == [] and list(new.alive) == [False, True, True, True]
    assert new.edges.astype(int).tolist() == [[0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 1, 0]]
    # too early for a rebirth; a window not yet full is not "consistently low"
    assert rule_based_edit(g, recent, pi, template4, t=24, config=cfg).pairs == [(0, None)]
    short = [deque([0.0] * 3), deque([0.25] * 4), deque([0.9] * 4), deque()]
    assert rule_based_edit(g, short, pi, template4, t=10, config=cfg).pairs == []
    # never the last alive agent: all low, at most B_V = 2 die, the highest pi survives
    low = [deque([0.1] * 4) for _ in range(3)]
    edit = rule_based_edit(graph_of(STAR), low, np.array([0.5, 0.2, 0.3]), template, t=3, config=cfg)
    assert edit.pairs == [(1, None), (2, None)]


# -- the meta-LLM JSON path ------------------------------------------------------------------------

def meta_reply(pairs=(), edits=(), control="continue") -> str:
    obj = {"birth_death_pairs": list(pairs), "graph_edit": list(edits), "graph_diff": "", "agent_feedback": {},
           "global_rationale": "test", "time_control": control}
    return "Here is the plan:\n```json\n" + json.dumps(obj) + "\n```"


def test_parse_meta_edit_reads_the_papers_json_form():
    text = meta_reply(pairs=[["agent_0", None], {"v_dead": None, "v_new_spec": {"role": "researcher"}}],
                      edits=[{"op": "edge_add", "src": "agent_1", "dst": "agent_0"},
                             {"op": "edge_remove", "from": 0, "to": "2"}], control="slow_again")
    edit = parse_meta_edit(text, 3)
    assert edit.pairs == [(0, None), (None, ANY_FREE_SLOT)]
    assert edit.edge_ops == [("add", 1, 0), ("remove", 0, 2)]
    assert edit.time_control == "slow_again"
    for garbage in ["no json here", "{not: json}", "[1, 2]", '{"birth_death_pairs": 3}',
                    '{"graph_edit": [{"op": "edge_add", "src": "planner", "dst": "agent_1"}]}']:
        with pytest.raises(EditRejected):
            parse_meta_edit(garbage, 3)


def stream_controller(propose, **config):
    return tacomas.build(3, 2, 0, dict({"halt_on_success": False, "slow_interval": 1}, **config), propose=propose)


def run_one_slow_update(controller):
    """One scored last round whose answer was wrong (s = 0 < tau): a slow update runs."""
    outputs = [out("A", 0.9), out("A", 0.8), out("B", 0.7)]
    controller.begin({}, {})
    controller.end({}, 0.0, {"calls": np.ones(3, int), "outputs": outputs, "accuracy": 0.0})


@pytest.mark.parametrize("reply, applied, reason", [
    (meta_reply(pairs=[["agent_0", None]], edits=[{"op": "edge_remove", "src": 1, "dst": 2}]), True, "test"),
    (meta_reply(pairs=[["sink", None]]), False, "never deleted"),
    (meta_reply(edits=[{"op": "edge_add", "src": 2, "dst": 0}]), False, "cycle"),
    ("I think we should add a researcher.", False, "no JSON object"),
    ('{"birth_death_pairs": [["agent_0", null]], ', False, "no JSON object"),
    (meta_reply(edits=[{"op": "edge_add", "src": "agent_9", "dst": "agent_0"}]), False, "unknown agent"),
])
def test_meta_llm_edits_are_validated_then_applied_or_rejected(reply, applied, reason, caplog):
    prompts = []

    def propose(prompt):
        prompts.append(prompt)
        return reply

    controller = stream_controller(propose)
    before = controller.graph.copy()
    with caplog.at_level(logging.WARNING, logger="controllers.tacomas"):
        run_one_slow_update(controller)
    assert len(prompts) == 1 and "birth_death_pairs" in prompts[0] and '"sink"' in prompts[0]
    entry = controller.edit_log[-1]
    assert entry["source"] == "meta_llm" and entry["applied"] is applied and reason in entry["reason"]
    if applied:
        assert not controller.graph.alive[0] and controller.pi[0] == 0.0
        assert not controller.graph.edges[1, 2]
    else:
        assert (controller.graph.edges == before.edges).all() and (controller.graph.alive == before.alive).all()
        assert any("rejected" in r.message and reason in r.message for r in caplog.records)


def test_over_budget_meta_edit_keeps_its_first_pairs_and_edges(caplog):
    reply = meta_reply(pairs=[["agent_0", None], [None, None], ["agent_1", None]],
                       edits=[{"op": "edge_remove", "src": 1, "dst": 2}, {"op": "edge_add", "src": 2, "dst": 1},
                              {"op": "edge_remove", "src": 2, "dst": 1}, {"op": "edge_add", "src": 1, "dst": 2},
                              {"op": "edge_add", "src": 2, "dst": 1}])
    controller = stream_controller(lambda prompt: reply)
    with caplog.at_level(logging.WARNING, logger="controllers.tacomas"):
        run_one_slow_update(controller)
    entry = controller.edit_log[-1]
    assert entry["applied"] and entry["pairs"] == [(0, None), (None, None)] and len(entry["edge_ops"]) == 4
    assert list(controller.graph.alive) == [False, True, True]
    assert controller.graph.edges.astype(int).tolist() == [[0, 0, 0], [0, 0, 1], [0, 0, 0]]
    assert sum("over the budget" in r.message for r in caplog.records) == 2


def test_a_failing_meta_llm_call_is_a_rejection_not_a_crash():
    def broken(prompt):
        raise TimeoutError("meta-LLM timed out")

    controller = stream_controller(broken)
    run_one_slow_update(controller)
    assert controller.edit_log[-1]["applied"] is False and "TimeoutError" in controller.edit_log[-1]["reason"]


def test_time_control_stop_halts_the_task():
    controller = stream_controller(lambda prompt: meta_reply(control="stop"))
    controller.begin({"round": 0}, {"calls": np.zeros(3, int)})
    action = controller.act({"round": 0}, {"calls": np.zeros(3, int)})
    assert action["active"].tolist() == [1, 1, 1] and action["adjacency"][0, 2] == 1
    info = {"calls": np.ones(3, int), "outputs": [out("A", 0.9), out("B", 0.8), out("C", 0.7)]}
    action = controller.act({"round": 1}, info)  # s = 0.9/2.4 < 1: slow update (K = 1), which says stop
    assert controller.edit_log[-1]["applied"] and action["halt"] == 1 and not action["active"].any()


# -- the controller on the simulated team ----------------------------------------------------------

def test_config_rejects_unknown_keys_and_bad_values():
    assert TacoMASConfig.from_dict({"eta": 2}).eta == 2.0
    for bad, key in [({"etaa": 1}, "etaa"), ({"eta": 0}, "eta"), ({"slow_interval": 0}, "slow_interval"),
                     ({"tau": 1.5}, "tau"), ({"max_edge_edits": -1}, "max_edge_edits"),
                     ({"halt_on_success": 1}, "halt_on_success"), ({"death_threshold": "low"}, "death_threshold")]:
        with pytest.raises(ValueError, match=key):
            TacoMASConfig.from_dict(bad)
    with pytest.raises(ValueError, match="leader"):
        tacomas.build(3, 2, 0, {"leader": 5})


def test_halts_once_the_team_is_unanimous_and_scores_the_round_with_the_outcome():
    env = orchestrator_env(mode="graph", profile="mmlu_pro", rounds=2)
    controller = tacomas.build(3, 2, 0)
    observation, info = env.reset(seed=0, options={"split": "eval"})
    controller.begin(observation, info)
    observation, _, _, _, info = env.step(controller.act(observation, info))
    assert len({o["answer"] for o in info["outputs"]}) == 1  # this task's team agrees after round 1
    action = controller.act(observation, info)
    assert action["halt"] == 1 and not action["active"].any() and controller.t == 0
    observation, reward, done, _, info = env.step(action)
    assert done and info["calls"].sum() == 0
    controller.end(observation, reward, info)
    assert controller.t == 1 and all(len(r) == 1 for r in controller.recent)


def test_a_stream_of_played_episodes_edits_the_graph_and_is_reproducible():
    env = orchestrator_env(mode="graph", profile="mmlu_pro", rounds=2)

    def run(episodes):
        controller = tacomas.build(3, 2, 0)
        graphs, records = [], []
        for k in range(episodes):
            records.append(play_episode(env, controller, k, {"split": "eval"}))
            graphs.append((controller.graph.edges.copy(), controller.graph.alive.copy()))
        return controller, graphs, records

    controller, graphs, records = run(60)
    assert controller.t == 60 + sum(r.rounds == 2 for r in records) - sum(r.rounds == 0 for r in records)
    assert controller.slow_updates > 0
    changed = [k for k in range(1, len(graphs)) if not (np.array_equal(graphs[k][0], graphs[k - 1][0])
                                                        and np.array_equal(graphs[k][1], graphs[k - 1][1]))]
    assert changed, "the slow loop never changed the graph"
    assert any(e["applied"] and (e["pairs"] or e["edge_ops"]) for e in controller.edit_log)
    for edges, alive in graphs:
        assert not has_cycle(edges) and alive.any()
    assert controller.pi.sum() == pytest.approx(1.0) and (controller.pi[~controller.graph.alive] == 0).all()
    assert all(r.rounds in (1, 2) for r in records)
    again, _, _ = run(60)
    a, b = controller.state_dict(), again.state_dict()
    assert all(np.array_equal(np.asarray(a[k]), np.asarray(b[k])) for k in a)
    restored = tacomas.build(3, 2, 1)
    restored.load_state_dict(a)
    assert np.array_equal(restored.graph.edges, controller.graph.edges) and np.allclose(restored.pi, controller.pi)
