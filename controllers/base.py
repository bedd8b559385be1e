"""The one interface every topology controller implements, and the loop that plays it.

A controller drives the orchestrator env (:mod:`topo_env.frontends.orchestrator_env`): in ``mode="graph"`` it
returns a whole round per step (``{"adjacency", "active", "verify", "halt"}``, ``adjacency[u, v] = 1``
sends u's output to v), in ``mode="next_agent"`` the next agent to speak (``N`` = stop). It sees
the env's observations and infos, nothing else (no env attributes): what it needs beyond them is a
reason to extend the observation.

    controller.begin(observation, info)          # a new task (stream state, e.g. TacoMAS's, persists)
    while not done:
        action = controller.act(observation, info)
        observation, reward, done, _, info = env.step(action)
    controller.end(observation, reward, info)    # the episode's outcome (online learners update here)

Learnable controllers also implement :meth:`Controller.train`, which trains on episodes of the
``train`` split of an env it is handed; :class:`CallCounter` wraps that env so the leaderboard
knows what training spent (LLM calls, agents' and the decision node's, and tokens) whatever the
controller does with it.
"""
from __future__ import annotations

import copy
import dataclasses
import math
import numbers
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, TypeVar

import gymnasium
import numpy as np

from topo_env.references.baselines import env_decision_calls


TRAIN_SEED_BASE = 1_000_000
"""Training episodes use reset seeds ``TRAIN_SEED_BASE * (seed + 1) + k`` on the train split;
evaluation uses seeds ``k`` on the eval split, the same for every method (common random numbers)."""


def train_seed(seed: int, episode: int) -> int:
    """The reset seed of training episode ``episode`` of a run seeded ``seed``."""
    return TRAIN_SEED_BASE * (int(seed) + 1) + int(episode)


def graph_action(n_agents: int, adjacency: Any = None, active: Any = None, verify: Any = None,
                 halt: bool = False, recall: Any = None) -> dict[str, Any]:
    """An orchestrator ``graph`` action: ``adjacency`` (N, N) 0/1 (u -> v this round), ``active`` /
    ``verify`` (N,) 0/1 (default: nobody; the env also calls every agent on an edge), ``halt``, and
    ``recall`` (N, N) 0/1 (u's latest earlier output shown to v; default none)."""
    n = int(n_agents)

    def flags(value: Any, shape: tuple[int, ...]) -> np.ndarray:
        return np.zeros(shape, dtype=np.int8) if value is None else np.asarray(value, dtype=np.int8).reshape(shape)

    adj = flags(adjacency, (n, n)).copy()
    np.fill_diagonal(adj, 0)
    rec = flags(recall, (n, n)).copy()
    np.fill_diagonal(rec, 0)
    return {"adjacency": adj, "active": flags(active, (n,)), "verify": flags(verify, (n,)), "halt": int(bool(halt)),
            "recall": rec}


_Config = TypeVar("_Config")


def config_from_dict(cls: type[_Config], values: Mapping[str, Any] | None, label: str,
                     checks: Mapping[str, Callable[[Any], Any]]) -> _Config:
    """``cls(**values)`` for the dataclass ``cls``, each given key in ``checks`` replaced by
    ``checks[key](value)``. Raises a one-line ValueError: ``"unknown <label> key '<key>'; set one of
    [<fields>]"`` for a key that is no field, ``"<label>: <key>=<value>; <fix>"`` where a check raised
    ValueError(<fix>)."""
    d = dict(values or {})
    names = sorted(f.name for f in dataclasses.fields(cls))
    unknown = sorted(set(d) - set(names))
    if unknown:
        raise ValueError(f"unknown {label} key {unknown[0]!r}; set one of {names}")
    for key, check in checks.items():
        if key in d:
            try:
                d[key] = check(d[key])
            except ValueError as fix:
                raise ValueError(f"{label}: {key}={d[key]!r}; {fix}") from None
    return cls(**d)


def config_number(low: float = -math.inf, high: float = math.inf, low_open: bool = False,
                  high_open: bool = False) -> Callable[[Any], float]:
    """A check for :func:`config_from_dict`: a finite real (not a bool) in the range, as a float."""
    def check(v: Any) -> float:
        if (isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v)
                or v < low or v > high or (low_open and v == low) or (high_open and v == high)):
            if high == math.inf:
                raise ValueError(f"set a finite number {'>' if low_open else '>='} {low}")
            raise ValueError(f"set a number in {'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}")
        return float(v)
    return check


def config_integer(low: int, allow_none: bool = False) -> Callable[[Any], int | None]:
    """A check for :func:`config_from_dict`: an integer (not a bool) >= ``low`` as an int, or None if allowed."""
    def check(v: Any) -> int | None:
        if allow_none and v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < low:
            raise ValueError(f"set an integer >= {low}{' or null' if allow_none else ''}")
        return int(v)
    return check


def config_choice(options: Iterable[Any]) -> Callable[[Any], Any]:
    """A check for :func:`config_from_dict`: one of ``options``."""
    options = list(options)

    def check(v: Any) -> Any:
        if v not in options:
            raise ValueError(f"set one of {options}")
        return v
    return check


def config_flag(v: Any) -> bool:
    """A check for :func:`config_from_dict`: a bool."""
    if not isinstance(v, bool):
        raise ValueError("set true or false")
    return v


@dataclass
class TrainingSpend:
    """What training spent: episodes played, LLM calls (agents' + decision node's) and tokens, and
    ``simulator_episodes``: what the simulator played beyond those episodes (QMIX on a simulated
    team: the replicas of its batched training, its teacher's search and demonstrations)."""

    episodes: int = 0
    calls: int = 0
    tokens: int = 0
    simulator_episodes: int = 0


class Controller:
    """Base class: a controller that needs no training. Subclasses set ``name`` and ``mode`` and
    implement :meth:`act`; stateful ones override :meth:`begin` / :meth:`end`; learnable ones
    :meth:`train` (and set ``trainable = True``)."""

    name: str = "controller"
    mode: str = "graph"  # or "next_agent"
    trainable: bool = False
    online: bool = False  # adapts over the stream of episodes it plays (TacoMAS): plays them one at a time

    def shared(self) -> tuple:
        """Objects that copies of this controller (:meth:`copy`) share rather than duplicate, such
        as a large text encoder."""
        return ()

    def copy(self) -> "Controller":
        """An independent copy for another episode in flight (sharing :meth:`shared`)."""
        return copy.deepcopy(self, {id(o): o for o in self.shared()})

    def begin(self, observation: dict, info: dict) -> None:
        """A new episode (task) starts; ``observation`` / ``info`` are ``env.reset``'s."""

    def act(self, observation: dict, info: dict) -> Any:
        """The next action of the orchestrator env in :attr:`mode`."""
        raise NotImplementedError

    def end(self, observation: dict, reward: float, info: dict) -> None:
        """The episode ended with ``reward`` (its last step's) and the last step's ``info``."""

    def train(self, env: gymnasium.Env, episodes: int, seed: int, progress: bool = False) -> TrainingSpend:
        """Train on ``episodes`` episodes of ``env`` (in :attr:`mode`; reset them with
        ``options={"split": "train"}`` and :func:`train_seed`). Untrained controllers do nothing."""
        return TrainingSpend()

    def state_dict(self) -> dict:
        """What a trained controller needs to act again (empty for fixed ones)."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`."""


class NetworkController(Controller):
    """A controller whose torch network ``policy`` is built at the first observation, for its width, by
    :meth:`_ensure_policy`; :meth:`state_dict` is ``{"input_dim", "policy"}`` (None and {} before that)."""

    policy: Any = None
    _input_dim: int | None = None

    def _ensure_policy(self, input_dim: int) -> Any:
        """Build ``policy`` for ``input_dim`` features (recording ``_input_dim``) if there is none yet."""
        raise NotImplementedError

    def state_dict(self) -> dict:
        if self.policy is None:
            return {"input_dim": None, "policy": {}}
        return {"input_dim": self._input_dim,
                "policy": {k: v.detach().clone() for k, v in self.policy.state_dict().items()}}

    def load_state_dict(self, state: dict) -> None:
        if state.get("input_dim") is None:
            return
        self.policy = None
        self._ensure_policy(int(state["input_dim"]))
        self.policy.load_state_dict(state["policy"])


@dataclass
class EpisodeRecord:
    """One played episode: reward (the episode's return), accuracy, team tokens, LLM calls (agents
    + decision node), rounds played (steps that called someone), the mean density of those rounds'
    graphs, and each agent's mean out-degree per round (N,)."""

    reward: float
    accuracy: float
    tokens: int
    calls: int
    rounds: int
    density: float
    out_degree: tuple[float, ...]


class _Tally:
    """What :class:`EpisodeRecord` sums over an episode's steps."""

    def __init__(self, decision_calls: int = 1):
        # calls: the decision's (1 the decision node's; 0 a vote's or one agent's answer, env.decision)
        self.ret, self.calls, self.density, self.out_degrees = 0.0, int(decision_calls), [], []

    def add(self, reward: float, info: dict) -> None:
        self.ret += float(reward)
        step_calls = int(np.sum(info["calls"]))
        self.calls += step_calls
        if step_calls:
            self.density.append(float(info["density"]))
            self.out_degrees.append(np.asarray(info["out_degree"], dtype=float))

    def record(self, info: dict) -> EpisodeRecord:
        n = len(info["calls"])
        degrees = np.mean(self.out_degrees, axis=0) if self.out_degrees else np.zeros(n)
        return EpisodeRecord(reward=self.ret, accuracy=float(info["accuracy"]), tokens=int(info["team_tokens"]),
                             calls=self.calls, rounds=len(self.density),
                             density=float(np.mean(self.density)) if self.density else 0.0,
                             out_degree=tuple(float(d) for d in degrees))


def play_episode(env: gymnasium.Env, controller: Controller, seed: int, options: dict | None = None) -> EpisodeRecord:
    """Play one episode of ``controller`` on ``env`` from ``env.reset(seed=seed, options=options)``."""
    observation, info = env.reset(seed=seed, options=options)
    controller.begin(observation, info)
    tally, done = _Tally(env_decision_calls(env)), False
    while not done:
        observation, reward, done, _, info = env.step(controller.act(observation, info))
        tally.add(reward, info)
    controller.end(observation, float(reward), info)
    return tally.record(info)


async def aplay_episode(env: Any, controller: Controller, seed: int, options: dict | None = None) -> EpisodeRecord:
    """:func:`play_episode` as a coroutine on an orchestrator env's ``astep``: several episodes
    (one env and one controller copy each) then share one event loop and one LLM server."""
    observation, info = env.reset(seed=seed, options=options)
    controller.begin(observation, info)
    tally, done = _Tally(env_decision_calls(env)), False
    while not done:
        observation, reward, done, _, info = await env.astep(controller.act(observation, info))
        tally.add(reward, info)
    controller.end(observation, float(reward), info)
    return tally.record(info)


class CallCounter(gymnasium.Wrapper):
    """Counts what the episodes played through it spend: episodes (resets), LLM calls (agents'
    per step + the decision node's per finished episode, none where the team decides
    by a vote or one agent's answer) and team tokens (at each episode's end)."""

    def __init__(self, env: gymnasium.Env):
        super().__init__(env)
        self.report = TrainingSpend()
        self.decision_calls = env_decision_calls(env)  # 0 where the team decides without the decision node

    def reset(self, **kwargs):
        self.report.episodes += 1
        return self.env.reset(**kwargs)

    def step(self, action):
        observation, reward, terminated, truncated, info = self.env.step(action)
        self.report.calls += int(np.sum(info["calls"])) + int(bool(terminated)) * self.decision_calls
        if terminated:
            self.report.tokens += int(info["team_tokens"])
        return observation, reward, terminated, truncated, info


def train_counted(controller: Controller, make_env: Callable[[str], gymnasium.Env], episodes: int, seed: int,
                  progress: bool = False) -> TrainingSpend:
    """Train ``controller`` for ``episodes`` on an env of its mode from ``make_env(mode)`` and return
    what it spent, as counted by :class:`CallCounter` (not as the controller says). A controller
    that trains on another front-end of the same team (QMIX: the PettingZoo env) plays none of
    this env's episodes; then its own report (from its run's records) is returned."""
    if not controller.trainable or episodes <= 0:
        return TrainingSpend()
    env = CallCounter(make_env(controller.mode))
    try:
        reported = controller.train(env, int(episodes), int(seed), progress)
    finally:
        env.close()
    if env.report.episodes == 0 and isinstance(reported, TrainingSpend):
        return reported
    return env.report
