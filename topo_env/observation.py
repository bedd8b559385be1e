"""Per-agent observation vectors and the global state.

Observation of agent i before round t (float32, length :attr:`ObservationBuilder.dim`):

====================  =====  ==========================================================
block                 size   meaning
====================  =====  ==========================================================
task embedding        E      encoder(task text) (``hashed`` n-grams or MiniLM)
task length           1      log1p(prompt tokens) / 10
agent id              N      one-hot of i
role                  R      one-hot of i's role kind (specialist, analyzer)
persona               P + 1  one-hot of i's persona in ``topo_env.roles.PERSONA_VOCAB``; last
                             slot: a persona outside it
round                 T      one-hot of t
previous action       7      one-hot of i's action in round t-1; slot 6 = none yet
own tokens            1      i's tokens so far / max_tokens
team tokens           1      team's tokens so far / max_tokens
in / out degree       2      last round's degree / (N - 1)
agrees with plurality 1      1 if i's last answer equals the team's most common one
peers agreeing        1      share of peers whose last answer equals i's
last confidence       1      i's stated confidence last round (0 before round 1)
last verdict          1      verifier verdict on i's last output: +1 pass, -1 fail, 0 none
====================  =====  ==========================================================

Adversaries are not marked: a policy has to notice them from behaviour (agreement).
The global state (QMIX mixer input) is all observations, the last graph's edge count and
density, N, the flattened last adjacency and t / T.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from topo_env.actions import N_ACTIONS
from topo_env.roles import PERSONA_VOCAB, ROLE_KINDS, persona_slot

N_SCALARS = 8


def answer_codes(answers: Sequence[str | None]) -> list[int]:
    """Integer codes for answer strings: equal answers share a code, ``None`` is -1."""
    seen: dict[str, int] = {}
    return [-1 if a is None else seen.setdefault(a, len(seen)) for a in answers]


def agreement(codes: Sequence[int]) -> tuple[list[float], list[float]]:
    """(agrees with plurality, share of peers agreeing) per agent from answer codes.

    The plurality answer is the most common code (ties: the one given first, i.e. by the
    lowest agent index); missing answers (-1) agree with nobody.
    """
    n = len(codes)
    counts: dict[int, int] = {}
    for c in codes:
        if c >= 0:
            counts[c] = counts.get(c, 0) + 1
    if not counts:
        return [0.0] * n, [0.0] * n
    plurality = max(counts, key=counts.__getitem__)  # first inserted wins ties
    agrees = [1.0 if c == plurality else 0.0 for c in codes]
    peers = [(counts[c] - 1) / (n - 1) if c >= 0 else 0.0 for c in codes]
    return agrees, peers


class ObservationBuilder:
    """Builds the (N, D) observation matrix and the global state for one env config."""

    def __init__(self, n_agents: int, rounds: int, roles: Sequence[str], embed_dim: int, max_tokens: int,
                 personas: Sequence[str]):
        if len(roles) != n_agents or len(personas) != n_agents:
            raise ValueError(f"need one role and one persona per agent ({n_agents}), got roles={list(roles)!r}, "
                             f"personas={list(personas)!r}")
        self.n, self.rounds, self.max_tokens = n_agents, rounds, float(max_tokens)
        self.embed_dim = embed_dim
        identity = n_agents + len(ROLE_KINDS) + len(PERSONA_VOCAB) + 1  # agent id, role, persona
        self.dim = embed_dim + 1 + identity + rounds + (N_ACTIONS + 1) + N_SCALARS
        self.state_dim = n_agents * self.dim + 3 + n_agents * n_agents + 1
        # The parts that never change within an env instance, built once.
        static = np.zeros((n_agents, identity), dtype=np.float32)
        static[np.arange(n_agents), np.arange(n_agents)] = 1.0
        for i, (role, persona) in enumerate(zip(roles, personas)):
            static[i, n_agents + ROLE_KINDS.index(role)] = 1.0
            static[i, n_agents + len(ROLE_KINDS) + persona_slot(persona)] = 1.0
        self._static = static
        self._o_round = embed_dim + 1 + identity
        self._o_prev = self._o_round + rounds
        self._o_scalar = self._o_prev + N_ACTIONS + 1

    def episode_template(self, task_embedding: np.ndarray, task_tokens: int) -> np.ndarray:
        """The (N, D) rows with everything fixed for one episode filled in."""
        e = self.embed_dim
        rows = np.zeros((self.n, self.dim), dtype=np.float32)
        rows[:, :e] = task_embedding
        rows[:, e] = np.log1p(task_tokens) / 10.0
        rows[:, e + 1 : self._o_round] = self._static
        return rows

    def build(
        self,
        template: np.ndarray,
        round_index: int,
        prev_actions: Sequence[int] | None,
        agent_tokens: Sequence[int],
        team_tokens: int,
        in_degree: Sequence[int],
        out_degree: Sequence[int],
        answers: Sequence[str | None],
        confidences: Sequence[float | None],
        verdicts: Sequence[int],
    ) -> np.ndarray:
        """Observations (N, D) before round ``round_index`` (``template`` from
        :meth:`episode_template`)."""
        n = self.n
        obs = template.copy()
        obs[:, self._o_round + min(round_index, self.rounds - 1)] = 1.0
        if prev_actions is None:
            obs[:, self._o_prev + N_ACTIONS] = 1.0
        else:
            obs[range(n), [self._o_prev + a for a in prev_actions]] = 1.0
        agrees, peers = agreement(answer_codes(answers))
        scale = 1.0 / self.max_tokens
        deg = 1.0 / (n - 1)
        scalars = [
            [agent_tokens[i] * scale, team_tokens * scale, in_degree[i] * deg, out_degree[i] * deg, agrees[i], peers[i],
             0.0 if confidences[i] is None else confidences[i], verdicts[i]]
            for i in range(n)
        ]
        obs[:, self._o_scalar :] = scalars
        return obs

    @property
    def task_dim(self) -> int:
        """Length of the task block: the embedding and the task length."""
        return self.embed_dim + 1

    @property
    def agent_feature_dim(self) -> int:
        """F of :meth:`controller_view`: role, persona, the 8 scalars, ran before, active last round."""
        return len(ROLE_KINDS) + len(PERSONA_VOCAB) + 1 + N_SCALARS + 2

    def controller_view(self, obs: np.ndarray, ran: Sequence[bool], active: Sequence[bool]) -> tuple[np.ndarray, np.ndarray]:
        """What a central controller sees of the (N, D) observations: the task block (E + 1,) and
        per-agent features (N, F): each row's role and persona one-hots and its 8 scalars (tokens,
        degrees, agreement, confidence, verdict), then whether the agent has run this episode and
        whether it was active last round. The per-agent blocks that only an agent-level policy
        needs (agent id, round, previous action) are left out: a controller knows rows by position
        and gets the round apart."""
        e, n = self.embed_dim, self.n
        task = obs[0, : e + 1].copy()
        agents = np.empty((n, self.agent_feature_dim), dtype=np.float32)
        identity = obs[:, e + 1 + n : self._o_round]  # role and persona (agent id dropped)
        width = identity.shape[1]
        agents[:, :width] = identity
        agents[:, width : width + N_SCALARS] = obs[:, self._o_scalar :]
        agents[:, -2] = ran
        agents[:, -1] = active
        return task, agents

    def agent_observations(self, task: np.ndarray, agents: np.ndarray, round_index: int,
                           prev_actions: Sequence[int] | None) -> np.ndarray:
        """The (N, D) observations of :meth:`build` from a controller's view of them (the inverse of
        :meth:`controller_view`: ``task`` (E + 1,), ``agents`` (N, F)) and what a controller that
        chose CommActions knows itself: the round and the previous joint action (None before the
        first round). This is how a per-agent policy (QMIX, the fixed baselines) plays through the
        orchestrator env."""
        n, e = self.n, self.embed_dim
        obs = np.zeros((n, self.dim), dtype=np.float32)
        obs[:, : e + 1] = task
        obs[:, e + 1 : e + 1 + n] = np.eye(n, dtype=np.float32)
        width = self._o_round - (e + 1 + n)
        obs[:, e + 1 + n : self._o_round] = agents[:, :width]
        obs[:, self._o_round + min(round_index, self.rounds - 1)] = 1.0
        if prev_actions is None:
            obs[:, self._o_prev + N_ACTIONS] = 1.0
        else:
            obs[range(n), [self._o_prev + a for a in prev_actions]] = 1.0
        obs[:, self._o_scalar :] = agents[:, width : width + N_SCALARS]
        return obs

    def state(self, obs: np.ndarray, adjacency: np.ndarray, round_index: int) -> np.ndarray:
        n = self.n
        edges = float(np.count_nonzero(adjacency))
        tail = np.empty(3 + n * n + 1, dtype=np.float32)
        tail[0] = edges
        tail[1] = edges / (n * (n - 1))
        tail[2] = n
        tail[3 : 3 + n * n] = adjacency.reshape(-1)
        tail[-1] = round_index / self.rounds
        return np.concatenate([obs.reshape(-1), tail])
