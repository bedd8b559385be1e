"""A central controller trained with PPO on the orchestrator env's batched form (CleanRL's ``ppo.py``).

    from controllers.central_ppo import play_held_out, train_central_ppo
    config = EnvConfig.from_dict({"profile": "mmlu_pro", "rounds": 2})
    controller = train_central_ppo(config, seed=0, frames=300_000)      # 300,000 env steps, about a minute
    scores = play_held_out(controller, config, seed=0, episodes=5000)   # {"reward", "accuracy", "team_tokens"}: (E,)

One controller writes every round's graph (:mod:`topo_env.frontends.orchestrator_env`, ``mode="graph"``): it
sees the task (embedding and log length, (E + 1,)), the agents' features (N, F), last round's adjacency (N, N)
and the round, flattened into one vector with the round one-hot (T + 1,); it returns N(N - 1) off-diagonal
``adjacency`` bits, ``active`` (N), ``verify`` (N) and ``halt`` (1), each an independent Bernoulli of an MLP
(no recalls: ``recall`` is all zeros). Greedy play sets each bit whose probability is above 0.5.

Training (:func:`train_central_ppo`) follows CleanRL's ``cleanrl/ppo.py`` top to bottom: rollouts of
``num_steps`` steps on :class:`~topo_env.frontends.orchestrator_vector_env.OrchestratorVectorEnv` (``num_envs``
rows of the simulated team, train split), GAE, the clipped surrogate, the clipped value loss, an entropy bonus,
``update_epochs`` epochs of ``num_minibatches`` minibatches, Adam with the learning rate annealed to 0 and the
gradient norm clipped. Its defaults are CleanRL's (:class:`CentralPPOConfig`), except the rollout's shape.

NEXT_STEP autoreset (Gymnasium 1.x's default). The step after a row's episode ended restarts that row: the
action is ignored, the reward is 0 and the observation is the next episode's first. That step is no
transition of the policy: it is stored with ``valid = 0`` and left out of the losses, and the step that ended
the episode does not bootstrap (``dones = 1``), so nothing of the next episode reaches the previous one's
advantages (:func:`gae`).

Units. ``frames`` counts env steps summed over rows (BenchMARL's frames, CleanRL's ``global_step``), restart
steps included, rounded up to whole rollouts of ``num_envs * num_steps`` frames. An episode of T rounds takes
at most T + 1 frames (T rounds and the restart), fewer when the controller halts: :func:`frames_for_episodes`
converts the leaderboard's budget in episodes to frames that way.

Seeding. ``seed`` fixes everything: the network's initialisation (a local ``torch.Generator``), the action
samples (another), the minibatch shuffles (``numpy.random.default_rng([seed, 2])``) and the env's episodes
(``reset(seed=training_env_seed(seed, 0))``: row b plays the train-split episodes of env seed
``training_env_seed(seed, 0) + b`` and the ones its generator continues to). No global generator is read or
set, so the same seed on the same machine gives the same parameters.

Scoring (:func:`play_held_out`): row b of a batch plays the eval-split episode of env seed
``held_out_seed(seed) + b`` (its first episode after ``reset``), the episode the PettingZoo env and
:func:`learners.evaluation.score_on_simulator` play for that seed, so the rewards pair episode by episode.

As a leaderboard method (``ppo_central``, :class:`CentralPPOController`) it plays the one-episode orchestrator
env greedily; :meth:`CentralPPOController.train` trains on the simulated team of the comparison's env config
(the env it is handed is not played). An LLM team is a one-line ValueError: the PPO needs the batch simulator.
"""
from __future__ import annotations

import logging
import math
import time
from dataclasses import asdict, dataclass, replace
from typing import Any

import gymnasium
import numpy as np
import torch
from torch import nn

from controllers.base import (NetworkController, TrainingSpend, config_flag, config_from_dict, config_integer,
                              config_number)
from topo_env.engine.backend_registry import BATCH_SIMULATOR, backend_offers
from topo_env.engine.seeding import held_out_seed, training_env_seed
from topo_env.frontends.env_config import EnvConfig
from topo_env.frontends.orchestrator_vector_env import OrchestratorVectorEnv

logger = logging.getLogger(__name__)

TRAIN_EPISODES: int = 100_000
"""The leaderboard's budget: 100,000 train-split episodes (300,000 frames at T = 2), about a minute and a half
of training on the simulated team on 2 busy cores. The other learned graph writers train on 4,000-7,040
episodes one at a time; PPO on the batch simulator takes far more episodes for the same seconds."""
ENV_ROUNDS: int | None = None  # the profile's rounds
BUILD_TAKES_ENV_CONFIG: bool = True  # the registry hands build() the comparison's env config (training needs it)
INIT_STREAM, SAMPLE_STREAM, SHUFFLE_STREAM = 0, 1, 2  # the run's seed streams (see Seeding above)


@dataclass(frozen=True)
class CentralPPOConfig:
    """PPO's settings: CleanRL's ``ppo.py`` defaults, except the rollout's shape.

    ``num_envs`` 256 (CleanRL: 4): the vector env steps 256 rows in about twice the time of 64 (11,000
    against 5,300 frames/s here), and an episode gives only T + 1 frames, so width buys episodes.
    ``num_steps`` 8 (CleanRL: 128): an episode lasts at most T + 1 = 3 steps (4 at T = 3), so 8 steps hold
    two or more whole episodes per row, and a rollout of 2,048 frames (~900 episodes) leaves ~150 rollouts
    (2,300 minibatch steps) in the leaderboard's budget. ``hidden`` 64: CleanRL's two tanh layers of 64,
    separate for the actor and the critic. ``torch_threads`` 1: with more, torch's threads wait on each
    other at every small matrix product (15x slower on 2 busy cores)."""

    num_envs: int = 256
    num_steps: int = 8
    learning_rate: float = 2.5e-4
    anneal_lr: bool = True
    gamma: float = 0.99
    gae_lambda: float = 0.95
    num_minibatches: int = 4
    update_epochs: int = 4
    norm_adv: bool = True
    clip_coef: float = 0.2
    clip_vloss: bool = True
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    target_kl: float | None = None
    hidden: int = 64
    torch_threads: int = 1  # torch's CPU threads while training (restored after): 1 is fastest for a small MLP

    @property
    def batch_size(self) -> int:
        """Frames per rollout: ``num_envs * num_steps``."""
        return self.num_envs * self.num_steps

    @classmethod
    def from_dict(cls, values: dict | None) -> "CentralPPOConfig":
        """A config from field values; an unknown key or a bad value is a one-line ValueError naming it."""
        unit, positive = config_number(0.0, 1.0), config_number(0.0, low_open=True)
        cfg = config_from_dict(cls, values, "central ppo config", {
            "num_envs": config_integer(1), "num_steps": config_integer(1), "learning_rate": positive,
            "anneal_lr": config_flag, "gamma": unit, "gae_lambda": unit, "num_minibatches": config_integer(1),
            "update_epochs": config_integer(1), "norm_adv": config_flag, "clip_coef": positive,
            "clip_vloss": config_flag, "ent_coef": config_number(0.0), "vf_coef": config_number(0.0),
            "max_grad_norm": positive, "target_kl": _optional_positive, "hidden": config_integer(1),
            "torch_threads": config_integer(1)})
        if cfg.num_minibatches > cfg.batch_size:
            raise ValueError(f"central ppo config: num_minibatches={cfg.num_minibatches} exceeds the rollout's "
                             f"{cfg.batch_size} frames (num_envs * num_steps); set fewer minibatches")
        return cfg


def _optional_positive(v: Any) -> float | None:
    """The ``target_kl`` check: None (no early stop) or a finite number > 0."""
    return None if v is None else config_number(0.0, low_open=True)(v)


def frames_for_episodes(episodes: int, rounds: int) -> int:
    """Frames that hold ``episodes`` episodes of ``rounds`` rounds: ``episodes * (rounds + 1)`` (each
    episode's rounds and NEXT_STEP's restart step; an episode that halts early takes fewer)."""
    return int(episodes) * (int(rounds) + 1)


# -- observations and actions ----------------------------------------------------------------
def flatten_observation(obs: dict[str, np.ndarray], rounds: int) -> torch.Tensor:
    """(B, D) float32 features of batched observations: task (E + 1), agents (N * F), adjacency (N * N) and
    the round one-hot (T + 1), in that order."""
    b = len(obs["round"])
    one_hot = np.zeros((b, int(rounds) + 1), dtype=np.float32)
    one_hot[np.arange(b), np.minimum(np.asarray(obs["round"]), rounds)] = 1.0
    parts = [np.asarray(obs[k], dtype=np.float32).reshape(b, -1) for k in ("task", "agents", "adjacency")]
    return torch.from_numpy(np.concatenate([*parts, one_hot], axis=1))


def action_bits(n_agents: int) -> int:
    """K, the policy's Bernoulli outputs: N(N - 1) off-diagonal edges, N active, N verify, 1 halt."""
    return n_agents * (n_agents - 1) + 2 * n_agents + 1


def bits_to_action(bits: np.ndarray, n_agents: int) -> dict[str, np.ndarray]:
    """A batched ``"graph"`` action from (B, K) 0/1 bits (:func:`action_bits`' order; adjacency row-major
    without the diagonal); ``recall`` all zeros. The dtypes are the vector env's action space's."""
    n, b = n_agents, len(bits)
    bits = np.asarray(bits).astype(np.int8)
    edges = n * (n - 1)
    adjacency = np.zeros((b, n, n), dtype=np.int8)
    adjacency[:, ~np.eye(n, dtype=bool)] = bits[:, :edges]
    return {"adjacency": adjacency, "active": bits[:, edges:edges + n].copy(),
            "verify": bits[:, edges + n:edges + 2 * n].copy(), "halt": bits[:, -1].astype(np.int64),
            "recall": np.zeros((b, n, n), dtype=np.int8)}


# -- the network ------------------------------------------------------------------------------
def _layer(fan_in: int, fan_out: int, std: float, generator: torch.Generator) -> nn.Linear:
    """CleanRL's ``layer_init``: orthogonal weights of gain ``std``, zero biases (from ``generator``)."""
    layer = torch.nn.utils.skip_init(nn.Linear, fan_in, fan_out)
    with torch.no_grad():
        nn.init.orthogonal_(layer.weight, std, generator=generator)
        layer.bias.zero_()
    return layer


def _mlp(fan_in: int, hidden: int, fan_out: int, std: float, generator: torch.Generator) -> nn.Sequential:
    return nn.Sequential(_layer(fan_in, hidden, math.sqrt(2), generator), nn.Tanh(),
                         _layer(hidden, hidden, math.sqrt(2), generator), nn.Tanh(),
                         _layer(hidden, fan_out, std, generator))


class CentralPolicy(nn.Module):
    """CleanRL's ``Agent``: an actor (D -> K Bernoulli logits) and a critic (D -> 1), two tanh layers each."""

    def __init__(self, input_dim: int, n_bits: int, hidden: int, generator: torch.Generator):
        super().__init__()
        self.critic = _mlp(input_dim, hidden, 1, 1.0, generator)
        self.actor = _mlp(input_dim, hidden, n_bits, 0.01, generator)

    def value(self, x: torch.Tensor) -> torch.Tensor:
        """(B,) state values."""
        return self.critic(x).squeeze(-1)

    def act(self, x: torch.Tensor, bits: torch.Tensor | None = None, generator: torch.Generator | None = None
            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(bits, log-prob, entropy, value): ``bits`` (B, K) sampled from ``generator`` if not given; the
        log-probability and entropy of the factorised Bernoulli sum over the K bits."""
        logits = self.actor(x)
        if bits is None:
            bits = torch.bernoulli(torch.sigmoid(logits), generator=generator)
        dist = torch.distributions.Bernoulli(logits=logits, validate_args=False)
        return bits, dist.log_prob(bits).sum(-1), dist.entropy().sum(-1), self.value(x)


# -- GAE --------------------------------------------------------------------------------------
def gae(rewards: torch.Tensor, values: torch.Tensor, dones: torch.Tensor, valid: torch.Tensor,
        next_value: torch.Tensor, gamma: float, gae_lambda: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantages and returns (S, B) of a rollout under NEXT_STEP autoreset. ``dones[t]``: step t ended the
    row's episode (no bootstrap past it); ``valid[t]``: step t was a transition of the policy (0 on a
    restart step, whose advantage and return are set to 0 and which the losses leave out); ``next_value``
    (B,): the value of the observation after the last step."""
    steps = rewards.shape[0]
    advantages = torch.zeros_like(rewards)
    last = torch.zeros_like(next_value)
    for t in reversed(range(steps)):
        following = next_value if t == steps - 1 else values[t + 1]
        nonterminal = 1.0 - dones[t]
        delta = rewards[t] + gamma * following * nonterminal - values[t]
        last = (delta + gamma * gae_lambda * nonterminal * last) * valid[t]
        advantages[t] = last
    return advantages, (advantages + values) * valid


# -- training ---------------------------------------------------------------------------------
def train_central_ppo(config: EnvConfig, seed: int, frames: int, progress: bool = False,
                      **hyper: Any) -> "CentralPPOController":
    """PPO (CleanRL's ``ppo.py``) for ``frames`` frames on the simulated team of ``config`` (train split);
    ``hyper``: :class:`CentralPPOConfig` keys. Returns the trained controller; its ``history`` holds one
    dict of figures per rollout. Bad settings are a one-line ValueError."""
    args = CentralPPOConfig.from_dict(hyper)
    if isinstance(frames, bool) or not isinstance(frames, (int, np.integer)) or frames < 1:
        raise ValueError(f"frames={frames!r}: give a positive integer (env steps summed over rows)")
    envs = OrchestratorVectorEnv(args.num_envs, replace(config, split="train"), mode="graph")
    threads = torch.get_num_threads()
    torch.set_num_threads(args.torch_threads)
    try:
        return _ppo(envs, CentralPPOController(config, seed, args), -(-int(frames) // args.batch_size), progress)
    finally:
        torch.set_num_threads(threads)
        envs.close()


def _ppo(envs: OrchestratorVectorEnv, controller: "CentralPPOController", iterations: int,
         progress: bool) -> "CentralPPOController":
    """CleanRL's ``ppo.py`` loop: ``iterations`` rollouts of ``envs``, each followed by its updates of
    ``controller``'s policy (settings: ``controller.ppo``; seeds: ``controller.seed``)."""
    args, seed, config = controller.ppo, controller.seed, controller.config
    n, rounds, steps, rows = config.n_agents, config.rounds, args.num_steps, args.num_envs
    sampler = _torch_generator(seed, SAMPLE_STREAM)
    shuffler = np.random.default_rng([int(seed), SHUFFLE_STREAM])

    next_obs_np, _ = envs.reset(seed=training_env_seed(seed, 0), options={"split": "train"})
    next_obs = flatten_observation(next_obs_np, rounds)
    agent = controller._ensure_policy(next_obs.shape[1])
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)
    # rollout storage
    obs = torch.zeros((steps, rows, next_obs.shape[1]))
    actions = torch.zeros((steps, rows, action_bits(n)))
    logprobs, rewards, dones, valid, values = (torch.zeros((steps, rows)) for _ in range(5))
    next_done = torch.zeros(rows)  # the row's episode ended on the last step: its next step restarts it
    episode_return, started = np.zeros(rows), time.perf_counter()

    for iteration in range(iterations):
        if args.anneal_lr:
            optimizer.param_groups[0]["lr"] = (1.0 - iteration / iterations) * args.learning_rate
        returns_seen, accuracy_seen = [], []
        for step in range(steps):
            obs[step], valid[step] = next_obs, 1.0 - next_done
            with torch.no_grad():
                bits, logprob, _, value = agent.act(next_obs, generator=sampler)
            actions[step], logprobs[step], values[step] = bits, logprob, value
            next_obs_np, reward, terminated, truncated, infos = envs.step(bits_to_action(bits.numpy(), n))
            ended = np.logical_or(terminated, truncated)
            rewards[step] = torch.as_tensor(reward, dtype=torch.float32)
            dones[step] = next_done = torch.as_tensor(ended, dtype=torch.float32)
            next_obs = flatten_observation(next_obs_np, rounds)
            episode_return += reward
            returns_seen.extend(episode_return[ended])
            accuracy_seen.extend(infos["accuracy"][ended])
            episode_return[ended] = 0.0
            controller.episodes_trained += int(ended.sum())

        with torch.no_grad():
            advantages, returns = gae(rewards, values, dones, valid, agent.value(next_obs), args.gamma,
                                      args.gae_lambda)

        # flatten the batch, leaving out the restart steps
        keep = torch.nonzero(valid.reshape(-1), as_tuple=True)[0]
        b_obs = obs.reshape(-1, obs.shape[-1])[keep]
        b_actions = actions.reshape(-1, actions.shape[-1])[keep]
        b_logprobs, b_advantages, b_returns, b_values = (x.reshape(-1)[keep]
                                                        for x in (logprobs, advantages, returns, values))
        batch = len(keep)
        minibatch = max(1, batch // args.num_minibatches)
        clipfracs, nothing = [], torch.tensor(math.nan)
        pg_loss = v_loss = entropy_loss = approx_kl = nothing  # a rollout of restarts only: no update
        for _ in range(args.update_epochs):
            order = shuffler.permutation(batch)
            for start in range(0, batch, minibatch):
                mb = torch.from_numpy(order[start:start + minibatch])
                _, newlogprob, entropy, newvalue = agent.act(b_obs[mb], b_actions[mb])
                logratio = newlogprob - b_logprobs[mb]
                ratio = logratio.exp()
                with torch.no_grad():
                    approx_kl = ((ratio - 1) - logratio).mean()
                    clipfracs.append(((ratio - 1.0).abs() > args.clip_coef).float().mean().item())
                mb_advantages = b_advantages[mb]
                if args.norm_adv and len(mb) > 1:
                    mb_advantages = (mb_advantages - mb_advantages.mean()) / (mb_advantages.std() + 1e-8)
                # policy loss: the clipped surrogate
                pg_loss = torch.max(-mb_advantages * ratio,
                                    -mb_advantages * torch.clamp(ratio, 1 - args.clip_coef, 1 + args.clip_coef)).mean()
                # value loss
                if args.clip_vloss:
                    v_clipped = b_values[mb] + torch.clamp(newvalue - b_values[mb], -args.clip_coef, args.clip_coef)
                    v_loss = 0.5 * torch.max((newvalue - b_returns[mb]) ** 2, (v_clipped - b_returns[mb]) ** 2).mean()
                else:
                    v_loss = 0.5 * ((newvalue - b_returns[mb]) ** 2).mean()
                entropy_loss = entropy.mean()
                loss = pg_loss - args.ent_coef * entropy_loss + v_loss * args.vf_coef
                optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
                optimizer.step()
            if args.target_kl is not None and approx_kl > args.target_kl:
                break

        controller.frames_trained += args.batch_size
        controller.history.append({
            "frames": controller.frames_trained, "episodes": controller.episodes_trained,
            "episodic_return": float(np.mean(returns_seen)) if returns_seen else math.nan,
            "accuracy": float(np.mean(accuracy_seen)) if accuracy_seen else math.nan,
            "learning_rate": optimizer.param_groups[0]["lr"], "policy_loss": pg_loss.item(),
            "value_loss": v_loss.item(), "entropy": entropy_loss.item(), "approx_kl": approx_kl.item(),
            "clipfrac": float(np.mean(clipfracs)) if clipfracs else math.nan,
            "explained_variance": _explained_variance(b_values.numpy(), b_returns.numpy()),
            "frames_per_second": controller.frames_trained / (time.perf_counter() - started)})
        if progress and (iteration + 1) % max(1, iterations // 20) == 0:
            logger.info("central ppo: %s", {k: round(v, 4) for k, v in controller.history[-1].items()})
    return controller


def _explained_variance(values: np.ndarray, returns: np.ndarray) -> float:
    """1 - Var(returns - values) / Var(returns) (NaN without transitions or without variance)."""
    var = float(np.var(returns)) if len(returns) else 0.0
    return math.nan if var == 0 else 1.0 - float(np.var(returns - values)) / var


def _torch_generator(seed: int, stream: int) -> torch.Generator:
    """A ``torch.Generator`` of the run's stream ``stream``, independent of the others and of torch's global one."""
    return torch.Generator().manual_seed(int(np.random.default_rng([int(seed), stream]).integers(2**62)))


# -- scoring ----------------------------------------------------------------------------------
def play_held_out(controller: Any, config: EnvConfig, seed: int, episodes: int,
                  chunk: int = 1024) -> dict[str, np.ndarray]:
    """``controller.act_batch`` (batched observations -> batched ``"graph"`` actions) on ``episodes``
    eval-split episodes: env seeds ``held_out_seed(seed) + k``, k < ``episodes``, ``chunk`` rows at a time,
    each row's first episode. Returns (E,) arrays ``reward`` (the episode's return), ``accuracy`` and
    ``team_tokens``, in episode order."""
    if isinstance(episodes, bool) or not isinstance(episodes, (int, np.integer)) or episodes < 1:
        raise ValueError(f"episodes={episodes!r}: give a positive integer")
    cfg, first = replace(config, split="eval"), held_out_seed(seed)
    out = {"reward": np.zeros(episodes), "accuracy": np.zeros(episodes), "team_tokens": np.zeros(episodes, np.int64)}
    for start in range(0, episodes, chunk):
        rows = min(chunk, episodes - start)
        envs = OrchestratorVectorEnv(rows, cfg, mode="graph")
        obs, _ = envs.reset(seed=first + start, options={"split": "eval"})
        live, total = np.ones(rows, dtype=bool), np.zeros(rows)
        while live.any():
            obs, reward, terminated, truncated, infos = envs.step(controller.act_batch(obs))
            total += np.where(live, reward, 0.0)
            ended = live & np.logical_or(terminated, truncated)
            k = start + np.flatnonzero(ended)
            out["accuracy"][k], out["team_tokens"][k] = infos["accuracy"][ended], infos["team_tokens"][ended]
            live &= ~ended
        out["reward"][start:start + rows] = total
        envs.close()
    return out


# -- the controller ---------------------------------------------------------------------------
class CentralPPOController(NetworkController):
    """The greedy policy of :func:`train_central_ppo` (``ppo_central``): ``act_batch`` for batched
    observations, ``act`` for the one-episode orchestrator env. Untrained, it plays a network initialised
    from ``seed``, built at the first observation (its width)."""

    name = "ppo_central"
    mode = "graph"
    trainable = True

    def __init__(self, config: EnvConfig, seed: int = 0, ppo: CentralPPOConfig | None = None):
        self.config, self.seed, self.ppo = config, int(seed), ppo or CentralPPOConfig()
        self.n_agents, self.rounds = config.n_agents, config.rounds
        self.policy: CentralPolicy | None = None
        self._input_dim: int | None = None
        self.history: list[dict[str, float]] = []
        self.frames_trained = self.episodes_trained = 0

    def _ensure_policy(self, input_dim: int) -> CentralPolicy:
        """The policy, built for ``input_dim`` features if there is none yet (initialised from the seed)."""
        if self.policy is None:
            self._input_dim = int(input_dim)
            self.policy = CentralPolicy(self._input_dim, action_bits(self.n_agents), self.ppo.hidden,
                                        _torch_generator(self.seed, INIT_STREAM))
        elif input_dim != self._input_dim:
            raise ValueError(f"observations have {input_dim} features, the policy was built for {self._input_dim}: "
                             "use one env layout (n_agents, rounds, embed_dim) per controller")
        return self.policy

    def act_batch(self, obs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Greedy ``"graph"`` actions (B, ...) for batched observations (B, ...): each bit = probability > 0.5."""
        x = flatten_observation(obs, self.rounds)
        with torch.no_grad():
            bits = self._ensure_policy(x.shape[1]).actor(x) > 0.0
        return bits_to_action(bits.numpy(), self.n_agents)

    def act(self, observation: dict, info: dict) -> dict[str, Any]:
        batched = {k: np.asarray(v)[None] for k, v in observation.items()}
        action = {k: v[0] for k, v in self.act_batch(batched).items()}
        action["halt"] = int(action["halt"])
        return action

    def train(self, env: gymnasium.Env, episodes: int, seed: int, progress: bool = False) -> TrainingSpend:
        """PPO for :func:`frames_for_episodes` ``(episodes, rounds)`` frames on the simulated team of this
        controller's env config (``env`` is not played); returns the episodes it played."""
        if not backend_offers(self.config.backend, BATCH_SIMULATOR):
            raise ValueError(f"ppo_central trains on a simulated team (the batch simulator); backend kind "
                             f"{self.config.backend.kind!r} is not one: train it on a simulated team of this task")
        trained = train_central_ppo(self.config, seed, frames_for_episodes(episodes, self.rounds), progress,
                                    **asdict(self.ppo))
        self.load_state_dict(trained.state_dict())
        self.history, self.frames_trained, self.episodes_trained = (trained.history, trained.frames_trained,
                                                                    trained.episodes_trained)
        return TrainingSpend(episodes=trained.episodes_trained)


def build(n_agents: int, rounds: int, seed: int, config: dict | None = None,
          env_config: EnvConfig | None = None) -> CentralPPOController:
    """The leaderboard's constructor: ``env_config`` is the comparison's env (its team is what training
    simulates); ``config``: :class:`CentralPPOConfig` keys."""
    env_config = env_config or EnvConfig.from_dict({"n_agents": n_agents, "rounds": rounds})
    return CentralPPOController(env_config, seed, CentralPPOConfig.from_dict(config))
