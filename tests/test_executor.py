"""Tests of the round executor: who is called, when, and what each call is shown.

The simulated backend is wrapped to record every AgentCall it receives (and what the
decision node receives), so the tests check the messages actually delivered, not only the
executor's own CallRecords.
"""
from __future__ import annotations

import asyncio
import itertools
import time

import numpy as np
import pytest

from topo_env import EnvConfig, execution_plan
from topo_env.engine.team_backend import Verdict
from topo_env.engine.episode import RoundSpec, TeamEpisode, run_to_end
from topo_env.frontends.parallel_env import TopologyParallelEnv
from topo_env.engine.executor import RoundExecutor
from topo_env.sim.profiles import get_profile
from topo_env.sim.team import SimTeamBackend
from graph_helpers import reachability

SOLO, BCAST, QUERY, AGG, VERIFY, DEBATE = range(6)


class RecordingBackend(SimTeamBackend):
    """The simulated team, recording every call and the decision node's input."""

    def __init__(self, profile):
        super().__init__(profile)
        self.calls = []
        self.decided = None

    def start_episode(self, task, rng, n_agents, rounds):
        self.calls = []
        self.decided = None
        super().start_episode(task, rng, n_agents, rounds)

    async def call_agent(self, call):
        self.calls.append(call)
        return await super().call_agent(call)

    async def decide(self, task, finals):
        self.decided = finals
        return await super().decide(task, finals)


class SlowConcurrentBackend(SimTeamBackend):
    """An I/O-like backend: every call waits ``delay`` seconds, then answers like the sim."""

    concurrent = True

    def __init__(self, profile, delay=0.2):
        super().__init__(profile)
        self.delay = delay
        self.spans = []  # (round, agent, phase, start, end)

    async def call_agent(self, call):
        start = time.perf_counter()
        await asyncio.sleep(self.delay)
        reply = await super().call_agent(call)
        self.spans.append((call.round, call.agent, call.phase, start, time.perf_counter()))
        return reply


def make_env(backend_cls=RecordingBackend, **kw):
    cfg = EnvConfig.from_dict(kw)
    return TopologyParallelEnv(cfg, backend=backend_cls(get_profile(cfg.backend.profile)))


def check_round(env, backend, r, infos):
    """Every check of the executor contract for round r (0-based) of env's episode."""
    n = env.n_agents
    res = env.history[r]
    adj = res.adjacency
    assert res.round == r
    plan = execution_plan(adj)
    assert res.plan == plan
    reach = reachability(adj)
    comp = [frozenset(u for u in range(n) if reach[u, v] and reach[v, u]) for v in range(n)]
    multi = [len(comp[v]) > 1 for v in range(n)]
    plan_layer = {a: li for li, layer in enumerate(plan) for c in layer for a in c}
    final_phase = ["revise" if multi[u] else "solo" for u in range(n)]
    preds = [[u for u in range(n) if adj[u, v]] for v in range(n)]

    records = {(c.agent, c.phase): c for c in res.calls}
    assert len(records) == len(res.calls), "one call per agent and phase"
    calls = {(c.agent, c.phase): c for c in backend.calls if c.round == r}
    assert set(calls) == set(records)

    for v in range(n):
        phases = sorted(p for (a, p) in records if a == v)
        assert phases == (["draft", "revise"] if multi[v] else ["solo"]), (v, phases)
        assert infos[f"agent_{v}"]["calls"] == len(phases) >= 1
        assert infos[f"agent_{v}"]["round_tokens"] == sum(records[(v, p)].reply.total_tokens for p in phases)
        assert res.finals[v].sender == v and res.finals[v].phase == final_phase[v] and res.finals[v].round == r

        outside = [u for u in preds[v] if u not in comp[v]]
        if not multi[v]:
            rec, call = records[(v, "solo")], calls[(v, "solo")]
            # the solo call sees every in-edge's final output, in sender order
            assert rec.received == tuple((u, final_phase[u]) for u in preds[v])
            assert call.messages == tuple(res.finals[u] for u in preds[v])
            assert rec.layer == plan_layer[v]
            assert rec.had_previous == (r > 0)
            assert call.own_previous == (env.history[r - 1].finals[v] if r > 0 else None)
            continue
        draft, revise = records[(v, "draft")], records[(v, "revise")]
        dcall, rcall = calls[(v, "draft")], calls[(v, "revise")]
        assert draft.layer == revise.layer == plan_layer[v]
        # draft: only the predecessors outside the component, their final outputs
        assert draft.received == tuple((u, final_phase[u]) for u in outside)
        assert all(p in ("solo", "revise") for _, p in draft.received)
        assert dcall.messages == tuple(res.finals[u] for u in outside)
        assert draft.had_previous == (r > 0)
        assert dcall.own_previous == (env.history[r - 1].finals[v] if r > 0 else None)
        # revise: the same outside outputs plus the inside predecessors' drafts
        want = tuple((u, final_phase[u]) if u not in comp[v] else (u, "draft") for u in preds[v])
        assert revise.received == want
        assert {u for u, p in revise.received if p == "draft"} == {u for u in preds[v] if u in comp[v]}
        assert any(p == "draft" for _, p in revise.received)  # a component member has an inside predecessor
        own_draft = rcall.own_previous
        assert revise.had_previous is True
        assert own_draft.sender == v and own_draft.phase == "draft" and own_draft.round == r
        assert own_draft.answer == draft.reply.answer and own_draft.confidence == draft.reply.confidence
        drafts_of = {u: calls[(u, "revise")].own_previous for u in comp[v]}
        assert rcall.messages == tuple(res.finals[u] if u not in comp[v] else drafts_of[u] for u in preds[v])

    # a predecessor always ran in an earlier layer, or in the same component
    for u, v in zip(*np.nonzero(adj)):
        for (a, p), rec in records.items():
            if a != v:
                continue
            for (b, q), prec in records.items():
                if b == u:
                    if v in comp[u]:
                        assert prec.layer == rec.layer
                    else:
                        assert prec.layer < rec.layer, (u, v, plan)
    # calls are recorded layer by layer
    layers = [c.layer for c in res.calls]
    assert layers == sorted(layers)
    # every call carries the task; every message is what its sender's call answered, verdict included;
    # a call's record holds what the call was shown
    reply_of = {(c.agent, c.phase): c.reply for c in res.calls}
    for key, call in calls.items():
        rec = records[key]
        assert call.task is env.task and call.role == env.config.roles[call.agent]
        assert rec.shown == call.messages and rec.own_previous == call.own_previous
        for m in call.messages + ((call.own_previous,) if call.phase == "revise" else ()):  # this round's outputs
            sent = records[(m.sender, m.phase)]
            assert (m.text, m.role, m.answer) == (reply_of[(m.sender, m.phase)].text, env.config.roles[m.sender],
                                                  sent.reply.answer)
            assert m.verdict == sent.verdict


ALL_JOINT = list(itertools.product(range(6), repeat=3))


@pytest.mark.parametrize("profile", ["mmlu_pro", "humaneval"])
def test_all_216_joint_actions_two_rounds(profile):
    env = make_env(profile=profile, rounds=2)
    backend = env.backend
    layer_counts = set()
    for k, acts in enumerate(ALL_JOINT):
        env.reset(seed=k)
        joint = dict(zip(env.possible_agents, acts))
        _, _, _, _, infos1 = env.step(joint)
        check_round(env, backend, 0, infos1)
        # round 2 with the same choices (targets may now differ: disagree rule)
        _, _, _, _, infos2 = env.step(joint)
        check_round(env, backend, 1, infos2)
        layer_counts.add(len(env.history[0].plan))
        # the decision node got every agent's last output
        assert env.decision is not None
        assert backend.decided == env.history[-1].finals
        assert [m.sender for m in backend.decided] == [0, 1, 2]
        total = sum(c.reply.total_tokens for res in env.history for c in res.calls)
        total += env.decision.reply.total_tokens
        assert all(info["team_tokens"] == total for info in infos2.values())
        assert len(backend.calls) == len(env.history[0].calls) + len(env.history[1].calls)
    assert layer_counts == {1, 2, 3}


def test_random_joint_actions_n5():
    env = make_env(n_agents=5, rounds=3, profile="aime25")
    rng = np.random.default_rng(0)
    for k in range(60):
        env.reset(seed=k)
        for r in range(3):
            joint = dict(zip(env.possible_agents, rng.integers(0, 6, 5).tolist()))
            _, _, _, _, infos = env.step(joint)
            check_round(env, env.backend, r, infos)
        assert env.backend.decided == env.history[-1].finals


def test_check_round_catches_a_wrong_delivery():
    """Guard: the checker fails when a message is missing from a call."""
    env = make_env(rounds=2)
    env.reset(seed=0)
    _, _, _, _, infos = env.step({"agent_0": BCAST, "agent_1": SOLO, "agent_2": SOLO})
    rec = env.history[0].calls
    i = next(k for k, c in enumerate(rec) if c.agent == 1)
    rec[i] = type(rec[i])(rec[i].agent, rec[i].phase, rec[i].layer, (), rec[i].had_previous, rec[i].reply)
    with pytest.raises(AssertionError):
        check_round(env, env.backend, 0, infos)


# ---------------------------------------------------------------------------------------
# execute_verify
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("acts", [(VERIFY, SOLO, SOLO), (VERIFY, VERIFY, VERIFY), (VERIFY, AGG, DEBATE), (SOLO, DEBATE, VERIFY)])
def test_execute_verify_with_a_verifier(acts):
    env = make_env(profile="humaneval", rounds=2)
    for seed in range(5):
        env.reset(seed=seed)
        for _ in range(2):
            env.step(dict(zip(env.possible_agents, acts)))
            finals = env.history[-1].finals
            for i, a in enumerate(acts):
                if a == VERIFY:
                    assert finals[i].verdict in (Verdict.PASS, Verdict.FAIL)
                    assert finals[i].verdict_text
                else:
                    assert finals[i].verdict == Verdict.NONE and finals[i].verdict_text == ""
            # the verdict travels with the message to every receiver in this round
            r = env.history[-1].round
            for call in env.backend.calls:
                if call.round == r:
                    for m in call.messages:
                        if acts[m.sender] == VERIFY:
                            assert m.verdict in (Verdict.PASS, Verdict.FAIL)
                        else:
                            assert m.verdict == Verdict.NONE


def test_execute_verify_without_a_verifier():
    env = make_env(profile="mmlu_pro", rounds=2)
    for seed in range(5):
        env.reset(seed=seed)
        for _ in range(2):
            env.step({a: VERIFY for a in env.agents})
            assert all(m.verdict == Verdict.NONE for m in env.history[-1].finals)
            assert all(m.verdict_text == "" for m in env.history[-1].finals)


def test_verdicts_show_up_when_verifying_agents_send():
    """Over many humaneval episodes both verdicts occur, and only for execute_verify."""
    env = make_env(profile="humaneval", rounds=1)
    seen = set()
    for seed in range(60):
        env.reset(seed=seed)
        env.step({"agent_0": VERIFY, "agent_1": VERIFY, "agent_2": SOLO})
        seen.update(m.verdict for m in env.history[-1].finals[:2])
    assert seen == {Verdict.PASS, Verdict.FAIL}


# ---------------------------------------------------------------------------------------
# recalls, estimated tokens, adversaries, schedules (the executor on RoundSpecs)
# ---------------------------------------------------------------------------------------


def recording_episode(rounds: int = 2, backend: RecordingBackend | None = None) -> TeamEpisode:
    backend = backend or RecordingBackend(get_profile("mmlu_pro"))
    episode = TeamEpisode(backend, ("specialist", "specialist", "analyzer"), rounds)
    rng = np.random.default_rng(3)
    episode.start(backend.sample_task(rng, "eval"), rng)
    return episode


def spec_of(edges=(), recall_edges=()) -> RoundSpec:
    adj, recall = np.zeros((3, 3), bool), np.zeros((3, 3), bool)
    for u, v in edges:
        adj[u, v] = True
    for u, v in recall_edges:
        recall[u, v] = True
    return RoundSpec(adj, np.ones(3, bool), np.zeros(3, bool), recall)


def test_recalled_outputs_come_after_the_messages_in_every_call_with_the_own_previous_output():
    """Agent 2 debates agent 1 and recalls agent 0's round-1 output: its draft shows the recall
    (after no messages), its revise shows agent 1's draft then the recall, and each call keeps its
    own previous output (round 1's output, then its own draft)."""
    episode = recording_episode()
    first = episode.run_round(spec_of())
    second = episode.run_round(spec_of(edges=[(1, 2), (2, 1)], recall_edges=[(0, 2)]))
    calls = {c.phase: c for c in episode.backend.calls if c.round == 1 and c.agent == 2}
    drafts = {m.sender: m for c in episode.backend.calls if c.round == 1 and c.phase == "revise"
              for m in [c.own_previous]}
    assert calls["draft"].messages == (first.finals[0],)
    assert calls["draft"].own_previous == first.finals[2]
    assert calls["revise"].messages == (drafts[1], first.finals[0])
    assert calls["revise"].own_previous == drafts[2]
    assert second.finals[2].phase == "revise"
    assert all(c.task is episode.task for c in episode.backend.calls)


class EstimatingBackend(RecordingBackend):
    """The sim, but agent 1's replies say their tokens were estimated (no usage from a server)."""

    async def call_agent(self, call):
        reply = await super().call_agent(call)
        return reply._replace(tokens_estimated=call.agent == 1)


def test_a_round_says_when_some_call_estimated_its_tokens():
    episode = recording_episode(backend=EstimatingBackend(get_profile("mmlu_pro")))
    assert episode.run_round(spec_of(edges=[(0, 1)])).tokens_estimated is True
    assert episode.tokens_estimated  # and the episode remembers it
    plain = recording_episode()
    assert plain.run_round(spec_of(edges=[(0, 1)])).tokens_estimated is False


def test_executor_marks_the_calls_of_its_adversaries():
    backend = RecordingBackend(get_profile("mmlu_pro"))
    rng = np.random.default_rng(5)
    task = backend.sample_task(rng, "eval")
    backend.start_episode(task, rng, 3, 1)
    executor = RoundExecutor(backend, ("specialist",) * 3, adversarial=(1,))
    run_to_end(executor.run_round(task, 0, spec_of(edges=[(1, 0)]), [None] * 3))
    assert {c.agent: c.adversarial for c in backend.calls} == {0: False, 1: True, 2: False}


def test_schedules_are_memoised_per_graph_and_active_set():
    executor = RoundExecutor(RecordingBackend(get_profile("mmlu_pro")), ("specialist",) * 3)
    spec = spec_of(edges=[(0, 1)])
    assert executor.schedule(spec) is executor.schedule(spec_of(edges=[(0, 1)]))
    assert executor.schedule(spec) is not executor.schedule(spec_of(edges=[(1, 0)]))


# ---------------------------------------------------------------------------------------
# concurrency
# ---------------------------------------------------------------------------------------


def run_episode(env, seed, joint_per_round):
    obs, _ = env.reset(seed=seed)
    out = []
    for joint in joint_per_round:
        t0 = time.perf_counter()
        obs, rew, term, trunc, infos = env.step(joint)
        out.append((time.perf_counter() - t0, obs, rew, infos))
    return out


def test_concurrent_backend_overlaps_calls_of_one_layer():
    slow = make_env(SlowConcurrentBackend, rounds=2)
    plain = make_env(SimTeamBackend, rounds=2)
    solo = {a: SOLO for a in slow.possible_agents}
    for seed in (0, 1):
        a = run_episode(slow, seed, [solo, solo])
        b = run_episode(plain, seed, [solo, solo])
        for (dt, obs_a, rew_a, inf_a), (_, obs_b, rew_b, inf_b) in zip(a, b):
            assert dt < 0.45, f"3 calls of 0.2 s in one layer took {dt:.3f} s: not concurrent (0.6 s if sequential)"
            assert rew_a == rew_b
            for ag in slow.possible_agents:
                np.testing.assert_array_equal(obs_a[ag]["observation"], obs_b[ag]["observation"])
                assert inf_a[ag]["round_tokens"] == inf_b[ag]["round_tokens"]
                assert inf_a[ag]["team_tokens"] == inf_b[ag]["team_tokens"]
        for ra, rb in zip(slow.history, plain.history):
            assert [m.answer for m in ra.finals] == [m.answer for m in rb.finals]
            assert ra.finals == rb.finals
            assert [(c.agent, c.phase, c.reply) for c in ra.calls] == [(c.agent, c.phase, c.reply) for c in rb.calls]
        assert slow.decision == plain.decision
        assert slow.transcript() == plain.transcript()
    slow.close()


def test_concurrent_backend_runs_layers_in_order():
    """A chain 0 -> 1 -> 2 takes three sequential layers; a debate pair two phases."""
    env = make_env(SlowConcurrentBackend, rounds=2, target_rule="ring")
    plain = make_env(SimTeamBackend, rounds=2, target_rule="ring")
    chain = {"agent_0": QUERY, "agent_1": QUERY, "agent_2": SOLO}
    debate = {"agent_0": DEBATE, "agent_1": SOLO, "agent_2": SOLO}
    (dt1, *_), (dt2, *_) = run_episode(env, 3, [chain, debate])
    assert dt1 >= 0.6  # three layers, one after the other
    assert dt2 >= 0.4  # draft phase, then revise phase
    spans = env.backend.spans
    r0 = sorted((s for s in spans if s[0] == 0), key=lambda s: s[3])
    assert [s[1] for s in r0] == [0, 1, 2]
    for earlier, later in zip(r0, r0[1:]):
        assert later[3] >= earlier[4]  # the next layer starts after the previous one ended
    r1 = [s for s in spans if s[0] == 1]
    drafts = [s for s in r1 if s[2] != "revise"]
    revises = [s for s in r1 if s[2] == "revise"]
    assert len(drafts) == 3 and len(revises) == 2
    assert min(s[3] for s in revises) >= max(s[4] for s in drafts if s[2] == "draft")
    run_episode(plain, 3, [chain, debate])
    assert [r.finals for r in env.history] == [r.finals for r in plain.history]
    env.close()


@pytest.mark.filterwarnings("ignore:coroutine .* was never awaited:RuntimeWarning")
def test_cpu_backend_that_awaits_io_is_refused():
    class Sneaky(SimTeamBackend):
        async def call_agent(self, call):
            await asyncio.sleep(0)
            return await super().call_agent(call)

    env = make_env(Sneaky, rounds=2)
    env.reset(seed=0)
    with pytest.raises(RuntimeError, match=r"^a coroutine run without an event loop awaited I/O: a backend with "
                                           r"concurrent=False must not \(declare it concurrent=True\)$"):
        env.step({a: SOLO for a in env.agents})
