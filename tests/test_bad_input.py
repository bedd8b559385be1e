"""Bad input gets a clear error that names the agent / key and the bad value, and a
failed step() changes nothing."""
from __future__ import annotations

import re

import numpy as np
import pytest

from topo_env import ConfigError, EnvConfig, parallel_env


def good(env, action=1):
    return {a: action for a in env.agents}


def with_action(env, agent, value):
    acts = good(env)
    acts[agent] = value
    return acts


# ---------------------------------------------------------------------------------------
# actions
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value,match",
    [
        (6, "action of agent_1 is 6"),
        (-1, "action of agent_1 is -1"),
        (100, "action of agent_1 is 100"),
        (np.int64(7), "action of agent_1 is 7"),
        (1.5, "action of agent_1 is 1.5"),
        (1.0, "action of agent_1 is 1.0"),
        ("1", "action of agent_1 is '1'"),
        (None, "action of agent_1 is None"),
        (True, "action of agent_1 is True"),
        (False, "action of agent_1 is False"),
        (np.float64(2.0), r"action of agent_1 is (np\.float64\()?2\.0"),
        ([1], re.escape("action of agent_1 is [1]")),
    ],
)
def test_bad_action_value(value, match):
    env = parallel_env()
    env.reset(seed=0)
    with pytest.raises(ValueError, match=match):
        env.step(with_action(env, "agent_1", value))


@pytest.mark.parametrize("value", [np.int64(3), np.int32(3), np.array(3), np.uint8(3)])
def test_numpy_integer_actions_are_accepted(value):
    env = parallel_env()
    env.reset(seed=0)
    env.step(with_action(env, "agent_1", value))
    assert env.history[-1].actions == (1, 3, 1)


def test_unknown_agent():
    env = parallel_env()
    env.reset(seed=0)
    acts = good(env)
    acts["agent_7"] = 1
    with pytest.raises(ValueError, match="unknown agent 'agent_7'"):
        env.step(acts)
    acts = good(env)
    acts[0] = 1
    with pytest.raises(ValueError, match="unknown agent 0"):
        env.step(acts)


def test_missing_agent():
    env = parallel_env()
    env.reset(seed=0)
    acts = good(env)
    del acts["agent_2"]
    with pytest.raises(ValueError, match=re.escape("missing action for agent(s) ['agent_2']")):
        env.step(acts)
    with pytest.raises(ValueError, match="missing action"):
        env.step({})


def test_actions_not_a_dict():
    env = parallel_env()
    env.reset(seed=0)
    with pytest.raises(ValueError, match="must be a dict.*list"):
        env.step([1, 1, 1])


def test_step_after_episode_end():
    env = parallel_env(rounds=1)
    env.reset(seed=0)
    env.step(good(env))
    assert env.agents == []
    with pytest.raises(RuntimeError, match="after the episode ended"):
        env.step({a: 1 for a in env.possible_agents})
    with pytest.raises(RuntimeError, match="after the episode ended"):
        env.step({})


def test_step_before_reset():
    env = parallel_env()
    with pytest.raises(RuntimeError, match="reset"):
        env.step({a: 1 for a in env.possible_agents})


def test_masked_action():
    env = parallel_env(disabled_actions=["debate_check"])
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"action of agent_2 is 5 \(debate_check\).*masked"):
        env.step(with_action(env, "agent_2", 5))
    env.step(with_action(env, "agent_2", 4))  # the others stay allowed


def test_bad_reset_options():
    env = parallel_env()
    with pytest.raises(ValueError, match="'not a task'"):
        env.reset(seed=0, options={"task": "not a task"})
    with pytest.raises(ValueError, match="'test'"):
        env.reset(seed=0, options={"task": 3, "split": "test"})


# ---------------------------------------------------------------------------------------
# a failed step() loses nothing
# ---------------------------------------------------------------------------------------

BAD_STEPS = [
    {"agent_0": 1, "agent_1": 6, "agent_2": 1},
    {"agent_0": 1, "agent_1": 1, "agent_2": None},
    {"agent_0": 1, "agent_1": 1},
    {"agent_0": 1, "agent_1": 1, "agent_2": 1, "agent_9": 1},
    {"agent_0": 5, "agent_1": 1, "agent_2": 1},  # masked below
]


def outcome(env, steps):
    out = []
    for s in steps:
        obs, rew, term, trunc, infos = env.step(s)
        out.append((
            {a: o["observation"].tobytes() for a, o in obs.items()}, rew, term, trunc,
            {a: {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in i.items()} for a, i in infos.items()},
        ))
    return out, env.transcript(), [r.finals for r in env.history]


@pytest.mark.parametrize("bad", BAD_STEPS)
@pytest.mark.parametrize("when", [0, 1])
def test_failed_step_changes_nothing(bad, when):
    cfg = dict(rounds=3, disabled_actions=["debate_check"], render_mode="ansi")
    steps = [{"agent_0": 1, "agent_1": 2, "agent_2": 3}, {"agent_0": 4, "agent_1": 0, "agent_2": 3},
             {"agent_0": 2, "agent_1": 2, "agent_2": 2}]
    ref = parallel_env(**cfg)
    ref.reset(seed=21)
    expected = outcome(ref, steps)

    env = parallel_env(**cfg)
    env.reset(seed=21)
    done = outcome(env, steps[:when])[0]
    state_before = env.state().copy()
    with pytest.raises(ValueError):
        env.step(bad)
    with pytest.raises(ValueError):
        env.step(bad)  # twice: still nothing consumed
    np.testing.assert_array_equal(env.state(), state_before)
    assert env.round == when and len(env.history) == when
    rest = outcome(env, steps[when:])
    assert done + rest[0] == expected[0]
    assert rest[1] == expected[1]
    assert rest[2] == expected[2]


# ---------------------------------------------------------------------------------------
# configs
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kw,match",
    [
        (dict(n_agents=1), "n_agents=1"),
        (dict(n_agents=0), "n_agents=0"),
        (dict(n_agents=2.5), "n_agents=2.5"),
        (dict(n_agents=True), "n_agents=True"),
        (dict(rounds=0), "rounds=0"),
        (dict(rounds=-2), "rounds=-2"),
        (dict(profile="nope"), "profile='nope'"),
        (dict(domain="chemistry"), "domain='chemistry'"),
        (dict(domain="math"), "domain='math' does not match profile 'mmlu_pro'"),
        (dict(profile="humaneval", domain="reasoning"), "domain='reasoning' does not match profile 'humaneval'"),
        (dict(backend="gpt"), "backend='gpt': no such backend"),
        (dict(backend={"kind": "gpt"}), "backend.kind='gpt': no such backend"),
        (dict(backend=3), "backend=3"),
        (dict(backend={"kind": "sim", "model": "m"}), re.escape("backend kind 'sim' has no key(s) ['model']")),
        (dict(backend="llm", domain="code"), "needs backend.dataset, backend.model"),
        (dict(backend={"kind": "llm", "model": "m", "dataset": "humaneval"}), "backend kind 'llm' needs env.domain"),
        (dict(backend={"kind": "llm", "model": "m", "dataset": "humaneval", "max_tokens": 0}, domain="code"),
         "backend.max_tokens=0"),
        (dict(llm={"model": "m"}), re.escape("unknown env config key(s) ['llm']; 'llm' is now env.backend.model")),
        (dict(dataset="humaneval", train_size=3),
         re.escape("['dataset', 'train_size']; 'dataset' is now env.backend.dataset; 'train_size' is now "
                   "env.backend.train_size;")),
        (dict(w_acc=-1), "w_acc=-1"),
        (dict(w_acc=float("nan")), "w_acc=nan"),
        (dict(w_acc="1"), "w_acc='1'"),
        (dict(w_tok=-0.1), "w_tok=-0.1"),
        (dict(w_tok=float("inf")), "w_tok=inf"),
        (dict(max_tokens=0), "max_tokens=0"),
        (dict(max_tokens=100.0), "max_tokens=100.0"),
        (dict(reward_mode="dense"), "reward_mode='dense'"),
        (dict(target_rule="x"), "target_rule='x'"),
        (dict(split="test"), "split='test'"),
        (dict(render_mode="svg"), "render_mode='svg'"),
        (dict(foo=1), re.escape("unknown env config key(s) ['foo']")),
        (dict(adversarial_agents=[3]), "adversarial_agents contains 3"),
        (dict(adversarial_agents=[-1]), "adversarial_agents contains -1"),
        (dict(n_agents=5, adversarial_agents=[5]), "adversarial_agents contains 5"),
        (dict(adversarial_agents=[1, 1]), re.escape("adversarial_agents=[1, 1] repeats")),
        (dict(adversarial_agents=[0, 1, 2]), "leaves no honest agent"),
        (dict(adversarial_agents=1), "adversarial_agents=1"),
        (dict(roles=["specialist", "analyzer"]), re.escape("roles=['specialist', 'analyzer'] has 2 entries, n_agents is 3")),
        (dict(n_agents=2, roles=["specialist"] * 3), "has 3 entries, n_agents is 2"),
        (dict(roles=["specialist", "analyzer", "wizard"]), "roles contains 'wizard'"),
        (dict(personas=["inspector", "bug fixer"]), re.escape("personas=['inspector', 'bug fixer'] has 2 entries")),
        (dict(personas=["inspector", "", "bug fixer"]), "personas contains '': each must be a non-empty string"),
        (dict(personas="inspector"), "personas='inspector': must be a list"),
        (dict(roles="specialist"), "roles='specialist'"),
        (dict(disabled_actions=["fly"]), "disabled_actions contains 'fly'"),
        (dict(disabled_actions=[6]), "disabled_actions contains 6"),
        (dict(disabled_actions=list(range(6))), "disables every action"),
        (dict(encoder="bert"), "encoder='bert'"),
        (dict(embed_dim=4), "embed_dim=4"),
    ],
)
def test_bad_config(kw, match):
    with pytest.raises(ConfigError, match=match):
        parallel_env(**kw)
    assert issubclass(ConfigError, ValueError)


def test_bad_config_direct_dataclass():
    with pytest.raises(ConfigError, match="rounds=0"):
        EnvConfig(rounds=0)
    with pytest.raises(ConfigError, match=re.escape("['colour', 'size']")):
        EnvConfig.from_dict({"size": 3, "colour": "red"})


def test_good_configs_still_work():
    for kw in (dict(domain="reasoning"), dict(profile="humaneval", domain="code"), dict(profile="aime25", domain="math"),
               dict(n_agents=2), dict(rounds=1), dict(w_acc=0, w_tok=0), dict(adversarial_agents=[0, 1]),
               dict(roles=["analyzer", "analyzer", "specialist"]), dict(disabled_actions=[0, 1, 2, 3, 4])):
        env = parallel_env(**kw)
        obs, _ = env.reset(seed=0)
        assert set(obs) == set(env.possible_agents)


# ---------------------------------------------------------------------------------------
# a failed reset() loses nothing either
# ---------------------------------------------------------------------------------------


def _not_a_sim_task():
    from topo_env import Task

    return Task(id="real-1", domain="reasoning", prompt="What is 2 + 2?", reference="4")


@pytest.mark.parametrize(
    "bad_reset",
    [
        pytest.param(dict(options={"task": "not a task"}), id="bad-task-option"),
        pytest.param(dict(seed=5, options={"task": "not a task"}), id="bad-task-option-with-seed"),
        pytest.param(dict(options={"task": 3, "split": "test"}), id="bad-split"),
        pytest.param(dict(options={"task": _not_a_sim_task()}), id="task-the-backend-rejects"),
    ],
)
def test_failed_reset_changes_nothing(bad_reset):
    """A reset() that raises must leave the running episode (and the seed stream) as it was."""
    acts = {"agent_0": 1, "agent_1": 5, "agent_2": 2}
    ref = parallel_env(render_mode="ansi")
    ref.reset(seed=0)
    ref_steps = outcome(ref, [acts, acts])
    ref.reset()  # continues the seed-0 stream
    ref_next_task = ref.task.id

    env = parallel_env(render_mode="ansi")
    env.reset(seed=0)
    task = env.task
    first = outcome(env, [acts])[0]
    with pytest.raises(ValueError):
        env.reset(**bad_reset)
    assert env.task == task, (
        f"BUG topo_env/frontends/parallel_env.py reset(): the failed reset replaced the running episode's task "
        f"{task.id!r} by {env.task.id!r} (self.task is assigned before backend.start_episode validates it)"
    )
    assert env.agents == env.possible_agents and env.round == 1
    second = outcome(env, [acts])
    assert first + second[0] == ref_steps[0]
    assert second[1] == ref_steps[1]
    env.reset()
    assert env.task.id == ref_next_task, (
        "BUG topo_env/frontends/parallel_env.py reset(): a reset(seed=...) that raised (bad options) still re-seeded the env's "
        "random stream (self._rng is replaced before the options are validated)"
    )
