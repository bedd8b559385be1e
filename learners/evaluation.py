"""Held-out evaluation shared by training (:mod:`learners.training`: results.json) and the robustness
study (``python -m studies.robustness``: robustness.json).

Every policy, learned or fixed, is scored by the same loop
(:func:`topo_env.references.baselines.evaluate_policy`, through the PettingZoo API) on the same seeded
episodes, and summarised by the same function (:func:`evaluate`), so that every policy's
entry has the same keys:

* from ``evaluate_policy``: ``reward``, ``reward_std``, ``accuracy``, ``tokens_per_task``,
  ``density``, ``episodes``;
* from the episodes' graphs (:func:`summarize_traces`): ``total_tokens``,
  ``action_distribution_by_round`` (per round, the share of agent choices per action),
  ``density_by_bucket``, ``out_degree_by_agent`` (mean edges sent per round, per agent
  index), and, where some agents are watched (by default each episode's adversaries),
  ``adversary_out_degree`` / ``honest_out_degree``: the mean out-degree per round of the
  watched agents / of the others. Out-degree of u is ``sum_v A[t, u, v]`` (edges u -> v).

The learned policy plays through :class:`QMIXPolicy`, an adapter of the agent network to the
baselines' ``CommPolicy`` protocol (greedy: the same actions as ``EpisodeRunner.run(0.0, ...)``).
On the simulated team a greedy QMIXPolicy is played by the batch simulator instead
(:func:`evaluate_batched`): :data:`BATCH_EPISODES` episodes at once, one network call per round
for all of them; the episodes, actions and figures are those of the one-by-one loop (the
network's rows do not interact).
"""
from __future__ import annotations

import copy
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch
from pettingzoo.utils import BaseParallelWrapper
from tqdm import tqdm

from learners.agent_network import AgentQNetwork, build_agent_network
from learners.batch_runner import BatchEpisodeRunner
from learners.config import ExperimentConfig, with_overrides
from topo_env.frontends.inflight import EpisodesInFlight
from learners.runner import select_actions
from topo_env.frontends.comm_actions import ACTION_NAMES, N_ACTIONS
from topo_env.references.baselines import (
    BASELINES, FIXED_BASELINES, EpisodeFigures, CommPolicy, agent_index, check_evaluation, episode_calls, evaluate_policy,
    make_baseline, open_loop_actions, play_comm_episode, policy_figures, random_joint_actions,
)
from topo_env.engine.config_checks import ConfigError
from topo_env.engine.backend_registry import BATCH_SIMULATOR, TASK_LIST, backend_offers
from topo_env.engine.seeding import held_out_seed, policy_rng
from topo_env.frontends.vector_env import SimVectorEnv





class EpisodeTrace(NamedTuple):
    """One finished episode, as the env recorded it."""

    reward: float  # return of agent 0 (all agents share it)
    accuracy: float
    tokens: int  # team tokens incl. the decision node
    density: float  # mean over rounds
    actions: np.ndarray  # (T, N)
    adjacency: np.ndarray  # (T, N, N), A[t, u, v] = 1 iff u -> v in round t
    targets: np.ndarray  # (T, N) peers of selective_query / debate_check
    bucket: str | None  # difficulty bucket of a simulated task
    adversaries: tuple[int, ...]  # the episode's adversaries (env.adversaries)


class TraceRecorder(BaseParallelWrapper):
    """A pass-through wrapper that appends an :class:`EpisodeTrace` to ``traces`` whenever an
    episode ends, built from what a policy sees (the joint actions it sent and the infos that came
    back: ``sent_to``, ``target``) and the env's ``episode_summary()`` once the episode is over.
    ``astep`` records the same way for episodes in flight."""

    def __init__(self, env):
        super().__init__(env)
        self.traces: list[EpisodeTrace] = []
        self._steps: list[tuple[dict, dict]] = []
        self._episode_return = 0.0

    def reset(self, seed: int | None = None, options: dict | None = None):
        self._steps, self._episode_return = [], 0.0
        return self.env.reset(seed=seed, options=options)

    def step(self, actions):
        return self._record(actions, self.env.step(actions))

    async def astep(self, actions):
        return self._record(actions, await self.env.astep(actions))

    def _record(self, actions, result):
        obs, rewards, terminations, truncations, infos = result
        names = self.env.possible_agents
        self._steps.append((actions, infos))
        self._episode_return += float(rewards[names[0]])
        if not self.env.agents:
            self.traces.append(trace_of_steps(names, self._episode_return, self._steps,
                                              self.env.unwrapped.episode_summary()))
        return obs, rewards, terminations, truncations, infos


def trace_of_steps(names: Sequence[str], episode_return: float, steps: Sequence[tuple[dict, dict]],
                   summary: dict[str, Any]) -> EpisodeTrace:
    """The trace of an episode that just ended, from its steps' ``(joint action, infos)`` and its
    ``episode_summary()``."""
    n = len(names)
    actions = np.array([[int(joint[a]) for a in names] for joint, _ in steps], dtype=np.int64)
    adjacency = np.array([[infos[a]["sent_to"] for a in names] for _, infos in steps], dtype=np.int8)
    targets = np.array([[infos[a]["target"] for a in names] for _, infos in steps], dtype=np.int64)
    last = steps[-1][1][names[0]]
    return EpisodeTrace(
        reward=float(episode_return), accuracy=float(last["accuracy"]), tokens=int(last["team_tokens"]),
        density=float(adjacency.sum(axis=(1, 2)).mean() / (n * (n - 1))), actions=actions, adjacency=adjacency,
        targets=targets, bucket=summary["bucket"], adversaries=tuple(summary["adversaries"]),
    )


class QMIXPolicy:
    """The agent network as a baselines ``CommPolicy``: each agent takes its best valid action
    (``epsilon > 0``: epsilon-greedy with :func:`learners.runner.select_actions`, seeded by
    ``reset(seed)``). The GRU state is carried over the rounds of an episode."""

    privileged = False

    def __init__(self, agent: AgentQNetwork, device: torch.device | str = "cpu", epsilon: float = 0.0,
                 name: str = "qmix"):
        if not 0.0 <= epsilon <= 1.0:
            raise ValueError(f"epsilon={epsilon!r}: must be in [0, 1]")
        self.agent, self.device, self.epsilon, self.name = agent, torch.device(device), float(epsilon), name
        self._hidden = None
        self._rng = np.random.default_rng(0)

    def reset(self, seed: int | None) -> None:
        self._hidden = None
        self._rng = policy_rng("qmix", seed)

    def act(self, observations: dict, infos: dict) -> dict[str, int]:
        names = sorted(observations, key=agent_index)
        obs = np.stack([observations[a]["observation"] for a in names])
        mask = np.stack([observations[a]["action_mask"] for a in names]).astype(bool)
        adjacency = np.stack([infos[a]["sent_to"] for a in names]).astype(np.float32)  # row u: where u's output went
        self.agent.eval()
        if self._hidden is None:
            self._hidden = self.agent.initial_hidden(1, len(names))
        with torch.no_grad():
            q, self._hidden = self.agent(torch.as_tensor(obs, device=self.device)[None],
                                         torch.as_tensor(adjacency, device=self.device)[None], self._hidden)
        actions = select_actions(q[0].cpu().numpy(), mask, self.epsilon, self._rng)
        return {a: int(actions[i]) for i, a in enumerate(names)}


BATCH_EPISODES = 4096
"""Episodes a greedy QMIX evaluation on the simulated team plays at once (:func:`evaluate_batched`)."""


def evaluate_batched(env, policy: QMIXPolicy, episodes: int, seed: int, split: str = "eval",
                     progress: bool = True) -> list[tuple[EpisodeFigures, EpisodeTrace]]:
    """The greedy policy's episodes ``seed + k`` (k < ``episodes``) on ``env``'s simulated team,
    :data:`BATCH_EPISODES` at a time through the batch simulator
    (:class:`~topo_env.frontends.vector_env.SimVectorEnv`, one network call per round for all of them); in
    episode order, each as :func:`~topo_env.references.baselines.play_comm_episode` and :class:`TraceRecorder` give it
    on the PettingZoo env (the same episodes, actions and figures)."""
    env = env.unwrapped
    runner = BatchEpisodeRunner(SimVectorEnv(env.config, encoder=env.encoder), policy.agent, policy.device)
    n = env.n_agents
    greedy_draws = np.random.default_rng(0)  # epsilon 0: the actions do not depend on the draws
    done: list[tuple[EpisodeFigures, EpisodeTrace]] = []
    bar = tqdm(total=int(episodes), desc=f"evaluate {policy.name}", disable=not progress, file=sys.stderr)
    for start in range(0, int(episodes), BATCH_EPISODES):
        seeds = range(int(seed) + start, int(seed) + min(int(episodes), start + BATCH_EPISODES))
        _, stats = runner.run(seeds, 0.0, greedy_draws, split)
        for b in range(len(seeds)):
            figures = EpisodeFigures(float(stats.reward[b]), float(stats.accuracy[b]), float(stats.tokens[b]),
                                     float(stats.density[b]), {}, int(stats.calls[b]))
            trace = EpisodeTrace(float(stats.reward[b]), float(stats.accuracy[b]), int(stats.tokens[b]),
                                 float(stats.graphs[b].sum(axis=(1, 2)).mean() / (n * (n - 1))), stats.actions[b],
                                 stats.graphs[b], stats.targets[b],
                                 stats.buckets[b], tuple(int(i) for i in np.flatnonzero(stats.adversaries[b])))
            done.append((figures, trace))
        bar.update(len(seeds))
    bar.close()
    return done


def summarize_traces(traces: Sequence[EpisodeTrace], rounds: int,
                     watch: Sequence[Sequence[int]] | None = None) -> dict[str, Any]:
    """Graph and action figures of a list of episodes (module docstring). ``watch[k]``: the
    agents whose out-degree is reported as ``adversary_out_degree`` in episode k (default:
    episode k's own adversaries); the keys are left out when no episode watches anyone."""
    if not traces:
        raise ValueError("no episodes to summarize")
    if watch is None:
        watch = [t.adversaries for t in traces]
    if len(watch) != len(traces):
        raise ValueError(f"watch has {len(watch)} entries for {len(traces)} episodes")
    actions = np.stack([t.actions for t in traces])  # (E, T, N)
    out_degree = np.stack([t.adjacency for t in traces]).sum(axis=3)  # (E, T, N): edges each agent sends
    n = actions.shape[2]
    watched = np.zeros((len(traces), n), dtype=bool)
    for k, agents in enumerate(watch):
        watched[k, list(agents)] = True
    summary = {
        "total_tokens": int(sum(t.tokens for t in traces)),
        "action_distribution_by_round": [
            {ACTION_NAMES[a]: float(np.mean(actions[:, t] == a)) for a in range(N_ACTIONS)} for t in range(rounds)
        ],
        "density_by_bucket": {
            bucket: float(np.mean([t.density for t in traces if t.bucket == bucket]))
            for bucket in sorted({t.bucket for t in traces if t.bucket is not None})
        },
        "out_degree_by_agent": out_degree.mean(axis=(0, 1)).tolist(),
    }
    if watched.any():
        per_round = np.broadcast_to(watched[:, None, :], out_degree.shape)
        summary["adversary_out_degree"] = float(out_degree[per_round].mean())
        summary["honest_out_degree"] = float(out_degree[~per_round].mean())
    return summary


def evaluate(env, policy: CommPolicy, episodes: int, seed: int, split: str = "eval", progress: bool = True,
             watch: Sequence[Sequence[int]] | None = None,
             siblings: Sequence[Any] = ()) -> tuple[dict[str, Any], list[EpisodeTrace]]:
    """Score ``policy`` on ``episodes`` episodes of ``env`` (episode k: env seed ``seed + k``)
    with :func:`~topo_env.references.baselines.evaluate_policy`; returns its figures merged with
    :func:`summarize_traces` of the same episodes, and the episodes' traces. A real team (any
    backend with a task list) plays its held-out tasks in order, episode k task k, so an
    evaluation of at most the split's size sees each task once and every policy the same tasks.

    ``siblings``: more envs of ``env``'s config (:func:`topo_env.frontends.inflight.sibling_envs`) to keep
    ``1 + len(siblings)`` episodes in flight, each env with its own copy of ``policy``; every
    episode's figures and trace are those of the sequential evaluation (an episode depends on
    its seed only), in episode order."""
    backend = env.unwrapped.config.backend
    if isinstance(policy, QMIXPolicy) and policy.epsilon == 0.0 and backend_offers(backend, BATCH_SIMULATOR):
        check_evaluation(episodes, seed, split)
        done = evaluate_batched(env, policy, episodes, seed, split, progress)
        traces = [trace for _, trace in done]
        return {**policy_figures([f for f, _ in done]), **summarize_traces(traces, env.rounds, watch)}, traces
    in_order = backend_offers(backend, TASK_LIST)
    if not siblings:
        recorder = TraceRecorder(env)
        figures = evaluate_policy(recorder, policy, episodes, seed=seed, split=split, progress=progress,
                                  tasks_in_order=in_order)
        return {**figures, **summarize_traces(recorder.traces, env.rounds, watch)}, recorder.traces
    check_evaluation(episodes, seed, split)
    envs = [env, *siblings]
    policies = [policy] + [copy.deepcopy(policy) for _ in siblings]

    recorders = {id(e): TraceRecorder(e) for e in envs}

    async def play(slot_env, slot: int, k: int) -> tuple[EpisodeFigures, EpisodeTrace]:
        recorder = recorders[id(slot_env)]
        played = await play_comm_episode(recorder, policies[slot], int(seed) + k, split, recorder.astep,
                                         task=k if in_order else None)
        return played, recorder.traces[-1]

    done = list(tqdm(EpisodesInFlight(envs).play(range(int(episodes)), play), total=int(episodes),
                     desc=f"evaluate {policy.name}", disable=not progress, file=sys.stderr))
    traces = [trace for _, (_, trace) in done]
    return {**policy_figures([played for _, (played, _) in done]), **summarize_traces(traces, env.rounds, watch)}, traces


def paired_difference(a: Sequence[float], b: Sequence[float]) -> dict[str, float]:
    """Mean of ``a[k] - b[k]`` over paired episodes (same task and noise) and its standard
    error; pairing removes the task-to-task spread that two independent samples would carry."""
    if len(a) != len(b) or not len(a):
        raise ValueError(f"paired samples need the same non-zero length, got {len(a)} and {len(b)}")
    diff = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    se = float(diff.std(ddof=1) / np.sqrt(len(diff))) if len(diff) > 1 else 0.0
    return {"mean": float(diff.mean()), "se": se}


def paired_differences(traces: dict[str, list[EpisodeTrace]], reference: str = "qmix") -> dict[str, dict[str, float]]:
    """Reward of ``reference`` minus each other policy's, on the same held-out episodes:
    ``{policy: {"mean", "se"}}`` (see :func:`paired_difference`)."""
    ref = [t.reward for t in traces[reference]]
    return {name: paired_difference(ref, [t.reward for t in other])
            for name, other in traces.items() if name != reference}


CHECKPOINT_KEYS = ("config", "learner", "episode", "buffer", "torch_rng", "numpy_rng", "python_rng")
"""What every train_qmix.py checkpoint holds (learners.training_run.save_checkpoint) and a resumed run reads."""
LEARNER_KEYS = ("agent", "mixer", "target_agent", "target_mixer", "optimizer", "updates")
"""What its ``learner`` holds (QMIXLearner.state_dict)."""
CHECKPOINT_REMEDY = "restore it from a copy, or train the run again (python train_qmix.py --out DIR)"


def read_checkpoint(file: str | Path) -> dict[str, Any]:
    """The train_qmix.py checkpoint dict in ``file``, read without changing the file. One that torch
    cannot load (empty, truncated, garbage) or that lacks :data:`CHECKPOINT_KEYS` or
    :data:`LEARNER_KEYS` is a one-line ConfigError naming the file and what to do."""
    try:
        checkpoint = torch.load(file, map_location="cpu", weights_only=False)
    except Exception as err:  # whatever unpickling a damaged file raises: EOFError, RuntimeError, UnpicklingError, ...
        why = (str(err).splitlines() or [""])[0].split(". ")[0][:100]
        why = "an empty file" if Path(file).stat().st_size == 0 else f"{type(err).__name__}: {why}"
        raise ConfigError(f"{file}: not a readable checkpoint (truncated or damaged: {why}); {CHECKPOINT_REMEDY}") from None
    if not isinstance(checkpoint, dict):
        raise ConfigError(f"{file}: not a train_qmix.py checkpoint (it holds a {type(checkpoint).__name__}); "
                          f"{CHECKPOINT_REMEDY}")
    learner = checkpoint.get("learner")
    lacks = [k for k in CHECKPOINT_KEYS if k not in checkpoint or k in ("config", "learner")
             and not isinstance(checkpoint[k], dict)]
    lacks += [f"learner.{k}" for k in LEARNER_KEYS if isinstance(learner, dict) and k not in learner]
    if lacks:
        raise ConfigError(f"{file}: not a complete train_qmix.py checkpoint (lacks {lacks}); {CHECKPOINT_REMEDY}")
    return checkpoint


def load_checkpoint(path: str | Path, overrides: Sequence[str] = ()) -> tuple[ExperimentConfig, dict[str, Any]]:
    """A training run's checkpoint: ``path`` is the run directory (holding checkpoint.pt) or the
    file. Returns the run's config with ``overrides`` (``section.key=value``) applied, and the
    checkpoint dict (``"config"``, ``"learner"``, ``"episode"``, ...: :func:`read_checkpoint`, whose
    one-line ConfigError a missing, damaged or incomplete file is)."""
    path = Path(path)
    file = path / "checkpoint.pt" if path.is_dir() else path
    if not file.is_file():
        raise ConfigError(f"checkpoint {str(path)!r} not found (expected a run directory with checkpoint.pt, or the file)")
    checkpoint = read_checkpoint(file)
    return with_overrides(ExperimentConfig.from_dict(checkpoint["config"]), overrides), checkpoint


OBSERVATION_LAYOUT = (("env", "n_agents"), ("env", "rounds"), ("env", "roles"), ("env", "personas"), ("env", "encoder"),
                      ("env", "embed_dim"))
"""The config fields that fix the agents' observations (what a network trained on one team reads on another)."""
AGENT_LAYOUT = OBSERVATION_LAYOUT + (("qmix", "hidden_dim"), ("qmix", "gnn_layers"), ("qmix", "gnn"),
                                     ("qmix", "dueling"))
"""The config fields that fix the agent network's shapes: the observation layout and its architecture."""
MIXER_LAYOUT = (("qmix", "mixer"), ("qmix", "mixer_embed_dim"), ("qmix", "hypernet_dim"),
                ("sim_scale", "privileged_state"))
"""The config fields that fix the mixer's shapes beyond the agents' (its state: privileged or not)."""
NETWORK_LAYOUT = AGENT_LAYOUT + MIXER_LAYOUT
"""The config fields that fix the networks' shapes: the observation layout and the architecture."""


def layout_difference(ours: ExperimentConfig, theirs: ExperimentConfig,
                      fields: tuple[tuple[str, str], ...] = NETWORK_LAYOUT) -> str | None:
    """The first of ``fields`` (default :data:`NETWORK_LAYOUT`) in which two configs differ, in
    words, or None."""
    for section, key in fields:
        a, b = getattr(getattr(ours, section), key), getattr(getattr(theirs, section), key)
        if (list(a) if isinstance(a, tuple) else a) != (list(b) if isinstance(b, tuple) else b):
            return f"{section}.{key} is {b!r} there and {a!r} here"
    return None


def agent_from_checkpoint(checkpoint: dict[str, Any], cfg: ExperimentConfig, obs_dim: int,
                          device: torch.device | str = "cpu") -> AgentQNetwork:
    """The trained greedy policy's agent network of a checkpoint: the network that scored best
    in validation if the run validated (``train.validate_every``), else the last one; for
    observations of size ``obs_dim`` (a ConfigError if the checkpoint's network takes another size)."""
    best = (checkpoint.get("validation") or {}).get("best")
    state = best["agent"] if best else checkpoint["learner"]["agent"]
    agent = build_agent_network(obs_dim, N_ACTIONS, cfg.qmix)
    expected = {k: tuple(v.shape) for k, v in agent.state_dict().items()}
    got = {k: tuple(v.shape) for k, v in state.items()}
    if expected != got:
        bad = sorted(k for k in set(expected) | set(got) if expected.get(k) != got.get(k))
        raise ConfigError(f"the checkpoint's agent network does not fit observations of size {obs_dim} "
                          f"(n_agents, rounds, roles, encoder, embed_dim must be those of training); "
                          f"differs at {bad[:3]}: checkpoint {[got.get(k) for k in bad[:3]]}, "
                          f"env {[expected.get(k) for k in bad[:3]]}")
    agent.load_state_dict(state)
    return agent.to(device).eval()


def references_apply(cfg: ExperimentConfig) -> bool:
    """Whether a run of ``cfg`` scores the headroom references (``train.references`` on a team the
    batch simulator plays; enumerated for N = 3, T <= 2, else searched: :mod:`topo_env.references.headroom`)."""
    return backend_offers(cfg.env.backend, BATCH_SIMULATOR) and cfg.train.references


def batch_figures(result: Any) -> dict[str, Any]:
    """The figures :func:`topo_env.references.baselines.policy_figures` gives, of a
    :class:`~topo_env.sim.batch.BatchResult` (episodes played by the batch simulator)."""
    calls = result.calls.sum(axis=(1, 2)) + episode_calls(0, result.decision_calls)
    return {"reward": float(result.reward.mean()), "reward_std": float(result.reward.std()),
            "accuracy": float(result.accuracy.mean()), "tokens_per_task": float(result.tokens.mean()),
            "density": float(result.density.mean()), "calls_per_task": float(calls.mean()),
            "episodes": int(len(result.reward)),
            "total_tokens": int(result.tokens.sum())}


def score_on_simulator(env, episodes: int, seed: int, progress: bool = True,
                       references: bool = True) -> tuple[dict[str, dict[str, Any]], dict[str, np.ndarray]]:
    """The fixed baselines, the random policy and (``references``) the headroom
    references (:mod:`topo_env.references.headroom`: ``best_fixed``, ``context_only``, ``adaptive``) played by
    the batch simulator on ``env``'s held-out episodes ``seed + k`` (k < ``episodes``): the tasks and
    noise every env evaluation meets (common random numbers), at a fraction of the env's cost.
    ``env``: an env with the simulated team. Returns each policy's figures (:func:`batch_figures`)
    and its per-episode rewards."""
    from topo_env.references.headroom import cached_references, play_references

    config = env.unwrapped.config
    venv = SimVectorEnv(config, encoder=env.unwrapped.encoder)
    seeds = range(int(seed), int(seed) + int(episodes))
    drawn, _ = venv.sample_episodes(seeds, "eval")
    sim, arrays = venv.sim, (drawn.tasks, drawn.noise, drawn.adversaries)
    played = {name: sim.run(open_loop_actions(name, config.n_agents, config.rounds, config.roles), *arrays)
              for name in FIXED_BASELINES}
    valid = [a for a in range(N_ACTIONS) if a not in config.disabled_actions]
    played["random"] = sim.run(random_joint_actions(seeds, config.n_agents, config.rounds, valid), *arrays)
    if references:
        chosen, _ = cached_references(config, progress=progress)
        played.update(play_references(sim, chosen, *arrays))
    figures = {name: batch_figures(result) for name, result in played.items()}
    return figures, {name: result.reward for name, result in played.items()}


def held_out_comparison(cfg: ExperimentConfig, qmix_policies: Sequence[QMIXPolicy], eval_env: Any,
                        siblings: Sequence[Any] = (), progress: bool = True):
    """A run's final table: the QMIX policies (the first named ``qmix``), every baseline and, on a
    simulated team with ``train.references``, the headroom references, on the same
    ``train.eval_episodes`` held-out episodes of ``eval_env`` (env seeds ``held_out_seed(train.seed)
    + k``: the seed's own, common random numbers). On the simulated team the baselines and
    references are played by the batch simulator (:func:`score_on_simulator`), otherwise every
    policy plays the env (``siblings``: more envs for episodes in flight).

    Returns ``(results, traces, rewards, paired, headroom)``: per policy its figures, the QMIX
    policies' episode traces, per policy the per-episode rewards, QMIX minus each other policy
    (:func:`paired_difference`), and ``{"headroom", "headroom_share"}`` where the references ran."""
    seed = held_out_seed(cfg.train.seed)
    simulated = backend_offers(cfg.env.backend, BATCH_SIMULATOR)
    results, traces = {}, {}
    for policy in list(qmix_policies) + ([] if simulated else [make_baseline(name) for name in BASELINES]):
        results[policy.name], traces[policy.name] = evaluate(eval_env, policy, cfg.train.eval_episodes, seed=seed,
                                                             split="eval", progress=progress, siblings=siblings)
    rewards = {name: np.array([t.reward for t in episodes]) for name, episodes in traces.items()}
    with_references = references_apply(cfg)
    if simulated:
        figures, batch_rewards = score_on_simulator(eval_env, cfg.train.eval_episodes, seed, progress=progress,
                                                    references=with_references)
        results.update(figures)
        rewards.update(batch_rewards)
    paired = {name: paired_difference(rewards["qmix"], r) for name, r in rewards.items() if name != "qmix"}
    headroom = {}
    if with_references:
        gap = results["adaptive"]["reward"] - results["best_fixed"]["reward"]
        headroom = {"headroom": gap, "headroom_share": (results["qmix"]["reward"] - results["best_fixed"]["reward"]) / gap
                    if gap > 0 else None}
    return results, traces, rewards, paired, headroom
