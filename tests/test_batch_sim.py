"""The batch simulator computes exactly what the PettingZoo env computes."""
import numpy as np
import pytest

import topo_env
from topo_env.sim.batch import TaskArrays
from topo_env.frontends.comm_batch import CommBatchSimulator
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
