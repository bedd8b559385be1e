"""The batch simulator computes exactly what the PettingZoo env computes."""
import numpy as np
import pytest

import topo_env
from topo_env.sim.batch import TaskArrays
from topo_env.frontends.comm_batch import CommBatchSimulator
from topo_env.sim.model import (
    AgentFeatures, Input, TaskFeatures, draw_noise, simulate_call, simulate_decision, simulate_verdict, wrong_label_cdf,
)
from topo_env.sim.numerics import ARRAYS, SCALARS
from topo_env.sim.profiles import get_profile
from topo_env.sim.tasks import SimTaskSource

CASES = [
    dict(profile="mmlu_pro", n_agents=3, rounds=2, adversarial_agents=(), target_rule="disagree"),
    dict(profile="humaneval", n_agents=3, rounds=2, adversarial_agents=(1,), target_rule="confident"),
    dict(profile="aime25", n_agents=3, rounds=3, adversarial_agents=(0,), target_rule="ring"),
    dict(profile="livecodebench", n_agents=4, rounds=2, adversarial_agents=(), target_rule="disagree"),
    dict(profile="beyond_aime", n_agents=5, rounds=2, adversarial_agents=(2,), target_rule="disagree"),
]


@pytest.mark.parametrize("case", CASES, ids=[c["profile"] for c in CASES])
def test_episode_by_episode_agreement_with_env(case):
    """Same task, same noise, same actions: same answer, tokens and reward, every episode."""
    env = topo_env.parallel_env(**case)
    sim = CommBatchSimulator(get_profile(case["profile"]), case["n_agents"], case["rounds"],
                         adversarial_agents=case["adversarial_agents"], target_rule=case["target_rule"])
    rng = np.random.default_rng(11)
    t, n = case["rounds"], case["n_agents"]
    tasks, noises, actions, rewards, tokens, accs, adjs = [], [], [], [], [], [], []
    for ep in range(150):
        acts = rng.integers(6, size=(t, n))
        env.reset(seed=1000 + ep)
        tasks.append(env.task)
        noises.append(env.backend.noise)
        ep_adj = []
        for r in range(t):
            _, rew, _, _, info = env.step({f"agent_{i}": int(acts[r, i]) for i in range(n)})
            ep_adj.append(env.adjacency.copy())
        actions.append(acts)
        rewards.append(rew["agent_0"])
        tokens.append(info["agent_0"]["team_tokens"])
        accs.append(info["agent_0"]["accuracy"])
        adjs.append(np.stack(ep_adj))
    noise = type(noises[0]).concatenate(noises)
    res = sim.run(np.stack(actions), TaskArrays.from_tasks(tasks), noise)
    np.testing.assert_array_equal(res.tokens, tokens)
    np.testing.assert_array_equal(res.accuracy, accs)
    np.testing.assert_allclose(res.reward, rewards, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(res.adjacency, np.stack(adjs))


def test_vectorised_task_sampling_matches_task_generator():
    p = get_profile("mmlu_pro")
    source = SimTaskSource(p)
    gen = TaskArrays.from_tasks([source.task("train", i) for i in range(4000)])
    vec = TaskArrays.sample(np.random.default_rng(0), p, 40000)
    for field in ("difficulty", "latent", "prompt_tokens"):
        a, b = getattr(gen, field), getattr(vec, field)
        assert abs(a.mean() - b.mean()) < 4 * a.std() / np.sqrt(len(a)), field
        assert abs(a.std() - b.std()) < 0.05 * a.std(), field


def test_open_loop_broadcast_and_shapes():
    p = get_profile("mmlu_pro")
    sim = CommBatchSimulator(p, 3, 2)
    tasks, noise = sim.sample(np.random.default_rng(0), 64)
    res = sim.run(np.ones((2, 3), np.int64), tasks, noise)
    assert res.adjacency.shape == (64, 2, 3, 3)
    np.testing.assert_array_equal(res.density, np.ones(64))
    np.testing.assert_array_equal(res.calls, np.full((64, 2, 3), 2))  # draft + revise
    with pytest.raises(ValueError, match=r"\(B, T, N\)"):
        sim.run(np.ones((3, 3), np.int64), tasks, noise)


@pytest.mark.parametrize("profile", ["mmlu_pro", "humaneval", "aime25"])
@pytest.mark.parametrize("with_previous", [False, True])
def test_each_behaviour_is_one_function_for_one_call_and_for_arrays(profile, with_previous):
    """The model (topo_env/sim/model.py) is written once: on one call's Python numbers (the env's
    path, xp=SCALARS) and on arrays (the batch path, xp=ARRAYS) it gives the same call, verdict and
    decision, row by row; a sender hidden in a row is one the single call is not shown."""
    p = get_profile(profile)
    rng = np.random.default_rng(3)
    m, senders = 300, 3
    tasks = TaskArrays.sample(rng, p, m)
    noise = draw_noise(rng, p, m, 1, 1).calls[:, 0, 0, 0]  # (m, L)
    verifiability = np.array(p.verifiability)[tasks.subject]
    skill = 0.3 * rng.standard_normal(m)
    strength = np.array(p.subject_offsets)[tasks.subject] + skill
    blind, adversarial = rng.standard_normal(m), rng.random(m) < 0.2
    inputs = [Input(rng.integers(0, p.n_wrong + 1, m), rng.random(m), rng.integers(50, 400, m), rng.integers(-1, 2, m))
              for _ in range(senders + 1)]
    masks = rng.random((senders, m)) < 0.6
    previous = inputs[0] if with_previous else None
    task = TaskFeatures(tasks.difficulty, tasks.latent, tasks.prompt_tokens, verifiability)
    agent = AgentFeatures("analyzer", strength, skill, blind, 1.1, adversarial)
    shown = list(zip(masks, inputs[1:]))
    cdf = wrong_label_cdf(p)
    batch_call = simulate_call(ARRAYS, p, np.array(cdf), task, agent, previous, shown, noise.T)
    batch_decision = simulate_decision(ARRAYS, p, wrong_label_cdf(p), task, shown, noise.T)
    batch_verdict = simulate_verdict(ARRAYS, p, batch_call.label, noise.T, verifiability)
    for r in range(m):
        one_task = _row(task, r)
        one_agent = AgentFeatures("analyzer", strength[r].item(), skill[r].item(), blind[r].item(), 1.1,
                                  bool(adversarial[r]))
        one_shown = [(True, _row(x, r)) for mask, x in shown if mask[r]]
        one_previous = None if previous is None else _row(previous, r)
        one_noise = noise[r].tolist()
        call = simulate_call(SCALARS, p, cdf, one_task, one_agent, one_previous, one_shown, one_noise)
        decision = simulate_decision(SCALARS, p, wrong_label_cdf(p), one_task, one_shown, one_noise)
        verdict = simulate_verdict(SCALARS, p, call.label, one_noise, one_task.verifiability)
        for one, batch in ((call, batch_call), (decision, batch_decision)):
            assert [one.label, one.content_tokens, one.prompt_tokens, one.completion_tokens, one.reasoning_tokens] == \
                   [int(x[r]) for x in (batch.label, batch.content_tokens, batch.prompt_tokens, batch.completion_tokens,
                                        batch.reasoning_tokens)]
            assert one.confidence == pytest.approx(batch.confidence[r], rel=1e-12)
        assert verdict == batch_verdict[r]


def _row(features, r: int):
    """Row r of a NamedTuple of (m,) arrays, as the same NamedTuple of Python numbers."""
    return type(features)(*(x[r].item() for x in features))
