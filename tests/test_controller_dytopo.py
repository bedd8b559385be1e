"""DyTopo (controllers/dytopo.py) and the simulated team's need/offer descriptors
(topo_env/sim/descriptors.py): the threshold, the in-degree cap, no self-loops, the barrier, the
descriptor parser and its fallback, the manager's halting, the sim descriptors leaving the
episode's noise untouched, and played episodes."""
import logging
import math

import numpy as np
import pytest
import torch

from controllers import dytopo
from controllers.base import graph_action, play_episode
from controllers.dytopo import (
    DytopoConfig, DytopoController, build, manager_complete, parse_descriptors, relevance_matrix, route,
)
from topo_env.frontends.encoders import make_encoder
from topo_env.frontends.orchestrator_env import orchestrator_env
from topo_env.sim import descriptors
from topo_env.sim.profiles import PROFILES

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def minilm():
    return make_encoder("minilm")


def unit(angle_deg: float) -> np.ndarray:
    a = math.radians(angle_deg)
    return np.array([math.cos(a), math.sin(a)])


# -- config ----------------------------------------------------------------------------------
def test_config_has_the_paper_defaults_and_rejects_bad_keys():
    cfg = DytopoConfig.from_dict({})
    assert (cfg.tau, cfg.k_in, cfg.t_max, cfg.early_stop, cfg.halt_confidence) == (0.3, 3, 10, True, 0.5)
    assert DytopoConfig.from_dict({"tau": 0.4, "k_in": 2}).tau == 0.4
    for bad, key in [({"taus": 0.3}, "taus"), ({"tau": 1.5}, "tau"), ({"k_in": 0}, "k_in"), ({"k_in": 2.5}, "k_in"),
                     ({"t_max": True}, "t_max"), ({"halt_confidence": "high"}, "halt_confidence"),
                     ({"early_stop": 1}, "early_stop")]:
        with pytest.raises(ValueError, match=key):
            DytopoConfig.from_dict(bad)
    assert dytopo.TRAIN_EPISODES == 0 and dytopo.ENV_ROUNDS is None
    controller = build(3, 2, 7, {"tau": 0.4})
    assert isinstance(controller, DytopoController) and controller.config.tau == 0.4
    assert controller.state_dict() == {} and not controller.trainable and controller.mode == "graph"


# -- routing ---------------------------------------------------------------------------------
def test_an_edge_exists_iff_relevance_exceeds_tau():
    """q_0 = (1, 0); k_1 at 60 degrees (r = 0.5), k_2 at 90 degrees (r = 0): 1 -> 0 iff 0.5 > tau."""
    queries = np.stack([unit(0), unit(-90), unit(-90)])  # 1 and 2 match no offer: r <= 0
    keys = np.stack([unit(180), unit(60), unit(90)])
    r = relevance_matrix(queries, keys)
    assert r[0, 1] == pytest.approx(0.5) and r[0, 2] == pytest.approx(0.0, abs=1e-12)
    expected = np.zeros((3, 3), np.int8)
    expected[1, 0] = 1  # edges[j, i]: j -> i
    assert route(r, 0.49, 3).tolist() == expected.tolist()
    assert route(np.array([[0, 0.5, 0], [0, 0, 0], [0, 0, 0]]), 0.5, 3).sum() == 0  # strictly greater
    assert route(r, 0.51, 3).sum() == 0
    assert route(r, -0.5, 3)[:, 0].tolist() == [0, 1, 1]  # r[0, 2] = 0 > -0.5


def test_in_degree_cap_keeps_the_most_relevant_providers():
    r = np.zeros((5, 5))
    r[0, 1:] = [0.9, 0.5, 0.7, 0.6]  # agent 0's need against the offers of 1..4
    r[2, [0, 1, 3]] = [0.8, 0.8, 0.8]  # a tie: the lower index wins
    edges = route(r, 0.3, 2)
    assert np.flatnonzero(edges[:, 0]).tolist() == [1, 3]
    assert np.flatnonzero(edges[:, 2]).tolist() == [0, 1]
    assert edges.sum(axis=0).max() == 2
    assert np.flatnonzero(route(r, 0.3, 3)[:, 0]).tolist() == [1, 3, 4]


def test_no_self_loops_and_missing_descriptors_cut_edges():
    v = np.eye(3)
    r = relevance_matrix(v, v)  # everyone matches only itself
    assert route(r, 0.3, 3).sum() == 0
    r = np.full((3, 3), 0.9)
    assert route(r, 0.3, 3).tolist() == [[0, 1, 1], [1, 0, 1], [1, 1, 0]]
    edges = route(r, 0.3, 3, has_need=[True, False, True], has_offer=[True, True, False])
    assert edges.tolist() == [[0, 0, 1], [1, 0, 1], [0, 0, 0]]


# -- descriptors -----------------------------------------------------------------------------
def test_parser_reads_lines_and_json_and_falls_back_on_garbage():
    assert parse_descriptors("[X] answer: B\nNEED: a check of my answer\nOFFER: a proof") == \
        ("a check of my answer", "a proof")
    assert parse_descriptors("- **need**: help on law\n  Offer = \"my notes\"  ") == ("help on law", "my notes")
    assert parse_descriptors("NEED: old\nOFFER: old\n...\nNEED: new\nOFFER: new") == ("new", "new")
    paper = '```json\n{"public_content": "x {y}", "q_vector": "I need tests", "k_vector": "I provide code"}\n```'
    assert parse_descriptors(paper) == ("I need tests", "I provide code")
    assert parse_descriptors('{"Query": "q", "Key": "k"}') == ("q", "k")
    assert parse_descriptors('{"q_desc": "q"} then\nOFFER: k') == ("q", "k")
    for garbage in [None, "", 17, "no descriptors here", '{"q_vector": ["not", "text"]}', "NEED:\nOFFER:   ",
                    "{broken json", "needs: x"]:
        assert parse_descriptors(garbage) == (None, None), garbage
    assert parse_descriptors("NEED: x" + "y" * 2000)[0] == "x" + "y" * (dytopo.MAX_DESCRIPTOR_CHARS - 1)


def test_unreadable_replies_are_logged_and_get_no_edges(minilm, caplog):
    controller = DytopoController(3, 3, config=DytopoConfig(early_stop=False), encoder=minilm)
    texts = ["NEED: I need a check of my answer on law.\nOFFER: I offer my worked reasoning on law.",
             "just an answer",
             "NEED: I need a check of my answer on law.\nOFFER: I offer a confident answer on law."]
    outputs = [{"text": s, "answer": "A", "confidence": 0.9, "verdict": 0} for s in texts]
    with caplog.at_level(logging.WARNING, logger="controllers.dytopo"):
        action = controller.act({"round": 1}, {"outputs": outputs})
    assert "agent 1's reply has no readable NEED and OFFER descriptor" in caplog.text
    assert action["recall"].tolist() == [[0, 0, 1], [0, 0, 0], [1, 0, 0]]
    assert action["adjacency"].sum() == 0 and action["active"].tolist() == [1, 1, 1]


def test_sim_descriptor_categories_and_noise():
    z = 0.0
    assert descriptors.categories(0.0, 0.9, False, False, z) == ("none", "confident")  # logit 2.2
    assert descriptors.categories(0.0, 0.75, False, False, z) == ("check", "reasoning")  # logit 1.1
    assert descriptors.categories(0.6, 0.75, False, False, z) == ("none", "confident")  # skill lifts it
    assert descriptors.categories(0.0, 0.55, False, False, z) == ("check", "open")
    assert descriptors.categories(0.0, 0.99, True, False, z) == ("resolve", "confident")
    assert descriptors.categories(-3.0, 0.1, True, True, z) == ("none", "confident")  # an adversary bluffs
    assert descriptors.categories(0.0, 0.75, False, False, 2.0) == ("none", "confident")  # noise sd 0.5
    assert descriptors.categories(0.0, 0.75, False, False, -1.0) == ("check", "open")
    noise = [0.25, 0.5, -1.0]
    assert descriptors.call_normal(noise) == descriptors.call_normal(list(noise))
    assert descriptors.call_normal(noise) != descriptors.call_normal([0.25, 0.5, -1.0 + 1e-12])
    draws = np.array([descriptors.call_normal([float(k)]) for k in range(4000)])
    assert abs(draws.mean()) < 0.06 and abs(draws.std() - 1.0) < 0.05
    lines = descriptors.descriptor_lines("other", 0.0, 0.9, False, False, [0.1])
    assert lines.splitlines()[0].startswith("NEED: ") and "general knowledge" in lines


def test_sim_templates_separate_at_the_papers_thresholds(minilm):
    """'check'/'resolve' needs match 'confident'/'reasoning' offers above 0.4 for every subject of
    every profile; the 'none' need and the 'open' offer match nothing above 0.3."""
    subjects = sorted({descriptors.SUBJECT_PHRASES.get(s, s) for p in PROFILES.values() for s in p.subject_names})
    for subject in subjects:
        q = {k: minilm.encode(v.format(subject=subject)) for k, v in descriptors.NEEDS.items()}
        k = {c: minilm.encode(v.format(subject=subject)) for c, v in descriptors.OFFERS.items()}
        for need in q:
            for offer in k:
                r = float(q[need] @ k[offer])
                if need in ("check", "resolve") and offer in ("confident", "reasoning"):
                    assert r > 0.4, (subject, need, offer, r)
                else:
                    assert r < 0.3, (subject, need, offer, r)


def play_fixed_graph(profile: str, seed: int, descriptors: bool) -> tuple[float, dict]:
    """A fixed graph (round 1 solo, round 2 fully connected, all verified on code) on eval episode
    ``seed``: the return and the last step's info."""
    env = orchestrator_env(mode="graph", profile=profile, rounds=2, descriptors=descriptors)
    env.reset(seed=seed, options={"split": "eval"})
    ret, done, t = 0.0, False, 0
    while not done:
        action = graph_action(3, adjacency=1 - np.eye(3) if t else None, active=np.ones(3),
                              verify=np.ones(3) if profile == "humaneval" else None)
        _, reward, done, _, info = env.step(action)
        ret, t = ret + reward, t + 1
    return ret, info


@pytest.mark.parametrize("profile, seed", [("mmlu_pro", 0), ("mmlu_pro", 1), ("mmlu_pro", 2), ("humaneval", 1)])
def test_sim_descriptors_leave_the_episodes_results_untouched_and_are_deterministic(profile, seed):
    """With descriptors on, the same episode has the return, tokens, accuracy and confidences it has
    with them off; the reply texts carry NEED/OFFER lines (none with descriptors off), the same
    ones when the episode is played again."""
    plain_return, plain = play_fixed_graph(profile, seed, descriptors=False)
    texts = []
    for _ in range(2):
        ret, info = play_fixed_graph(profile, seed, descriptors=True)
        assert (ret, info["team_tokens"], info["accuracy"]) == (plain_return, plain["team_tokens"], plain["accuracy"])
        assert [o["confidence"] for o in info["outputs"]] == [o["confidence"] for o in plain["outputs"]]
        texts.append([o["text"] for o in info["outputs"]])
    assert texts[0] == texts[1]
    assert all(parse_descriptors(s)[0] and parse_descriptors(s)[1] for s in texts[0])
    assert all(parse_descriptors(o["text"]) == (None, None) for o in plain["outputs"])


# -- manager ---------------------------------------------------------------------------------
def test_manager_halts_only_on_a_confident_unanimous_unrefuted_round():
    def out(answer, conf, verdict=0):
        return {"text": "", "answer": answer, "confidence": conf, "verdict": verdict}

    assert manager_complete([out("A", 0.9), out("A", 0.6), out("A", 0.5)], 0.5)
    assert not manager_complete([out("A", 0.9), out("B", 0.9), out("A", 0.9)], 0.5)
    assert not manager_complete([out("A", 0.9), out("A", 0.49), out("A", 0.9)], 0.5)
    assert not manager_complete([out("A", 0.9), out("A", 0.9), out("A", 0.9, verdict=-1)], 0.5)
    assert not manager_complete([out("A", 0.9), None, out("A", 0.9)], 0.5)
    assert not manager_complete([out(None, 0.9)] * 3, 0.5)
    assert not manager_complete([out("A", None)] * 3, 0.5)
    controller = DytopoController(3, 2, encoder=make_encoder("hashed"))
    action = controller.act({"round": 1}, {"outputs": [out("A", 0.9)] * 3})
    assert action["halt"] == 1 and action["active"].sum() == 0 and action["recall"].sum() == 0
    off = DytopoController(3, 2, config=DytopoConfig(early_stop=False), encoder=make_encoder("hashed"))
    assert off.act({"round": 1}, {"outputs": [out("A", 0.9)] * 3})["active"].tolist() == [1, 1, 1]


def test_round_cap_t_max_ends_the_episode():
    env = orchestrator_env(mode="graph", profile="mmlu_pro", rounds=5, descriptors=True)
    controller = build(3, 5, 0, {"t_max": 2, "early_stop": False})
    record = play_episode(env, controller, 1, {"split": "eval"})
    assert record.rounds == 2 and record.calls == 7
    first = build(3, 5, 0, {"t_max": 1})
    assert first.act({"round": 0}, {})["halt"] == 1


# -- played episodes -------------------------------------------------------------------------
def test_barrier_round_two_routes_round_one_outputs_as_recalls(minilm):
    env = orchestrator_env(mode="graph", profile="mmlu_pro", rounds=3, descriptors=True)
    controller = DytopoController(3, 3, config=DytopoConfig(early_stop=False), encoder=minilm)
    obs, info = env.reset(seed=2, options={"split": "eval"})
    controller.begin(obs, info)
    first = controller.act(obs, info)
    assert first["adjacency"].sum() == 0 and first["recall"].sum() == 0 and first["active"].tolist() == [1, 1, 1]
    obs, _, _, _, info = env.step(first)
    round_one = [o["text"] for o in info["outputs"]]
    second = controller.act(obs, info)
    assert second["adjacency"].sum() == 0  # nobody sees a message of the round it runs in
    # agent 0 is sure and needs nothing; 1 and 2 ask for a check: 0 (confident) and each other
    # (worked reasoning) answer it
    assert [parse_descriptors(s)[0] for s in round_one] == [
        "No needs at the moment.", "I need a check of my answer on computer science.",
        "I need a check of my answer on computer science."]
    assert second["recall"].tolist() == [[0, 1, 1], [0, 0, 1], [0, 1, 0]]
    assert controller.trace[0]["relevance"][1, 0] > 0.6 and controller.trace[0]["relevance"][0, 1] < 0.3
    obs, _, _, _, info = env.step(second)
    assert obs["adjacency"].tolist() == second["recall"].tolist()  # the env ran exactly these
    assert info["calls"].tolist() == [1, 1, 1]


def test_played_episodes_are_reproducible_and_halt_early(minilm):
    env = orchestrator_env(mode="graph", profile="mmlu_pro", descriptors=True)
    controller = DytopoController(3, env.rounds, encoder=minilm)
    records = [play_episode(env, controller, k, {"split": "eval"}) for k in range(8)]
    again = [play_episode(env, DytopoController(3, env.rounds, encoder=minilm), k, {"split": "eval"})
             for k in range(8)]
    assert records == again
    assert {r.rounds for r in records} == {1, 2}  # the manager halts some after round 1
    assert all(r.calls == 3 * r.rounds + 1 for r in records)
    assert [r.rounds for r in records] == [1, 2, 1, 1, 1, 1, 2, 1]
    assert [r.accuracy for r in records] == [1.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0]
    assert records[0].tokens == 4773 and records[0].density == 0.0  # halted: one solo round


def test_llm_agents_are_asked_for_descriptors_only_when_the_env_says_so():
    from agents_llm.prompts import DESCRIPTORS, system_prompt

    asked = system_prompt("reasoning", "specialist", "reasoning expert", False, descriptors=True)
    assert asked.endswith(DESCRIPTORS) and "NEED:" in asked and "OFFER:" in asked
    assert "NEED:" not in system_prompt("reasoning", "specialist", "reasoning expert", False)
    reply = "Answer: B\nConfidence: 0.7\nNEED: a check of the second step\nOFFER: the algebra"
    assert parse_descriptors(reply) == ("a check of the second step", "the algebra")
