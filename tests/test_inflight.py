"""Episodes in flight (``runtime.episodes_in_flight``, topo_env/frontends/inflight.py): K = 1 is the
sequential run bit for bit, the order in which episodes complete changes nothing the learner
sees, every stored episode carries its policy version, the token budget stops exactly, and an
evaluation with K > 1 gives the sequential evaluation's episodes."""
from __future__ import annotations

import dataclasses
import json
import random

import numpy as np
import pytest
import torch

import train_qmix
from run_checks import ONE_EPISODE_CONFIG, DelayedBackend, assert_same_learner_and_replay, read_checkpoint
import topo_env.frontends.parallel_env as env_module
from fake_openai_server import FakeOpenAIServer
from learners.agent_network import AgentQNetwork
from learners.buffer import EpisodeReplayBuffer
from learners.config import load_experiment
from learners.evaluation import QMIXPolicy, evaluate
from topo_env.frontends.inflight import sibling_envs
from learners.learner import QMIXLearner
from learners.runner import EpisodeRunner
from learners.schedules import epsilon_at, lr_at
from topo_env.frontends.comm_actions import N_ACTIONS
from topo_env.references.baselines import make_baseline
from topo_env.engine.config_checks import ConfigError
from topo_env.frontends.parallel_env import TopologyParallelEnv
from topo_env.engine.seeding import EXPLORATION_STREAM, REPLAY_STREAM, episode_rng, training_env_seed

torch.set_num_threads(1)

EPISODES = 24
SMALL = {"train.eval_episodes": 12, "train.references": False, "train.warmup_episodes": 8, "qmix.batch_size": 8,
         "train.checkpoint_every": 100, "train.log_every": 8, "qmix.hidden_dim": 32,
         "exploration.eps_anneal_episodes": EPISODES, "qmix.lr_anneal_episodes": EPISODES, "runtime.device": "cpu"}


def train(out, *extra: str, **settings) -> int:
    sets = [x for key, value in {**SMALL, **settings}.items() for x in ("--set", f"{key}={value}")]
    return train_qmix.main(["--config", ONE_EPISODE_CONFIG, *sets, "--episodes", str(EPISODES), "--out", str(out),
                            "--no-progress", "--no-pictures", *extra])


def delayed_backends(monkeypatch, seed: int) -> list:
    finished, delays = [], random.Random(seed)
    monkeypatch.setattr(env_module, "make_backend", lambda config: DelayedBackend(config, delays, finished))
    return finished


def test_episodes_in_flight_is_validated():
    with pytest.raises(ConfigError, match="runtime.episodes_in_flight"):
        load_experiment(None, ["runtime.episodes_in_flight=0"])


def test_k1_is_the_sequential_loop_bit_for_bit(tmp_path):
    """train_qmix with the default K = 1 stores exactly the replay and weights of the sequential
    loop (EpisodeRunner.run on the live network, update after each episode)."""
    assert train(tmp_path / "k1") == 0
    got = read_checkpoint(tmp_path / "k1")
    cfg = load_experiment(ONE_EPISODE_CONFIG, [f"{k}={v}" for k, v in SMALL.items()] + [f"train.episodes={EPISODES}"])
    seed = cfg.train.seed
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    env = TopologyParallelEnv(dataclasses.replace(cfg.env, split="train"))
    learner = QMIXLearner(env.obs_builder.dim, env.obs_builder.state_dim, cfg.env.n_agents, N_ACTIONS, cfg.qmix,
                          torch.device("cpu"))
    buffer = EpisodeReplayBuffer(cfg.qmix.buffer_size, cfg.env.rounds, cfg.env.n_agents, env.obs_builder.dim,
                                 env.obs_builder.state_dim, N_ACTIONS)
    runner = EpisodeRunner(env, learner.agent, torch.device("cpu"))
    for episode in range(EPISODES):
        learner.set_lr(lr_at(episode, cfg))
        record, _ = runner.run(epsilon_at(episode, cfg), episode_rng(seed, EXPLORATION_STREAM, episode),
                               seed=training_env_seed(seed, episode), policy_version=episode,
                               team_explore=cfg.exploration.team_explore,
                               deviation_explore=cfg.exploration.deviation_explore,
                               deviation_rank_decay=cfg.exploration.deviation_rank_decay,
                               topology_explore=cfg.exploration.topology_explore)
        buffer.add(record)
        if len(buffer) >= max(cfg.train.warmup_episodes, cfg.qmix.batch_size):
            learner.update(buffer.sample(cfg.qmix.batch_size, episode_rng(seed, REPLAY_STREAM, episode)))
    want = {"episode": EPISODES, "learner": learner.state_dict(), "buffer": buffer.state_dict()}
    assert_same_learner_and_replay(got, want)
    assert got["buffer"]["policy_version"].tolist() == list(range(EPISODES))  # K = 1: episode j after j updates' episodes


def test_completion_order_does_not_change_what_the_learner_sees(tmp_path, monkeypatch):
    """K = 4 on a team whose calls take random times: two runs whose episodes complete in
    different orders store the same replay, reach the same weights and the same results; each
    stored episode j was played by policy version max(0, j - 3)."""
    orders, results = [], []
    for run, delay_seed in enumerate((1, 2)):
        with monkeypatch.context() as m:
            finished = delayed_backends(m, delay_seed)
            assert train(tmp_path / f"run{run}", **{"runtime.episodes_in_flight": 4}) == 0
        orders.append(finished[:EPISODES])  # the training episodes, in completion order
        results.append(json.loads((tmp_path / f"run{run}" / "results.json").read_text())["eval"])
    assert orders[0] != orders[1] and sorted(orders[0]) == sorted(orders[1])
    a, b = read_checkpoint(tmp_path / "run0"), read_checkpoint(tmp_path / "run1")
    assert_same_learner_and_replay(a, b)
    assert a["buffer"]["policy_version"].tolist() == [max(0, j - 3) for j in range(EPISODES)]
    assert results[0] == results[1]


def test_token_budget_stops_after_the_episodes_in_flight(tmp_path, monkeypatch, capsys):
    """With K = 4 the run stops launching once the budget is reached; the (at most 3) episodes
    already in flight finish and count, and nothing else runs: the overshoot is exactly theirs."""
    tokens, original = {}, EpisodeRunner.arun

    async def arun(self, *args, **kwargs):
        record, stats = await original(self, *args, **kwargs)
        tokens[kwargs["seed"]] = stats.tokens  # seed 0: env seed = episode index
        return record, stats

    monkeypatch.setattr(EpisodeRunner, "arun", arun)
    budget = 60000
    assert train(tmp_path / "budget", **{"runtime.episodes_in_flight": 4, "train.token_budget": budget}) == 130
    ck = read_checkpoint(tmp_path / "budget")
    spent = np.cumsum([tokens[j] for j in range(len(tokens))])
    reached = int(np.argmax(spent >= budget)) + 1  # episodes committed when the budget was reached
    assert reached < EPISODES - 3
    assert len(tokens) == ck["episode"] == reached + 3 == ck["buffer"]["size"]  # no episode launched after it
    assert ck["tokens_spent"] == spent[reached + 2]
    err = capsys.readouterr().err
    assert "finishing the 3 episode(s) already in flight" in err and "started before it was reached" in err


def test_evaluation_in_flight_gives_the_sequential_episodes(tmp_path):
    """A fixed greedy QMIX policy on an LLM team behind a server with per-request latencies:
    K = 4 episodes in flight (one shared client) give the per-episode figures and traces of
    K = 1, and the server did see several calls at once."""
    rows = [{"id": f"q{i}", "domain": "reasoning", "prompt": f"Question {i}?", "choices": ["a", "b", "c"],
             "reference": "A"} for i in range(8)]
    data = tmp_path / "tasks.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in rows))
    latency = lambda body: (hash(json.dumps(body["messages"])) % 7) * 0.002  # noqa: E731
    with FakeOpenAIServer([("ok", "Answer: A\nConfidence: 0.7", {"prompt_tokens": 9, "completion_tokens": 4})],
                          latency=latency) as server:
        env = TopologyParallelEnv(load_experiment(None, [
            "env.backend.kind=llm", "env.domain=reasoning", f"env.backend.dataset={data}", "env.backend.model=m",
            f"env.backend.base_url={server.base_url}", "env.backend.cache_path=null", "env.backend.train_size=3"]).env)
        envs = sibling_envs(env, 4)
        assert all(e.backend.client is env.backend.client and e.backend is not env.backend for e in envs[1:])
        torch.manual_seed(3)
        agent = AgentQNetwork(env.obs_builder.dim, N_ACTIONS, 32)
        sequential, seq_traces = evaluate(env, QMIXPolicy(agent), 10, seed=5, progress=False)
        server.max_in_flight = 0
        in_flight, traces = evaluate(env, QMIXPolicy(agent), 10, seed=5, progress=False, siblings=envs[1:])
        assert server.max_in_flight > 3
        chain, chain_traces = evaluate(env, make_baseline("chain"), 6, seed=5, progress=False, siblings=envs[1:])
    assert in_flight == sequential
    for a, b in zip(seq_traces, traces, strict=True):
        assert a.reward == b.reward and a.tokens == b.tokens and a.adversaries == b.adversaries
        assert np.array_equal(a.actions, b.actions) and np.array_equal(a.adjacency, b.adjacency)
    assert chain["episodes"] == len(chain_traces) == 6


def test_exploration_in_flight_records_the_sequential_traces(tmp_path, monkeypatch):
    """record_exploration with K = 4 on a team whose episodes complete out of order writes, in episode
    order, the traces and truth of K = 1, hands back the same figures and generator states (what a
    resumed recording continues from), and did complete episodes out of order."""
    from topo_env.fitting.explore import record_exploration
    from topo_env.frontends.env_config import EnvConfig

    runs = {}
    for k in (1, 4):
        with monkeypatch.context() as m:
            finished = delayed_backends(m, 7)
            env = TopologyParallelEnv(EnvConfig.from_dict({"profile": "mmlu_pro"}))
            handed = []
            figures = record_exploration(env, tmp_path / f"k{k}.jsonl", 16, seed=3, truth=tmp_path / f"t{k}.jsonl",
                                         in_flight=k, after_episode=handed.append)
        runs[k] = (figures, handed, list(finished))
    assert (tmp_path / "k1.jsonl").read_text() == (tmp_path / "k4.jsonl").read_text()
    assert (tmp_path / "t1.jsonl").read_text() == (tmp_path / "t4.jsonl").read_text()
    assert runs[1][:2] == runs[4][:2]
    order = [json.loads(line)["task"]["id"] for line in (tmp_path / "k1.jsonl").read_text().splitlines()]
    assert runs[4][2] != runs[1][2] and sorted(runs[4][2]) == sorted(runs[1][2]) and runs[1][2] == order
