"""Puppeteer (paper 004, "Multi-Agent Collaboration via Evolving Orchestration"): a central policy
picks which agent speaks next, trained with REINFORCE on a cost-aware return.

Method, with the paper's place for each part:

* Sequential orchestration (Sec. 2.1, Eqs. 1-4). The env runs in ``mode="next_agent"``: at step t
  the policy picks ``a_t`` in ``{0..N-1, N}``; agent k < N speaks alone and is shown the latest
  output of every agent that has spoken (the env's recall edges: the global state ``S_t`` the
  paper's agents read), k = N is the Terminator: the decision node aggregates and answers (the
  paper's majority vote F_agg). The env's ``rounds`` is the step cap (the paper's "episode
  length 4", Sec. 3 setup: :data:`ENV_ROUNDS`); at the cap the episode ends whatever was picked.
* State (Eq. 1, ``S_t`` and ``tau``): the task embedding ``obs["task"]``, the per-agent features
  ``obs["agents"]`` (role, persona, tokens, degrees, agreement, confidence, verdict, has run, was
  active), a hashed text embedding of the outputs so far (``info["outputs"]``' texts in agent order,
  :class:`topo_env.frontends.encoders.HashedNgramEncoder`) and the step fraction ``t / phi``.
* Policy: the released code's MLP (``MLP_PolicyNetwork``: 512-128-32, ReLU) with a softmax over
  the N + 1 actions.
* Reward (Eq. 6): ``R_T = r - lambda C_T``, ``R_t = gamma R_{t+1} - lambda C_t`` with the step cost
  ``C_t = F_t log(1 + t / phi)``, t = 1..T the step index, lambda 0.1, gamma 0.99 (Sec. 3 setup),
  ``phi`` the maximum step budget (= the env's step cap). ``r`` is task success (Sec. 2.2: r in
  {0, 1} for tasks with ground truth): the env's ``info["accuracy"]`` (``terminal_reward=
  "accuracy"``); ``"env"`` uses the env's Eq. 12 episode reward instead, which charges the tokens a
  second time. F is "FLOPs or token-level metrics": here the tokens the step spent (the team-token
  increase of the step, which on the last step includes the decision node's answer) divided by
  ``token_scale`` (10,000 = the env's ``max_tokens``, the token unit of Eq. 12; the released code
  divides by 100,000 for its large-model token counts).
* Optimisation (Eq. 5): REINFORCE with per-step reward-to-go (the released code's
  ``calculate_returns``), loss ``-sum_t log pi(a_t | S_t) R_t - beta sum_t H(pi(. | S_t))`` averaged
  over the episodes of one update; Adam, lr 1e-4 and one episode per update (released
  ``config/policy.json``: ``learning_rate`` 1e-4, ``sample_size`` 1); no baseline (neither the
  paper nor the code has one).
* Graph folding (Sec. 2.1 "when this episode is restored through folding ... a directed graph with
  agents as nodes and orchestration partial order relations as edges"; released
  ``GraphReasoningPath.step`` adds a dependency from the previous action to the next): the
  activation sequence ``a_1..a_T`` (stop excluded) folds into the graph with an edge
  ``a_t -> a_{t+1}`` for each consecutive pair (``a_t``'s output reaches ``a_{t+1}``); an agent
  that speaks twice in a row gives a self-loop (Fig. 5's "single agent handling continuous
  reasoning"). :func:`fold_metrics` gives its density (distinct non-self-loop edges / N(N - 1), the
  env's ``info["density"]`` convention) and its number of simple cycles (``networkx.simple_cycles``,
  self-loops included); Sec. 3.3 reports both (Fig. 6) without defining them formally.

Deviations from the paper (and why):

* State encoder: a 64-d hashed n-gram embedding of the outputs' texts plus the env's structured
  features stands in for the last hidden state of the frozen 70B reward model
  (Llama-3.1-Nemotron-70B-Reward) over the dialogue history: no such model runs here.
* One reasoning path per episode: the paper explores up to 3 parallel paths (the released code
  forks a path for every agent above a probability threshold); the env plays one trajectory.
  Actions are sampled from the policy in training (REINFORCE is on-policy) and, by default, in
  evaluation too (``eval_policy="sample"``, draws from the controller's generator): the trained
  policy stays stochastic at lr 1e-4, and on mmlu_pro its samples scored higher than its most
  probable action (``"greedy"``, the released threshold rule's top choice on a single path),
  which tends to repeat one agent to the step cap.
* Entropy bonus weight: the released code subtracts the plain sum of the step entropies (weight
  1), which at lr 1e-4 holds the policy near uniform on this team's small reward differences;
  ``entropy_coef`` defaults to 0.01.
* The released code's reward factors (terminator +0.5, web search -1.5) and its terminal
  ``r +- 0.5 C`` are not in the paper; Eq. 6 is followed as written.

Bad input: an ``info["outputs"]`` entry that is not a dict with a string ``"text"`` is logged and
read as empty text; a policy whose probabilities are not finite (a diverged network) is logged
and acts uniformly at random from the controller's generator, so an episode never crashes.
"""
from __future__ import annotations

import logging
import math
import numbers
from dataclasses import dataclass
from typing import Sequence

import gymnasium
import networkx as nx
import numpy as np
import torch
from torch import nn

from controllers.base import (NetworkController, TrainingSpend, config_choice, config_from_dict, config_integer,
                              config_number, train_seed)
from topo_env.frontends.encoders import make_encoder

logger = logging.getLogger(__name__)

TRAIN_EPISODES: int = 4000
"""The paper states no episode budget for the simulated setting (its appendix mentions 200
optimisation samples per task set, with LLM agents); 4,000 episodes is the QMIX default's budget
(configs/default.yaml), so both learners see the same number of training tasks, and fits in
about 30 s on the simulated team."""

ENV_ROUNDS: int | None = 4
"""The step cap of the next_agent env: the paper's "episode length 4" (Sec. 3, setup)."""

EVAL_POLICIES = ("greedy", "sample")
TERMINAL_REWARDS = ("accuracy", "env")


@dataclass(frozen=True)
class PuppeteerConfig:
    """Puppeteer's settings (paper defaults; see the module docstring)."""

    lam: float = 0.1  # Eq. 6 lambda, the accuracy/cost trade-off (Sec. 3 setup: 0.1)
    gamma: float = 0.99  # Eq. 6 discount (Sec. 3 setup: 0.99)
    phi: int | None = None  # Eq. 6 phi, the maximum step budget; None = the env's step cap (rounds)
    token_scale: float = 10000.0  # Eq. 6 F = step tokens / token_scale (the env's max_tokens)
    terminal_reward: str = "accuracy"  # Eq. 6 r: "accuracy" (task success, Sec. 2.2) or "env" (Eq. 12)
    lr: float = 1e-4  # Eq. 5's alpha; released config/policy.json learning_rate
    entropy_coef: float = 0.01  # entropy bonus weight (released code: 1, see deviations)
    episodes_per_update: int = 1  # Eq. 5's sample size N; released config/policy.json sample_size 1
    hidden: tuple[int, ...] = (512, 128, 32)  # released MLP_PolicyNetwork widths
    outputs_embed_dim: int = 64  # hashed text embedding of the outputs (stands in for the 70B encoder)
    eval_policy: str = "sample"  # outside training: "sample" (on-policy) or "greedy" (top action)

    @classmethod
    def from_dict(cls, d: dict | None) -> "PuppeteerConfig":
        """A config from a dict of field values; unknown keys or bad values raise a one-line
        ValueError naming the key and the fix."""
        return config_from_dict(cls, d, "puppeteer config", {
            "lam": config_number(0.0), "gamma": config_number(0.0, 1.0, low_open=True),
            "token_scale": config_number(0.0, low_open=True), "lr": config_number(0.0, low_open=True),
            "entropy_coef": config_number(0.0), "phi": config_integer(1, allow_none=True),
            "episodes_per_update": config_integer(1), "outputs_embed_dim": config_integer(8),
            "terminal_reward": config_choice(TERMINAL_REWARDS), "eval_policy": config_choice(EVAL_POLICIES),
            "hidden": _hidden_widths})


def _hidden_widths(h: object) -> tuple[int, ...]:
    """The ``hidden`` check: a non-empty list of positive integers, as a tuple."""
    if (not isinstance(h, (list, tuple)) or not h
            or any(isinstance(w, bool) or not isinstance(w, numbers.Integral) or w < 1 for w in h)):
        raise ValueError("set a non-empty list of positive integers")
    return tuple(int(w) for w in h)


# -- Eq. 6 ------------------------------------------------------------------------------------
def step_cost(flops: float, t: int, phi: float) -> float:
    """Eq. 6's ``C_t = F log(1 + t / phi)`` for step ``t`` (1-based) of a budget of ``phi`` steps."""
    return float(flops) * math.log1p(float(t) / float(phi))


def discounted_returns(costs: Sequence[float], r: float, lam: float, gamma: float) -> list[float]:
    """Eq. 6's returns for steps 1..T with step costs ``costs = [C_1, .., C_T]``:
    ``R_T = r - lam C_T`` and ``R_t = gamma R_{t+1} - lam C_t``. Empty costs give []."""
    returns = [0.0] * len(costs)
    following = None
    for i in range(len(costs) - 1, -1, -1):
        following = (float(r) if following is None else gamma * following) - lam * float(costs[i])
        returns[i] = following
    return returns


def reinforce_loss(log_probs: torch.Tensor, returns: torch.Tensor, entropies: torch.Tensor,
                   entropy_coef: float, n_episodes: int = 1) -> torch.Tensor:
    """Eq. 5 as a loss to minimise: ``-(sum_t log pi(a_t|S_t) R_t + beta sum_t H_t) / n_episodes``
    over the steps (T,) of ``n_episodes`` episodes; ``returns`` carry no gradient."""
    return -((log_probs * returns.detach()).sum() + entropy_coef * entropies.sum()) / float(n_episodes)


# -- graph folding (Sec. 2.1, Sec. 3.3) ---------------------------------------------------------
def folded_graph(sequence: Sequence[int], n_agents: int) -> nx.DiGraph:
    """The activation sequence folded into a directed graph over agents 0..n_agents-1: an edge
    ``a_t -> a_{t+1}`` (a_t's output reaches a_{t+1}) for every consecutive pair; a repeat gives
    a self-loop. Entries >= n_agents (the stop action) end the sequence."""
    graph = nx.DiGraph()
    graph.add_nodes_from(range(n_agents))
    agents: list[int] = []
    for a in sequence:
        if not 0 <= int(a) < n_agents:
            break
        agents.append(int(a))
    graph.add_edges_from(zip(agents[:-1], agents[1:]))
    return graph


def fold_metrics(sequence: Sequence[int], n_agents: int) -> tuple[float, int]:
    """(density, cycles) of :func:`folded_graph`: distinct non-self-loop edges / N(N - 1), and
    the number of simple cycles (self-loops count as cycles of length 1)."""
    graph = folded_graph(sequence, n_agents)
    edges = sum(1 for u, v in graph.edges if u != v)
    density = edges / (n_agents * (n_agents - 1)) if n_agents > 1 else 0.0
    return density, sum(1 for _ in nx.simple_cycles(graph))


# -- policy -------------------------------------------------------------------------------------
class PolicyNetwork(nn.Module):
    """State (D,) or (B, D) -> logits over the N + 1 actions (agents, then stop)."""

    def __init__(self, input_dim: int, n_actions: int, hidden: Sequence[int], generator: torch.Generator):
        super().__init__()
        widths = [int(input_dim), *[int(w) for w in hidden], int(n_actions)]
        layers: list[nn.Module] = []
        for i, (fan_in, fan_out) in enumerate(zip(widths[:-1], widths[1:])):
            # skip_init + a local generator: torch's default init, without touching its global RNG
            linear = torch.nn.utils.skip_init(nn.Linear, fan_in, fan_out)
            bound = 1.0 / math.sqrt(fan_in)
            with torch.no_grad():
                nn.init.uniform_(linear.weight, -bound, bound, generator=generator)
                nn.init.uniform_(linear.bias, -bound, bound, generator=generator)
            layers.append(linear)
            if i < len(widths) - 2:
                layers.append(nn.ReLU())
        self.layers = nn.Sequential(*layers)

    def forward(self, state: torch.Tensor) -> torch.Tensor:
        return self.layers(state)


class PuppeteerController(NetworkController):
    """Puppeteer on the next_agent env: ``act`` returns an agent index (N = stop).

    After each episode ``last_sequence`` holds the actions taken (stop included when chosen) and
    :meth:`last_fold` its folded graph's (density, cycles)."""

    name = "puppeteer"
    mode = "next_agent"
    trainable = True

    def __init__(self, n_agents: int, rounds: int, seed: int, config: PuppeteerConfig | None = None):
        self.n_agents, self.rounds, self.seed = int(n_agents), int(rounds), int(seed)
        self.config = cfg = config or PuppeteerConfig()
        self.phi = float(cfg.phi if cfg.phi is not None else self.rounds)
        self.encoder = make_encoder("hashed", cfg.outputs_embed_dim)
        self._rng = np.random.default_rng([self.seed, 0])
        self._torch_generator = torch.Generator().manual_seed(self.seed)
        self.policy: PolicyNetwork | None = None  # built on the first observation (its size)
        self.optimizer: torch.optim.Optimizer | None = None
        self._input_dim: int | None = None
        self.last_sequence: list[int] = []
        self.last_costs: list[float] = []  # the last training episode's C_1..C_T (Eq. 6)
        self.last_returns: list[float] = []  # and its R_1..R_T
        self._step = 0

    # -- state ----------------------------------------------------------------------------
    def outputs_text(self, info: dict) -> str:
        """The outputs so far (``info["outputs"]``), their texts joined in agent order."""
        texts = []
        for k, output in enumerate(info.get("outputs") or []):
            if output is None:
                continue
            text = output.get("text") if isinstance(output, dict) else None
            if not isinstance(text, str):
                logger.warning("info['outputs'][%d] has no string 'text' (%r); read as empty", k, output)
                continue
            texts.append(text)
        return "\n".join(texts)

    def state_vector(self, observation: dict, info: dict, step: int) -> np.ndarray:
        """S_t as one float32 vector: task embedding, agents' features (flattened), the
        outputs' hashed embedding and ``step / phi``."""
        task = np.asarray(observation["task"], dtype=np.float32).reshape(-1)
        agents = np.asarray(observation["agents"], dtype=np.float32).reshape(-1)
        outputs = self.encoder.encode(self.outputs_text(info)).astype(np.float32)
        return np.concatenate([task, agents, outputs, np.array([step / self.phi], dtype=np.float32)])

    def _ensure_policy(self, input_dim: int) -> None:
        if self.policy is not None:
            if input_dim != self._input_dim:
                raise ValueError(f"state has {input_dim} features, the policy was built for {self._input_dim}: "
                                 "use one env layout (n_agents, embed_dim) per controller")
            return
        self._input_dim = input_dim
        self.policy = PolicyNetwork(input_dim, self.n_agents + 1, self.config.hidden, self._torch_generator)
        self.optimizer = torch.optim.Adam(self.policy.parameters(), lr=self.config.lr)

    def distribution(self, state: np.ndarray) -> torch.distributions.Categorical:
        """pi(. | S_t) over the N + 1 actions."""
        self._ensure_policy(int(state.shape[0]))
        logits = self.policy(torch.from_numpy(state).unsqueeze(0)).squeeze(0)
        return torch.distributions.Categorical(logits=logits, validate_args=False)

    def _choose(self, probs: np.ndarray, sample: bool) -> int:
        if not np.all(np.isfinite(probs)) or probs.sum() <= 0:
            logger.warning("policy probabilities are not finite (%s); acting uniformly at random", probs)
            return int(self._rng.integers(self.n_agents + 1))
        if not sample:
            return int(np.argmax(probs))
        probs = probs / probs.sum()
        return int(self._rng.choice(len(probs), p=probs))

    # -- Controller interface -------------------------------------------------------------
    def begin(self, observation: dict, info: dict) -> None:
        self.last_sequence = []
        self._step = 0

    def act(self, observation: dict, info: dict) -> int:
        self._step += 1
        state = self.state_vector(observation, info, self._step - 1)
        with torch.no_grad():
            probs = self.distribution(state).probs.numpy().astype(np.float64)
        action = self._choose(probs, sample=self.config.eval_policy == "sample")
        self.last_sequence.append(action)
        return action

    def last_fold(self) -> tuple[float, int]:
        """(density, cycles) of the last episode's folded activation sequence."""
        return fold_metrics(self.last_sequence, self.n_agents)

    def terminal_reward(self, reward: float, info: dict) -> float:
        """Eq. 6's r: task success (``info["accuracy"]``) or the env's Eq. 12 episode reward."""
        return float(info["accuracy"]) if self.config.terminal_reward == "accuracy" else float(reward)

    def play_training_episode(self, env: gymnasium.Env, seed: int) -> tuple[torch.Tensor, float, dict]:
        """One on-policy episode from ``env.reset(seed, split=train)``: its REINFORCE loss (one
        episode's, before averaging), the episode's env return and the last info."""
        observation, info = env.reset(seed=seed, options={"split": "train"})
        self.begin(observation, info)
        log_probs, entropies, costs = [], [], []
        tokens_before, env_return, done, t = int(info["team_tokens"]), 0.0, False, 0
        reward = 0.0
        while not done:
            t += 1
            dist = self.distribution(self.state_vector(observation, info, t - 1))
            action = self._choose(dist.probs.detach().numpy().astype(np.float64), sample=True)
            self.last_sequence.append(action)
            log_probs.append(dist.log_prob(torch.tensor(action)))
            entropies.append(dist.entropy())
            observation, reward, done, _, info = env.step(action)
            env_return += float(reward)
            tokens = int(info["team_tokens"])
            costs.append(step_cost((tokens - tokens_before) / self.config.token_scale, t, self.phi))
            tokens_before = tokens
        self.end(observation, float(reward), info)
        returns = discounted_returns(costs, self.terminal_reward(env_return, info), self.config.lam,
                                     self.config.gamma)
        self.last_costs, self.last_returns = costs, returns
        loss = reinforce_loss(torch.stack(log_probs), torch.tensor(returns, dtype=torch.float32),
                              torch.stack(entropies), self.config.entropy_coef)
        return loss, env_return, info

    def train(self, env: gymnasium.Env, episodes: int, seed: int, progress: bool = False) -> TrainingSpend:
        """REINFORCE on ``episodes`` train-split episodes (reset seeds :func:`train_seed`), one
        Adam step per ``episodes_per_update`` episodes."""
        if not isinstance(env.action_space, gymnasium.spaces.Discrete):  # next_agent: Discrete(N + 1)
            raise ValueError("PuppeteerController.train needs an orchestrator env with mode='next_agent'")
        self._rng = np.random.default_rng([self.seed, int(seed), 1])
        batch = self.config.episodes_per_update
        pending: list[torch.Tensor] = []
        report = TrainingSpend()
        for k in range(int(episodes)):
            loss, _, info = self.play_training_episode(env, train_seed(seed, k))
            report.episodes += 1
            report.calls += len(self.last_sequence) + 1
            report.tokens += int(info["team_tokens"])
            pending.append(loss)
            if len(pending) == batch or k == episodes - 1:
                self.optimizer.zero_grad()
                (torch.stack(pending).sum() / len(pending)).backward()
                self.optimizer.step()
                pending = []
            if progress and (k + 1) % 500 == 0:
                logger.info("puppeteer training: %d / %d episodes", k + 1, episodes)
        self._rng = np.random.default_rng([self.seed, 0])
        return report


def build(n_agents: int, rounds: int, seed: int, config: dict | None = None) -> PuppeteerController:
    """The leaderboard's constructor: a Puppeteer for ``n_agents`` agents on a next_agent env of
    ``rounds`` steps, its random draws seeded from ``seed``; ``config``: :class:`PuppeteerConfig` keys."""
    return PuppeteerController(n_agents, rounds, seed, PuppeteerConfig.from_dict(config))
