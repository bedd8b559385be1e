"""The episode engine: RoundSpec validation, inactive agents, recalls, early halts, the batch
simulator on arbitrary RoundSpecs, the PettingZoo env as the engine playing its joint actions'
graphs, and the env against a snapshot of its own episodes."""
import asyncio
import json
import pickle
from pathlib import Path

import numpy as np
import pytest

import topo_env
from regression_episodes import CASES, record_case
from topo_env import CommAction, build_adjacency
from topo_env.engine.episode import RewardConfig, RoundSpec, TeamEpisode, episode_transcript
from topo_env.sim.batch import BatchRoundSpec, TaskArrays
from topo_env.frontends.comm_batch import CommBatchSimulator
from topo_env.sim.model import EpisodeNoise
from topo_env.sim.profiles import get_profile
from topo_env.sim.team import SimTeamBackend

SNAPSHOT = Path(__file__).parent / "data" / "pz_episodes_snapshot.json"


@pytest.mark.parametrize("case", sorted(CASES))
def test_pettingzoo_env_matches_the_snapshot_of_its_episodes(case):
    """Observations, state, rewards, infos and transcripts of seeded episodes equal the snapshot the
    code itself wrote (tests/regression_episodes.py; rewritten whenever the model changes on
    purpose): a tripwire for unintended changes, not a proof of correctness. What the episodes
    should be is checked independently below (test_pettingzoo_env_plays_the_engine_episode_of_its_joint_actions)."""
    stored = json.loads(SNAPSHOT.read_text())[case]
    now = json.loads(json.dumps(record_case(CASES[case])))
    for before, after in zip(stored, now):
        assert before == after, f"{case}: episode with seed {before['seed']} differs"
    assert len(stored) == len(now)


@pytest.mark.parametrize("config, adversaries", [
    ({"profile": "mmlu_pro", "rounds": 2}, ()),
    ({"profile": "humaneval", "rounds": 3, "reward_mode": "shaped", "adversarial_agents": [1]}, (1,)),
    ({"profile": "aime25", "rounds": 2, "n_agents": 4, "reward_mode": "shaped", "w_tok": 0.5, "max_tokens": 20000}, ()),
])
def test_pettingzoo_env_plays_the_engine_episode_of_its_joint_actions(config, adversaries):
    """The env is the engine run on each joint action's graph: replaying its actions as RoundSpecs
    (build_adjacency with the ring rule, the execute_verify agents verified) on a bare TeamEpisode
    with the same task, seed and adversaries gives the same calls, tokens, verdicts and decision,
    and the env's rewards are Eq. 12 (sparse: all at the end; shaped: each round's token penalty)."""
    env = topo_env.parallel_env(target_rule="ring", **config)
    cfg, n = env.config, env.n_agents
    actions_rng = np.random.default_rng(11)
    for seed in range(4):
        backend = SimTeamBackend.from_config(cfg)
        task = backend.sample_task(np.random.default_rng(100 + seed), "train")
        engine = TeamEpisode(backend, cfg.roles, cfg.rounds)
        engine.start(task, np.random.default_rng(seed), adversaries)
        env.reset(seed=seed, options={"task": task})
        penalties, rewards = [0.0], []
        for _ in range(cfg.rounds):
            actions = actions_rng.integers(0, 6, n)
            _, reward, _, _, infos = env.step({f"agent_{i}": int(a) for i, a in enumerate(actions)})
            rewards.append(reward["agent_0"])
            spec = RoundSpec.all_active(build_adjacency(actions.tolist()), verify=actions == CommAction.EXECUTE_VERIFY)
            want = engine.run_round(spec)
            if engine.round == cfg.rounds:
                engine.decide()
            got = env.history[-1]
            assert [(c.agent, c.phase, c.received, c.verdict, c.reply.total_tokens) for c in got.calls] == \
                   [(c.agent, c.phase, c.received, c.verdict, c.reply.total_tokens) for c in want.calls]
            assert [infos[f"agent_{i}"]["round_tokens"] for i in range(n)] == want.agent_tokens
            assert [infos[f"agent_{i}"]["calls"] for i in range(n)] == want.agent_calls
            assert infos["agent_0"]["team_tokens"] == engine.team_tokens
            penalties.append(cfg.w_tok * min(engine.team_tokens / cfg.max_tokens, 1.0))
        assert env.decision.reply.text == engine.decision.reply.text and env.accuracy == engine.accuracy
        paid = cfg.w_acc * engine.accuracy
        if cfg.reward_mode == "sparse":
            expected = [0.0] * (cfg.rounds - 1) + [paid - penalties[-1]]
        else:
            expected = [before - after for before, after in zip(penalties, penalties[1:])]
            expected[-1] += paid
        assert rewards == pytest.approx(expected, abs=1e-12)


def _spec(n=3, edges=(), active=None, verify=(), recall=None):
    adj = np.zeros((n, n), dtype=bool)
    for u, v in edges:
        adj[u, v] = True
    act = np.ones(n, dtype=bool) if active is None else np.isin(np.arange(n), active)
    ver = np.isin(np.arange(n), verify)
    return RoundSpec(adj, act, ver, recall)


@pytest.mark.parametrize("make, message", [
    (lambda: RoundSpec(np.zeros((3, 2), bool), np.ones(3, bool), np.zeros(3, bool)), r"square"),
    (lambda: RoundSpec(np.eye(3, dtype=bool), np.ones(3, bool), np.zeros(3, bool)), r"self-loop at agent 0"),
    (lambda: RoundSpec(np.zeros((3, 3)), np.ones(3, bool), np.zeros(3, bool)), r"RoundSpec adjacency has dtype float64"),
    (lambda: RoundSpec(np.full((3, 3), 2), np.ones(3, bool), np.zeros(3, bool)), r"holds 2"),
    (lambda: RoundSpec(np.array([[0, 1, 0], [0, 0, 3], [0, 0, 0]]), np.ones(3, bool), np.zeros(3, bool)),
     r"RoundSpec adjacency holds 3: entries must be 0 or 1"),
    (lambda: RoundSpec(np.zeros((0, 0), bool), np.ones(0, bool), np.zeros(0, bool)), r"square \(N, N\) array"),
    (lambda: RoundSpec(np.zeros((3, 3), bool), np.ones(4, bool), np.zeros(3, bool)), r"active has shape \(4,\)"),
    (lambda: RoundSpec(np.zeros((3, 3), bool), np.ones(3, bool), np.zeros(2, bool)), r"RoundSpec verify has shape \(2,\)"),
    (lambda: _spec(recall=np.ones((3, 3), float)), r"RoundSpec recall has dtype float64"),
    (lambda: _spec(recall=np.eye(3, k=1, dtype=bool) | np.diag([False, True, False])),
     r"RoundSpec recall has a self-loop at agent 1: an agent always sees its own last output"),
    (lambda: _spec(edges=[(0, 2)], active=[0, 1]), r"edge 0->2 touches inactive agent 2"),
    (lambda: _spec(edges=[(1, 0)], active=[0]), r"edge 1->0 touches inactive agent 1"),
    (lambda: _spec(active=[0], verify=[1]), r"verifies inactive agent 1"),
    (lambda: _spec(active=[0], recall=np.eye(3, k=1, dtype=bool)), r"recalls to inactive agent 1"),
])
def test_round_spec_validation_names_the_bad_entry(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_round_spec_is_read_only_and_takes_integer_flags():
    spec = RoundSpec(np.array([[0, 1], [0, 0]]), [1, 1], [0, 1], np.array([[0, 0], [1, 0]]))
    assert spec.adjacency.dtype == bool and spec.active.dtype == bool and spec.n_agents == 2
    assert spec.verify.dtype == bool and spec.verify.tolist() == [False, True] and spec.verified == {1}
    assert spec.recall.dtype == bool and spec.recall.tolist() == [[False, False], [True, False]]
    assert spec.edges() == [(0, 1)]
    for flags in (spec.adjacency, spec.active, spec.verify, spec.recall):
        with pytest.raises(ValueError):
            flags[0] = False
    one = RoundSpec(np.zeros((1, 1), int), [1], [0])  # a team of one is a team
    assert one.n_agents == 1 and one.edges() == []
    assert RoundSpec.all_active(np.zeros((3, 3), bool), verify=[1, 0, 1]).verified == {0, 2}


def test_reward_config_names_the_reward_modes():
    with pytest.raises(ValueError, match=r"reward mode 'dense': must be one of \['sparse', 'shaped'\]"):
        RewardConfig(mode="dense")


def _episode(profile="mmlu_pro", n=3, rounds=3, seed=0, mode="sparse"):
    p = get_profile(profile)
    backend = SimTeamBackend(p)
    ep = TeamEpisode(backend, ("specialist",) * (n - 1) + ("analyzer",), rounds, RewardConfig(mode=mode))
    rng = np.random.default_rng(seed)
    ep.start(backend.sample_task(rng, "eval"), rng)
    return ep


def test_inactive_agents_are_not_called_and_keep_their_output():
    ep = _episode()
    first = ep.run_round(_spec(edges=[(0, 1)]))
    assert sorted(c.agent for c in first.calls) == [0, 1, 2]
    second = ep.run_round(_spec(edges=[(1, 2)], active=[1, 2]))
    assert sorted(c.agent for c in second.calls) == [1, 2]
    assert second.finals[0] is first.finals[0]  # agent 0 kept its round-1 output
    assert second.agent_calls == [0, 1, 1] and ep.agent_tokens[0] == first.agent_tokens[0]
    assert ep.ran == [True, True, True]


def test_decision_reads_only_agents_that_ran():
    seen = []
    ep = _episode()
    decide = ep.backend.decide

    async def spy(task, finals):
        seen.append((task, tuple(m.sender for m in finals)))
        reply = await decide(task, finals)
        return reply._replace(reply=reply.reply._replace(tokens_estimated=True))

    ep.backend.decide = spy
    ep.run_round(_spec(active=[2]))
    assert not ep.tokens_estimated
    ep.decide()
    assert seen == [(ep.task, (2,))]
    assert ep.ended and ep.accuracy in (0.0, 1.0)
    assert ep.tokens_estimated  # the decision node's tokens were estimated
    for late in (lambda: ep.run_round(_spec()), ep.decide):
        with pytest.raises(RuntimeError, match=r"^the episode is over \(or not started\): call start\(\) first$"):
            late()


def test_nothing_runs_before_start():
    ep = TeamEpisode(SimTeamBackend(get_profile("mmlu_pro")), ("specialist",) * 3, 2)
    for early in (lambda: ep.run_round(_spec()), ep.decide):
        with pytest.raises(RuntimeError, match=r"\(or not started\): call start\(\) first"):
            early()


def test_early_halt_rewards_and_limits():
    """Deciding after round 1 of 3 ends the episode; sparse and shaped pay the same return."""
    returns = {}
    for mode in ("sparse", "shaped"):
        ep = _episode(mode=mode, seed=4)
        total = 0.0
        ep.run_round(_spec(edges=[(0, 1), (1, 0)]))
        total += ep.step_reward()
        ep.decide()
        total += ep.step_reward()
        returns[mode] = total
        assert ep.round == 1
        assert total == pytest.approx(ep.episode_reward)
    assert returns["sparse"] == pytest.approx(returns["shaped"])
    ep = _episode(rounds=1)
    ep.run_round(_spec())
    with pytest.raises(RuntimeError, match="all 1 rounds"):
        ep.run_round(_spec())
    with pytest.raises(ValueError, match="4 agents"):
        _episode().run_round(_spec(n=4))


def test_recall_shows_earlier_outputs_after_this_rounds_messages():
    ep = _episode()
    r1 = ep.run_round(_spec(active=[0]))
    recall = np.zeros((3, 3), bool)
    recall[0, 2] = True
    r2 = ep.run_round(_spec(edges=[(1, 2)], active=[1, 2], recall=recall))
    call = [c for c in r2.calls if c.agent == 2][0]
    assert call.received == ((1, "solo"), (0, "solo"))
    assert r2.finals[0] is r1.finals[0]


def _random_spec(rng, b, n, round_index):
    active = rng.random((b, n)) < 0.7
    adj = (rng.random((b, n, n)) < 0.35) & active[:, :, None] & active[:, None, :]
    adj[:, np.arange(n), np.arange(n)] = False
    verify = active & (rng.random((b, n)) < 0.3)
    return adj, active, verify


@pytest.mark.parametrize("profile, n, rounds", [("mmlu_pro", 3, 3), ("humaneval", 4, 2), ("aime25", 3, 2)])
def test_batch_simulator_runs_any_round_specs_as_the_engine_does(profile, n, rounds):
    """Random graphs with inactive and verified agents and early halts (idle rounds): the batch
    simulator and the engine agree on every episode's tokens, accuracy and reward."""
    p = get_profile(profile)
    rng = np.random.default_rng(3)
    b = 120
    specs = [_random_spec(rng, b, n, t) for t in range(rounds)]
    halt_after = rng.integers(1, rounds + 1, size=b)
    for t, (adj, active, verify) in enumerate(specs):
        idle = halt_after <= t
        adj[idle], active[idle], verify[idle] = False, False, False
    sim = CommBatchSimulator(p, n, rounds)
    tasks, noises, tokens, accs, rewards = [], [], [], [], []
    roles = ("specialist",) * (n - 1) + ("analyzer",)
    backend = SimTeamBackend(p)
    ep = TeamEpisode(backend, roles, rounds)
    for k in range(b):
        erng = np.random.default_rng(500 + k)
        task = backend.sample_task(erng, "eval")
        ep.start(task, erng)
        tasks.append(task)
        noises.append(backend.noise)
        for t in range(halt_after[k]):
            adj, active, verify = specs[t]
            ep.run_round(RoundSpec(adj[k], active[k], verify[k]))
        ep.decide()
        tokens.append(ep.team_tokens)
        accs.append(ep.accuracy)
        rewards.append(ep.episode_reward)
    noise = EpisodeNoise.concatenate(noises)
    res = sim.run_specs([BatchRoundSpec(a.astype(np.int8), act, ver) for a, act, ver in specs],
                        TaskArrays.from_tasks(tasks), noise)
    np.testing.assert_array_equal(res.tokens, tokens)
    np.testing.assert_array_equal(res.accuracy, accs)
    np.testing.assert_allclose(res.reward, rewards, rtol=0, atol=1e-12)


def test_batch_round_spec_validation():
    z = np.zeros((2, 3, 3), np.int8)
    on = np.ones((2, 3), bool)
    with pytest.raises(ValueError, match=r"episode 1: self-loop at agent 2"):
        bad = z.copy()
        bad[1, 2, 2] = 1
        BatchRoundSpec(bad, on, ~on)
    with pytest.raises(ValueError, match=r"episode 0: edge 0->1 touches an inactive agent"):
        bad = z.copy()
        bad[0, 0, 1] = 1
        off = on.copy()
        off[0, 1] = False
        BatchRoundSpec(bad, off, ~on)
    with pytest.raises(ValueError, match=r"bool array of shape \(2, 3\)"):
        BatchRoundSpec(z, np.ones((2, 3), np.int8), ~on)
    idle = BatchRoundSpec.idle(2, 3)
    assert not idle.active.any() and not idle.adjacency.any()


def test_transcript_labels_rounds_by_who_ran_and_who_was_verified():
    """Without a front-end's labels, a round reads "active: ..." (everyone, the agents, or nobody)
    and "; verified: ..."; a round without edges says so; adversaries are named first."""
    backend = SimTeamBackend(get_profile("humaneval"))
    ep = TeamEpisode(backend, ("specialist",) * 3, 3)
    assert episode_transcript(ep) == ""  # nothing started
    rng = np.random.default_rng(0)
    ep.start(backend.sample_task(rng, "eval"), rng, adversaries=(0, 2))
    ep.run_round(_spec(edges=[(0, 1)]))
    ep.run_round(_spec(edges=[(1, 2)], active=[1, 2], verify=[1, 2]))
    ep.run_round(_spec(active=[]))
    lines = episode_transcript(ep).splitlines()
    assert lines[1] == "adversaries: agent_0, agent_2"
    rounds = [line for line in lines if line.startswith("== round")]
    assert rounds == ["== round 1/3: active: everyone", "== round 2/3: active: agent_1, agent_2; verified: agent_1, agent_2",
                      "== round 3/3: active: nobody"]
    assert lines[lines.index(rounds[2]) + 1].startswith("   edges: (none)   plan: ")
    assert episode_transcript(ep, ["first", "second"]).count("== round 3/3: active: nobody") == 1


def test_an_episode_gets_a_working_event_loop_after_close_and_after_pickling():
    ep = _episode()
    loop = ep.event_loop()
    assert ep.event_loop() is loop and not loop.is_closed()
    ep.close()
    assert loop.is_closed() and not ep.event_loop().is_closed()
    copy = pickle.loads(pickle.dumps(ep))
    assert copy.event_loop() is not ep.event_loop() and copy.event_loop().run_until_complete(asyncio.sleep(0, 7)) == 7
    ep.close()
    copy.close()


def test_env_exports_the_engine():
    assert topo_env.RoundSpec is RoundSpec and topo_env.TeamEpisode is TeamEpisode


def test_all_active_and_oracle_scoring_of_round_specs():
    """RoundSpec.all_active calls everyone; the oracle scores any controller's batched rounds on its
    own samples, and the full team's rounds score as the 'full' baseline's actions do."""
    from topo_env.references.oracle import draw_samples, score_round_specs

    adj = np.ones((3, 3), bool) & ~np.eye(3, dtype=bool)
    spec = RoundSpec.all_active(adj)
    assert spec.everyone and spec.active.all() and not spec.verify.any()
    sim = CommBatchSimulator(get_profile("mmlu_pro"), 3, 2)
    b = 400
    full = BatchRoundSpec(np.broadcast_to(adj, (b, 3, 3)).astype(np.int8), np.ones((b, 3), bool), np.zeros((b, 3), bool))
    scored = score_round_specs(sim, [full, full], seed=3, split="eval")
    tasks, noise = draw_samples(sim, b, 3, "eval")
    want = sim.run(np.ones((2, 3), np.int64), tasks, noise)  # every agent broadcast_all, both rounds
    assert scored["reward"] == pytest.approx(float(want.reward.mean()), abs=1e-12)
    assert scored["episodes"] == b and scored["reward_se"] > 0
    halted = score_round_specs(sim, [full, BatchRoundSpec.idle(b, 3)], seed=3, split="eval")
    assert halted["tokens_per_task"] < scored["tokens_per_task"]
