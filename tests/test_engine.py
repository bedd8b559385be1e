"""The episode engine: RoundSpec validation, inactive agents, recalls, early halts, the batch
simulator on arbitrary RoundSpecs, and the PettingZoo env bit for bit as before the engine."""
import json
from pathlib import Path

import numpy as np
import pytest

import topo_env
from regression_episodes import CASES, record_case
from topo_env.engine import RewardConfig, RoundSpec, TeamEpisode
from topo_env.sim.batch import BatchRoundSpec, BatchSimulator, TaskArrays
from topo_env.sim.model import EpisodeNoise
from topo_env.sim.profiles import get_profile
from topo_env.sim.team import SimTeamBackend

STORED = Path(__file__).parent / "data" / "pz_episodes.json"


@pytest.mark.parametrize("case", sorted(CASES))
def test_pettingzoo_env_is_bit_for_bit_as_before_the_engine(case):
    """Observations, state, rewards, infos and transcripts of seeded episodes equal those the env
    wrote before it became an adapter over the engine (tests/regression_episodes.py)."""
    stored = json.loads(STORED.read_text())[case]
    now = json.loads(json.dumps(record_case(CASES[case])))
    for before, after in zip(stored, now):
        assert before == after, f"{case}: episode with seed {before['seed']} differs"
    assert len(stored) == len(now)


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
    (lambda: RoundSpec(np.zeros((3, 3)), np.ones(3, bool), np.zeros(3, bool)), r"dtype float64"),
    (lambda: RoundSpec(np.full((3, 3), 2), np.ones(3, bool), np.zeros(3, bool)), r"holds 2"),
    (lambda: RoundSpec(np.zeros((3, 3), bool), np.ones(4, bool), np.zeros(3, bool)), r"active has shape \(4,\)"),
    (lambda: _spec(edges=[(0, 2)], active=[0, 1]), r"edge 0->2 touches inactive agent 2"),
    (lambda: _spec(edges=[(1, 0)], active=[0]), r"edge 1->0 touches inactive agent 1"),
    (lambda: _spec(active=[0], verify=[1]), r"verifies inactive agent 1"),
    (lambda: _spec(active=[0], recall=np.eye(3, k=1, dtype=bool)), r"recalls to inactive agent 1"),
])
def test_round_spec_validation_names_the_bad_entry(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_round_spec_is_read_only_and_takes_integer_flags():
    spec = RoundSpec(np.array([[0, 1], [0, 0]]), [1, 1], [0, 1])
    assert spec.adjacency.dtype == bool and spec.active.dtype == bool and spec.n_agents == 2
    assert spec.edges() == [(0, 1)]
    with pytest.raises(ValueError):
        spec.adjacency[0, 1] = False


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
        seen.append(tuple(m.sender for m in finals))
        return await decide(task, finals)

    ep.backend.decide = spy
    ep.run_round(_spec(active=[2]))
    ep.decide()
    assert seen == [(2,)]
    assert ep.ended and ep.accuracy in (0.0, 1.0)
    with pytest.raises(RuntimeError, match="over"):
        ep.run_round(_spec())


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
    sim = BatchSimulator(p, n, rounds)
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


def test_env_exports_the_engine():
    assert topo_env.RoundSpec is RoundSpec and topo_env.TeamEpisode is TeamEpisode


def test_all_active_and_oracle_scoring_of_round_specs():
    """RoundSpec.all_active calls everyone; the oracle scores any controller's batched rounds on its
    own samples, and the full team's rounds score as the 'full' baseline's actions do."""
    from topo_env.oracle import draw_samples, score_round_specs

    adj = np.ones((3, 3), bool) & ~np.eye(3, dtype=bool)
    spec = RoundSpec.all_active(adj)
    assert spec.everyone and spec.active.all() and not spec.verify.any()
    sim = BatchSimulator(get_profile("mmlu_pro"), 3, 2)
    b = 400
    full = BatchRoundSpec(np.broadcast_to(adj, (b, 3, 3)).astype(np.int8), np.ones((b, 3), bool), np.zeros((b, 3), bool))
    scored = score_round_specs(sim, [full, full], seed=3, split="eval")
    tasks, noise = draw_samples(sim, b, 3, "eval")
    want = sim.run(np.ones((2, 3), np.int64), tasks, noise)  # every agent broadcast_all, both rounds
    assert scored["reward"] == pytest.approx(float(want.reward.mean()), abs=1e-12)
    assert scored["episodes"] == b and scored["reward_se"] > 0
    halted = score_round_specs(sim, [full, BatchRoundSpec.idle(b, 3)], seed=3, split="eval")
    assert halted["tokens_per_task"] < scored["tokens_per_task"]
