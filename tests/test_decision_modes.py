"""The decision, configurable per team (``env.decision``, topo_env.engine.decision): the paper's LLM
decision node (the default), a plurality vote of the agents' finals, or one agent's final answer; in
the simulated team (scalar and batch), the LLM team, the traces and the fit."""
from __future__ import annotations

import asyncio

import numpy as np
import pytest

import topo_env
from topo_env.engine.config_checks import ConfigError
from topo_env.engine.decision import parse_decision, pick_final
from topo_env.engine.episode import RoundSpec, TeamEpisode
from topo_env.engine.team_backend import Message
from topo_env.engine.traces import read_traces
from topo_env.fitting.explore import record_exploration
from topo_env.fitting.fit import fit_records, load_traces
from topo_env.fitting.fit_check import predictive_check
from topo_env.fitting.fit_report import KEPT
from topo_env.frontends.comm_batch import CommBatchSimulator
from topo_env.frontends.env_config import EnvConfig
from topo_env.references.baselines import episode_calls
from topo_env.sim.batch import BatchRoundSpec, BatchSimulator, TaskArrays
from topo_env.sim.profiles import get_profile
from topo_env.sim.team import SimTeamBackend
from studies.sim2real import max_episode_calls
from fake_openai_server import FakeOpenAIServer
from test_llm_team import USAGE, make_env, reasoning_tasks

MODES = ["llm", "vote", "agent:0", "agent:2"]


def message(sender: int, answer: str, confidence: float | None, text: str | None = None) -> Message:
    return Message(sender, "specialist", 1, "revise", text or f"Answer: {answer}\nConfidence: {confidence}", answer,
                   confidence, 5)


def sim_decide(mode: str, finals: list[tuple[int, int, float]]):
    """The scalar simulated team's decision under ``mode`` on finals (agent, label, confidence)."""
    team = SimTeamBackend(get_profile("mmlu_pro"), decision=mode)
    task = team.sample_task(np.random.default_rng(0), "train")
    team.start_episode(task, np.random.default_rng(1), 3, 2)
    choices = task.hidden["answers"]
    shown = tuple(message(i, choices[label], conf) for i, label, conf in finals)
    decision = asyncio.run(team.decide(task, shown))
    return decision, choices


# ------------------------------------------------------------------------------------------------
# the setting


@pytest.mark.parametrize("bad, match", [("majority", "'majority'"), ("agent:3", "'agent:3'"), ("agent:x", "'agent:x'"),
                                        (1, "decision=1")])
def test_a_bad_value_is_one_line_naming_it(bad, match):
    with pytest.raises(ConfigError, match=match) as err:
        EnvConfig(n_agents=3, decision=bad)
    assert "\n" not in str(err.value)


def test_the_setting_is_kept_and_the_default_is_the_decision_node():
    assert EnvConfig().decision == "llm"
    assert EnvConfig.from_dict({"decision": "agent:1"}).to_dict()["decision"] == "agent:1"
    assert [parse_decision(m).calls for m in MODES] == [1, 0, 0, 0]
    assert [episode_calls(6, parse_decision(m).calls) for m in ("llm", "vote")] == [7, 6]
    assert max_episode_calls(3, 2) == 13 and max_episode_calls(3, 2, "vote") == 12


# ------------------------------------------------------------------------------------------------
# the simulated team (scalar)


def test_vote_picks_the_plurality_on_the_simulated_team():
    # labels: 0 right; two agents say the trap (label 1), with low confidence, one says right, confidently
    decision, choices = sim_decide("vote", [(0, 0, 0.99), (1, 1, 0.2), (2, 1, 0.3)])
    assert decision.reply.answer == choices[1] and decision.accuracy == 0.0
    assert decision.reply.confidence == 0.2  # the lowest-index voter of the winning answer speaks
    decision, _ = sim_decide("vote", [(0, 1, 0.2), (1, 0, 0.6), (2, 0, 0.3)])
    assert decision.reply.answer == choices[0] and decision.accuracy == 1.0
    assert decision.reply.prompt_tokens == decision.reply.completion_tokens == 0


def test_vote_ties_go_to_the_summed_confidence_then_the_lowest_index():
    decision, choices = sim_decide("vote", [(0, 2, 0.4), (1, 0, 0.45), (2, 3, 0.3)])  # 1 vote each
    assert decision.reply.answer == choices[0]  # the most confident
    decision, _ = sim_decide("vote", [(0, 2, 0.5), (1, 2, 0.2), (2, 0, 0.4), (3, 0, 0.3)])  # 2 : 2, 0.7 : 0.7
    assert decision.reply.answer == choices[2]  # agent 0 holds it
    decision, _ = sim_decide("vote", [(0, 0, 0.4), (1, 2, 0.5), (2, 2, 0.2), (3, 0, 0.3)])
    assert decision.reply.answer == choices[0]


def test_agent_k_answers_and_falls_back_to_the_vote():
    finals = [(0, 1, 0.9), (1, 1, 0.9), (2, 0, 0.1)]
    decision, choices = sim_decide("agent:2", finals)
    assert decision.reply.answer == choices[0] and decision.accuracy == 1.0
    assert decision.reply.text.startswith("Answer: ") and decision.reply.confidence == 0.1
    decision, _ = sim_decide("agent:2", finals[:2])  # agent 2 never ran: the vote
    assert decision.reply.answer == choices[1]
    llm, _ = sim_decide("llm", finals)
    assert llm.reply.completion_tokens > 0 and llm.reply.text.startswith("[")  # the decision node's own reply


# ------------------------------------------------------------------------------------------------
# the env and the batch simulator


def play_episodes(mode: str, episodes: int, rounds: int = 2):
    env = topo_env.parallel_env(profile="mmlu_pro", n_agents=3, rounds=rounds, decision=mode)
    rng = np.random.default_rng(5)
    out = {"tasks": [], "noise": [], "actions": [], "tokens": [], "accuracy": [], "reward": [], "decision": [],
           "agent_tokens": []}
    for ep in range(episodes):
        acts = rng.integers(6, size=(rounds, 3))
        env.reset(seed=500 + ep)
        out["tasks"].append(env.task)
        out["noise"].append(env.backend.noise)
        for r in range(rounds):
            _, rew, _, _, info = env.step({f"agent_{i}": int(acts[r, i]) for i in range(3)})
        out["actions"].append(acts)
        out["reward"].append(rew["agent_0"])
        out["tokens"].append(info["agent_0"]["team_tokens"])
        out["accuracy"].append(info["agent_0"]["accuracy"])
        out["decision"].append(env.unwrapped.episode.decision)
        out["agent_tokens"].append(sum(env.unwrapped.episode.agent_tokens))
    return out


@pytest.fixture(scope="module")
def played():
    return {mode: play_episodes(mode, 120) for mode in MODES}


@pytest.mark.parametrize("mode", MODES)
def test_batch_simulator_and_scalar_team_agree(played, mode):
    out = played[mode]
    sim = CommBatchSimulator(get_profile("mmlu_pro"), 3, 2, decision=mode)
    res = sim.run(np.stack(out["actions"]), TaskArrays.from_tasks(out["tasks"]),
                  type(out["noise"][0]).concatenate(out["noise"]))
    np.testing.assert_array_equal(res.tokens, out["tokens"])
    np.testing.assert_array_equal(res.accuracy, out["accuracy"])
    np.testing.assert_allclose(res.reward, out["reward"], rtol=0, atol=1e-12)
    labels = [t.hidden["answers"].index(d.reply.answer) if d.reply.answer is not None else -1
              for t, d in zip(out["tasks"], out["decision"])]
    np.testing.assert_array_equal(res.decision_label, labels)
    assert res.decision_calls == (1 if mode == "llm" else 0)


def test_vote_and_agent_decisions_spend_no_tokens_and_differ_from_the_node(played):
    llm = played["llm"]
    for mode in ("vote", "agent:0", "agent:2"):
        out = played[mode]
        assert out["agent_tokens"] == llm["agent_tokens"]  # the same agents' calls
        assert out["tokens"] == out["agent_tokens"]  # no decision tokens
        assert all(d.reply.prompt_tokens == d.reply.completion_tokens == 0 for d in out["decision"])
    assert all(a > b for a, b in zip(llm["tokens"], llm["agent_tokens"]))  # the node's tokens count
    answers = {m: [d.reply.answer for d in played[m]["decision"]] for m in MODES}
    assert answers["vote"] != answers["agent:0"] != answers["agent:2"]  # the modes do differ


@pytest.mark.parametrize("mode", ["vote", "agent:1", "llm"])
def test_batch_and_scalar_agree_when_agents_sit_out(mode):
    """Round specs in which agent 1 (and in some episodes everyone) never runs: agent:1 falls back to
    the vote, and nobody running answers nothing; the batch simulator's run_specs gives the same."""
    profile = get_profile("mmlu_pro")
    team = SimTeamBackend(profile, decision=mode)
    roles = ("specialist", "specialist", "analyzer")
    episode = TeamEpisode(team, roles, 2)
    rng = np.random.default_rng(9)
    tasks, noises, adjs, actives, labels, tokens = [], [], [], [], [], []
    for ep in range(90):
        task = team.sample_task(rng, "train")
        episode.start(task, np.random.default_rng(ep))
        tasks.append(task)
        noises.append(team.noise)
        ep_adj, ep_act = [], []
        for r in range(2):
            active = np.array([ep % 5 != 0, ep % 2 == 0 and ep % 5 != 0, ep % 5 != 0 and r == 1])
            adj = np.zeros((3, 3), np.int8)
            if active[0] and active[2]:
                adj[0, 2] = 1
            episode.run_round(RoundSpec(adj, active, np.zeros(3, bool)))
            ep_adj.append(adj)
            ep_act.append(active)
        d = episode.decide()
        labels.append(task.hidden["answers"].index(d.reply.answer) if d.reply.answer is not None else -1)
        tokens.append(episode.team_tokens)
        adjs.append(ep_adj)
        actives.append(ep_act)
    adjs, actives = np.array(adjs), np.array(actives)
    specs = [BatchRoundSpec(adjs[:, r], actives[:, r], np.zeros((90, 3), bool)) for r in range(2)]
    sim = BatchSimulator(profile, 3, 2, roles, decision=mode)
    res = sim.run_specs(specs, TaskArrays.from_tasks(tasks), type(noises[0]).concatenate(noises))
    np.testing.assert_array_equal(res.decision_label, labels)
    np.testing.assert_array_equal(res.tokens, tokens)
    if mode != "llm":
        assert labels[0] == -1 and (res.accuracy[::5] == 0).all()  # nobody ran: no answer
    if mode == "agent:1":  # agent 1 ran in episodes 2, 4, 6, 8, 12, ...: elsewhere the vote
        vote = BatchSimulator(profile, 3, 2, roles, decision="vote").run_specs(
            specs, TaskArrays.from_tasks(tasks), type(noises[0]).concatenate(noises))
        ran = actives[:, :, 1].any(axis=1)
        np.testing.assert_array_equal(res.decision_label[~ran], vote.decision_label[~ran])
        assert (res.decision_label[ran] != vote.decision_label[ran]).any()


def test_traces_record_the_mode(tmp_path):
    for mode in ("llm", "agent:2"):
        env = topo_env.parallel_env(profile="mmlu_pro", rounds=2, decision=mode)
        env.record(str(tmp_path / f"{mode}.jsonl"))
        env.reset(seed=1)
        for _ in range(2):
            env.step({a: 1 for a in env.agents})
        (record,) = read_traces(tmp_path / f"{mode}.jsonl")
        assert record["decision"]["mode"] == mode
        assert (record["decision"]["prompt_tokens"] == 0) == (mode != "llm")


# ------------------------------------------------------------------------------------------------
# the LLM team (a fake OpenAI server)


def test_llm_team_votes_without_a_decision_call(tmp_path):
    reply = "The second option fits.\nAnswer: B\nConfidence: 0.8"
    with FakeOpenAIServer([("ok", reply, USAGE)]) as srv:
        env = make_env(srv, tmp_path, "reasoning", reasoning_tasks(tmp_path / "r.jsonl"), decision="vote")
        env.reset(seed=3)
        for joint in [(1, 0, 3), (5, 1, 0)]:
            _, _, _, _, infos = env.step({f"agent_{i}": a for i, a in enumerate(joint)})
        calls = [c for r in env.history for c in r.calls]
        assert len(srv.requests) == len(calls)  # no FinalRefer
        assert infos["agent_0"]["team_tokens"] == len(calls) * 30
        assert infos["agent_0"]["accuracy"] == 1.0

        backend, task = env.backend, env.task
        n = len(srv.requests)

        def decide(finals):
            return asyncio.run(backend.decide(task, tuple(finals)))

        plurality = [message(0, "A", 0.95), message(1, "B", 0.3), message(2, "B", 0.4)]
        d = decide(plurality)
        assert (d.reply.answer, d.accuracy, d.reply.total_tokens) == ("B", 1.0, 0)
        d = decide([message(0, "A", 0.5), message(1, "B", 0.4), message(2, "C", 0.6)])  # 1 : 1 : 1
        assert d.reply.answer == "C" and d.accuracy == 0.0
        d = decide([message(0, "C", 0.5), message(1, "B", 0.5)])  # 1 : 1, 0.5 : 0.5: agent 0
        assert d.reply.answer == "C"
        d = decide([message(0, "B", None), message(1, None, 0.9, "no answer"), message(2, "C", 0.2)])
        assert d.reply.answer == "C"  # no stated confidence adds 0; no answer does not vote
        backend.decision = parse_decision("agent:0")
        d = decide(plurality)
        assert d.reply.answer == "A" and d.accuracy == 0.0
        assert decide(plurality[1:]).reply.answer == "B"  # agent 0 never ran: the vote
        assert len(srv.requests) == n  # none of these called the server


def test_pick_final_tie_break_is_stated_order():
    finals = [message(0, "x", 0.2), message(1, "y", 0.1), message(2, "y", 0.1)]
    assert pick_final(finals, parse_decision("vote")).sender == 1  # plurality beats confidence
    assert pick_final(finals[:2], parse_decision("vote")).sender == 0
    assert pick_final([message(0, "x", 0.1), message(1, "y", 0.2)], parse_decision("vote")).sender == 1
    assert pick_final([], parse_decision("vote")) is None


# ------------------------------------------------------------------------------------------------
# the fit


def test_fit_of_vote_traces_does_not_claim_the_decision_node(tmp_path):
    path = tmp_path / "vote.jsonl"
    env = topo_env.parallel_env(profile="mmlu_pro", rounds=2, decision="vote")
    made = record_exploration(env, path, 150, seed=3)
    records = load_traces([path])
    assert made["calls"] == sum(len(r["calls"]) for rec in records for r in rec["rounds"])  # no decision calls
    fitted = fit_records(records, get_profile("mmlu_pro"))
    rows = {r["parameter"]: r for r in fitted.report["parameters"]}
    for name in ("decide_tau", "contradicted_weight", "decide_factor"):
        assert rows[name]["status"] == KEPT and "not identified" in rows[name]["from"], rows[name]
    assert fitted.report["calls"]["decisions"] == 0
    # the predictive check replays them with a vote: no decision tokens (with the node it would add them)
    vote = predictive_check(fitted, seed=0, episodes=100, draws=2, replays=2)["replay"][0]
    for rec in fitted.records:
        del rec["decision"]["mode"]  # as if the traces were the decision node's
    node = predictive_check(fitted, seed=0, episodes=100, draws=2, replays=2)["replay"][0]
    assert abs(vote["z"]["tokens"]) < 3
    assert node["fitted"]["tokens"]["mean"] > vote["fitted"]["tokens"]["mean"] + 100
