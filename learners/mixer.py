"""Value decomposition: the QMIX monotonic mixing network (paper Eq. 6) and the ablations.

    Q_tot(q, s) = W2^T ELU(W1 q + b1) + b2,  W1 = |HyperNet1(s)| (N x E), W2 = |HyperNet2(s)| (E)

Each hypernetwork is an MLP with one hidden layer (``hypernet_dim``, 64 in the paper) from
the global state s; ``b1`` is a linear map of s and ``b2`` a state value V(s) (an MLP), as
in the standard QMIX. ``abs`` keeps dQ_tot/dQ_i >= 0 (monotonicity, hence IGM).

``qmix.mixer`` picks the decomposition (:func:`make_mixer`): ``qmix`` (above), ``vdn``
(Q_tot = sum_i Q_i; Sunehag et al., 2018) or ``none`` (independent Q-learning: no Q_tot, each
agent's Q_i is regressed on the team's reward on its own; :class:`IndependentQ` returns the
(..., N) per-agent values and the learner broadcasts rewards over agents).
"""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


class QMixer(nn.Module):
    """Mixes per-agent Q-values (..., N) with states (..., S) into Q_tot (...)."""

    def __init__(self, n_agents: int, state_dim: int, embed_dim: int = 64, hypernet_dim: int = 64):
        super().__init__()
        self.n_agents, self.embed_dim = n_agents, embed_dim
        self.hyper_w1 = nn.Sequential(nn.Linear(state_dim, hypernet_dim), nn.ReLU(), nn.Linear(hypernet_dim, n_agents * embed_dim))
        self.hyper_b1 = nn.Linear(state_dim, embed_dim)
        self.hyper_w2 = nn.Sequential(nn.Linear(state_dim, hypernet_dim), nn.ReLU(), nn.Linear(hypernet_dim, embed_dim))
        self.hyper_b2 = nn.Sequential(nn.Linear(state_dim, hypernet_dim), nn.ReLU(), nn.Linear(hypernet_dim, 1))

    def forward(self, agent_qs: torch.Tensor, states: torch.Tensor) -> torch.Tensor:
        lead = agent_qs.shape[:-1]
        q = agent_qs.reshape(-1, 1, self.n_agents)
        s = states.reshape(-1, states.shape[-1])
        w1 = torch.abs(self.hyper_w1(s)).view(-1, self.n_agents, self.embed_dim)
        b1 = self.hyper_b1(s).view(-1, 1, self.embed_dim)
        hidden = F.elu(torch.bmm(q, w1) + b1)
        w2 = torch.abs(self.hyper_w2(s)).view(-1, self.embed_dim, 1)
        b2 = self.hyper_b2(s).view(-1, 1, 1)
        return (torch.bmm(hidden, w2) + b2).reshape(lead)


class VDNMixer(nn.Module):
    """Q_tot = sum of the agents' Q-values (no parameters; the state is ignored)."""

    def forward(self, agent_qs: torch.Tensor, states: torch.Tensor) -> torch.Tensor:
        return agent_qs.sum(dim=-1)


class IndependentQ(nn.Module):
    """No mixing: (..., N) per-agent values pass through (independent Q-learning)."""

    def forward(self, agent_qs: torch.Tensor, states: torch.Tensor) -> torch.Tensor:
        return agent_qs


MIXERS = ("qmix", "vdn", "none")


def make_mixer(kind: str, n_agents: int, state_dim: int, embed_dim: int, hypernet_dim: int) -> nn.Module:
    """The mixer ``qmix.mixer`` names (one of :data:`MIXERS`)."""
    if kind == "qmix":
        return QMixer(n_agents, state_dim, embed_dim, hypernet_dim)
    if kind == "vdn":
        return VDNMixer()
    if kind == "none":
        return IndependentQ()
    raise ValueError(f"mixer={kind!r}: must be one of {list(MIXERS)}")
