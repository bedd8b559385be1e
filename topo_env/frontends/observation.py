"""Per-agent observation vectors and the global state.

Observation of agent i before round t (float32, length :attr:`ObservationBuilder.dim`):

====================  =====  ==========================================================
block                 size   meaning
====================  =====  ==========================================================
task embedding        E      encoder(task text) (``hashed`` n-grams or MiniLM)
task length           1      log1p(prompt tokens) / 10
agent id              N      one-hot of i
role                  R      one-hot of i's role kind (specialist, analyzer)
persona               P + 1  one-hot of i's persona in ``topo_env.engine.roles.PERSONA_VOCAB``; last
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

from topo_env.frontends.comm_actions import N_ACTIONS
from topo_env.engine.roles import PERSONA_VOCAB, ROLE_KINDS, persona_slot

N_SCALARS = 8


def answer_codes(answers: Sequence[str | None]) -> list[int]:
    """Integer codes for answer strings: equal answers share a code, ``None`` is -1."""
    seen: dict[str, int] = {}
    return [-1 if a is None else seen.setdefault(a, len(seen)) for a in answers]


def agreement(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(agrees with plurality, share of peers agreeing), each (B, N) float64, from (B, N) integer
    answer codes (equal code = same answer, -1 = no answer).

    The plurality answer is the most common code (ties: the one given first, i.e. by the
    lowest agent index); missing answers (-1) agree with nobody.
    """
    codes = np.asarray(codes)
    n = codes.shape[1]
    given = codes >= 0
    same = (codes[:, :, None] == codes[:, None, :]) & given[:, :, None] & given[:, None, :]
    counts = same.sum(axis=2)  # (B, N): agents holding i's answer, i included (0 when i has none)
    # the first agent holding a most common answer gives the plurality (the first such answer given)
    plurality = np.take_along_axis(codes, counts.argmax(axis=1)[:, None], axis=1)
    agrees = (given & (codes == plurality)).astype(np.float64)
    peers = np.where(given, (counts - 1) / (n - 1), 0.0)
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
        return self.episode_templates(np.asarray(task_embedding)[None], np.asarray([task_tokens]))[0]

    def episode_templates(self, task_embeddings: np.ndarray, task_tokens: np.ndarray) -> np.ndarray:
        """(B, N, D) :meth:`episode_template` rows of B episodes: ``task_embeddings`` (B, E),
        ``task_tokens`` (B,) the tasks' prompt lengths."""
        e = self.embed_dim
        rows = np.zeros((len(task_tokens), self.n, self.dim), dtype=np.float32)
        rows[:, :, :e] = task_embeddings[:, None, :]
        rows[:, :, e] = (np.log1p(np.asarray(task_tokens, dtype=np.float64)) / 10.0)[:, None]
        rows[:, :, e + 1 : self._o_round] = self._static
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
        """Observations (N, D) of one episode before round ``round_index`` (``template`` from
        :meth:`episode_template`): :meth:`build_batch` for a batch of one."""
        return self.build_batch(
            template[None], round_index, None if prev_actions is None else np.asarray(prev_actions)[None],
            np.asarray(agent_tokens)[None], np.asarray([team_tokens]), np.asarray(in_degree)[None],
            np.asarray(out_degree)[None], np.asarray(answer_codes(answers))[None],
            np.array([[0.0 if c is None else c for c in confidences]]), np.asarray(verdicts)[None])[0]

    def build_batch(self, templates: np.ndarray, round_index: int, prev_actions: np.ndarray | None,
                    agent_tokens: np.ndarray, team_tokens: np.ndarray, in_degree: np.ndarray, out_degree: np.ndarray,
                    answer_codes: np.ndarray, confidences: np.ndarray, verdicts: np.ndarray) -> np.ndarray:
        """Observations (B, N, D) of B episodes before round ``round_index``.

        ``templates`` (B, N, D) from :meth:`episode_template`; ``prev_actions`` (B, N) last round's
        actions (None before the first round); ``agent_tokens`` (B, N) and ``team_tokens`` (B,)
        tokens so far; ``in_degree`` / ``out_degree`` (B, N) of last round's graph;
        ``answer_codes`` (B, N) last answers as integer codes (equal code = same answer, -1 none);
        ``confidences`` (B, N) last stated confidences (0 where none); ``verdicts`` (B, N) +1 / -1 / 0."""
        b, n = templates.shape[:2]
        obs = templates.copy()
        obs[:, :, self._o_round + min(round_index, self.rounds - 1)] = 1.0
        rows, agents = np.arange(b)[:, None], np.arange(n)[None, :]
        if prev_actions is None:
            obs[:, :, self._o_prev + N_ACTIONS] = 1.0
        else:
            obs[rows, agents, self._o_prev + np.asarray(prev_actions)] = 1.0
        agrees, peers = agreement(answer_codes)
        scale = 1.0 / self.max_tokens
        deg = 1.0 / (n - 1)
        o = self._o_scalar
        obs[:, :, o] = np.asarray(agent_tokens) * scale
        obs[:, :, o + 1] = (np.asarray(team_tokens) * scale)[:, None]
        obs[:, :, o + 2] = np.asarray(in_degree) * deg
        obs[:, :, o + 3] = np.asarray(out_degree) * deg
        obs[:, :, o + 4] = agrees
        obs[:, :, o + 5] = peers
        obs[:, :, o + 6] = confidences
        obs[:, :, o + 7] = verdicts
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
        and gets the round apart. :meth:`controller_view_batch` for a batch of one."""
        task, agents = self.controller_view_batch(obs[None], np.asarray(ran)[None], np.asarray(active)[None])
        return task[0], agents[0]

    def controller_view_batch(self, obs: np.ndarray, ran: np.ndarray,
                              active: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`controller_view` of B episodes: (B, N, D) observations and (B, N) ``ran`` /
        ``active`` give the (B, E + 1) task blocks and the (B, N, F) per-agent features."""
        e, n = self.embed_dim, self.n
        task = obs[:, 0, : e + 1].copy()
        agents = np.empty((obs.shape[0], n, self.agent_feature_dim), dtype=np.float32)
        identity = obs[:, :, e + 1 + n : self._o_round]  # role and persona (agent id dropped)
        width = identity.shape[2]
        agents[:, :, :width] = identity
        agents[:, :, width : width + N_SCALARS] = obs[:, :, self._o_scalar :]
        agents[:, :, -2] = ran
        agents[:, :, -1] = active
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
        """The global state (S,) of one episode: :meth:`state_batch` for a batch of one."""
        return self.state_batch(obs[None], adjacency[None], round_index)[0]

    def state_batch(self, obs: np.ndarray, adjacency: np.ndarray, round_index: int) -> np.ndarray:
        """The global states (B, S) float32 of B episodes from their observations (B, N, D) and last
        round's graphs (B, N, N): all observations, the graph's edge count and density, N, the
        flattened graph and ``round_index / T``."""
        b, n = obs.shape[:2]
        edges = np.count_nonzero(adjacency.reshape(b, -1), axis=1).astype(np.float64)
        state = np.empty((b, self.state_dim), dtype=np.float32)
        width = n * self.dim
        state[:, :width] = obs.reshape(b, -1)
        state[:, width] = edges
        state[:, width + 1] = edges / (n * (n - 1))
        state[:, width + 2] = n
        state[:, width + 3 : width + 3 + n * n] = adjacency.reshape(b, -1)
        state[:, -1] = round_index / self.rounds
        return state
