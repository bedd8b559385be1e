"""QMIX learning: TD targets from target networks, the loss, the optimiser, target syncing.

Episodes are T rounds long and end in a true terminal state (the task is answered). For a
batch of B episodes:

    Q_tot[t]  = mixer(Q_i(tau_t, u_t), s_t)            s_t: the state *before* round t's actions
    y[T-1]    = r[T-1]                                  (terminal round: no bootstrap)
    y[t]      = r[t] + gamma * (1 - term[t]) * Q'_tot[t+1]
    Q'_tot[t+1] = target_mixer(Q'_i(tau_{t+1}, u*_{t+1}), s_{t+1}),
    u*        = argmax over *valid* actions of the online Q (double Q) or of the target Q.

With ``td_lambda > 0`` the targets are TD(lambda) returns built backwards from the same
pieces (td_lambda = 1: plain discounted returns, and the target networks are not run). With
``return_targets`` (``sim_scale.noise_samples`` > 0: simulated team, batched rollouts) y[t] is the
episode's stored ``return_target[t]``: its return from round t under greedy play, averaged over
samples of the simulator's noise (:mod:`learners.batch_runner`). The loss is the mean squared error over all
B x T rounds.
"""
from __future__ import annotations

import torch
from torch import nn

from learners.agent_network import build_agent_network
from learners.config import QMIXConfig
from learners.mixer import make_mixer

NEG_INF = -1e9


def masked_argmax(q: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Index of the best valid action: q (..., A), mask (..., A) bool -> (...)."""
    return q.masked_fill(~mask, NEG_INF).argmax(dim=-1)


def td_targets(rewards: torch.Tensor, terminated: torch.Tensor, next_values: torch.Tensor, gamma: float,
               td_lambda: float) -> torch.Tensor:
    """Targets y (B, T) from rewards (B, T), terminated (B, T) and the bootstrap values
    ``next_values[:, t] = Q'_tot(t + 1)`` (B, T; ignored where terminated). Trailing dims
    broadcast (independent learners: rewards (B, T, 1), values (B, T, N)).

    td_lambda = 0 gives one-step targets; otherwise
    ``G[t] = r[t] + gamma * (1 - term[t]) * ((1 - lambda) * next[t] + lambda * G[t + 1])``.
    """
    alive = 1.0 - terminated.float()
    if td_lambda == 0.0:
        return rewards + gamma * alive * next_values
    t_len = rewards.shape[1]
    returns = rewards.new_zeros(torch.broadcast_shapes(rewards.shape, next_values.shape))
    g = next_values[:, -1]
    for t in reversed(range(t_len)):
        g = rewards[:, t] + gamma * alive[:, t] * ((1 - td_lambda) * next_values[:, t] + td_lambda * g)
        returns[:, t] = g
    return returns


def polyak_update(target: nn.Module, source: nn.Module, tau: float) -> None:
    """target <- tau * source + (1 - tau) * target, parameter by parameter (tau = 1: copy)."""
    with torch.no_grad():
        for p, tp in zip(source.parameters(), target.parameters()):
            tp.mul_(1.0 - tau).add_(p, alpha=tau)


class QMIXLearner:
    """Owns the online and target networks and the optimiser. ``return_targets``: the batches carry
    ``return_target`` (noise-sampled returns) and the TD targets are those; ``compile``: the
    ``runtime.compile`` of :class:`learners.config.RuntimeConfig`."""

    def __init__(self, obs_dim: int, state_dim: int, n_agents: int, n_actions: int, config: QMIXConfig,
                 device: torch.device, *, return_targets: bool = False, compile: bool = False):
        self.config, self.device, self.return_targets = config, device, return_targets
        self.agent = build_agent_network(obs_dim, n_actions, config).to(device)
        self.mixer = make_mixer(config.mixer, n_agents, state_dim, config.mixer_embed_dim, config.hypernet_dim).to(device)
        self.target_agent = build_agent_network(obs_dim, n_actions, config).to(device)
        self.target_mixer = make_mixer(config.mixer, n_agents, state_dim, config.mixer_embed_dim,
                                       config.hypernet_dim).to(device)
        for target in (self.target_agent, self.target_mixer):
            target.requires_grad_(False)
        self.sync_targets(tau=1.0)
        self.params = list(self.agent.parameters()) + list(self.mixer.parameters())
        # eager: foreach Adam, bitwise equal to the per-parameter loop on CPU (documented runs
        # reproduce) and ~1.5 ms faster. compile: Adam's fused kernel (another ~1.3 ms; rounds
        # differently), and torch.compile traces loss_terms once (static shapes: batch_size x
        # rounds x agents), fusing its forward and backward into a few kernels; on CPU a C++
        # wrapper calls them (cpp_wrapper: ~0.7 ms less per update than inductor's Python one)
        self.optimizer = torch.optim.Adam(self.params, lr=config.lr, foreach=not compile, fused=compile)
        self._loss_terms = torch.compile(self.loss_terms, dynamic=False,
                                         options={"cpp_wrapper": device.type == "cpu"}) \
            if compile else self.loss_terms
        self.updates = 0

    def team_rewards(self, b: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """Rewards and terminal flags shaped like the mixer's output: (B, T), or (B, T, 1) for
        independent learners (broadcast over agents)."""
        if self.config.mixer == "none":
            return b["reward"].unsqueeze(-1), b["terminated"].unsqueeze(-1)
        return b["reward"], b["terminated"]

    def set_lr(self, lr: float) -> None:
        """Learning rate of the next updates (the run's schedule sets it every episode)."""
        for group in self.optimizer.param_groups:
            group["lr"] = float(lr)

    def sync_targets(self, tau: float = 1.0) -> None:
        """target <- tau * online + (1 - tau) * target (tau = 1: hard copy)."""
        polyak_update(self.target_agent, self.agent, tau)
        polyak_update(self.target_mixer, self.mixer, tau)

    def batch_to_tensors(self, batch: dict) -> dict[str, torch.Tensor]:
        return {k: torch.as_tensor(v, device=self.device) for k, v in batch.items()}

    def targets(self, b: dict[str, torch.Tensor], online_q: torch.Tensor | None = None) -> torch.Tensor:
        """TD targets y (B, T) for a batch (tensors from :meth:`batch_to_tensors`)."""
        cfg = self.config
        if self.return_targets:  # returns estimated on samples of the simulator's noise (learners.batch_runner)
            return b["return_target"].unsqueeze(-1) if cfg.mixer == "none" else b["return_target"]
        rewards, terminated = self.team_rewards(b)
        if cfg.td_lambda == 1.0:  # Monte-Carlo returns never read a bootstrap value: skip the target networks
            return td_targets(rewards, terminated, torch.zeros_like(rewards), cfg.gamma, 1.0)
        with torch.no_grad():
            target_q = self.target_agent.unroll(b["obs"], b["adjacency"])  # (B, T, N, A)
            if cfg.double_q:
                q_for_argmax = online_q.detach() if online_q is not None else self.agent.unroll(b["obs"], b["adjacency"])
            else:
                q_for_argmax = target_q
            best = masked_argmax(q_for_argmax, b["mask"])  # (B, T, N)
            best_q = target_q.gather(-1, best.unsqueeze(-1)).squeeze(-1)
            values = self.target_mixer(best_q, b["state"])  # (B, T): Q'_tot at each round ((B, T, N): none)
            next_values = torch.cat([values[:, 1:], torch.zeros_like(values[:, :1])], dim=1)
            return td_targets(rewards, terminated, next_values, cfg.gamma, cfg.td_lambda)

    def loss_terms(self, b: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
        """The TD loss of a batch and its parts: (loss (), Q_tot (B, T), targets y (B, T),
        Q-values of the actions taken (B, T, N)); only ``loss`` carries gradients."""
        q = self.agent.unroll(b["obs"], b["adjacency"])  # (B, T, N, A)
        chosen = q.gather(-1, b["actions"].unsqueeze(-1)).squeeze(-1)  # (B, T, N)
        q_tot = self.mixer(chosen, b["state"])  # (B, T); (B, T, N) for independent learners
        y = self.targets(b, online_q=q)
        loss = ((q_tot - y) ** 2).mean()
        return loss, q_tot.detach(), y, chosen.detach()

    @property
    def agent_updates(self) -> int:
        """The updates that changed the agent network (those after ``mixer_warmup``): two greedy policies
        with the same count are the same policy."""
        return max(0, self.updates - self.config.mixer_warmup)

    def update(self, batch: dict) -> dict[str, float]:
        """One gradient step on a sampled batch; returns loss and diagnostics."""
        cfg = self.config
        b = self.batch_to_tensors(batch)
        self.agent.train()
        self.mixer.train()
        loss, q_tot, y, chosen = self._loss_terms(b)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if self.updates < cfg.mixer_warmup:  # the agent network waits until the mixer has learned its targets
            for p in self.agent.parameters():
                p.grad = None
        grad_norm = nn.utils.clip_grad_norm_(self.params, cfg.grad_clip)
        self.optimizer.step()
        self.updates += 1
        if cfg.target_update == "soft":
            self.sync_targets(cfg.tau)
        elif self.updates % cfg.target_update_interval == 0:
            self.sync_targets(1.0)
        return {"loss": loss.item(), "grad_norm": float(grad_norm), "q_tot": q_tot.mean().item(),
                "target": y.mean().item(), "q_taken": chosen.mean().item()}

    def load_networks(self, state: dict, agent: dict | None = None, mixer: bool = True) -> None:
        """Start from another run's networks (a :meth:`state_dict`'s ``agent`` and, with ``mixer``,
        its ``mixer``; ``agent`` instead of its agent): the targets are copied from them; the
        optimiser and the update count start afresh."""
        self.agent.load_state_dict(agent if agent is not None else state["agent"])
        if mixer:
            self.mixer.load_state_dict(state["mixer"])
        self.sync_targets(tau=1.0)

    def state_dict(self) -> dict:
        return {"agent": self.agent.state_dict(), "mixer": self.mixer.state_dict(),
                "target_agent": self.target_agent.state_dict(), "target_mixer": self.target_mixer.state_dict(),
                "optimizer": self.optimizer.state_dict(), "updates": self.updates}

    def load_state_dict(self, state: dict) -> None:
        self.agent.load_state_dict(state["agent"])
        self.mixer.load_state_dict(state["mixer"])
        self.target_agent.load_state_dict(state["target_agent"])
        self.target_mixer.load_state_dict(state["target_mixer"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.updates = int(state["updates"])
