"""TacoMAS (seed 003, "Test-Time Co-Evolution of Topology and Capability in LLM-based Multi-Agent
Systems"): a fast loop that scores every agent's contribution each round and moves replicator
weights, and a slow loop that every K rounds, when the team's score is below tau, edits the graph
under small budgets. An online method: nothing is trained (``trainable = False``,
``TRAIN_EPISODES = 0``); all adaptation happens while it plays the stream of tasks.

State kept across the stream (``begin`` does not reset it): the directed graph over the team's N
agents plus the sink, the alive set, the replicator weights ``pi`` and the recent contributions.

* **The graph** (Sec. 3.1, T_t = (V_t, E_t)). ``edges[u, v] = 1``: u's output reaches v within a
  round (u -> v); always a DAG over the alive agents (checked after every edit). The sink is the
  env's decision node (index ``N`` in :meth:`TeamGraph.to_json`), which reads every agent that ran:
  so every alive agent has an implicit edge to the sink and is always connected to it, and the
  sink can be neither deleted nor cut off (Sec. 3.4 / App. D.1 "do NOT delete the sink agent").
  G_0 is the paper's centralized template (Sec. 5.1): every worker -> the leader (the last agent,
  the analyzer of the default roles), the leader -> sink.
* **A round** (Alg. 1 lines 4-7) plays the current graph: ``adjacency`` = edges among alive agents,
  ``active`` = alive (dead agents are not called, so the decision node does not read them),
  ``verify`` = alive when ``verify`` is set (the domain's verifier is the agents' tool; it costs
  nothing where the domain has none).
* **Rounds and K** (Sec. 3.1: a round is one complete forward workflow that yields an answer).
  One env round runs the whole DAG (the executor runs it layer by layer), so an env round is the
  paper's round t; t counts rounds over the whole stream (it is not reset per task), and the slow
  loop runs after round t when ``(t + 1) % K == 0`` (Alg. 1 line 9). With 2 rounds per task the
  slow loop therefore runs about once per task, at its end, where the judge knows the outcome;
  with 3 rounds it sometimes runs between rounds of a task, as in the paper.
* **Fast loop, the judge** (Sec. 3.3 "meta-judge"; App. D.3 Listing 7 scores in [0, 1]). The
  paper's judge is an LLM; here a rule-based judge scores each agent called in the round from
  ``info["outputs"]`` (:func:`judge_round`): the round's consensus is the confidence-weighted
  plurality answer; agent v's agreement score is ``q_v = 0.5 + 0.5 conf_v`` if it gave the
  consensus answer, ``0.5 - 0.5 conf_v`` otherwise (no answer: 0, "no useful signal"). At a
  task's last round the outcome is known and credits it: ``c_v = a q_v + (1 - a)(1 - q_v)`` with
  a = ``info["accuracy"]`` (a wrong consensus flips the credit). The verifier is the evidence
  gate of Listing 7: PASS -> ``(c + 1) / 2``, FAIL -> ``c / 2``.
* **Fast loop, the weights** (Eq. 2 in its normalised form Eq. 12):
  ``pi_v <- pi_v exp(eta c_v) / sum_u pi_u exp(eta c_u)`` over the alive agents scored in the
  round. The paper gives no eta (Eq. 2: "eta > 0 controls the update strength"); default 1.0.
  In the paper pi abstracts the capability a meta-LLM rewrites into each agent's prompt; the
  simulated team has no prompt to rewrite, so here pi is the influence ranking the slow loop uses
  (who dies first among equals, who survives when all are low, who feeds a newborn agent) and
  the tie-break of the judge's consensus. Dead agents have pi = 0; a born agent gets the fresh
  weight 1 / |V_alive| (the others are scaled to make room).
* **Global score s_t** (Alg. 1 line 8, ``s_t = J(a_t, q)``: the rubric judge's fraction of items
  passed). At a task's last round: ``info["accuracy"]``. Between rounds (no answer yet): the
  judge's estimate, the confidence share behind the consensus among the agents called (FAIL
  verdicts count against it), which is 1 only when the team is unanimous and nobody failed.
* **Termination** (Alg. 1 line 14: stop once ``s_t >= tau``, or on the meta-LLM's ``stop``).
  When ``halt_on_success`` and the estimate after a round reaches tau, the next action is an
  empty round with ``halt = 1``: nobody is called and the decision node answers at once (the env
  has no "halt after the round just played"). The round's contributions are then scored at the
  task's end, with the outcome.
* **Slow loop** (Sec. 3.4, Eq. 4; App. D.1): at most ``max_birth_death_pairs`` = 2 birth/death
  pairs and ``max_edge_edits`` = 4 edge edits (add/remove) per update, never the sink, the graph
  kept acyclic. The team is fixed at N, so a birth revives a dead slot (|V| <= N instead of the
  paper's 20) and a death removes the agent with its edges (the edges go with the node and do not
  count as edge edits). Two proposers, one validator (:func:`validate_edit`):

  - rule-based, on the simulated team (:func:`rule_based_edit`), following the developer prompt
    (App. D.1 Listing 2): death for an alive agent whose mean contribution over its last
    ``death_window`` scored rounds is below ``death_threshold`` = 0.2 (Listing 2 "reward < 0.2";
    Sec. 3.4 "remain consistently low"), lowest first, never the last alive agent; birth for the
    slot dead longest once dead ``rebirth_after`` rounds; edge edits: a born agent gets its
    template edges back, then edges are re-routed so evidence flows from higher- to
    lower-contribution agents: remove u -> v where u's mean contribution is more than
    ``edge_margin`` below v's (a weaker agent's output stops reaching a stronger one), largest
    gap first. It adds no other edges: every alive agent already reaches the sink directly, and
    on the simulated team adding edges from stronger to weaker agents as well was measured to
    lower the reward (2,000 eval tasks: mmlu_pro 0.912 against 0.925, humaneval 1.085 against
    1.127), as denser graphs do there.
  - meta-LLM (:func:`meta_llm_edit`): any ``propose(prompt) -> str``; the prompt is App. D.1's
    (system, developer and user payload) and the reply the paper's JSON object
    (``birth_death_pairs``, ``graph_edit``, ``graph_diff``, ``agent_feedback``,
    ``global_rationale``, ``time_control``), parsed by :func:`parse_meta_edit`.

  Bad edits (Alg. 1 line 11 "enforce |dV| <= B_V, |dE| <= B_E"): a proposal over a budget is
  trimmed to its first B_V pairs / B_E edge operations (the order the meta-LLM gave), with a
  warning. A proposal that breaks the graph's validity (unparseable or non-JSON reply, deleting
  the sink, an unknown or dead agent, reviving an alive one, a self-loop, an edge out of or cut
  from the sink, a cycle, no agent left) is rejected whole: the topology stays T_t for this
  update, the reason is logged (``logging`` and :attr:`TacoMASController.edit_log`) and the run
  goes on. A ``propose`` that raises counts as a rejected proposal.

Deviations from the paper (and why):

* The paper evolves per task instance and clears its memory between instances (App. B); here
  the graph, alive set and weights persist over the stream of tasks (the project's online
  setting; App. B names cross-instance memory as future work). Rounds per task are the env's
  (2-3), not R = 10, so K = 2 counts rounds over the stream (see above). The notes' flag: a median
  of 10 slow updates (App. C.5) cannot happen within R = 10, K = 2 (at most 5); over a stream the
  count is unbounded and is reported in :attr:`TacoMASController.slow_updates`.
* The judge and the proposer are rule-based on the simulated team (the paper's are LLMs); the
  capability side (prompt and memory rewrites, ``agent_feedback``) cannot act on the simulated
  team and is ignored; pi stands in for it as described.
* A birth revives a dead slot of the fixed team instead of spawning a new role; the rule-based
  proposer waits ``rebirth_after`` rounds before reviving a slot (the paper gives no rule; an
  immediate revival would bring back the agent just judged low).
* tau = 1.0 (the paper: "task-specific"): s_t is a fraction of rubric items passed, and 1 is
  "all passed"; with binary accuracy the slow loop runs after every wrong answer whatever
  tau in (0, 1], and the halting estimate reaches 1.0 only for a unanimous team.
* eta (not given in the paper) defaults to 1.0.
"""
from __future__ import annotations

import json
import logging
import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from controllers.base import (Controller, config_flag, config_from_dict, config_integer, config_number,
                              graph_action)

logger = logging.getLogger(__name__)

TRAIN_EPISODES: int = 0
"""Purely online (Alg. 1 adapts during inference; the paper trains nothing): the leaderboard runs
it over the eval stream in order and it adapts as it goes."""

ENV_ROUNDS: int | None = None
"""The profile's default rounds, like QMIX and the fixed baselines: the paper's R = 10 repeats the
workflow on one query, and tokens are charged in the reward, so more rounds are not free."""

SINK = "sink"
TIME_CONTROLS: tuple[str, ...] = ("continue", "slow_again", "stop")
ANY_FREE_SLOT = -1  # a birth that names a role, not a slot: the slot dead longest


@dataclass(frozen=True)
class TacoMASConfig:
    """TacoMAS's settings; defaults are the paper's where it gives one."""

    eta: float = 1.0  # Eq. 2 / Eq. 12 replicator step; the paper gives no value
    slow_interval: int = 2  # K, Sec. 5.1 "slow topology updates every K = 2 rounds"; Alg. 1 line 9
    tau: float = 1.0  # Alg. 1 success threshold on s_t ("task-specific"): 1 = every rubric item passed
    max_birth_death_pairs: int = 2  # B_V, Sec. 5.1 / App. D.1 "at most 2 pairs"; Eq. 4
    max_edge_edits: int = 4  # B_E, Sec. 5.1 / App. D.1 "at most 4 edge_add|edge_remove"; Eq. 4
    death_threshold: float = 0.2  # App. D.1 Listing 2 "Mark agents with reward < 0.2 for possible death"
    death_window: int = 4  # Sec. 3.4 "remain consistently low": scored rounds averaged (2K; no value given)
    rebirth_after: int = 20  # rounds a slot stays dead before the rule-based proposer revives it (not in paper)
    edge_margin: float = 0.1  # contribution gap for the rule-based edge edits (not in paper)
    halt_on_success: bool = True  # Alg. 1 line 14 "until s_t >= tau": halt the task once the estimate reaches tau
    verify: bool = True  # the agents' tool use (Sec. 3.1 phi includes tools): run the domain verifier
    leader: int = -1  # the template's leader (Sec. 5.1 centralized template); -1 = the last agent

    @classmethod
    def from_dict(cls, d: dict | None) -> "TacoMASConfig":
        """A config from a dict of field values; unknown keys and bad values raise a one-line ValueError."""
        unit = config_number(0.0, 1.0)
        return config_from_dict(cls, d, "tacomas config", {
            "eta": config_number(0.0, low_open=True),  # Eq. 2
            "slow_interval": config_integer(1), "tau": unit, "max_birth_death_pairs": config_integer(0),
            "max_edge_edits": config_integer(0), "death_threshold": unit, "death_window": config_integer(1),
            "rebirth_after": config_integer(0), "edge_margin": unit, "halt_on_success": config_flag,
            "verify": config_flag, "leader": config_integer(-1)})


# -- the graph ---------------------------------------------------------------------------------

def has_cycle(adjacency: np.ndarray) -> bool:
    """Whether the directed graph ``adjacency[u, v] = 1`` (u -> v) has a cycle (Kahn's algorithm)."""
    adj = np.asarray(adjacency, dtype=bool).copy()
    indegree = adj.sum(axis=0)
    ready = [v for v in range(adj.shape[0]) if indegree[v] == 0]
    seen = 0
    while ready:
        u = ready.pop()
        seen += 1
        for v in np.flatnonzero(adj[u]):
            indegree[v] -= 1
            if indegree[v] == 0:
                ready.append(int(v))
    return seen < adj.shape[0]


def centralized_template(n_agents: int, leader: int) -> np.ndarray:
    """G_0 (Sec. 5.1): every worker -> the leader; (N, N) bool."""
    edges = np.zeros((n_agents, n_agents), dtype=bool)
    edges[:, leader] = True
    edges[leader, leader] = False
    return edges


@dataclass
class TeamGraph:
    """The topology T_t: ``edges`` (N, N) bool (u -> v), ``alive`` (N,) bool and ``died_at`` (N,)
    int (the round t at which a dead slot died; -1 when alive). The sink (index N) is implicit:
    every alive agent -> sink."""

    edges: np.ndarray
    alive: np.ndarray
    died_at: np.ndarray

    @classmethod
    def initial(cls, template: np.ndarray) -> "TeamGraph":
        n = template.shape[0]
        return cls(template.copy(), np.ones(n, dtype=bool), np.full(n, -1, dtype=np.int64))

    @property
    def n_agents(self) -> int:
        return int(self.alive.shape[0])

    def copy(self) -> "TeamGraph":
        return TeamGraph(self.edges.copy(), self.alive.copy(), self.died_at.copy())

    def played_edges(self) -> np.ndarray:
        """The edges among alive agents (what a round plays)."""
        return self.edges & self.alive[:, None] & self.alive[None, :]

    def with_sink(self) -> np.ndarray:
        """(N + 1, N + 1) bool: the played edges plus every alive agent -> the sink (index N)."""
        n = self.n_agents
        full = np.zeros((n + 1, n + 1), dtype=bool)
        full[:n, :n] = self.played_edges()
        full[:n, n] = self.alive
        return full

    def is_valid(self) -> bool:
        """Acyclic, no self-loops, at least one alive agent, no edge touching a dead agent."""
        return (bool(self.alive.any()) and not self.edges.diagonal().any()
                and not (self.edges & ~(self.alive[:, None] & self.alive[None, :])).any()
                and not has_cycle(self.with_sink()))

    def to_json(self, pi: np.ndarray | None = None, mean_contribution: dict[int, float] | None = None) -> dict:
        """The graph as App. D.1's ``graph_json``: agents, the sink and the edges by name."""
        agents = []
        for v in range(self.n_agents):
            entry: dict[str, Any] = {"id": agent_name(v), "alive": bool(self.alive[v])}
            if pi is not None:
                entry["pi"] = round(float(pi[v]), 4)
            if mean_contribution is not None and v in mean_contribution:
                entry["mean_contribution"] = round(float(mean_contribution[v]), 3)
            agents.append(entry)
        full = self.with_sink()
        names = [agent_name(v) for v in range(self.n_agents)] + [SINK]
        edges = [[names[u], names[v]] for u, v in zip(*np.nonzero(full))]
        return {"agents": agents, "sink": SINK, "edges": edges}


def agent_name(v: int) -> str:
    return f"agent_{int(v)}"


# -- the fast loop -----------------------------------------------------------------------------

def replicator_update(pi: np.ndarray, contributions: np.ndarray, eta: float) -> np.ndarray:
    """Eq. 12 over the agents with a finite contribution (NaN = not scored this round):
    ``pi_v <- pi_v exp(eta c_v) / sum_u pi_u exp(eta c_u)``, the scored agents keeping their total
    mass (all of it when every alive agent was scored, as in every round this controller plays)."""
    pi = np.asarray(pi, dtype=float).copy()
    c = np.asarray(contributions, dtype=float)
    scored = np.isfinite(c) & (pi > 0)
    if not scored.any():
        return pi
    mass = pi[scored].sum()
    grown = pi[scored] * np.exp(eta * (c[scored] - c[scored].max()))  # shift for stability; cancels in the ratio
    pi[scored] = mass * grown / grown.sum()
    return pi


@dataclass(frozen=True)
class RoundJudgement:
    """The rule-based judge's reading of one round: ``contributions`` (N,) in [0, 1] (NaN for agents
    not called), the ``consensus`` answer, and ``estimate`` (the confidence share behind it)."""

    contributions: np.ndarray
    consensus: str | None
    estimate: float


def judge_round(outputs: list, called: np.ndarray, accuracy: float | None = None,
                pi: np.ndarray | None = None) -> RoundJudgement:
    """Score the agents ``called`` (N,) this round from their ``outputs`` (``info["outputs"]``).
    ``accuracy`` (the task's, known at its last round) credits the agreement scores by outcome;
    ``pi`` breaks ties of the consensus vote (then the answer's first appearance). See the module
    docstring for the formulas."""
    n = len(called)
    contributions = np.full(n, np.nan)
    votes: dict[str, float] = {}
    backing: dict[str, float] = {}
    order: list[str] = []
    answers: list[tuple[int, str | None, float, int]] = []
    for v in range(n):
        if not called[v]:
            continue
        out = outputs[v] if outputs is not None and v < len(outputs) else None
        answer = None if out is None else out.get("answer")
        conf = 0.0 if out is None else float(np.clip(out.get("confidence") or 0.0, 0.0, 1.0))
        verdict = 0 if out is None else int(out.get("verdict") or 0)
        answers.append((v, None if answer is None else str(answer), conf, verdict))
        if answer is not None:
            key = str(answer)
            if key not in votes:
                order.append(key)
                votes[key], backing[key] = 0.0, 0.0
            votes[key] += conf
            backing[key] += 0.0 if pi is None else float(pi[v])
    consensus = None
    if votes:
        consensus = max(order, key=lambda a: (votes[a], backing[a], -order.index(a)))
    total = sum(conf for _, _, conf, _ in answers)
    behind = sum(conf for _, a, conf, verdict in answers if a is not None and a == consensus and verdict >= 0)
    estimate = behind / total if total > 0 else 0.0
    for v, answer, conf, verdict in answers:
        if answer is None:
            contributions[v] = 0.0
            continue
        q = 0.5 + 0.5 * conf if answer == consensus else 0.5 - 0.5 * conf
        if accuracy is not None:
            a = float(np.clip(accuracy, 0.0, 1.0))
            q = a * q + (1.0 - a) * (1.0 - q)
        if verdict > 0:
            q = (q + 1.0) / 2.0
        elif verdict < 0:
            q = q / 2.0
        contributions[v] = q
    return RoundJudgement(contributions, consensus, float(estimate))


# -- the slow loop: edits ----------------------------------------------------------------------

class EditRejected(ValueError):
    """A proposed topology edit that breaks the graph's validity; the message is the reason."""


@dataclass
class TopologyEdit:
    """A structural delta dT (Eq. 4). ``pairs``: birth/death pairs ``(dead, born)``, each an agent
    index or None (``born = ANY_FREE_SLOT``: the slot dead longest); ``edge_ops``: ``(op, u, v)``
    with op ``"add"`` / ``"remove"`` and v = N for the sink; ``time_control`` (App. D.1)."""

    pairs: list[tuple[int | None, int | None]] = field(default_factory=list)
    edge_ops: list[tuple[str, int, int]] = field(default_factory=list)
    time_control: str = "continue"
    rationale: str = ""


def validate_edit(edit: TopologyEdit, graph: TeamGraph, max_pairs: int, max_edge_edits: int
                  ) -> tuple[TeamGraph, TopologyEdit, list[str]]:
    """Check ``edit`` against ``graph`` and return ``(new graph, edit as applied, notes)``.

    Budgets are enforced by trimming (Alg. 1 line 11) and noted; anything that breaks the graph's
    validity raises :class:`EditRejected` naming the reason (the caller keeps ``graph``). Deaths
    drop the agent's edges; births come back with no edges (edge ops add them). ``died_at`` of a
    new death is left for the caller to stamp (-2 here)."""
    n = graph.n_agents
    notes: list[str] = []
    pairs, ops = list(edit.pairs), list(edit.edge_ops)
    if len(pairs) > max_pairs:
        notes.append(f"{len(pairs)} birth/death pairs over the budget of {max_pairs}: kept the first {max_pairs}")
        pairs = pairs[:max_pairs]
    if len(ops) > max_edge_edits:
        notes.append(f"{len(ops)} edge edits over the budget of {max_edge_edits}: kept the first {max_edge_edits}")
        ops = ops[:max_edge_edits]
    if edit.time_control not in TIME_CONTROLS:
        raise EditRejected(f"time_control {edit.time_control!r} is not one of {list(TIME_CONTROLS)}")

    def agent(v: Any, what: str) -> int:
        if v == n:
            raise EditRejected(f"{what} names the sink: the sink is never deleted or spawned")
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or not 0 <= v < n:
            raise EditRejected(f"{what} names unknown agent {v!r} (the team is agent_0..agent_{n - 1})")
        return int(v)

    new = graph.copy()
    dying = [agent(d, "a death") for d, _ in pairs if d is not None]
    if len(set(dying)) < len(dying):
        raise EditRejected("the same agent dies twice")
    for d in dying:
        if not graph.alive[d]:
            raise EditRejected(f"death of {agent_name(d)}, which is already dead")
        new.alive[d] = False
        new.died_at[d] = -2
        new.edges[d, :] = False
        new.edges[:, d] = False
    free = sorted((int(v) for v in np.flatnonzero(~graph.alive)), key=lambda v: (graph.died_at[v], v))
    applied_pairs: list[tuple[int | None, int | None]] = []
    for d, born in pairs:
        if born is not None and born != ANY_FREE_SLOT:
            born = agent(born, "a birth")
            if born in dying:
                raise EditRejected(f"birth into {agent_name(born)}, which dies in the same update")
            if graph.alive[born]:
                raise EditRejected(f"birth into {agent_name(born)}, which is alive (the team is fixed at {n} slots)")
            if new.alive[born]:
                raise EditRejected(f"{agent_name(born)} is born twice")
        elif born == ANY_FREE_SLOT:
            open_slots = [v for v in free if not new.alive[v]]
            if not open_slots:
                notes.append(f"a birth found no free slot (the team is fixed at {n}): dropped")
                born = None
            else:
                born = open_slots[0]
        if born is not None:
            new.alive[born] = True
            new.died_at[born] = -1
            new.edges[born, :] = False
            new.edges[:, born] = False
        applied_pairs.append((None if d is None else int(d), born))
    if not new.alive.any():
        raise EditRejected("the edit leaves no agent alive: the sink would have no input")
    applied_ops: list[tuple[str, int, int]] = []
    for op, u, v in ops:
        if op not in ("add", "remove"):
            raise EditRejected(f"unknown edge operation {op!r} (edge_add or edge_remove)")
        if u == n:
            raise EditRejected(f"edge {SINK} -> {v}: the sink has no outgoing edges")
        u = agent(u, "an edge")
        if v == n:
            if op == "remove":
                raise EditRejected(f"edge_remove {agent_name(u)} -> {SINK}: the sink reads every alive agent; "
                                   "remove the agent (a death) instead")
            if not new.alive[u]:
                raise EditRejected(f"edge {agent_name(u)} -> {SINK} touches a dead agent")
            notes.append(f"edge_add {agent_name(u)} -> {SINK} is implied already: no change")
            applied_ops.append((op, u, n))
            continue
        v = agent(v, "an edge")
        if u == v:
            raise EditRejected(f"self-loop on {agent_name(u)}")
        if not (new.alive[u] and new.alive[v]):
            dead = u if not new.alive[u] else v
            raise EditRejected(f"edge {agent_name(u)} -> {agent_name(v)} touches {agent_name(dead)}, "
                               "which is dead after the birth/death edits")
        new.edges[u, v] = op == "add"
        applied_ops.append((op, u, v))
    if has_cycle(new.with_sink()):
        raise EditRejected("the edited graph has a cycle (it must stay a DAG)")
    return new, TopologyEdit(applied_pairs, applied_ops, edit.time_control, edit.rationale), notes


def rule_based_edit(graph: TeamGraph, recent: list, pi: np.ndarray, template: np.ndarray, t: int,
                    config: TacoMASConfig) -> TopologyEdit:
    """The simulated team's stand-in for the meta-LLM (App. D.1 Listing 2, see the module
    docstring). ``recent``: per agent its recent contributions (the last ``death_window``)."""
    cfg = config
    n = graph.n_agents
    mean_c = {v: float(np.mean(recent[v])) for v in range(n) if graph.alive[v] and len(recent[v])}
    full = [v for v in mean_c if len(recent[v]) >= cfg.death_window]
    low = sorted((v for v in full if mean_c[v] < cfg.death_threshold), key=lambda v: (mean_c[v], pi[v], v))
    deaths: list[int] = []
    alive_left = int(graph.alive.sum())
    for v in low:
        if len(deaths) < cfg.max_birth_death_pairs and alive_left > 1:
            deaths.append(v)
            alive_left -= 1
    ready = sorted((int(v) for v in np.flatnonzero(~graph.alive) if t - graph.died_at[v] >= cfg.rebirth_after),
                   key=lambda v: (graph.died_at[v], v))
    births = ready[:cfg.max_birth_death_pairs]
    pairs = [(deaths[i] if i < len(deaths) else None, births[i] if i < len(births) else None)
             for i in range(min(cfg.max_birth_death_pairs, max(len(deaths), len(births))))]
    alive = graph.alive.copy()
    alive[deaths] = False
    alive[births] = True
    edges = graph.edges & alive[:, None] & alive[None, :]
    candidates: list[tuple[float, str, int, int]] = []
    for b in births:
        for u, v in zip(*np.nonzero(template)):
            if b in (u, v) and alive[u] and alive[v]:
                candidates.append((math.inf, "add", int(u), int(v)))
    for u in mean_c:
        for v in mean_c:
            if u == v or not (alive[u] and alive[v]):
                continue
            gap = mean_c[v] - mean_c[u]
            if edges[u, v] and gap > cfg.edge_margin:
                candidates.append((gap, "remove", u, v))
    candidates.sort(key=lambda e: (-e[0], e[1] != "remove", e[2], e[3]))
    ops: list[tuple[str, int, int]] = []
    for _, op, u, v in candidates:
        if len(ops) >= cfg.max_edge_edits:
            break
        if op == "add":
            if edges[u, v]:
                continue
            edges[u, v] = True
            if has_cycle(edges):
                edges[u, v] = False
                continue
        else:
            edges[u, v] = False
        ops.append((op, u, v))
    why = []
    if deaths:
        why.append("death for mean contribution < %.2f: %s" % (cfg.death_threshold, ", ".join(map(agent_name, deaths))))
    if births:
        why.append("revived: " + ", ".join(map(agent_name, births)))
    if ops:
        why.append(f"{len(ops)} edge edit(s): evidence no longer flows from weaker to stronger agents")
    return TopologyEdit(pairs, ops, "continue", "; ".join(why) or "no edit")


# -- the slow loop: the meta-LLM ---------------------------------------------------------------

META_SYSTEM_PROMPT = """You are the meta-controller of a multi-agent LLM system that solves
a single task instance by evolving its topology and the capabilities
of its agents at inference time.
On every invocation ("slow update"), you receive:
1. the task description and a running task profile,
2. the current agent graph as JSON,
3. fast-round traces per agent (tool calls, critiques, round reward),
4. the most recent global round scores.
You output a structured JSON object with the following fields:
- birth_death_pairs: at most 2 pairs (v_dead, v_new_spec)
- graph_edit: at most 4 (edge_add|edge_remove) operations
- graph_diff: the implied graph delta, for provenance
- agent_feedback: per-agent capability deltas (prompt edits, memory seeds)
- global_rationale: short free-text reasoning, <= 3 sentences
- time_control: one of {continue, slow_again, stop}
Hard constraints:
- do NOT delete the sink agent;
- do NOT spawn > 2 agents per slow update;
- do NOT edit > 4 edges per slow update;
- prefer edits that re-route evidence over edits that spawn new roles;
- if round scores are monotone-improving, choose time_control = continue."""

META_DEVELOPER_PROMPT = """Follow this procedure:
1. Read the task profile and identify the missing evidence slots.
2. Inspect per-agent reward trajectories. Mark agents with
reward < 0.2 for possible death; mark evidence slots with no
assigned agent for possible birth.
3. If a single agent is handling > 2 distinct sub-goals, propose
splitting via a birth/death pair.
4. Re-wire edges so each evidence slot has a clear producer->
consumer path to the sink.
5. Emit the JSON output.
Format (this team has a fixed set of slots; a birth revives a dead slot):
{"birth_death_pairs": [["agent_1", "agent_0"]], "graph_edit": [{"op": "edge_add", "src": "agent_0",
"dst": "agent_2"}], "graph_diff": "...", "agent_feedback": {}, "global_rationale": "...",
"time_control": "continue"}. Use null for an empty side of a pair."""


def meta_llm_prompt(task: str, graph_json: dict, summaries: dict, round_scores: list[float]) -> str:
    """App. D.1's three listings as one prompt (system, developer, user payload)."""
    user = (f"Task: {task}\n\nCurrent graph:\n{json.dumps(graph_json)}\n\nPer-agent fast-round summaries:\n"
            f"{json.dumps(summaries)}\n\nRecent round scores (oldest to newest):\n"
            f"{json.dumps([round(float(s), 3) for s in round_scores])}\n\nProvide the JSON object now.")
    return f"{META_SYSTEM_PROMPT}\n\n{META_DEVELOPER_PROMPT}\n\n{user}"


def _reference(value: Any, n: int, what: str) -> int | None:
    """An agent reference (``3``, ``"3"``, ``"agent_3"``) or the sink (``"sink"``, ``N``) as an index."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise EditRejected(f"{what}: {value!r} is not an agent")
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, str):
        text = value.strip().lower()
        if text in (SINK, "decision", "decision_node"):
            return n
        if text.startswith("agent_"):
            text = text[len("agent_"):]
        if text.isdigit():
            return int(text)
    raise EditRejected(f"{what}: unknown agent {value!r}")


def parse_meta_edit(text: str, n_agents: int) -> TopologyEdit:
    """The meta-LLM's reply (App. D.1 JSON object, optionally inside prose or a code fence) as a
    :class:`TopologyEdit`; raises :class:`EditRejected` when it does not parse or has the wrong form.

    ``birth_death_pairs``: ``[v_dead, v_new_spec]`` lists or ``{"v_dead", "v_new_spec"}`` objects;
    v_new_spec is null, an agent (the slot to revive) or an object with ``slot``/``agent``/``id``
    (a spec without one revives the slot dead longest). ``graph_edit``: ``{"op": "edge_add" |
    "edge_remove", "src", "dst"}`` (``from``/``to`` also read). ``graph_diff`` and
    ``agent_feedback`` are provenance / capability deltas, not applied on the simulated team."""
    n = int(n_agents)
    if not isinstance(text, str):
        raise EditRejected(f"the meta-LLM returned {type(text).__name__}, not text")
    start, stop = text.find("{"), text.rfind("}")
    if start < 0 or stop <= start:
        raise EditRejected("no JSON object in the meta-LLM's reply")
    try:
        obj = json.loads(text[start:stop + 1])
    except json.JSONDecodeError as err:
        raise EditRejected(f"the meta-LLM's JSON does not parse: {err.msg} at char {err.pos}") from None
    if not isinstance(obj, dict):
        raise EditRejected("the meta-LLM's reply is not a JSON object")
    raw_pairs = obj.get("birth_death_pairs") or []
    raw_edits = obj.get("graph_edit") or []
    if not isinstance(raw_pairs, list) or not isinstance(raw_edits, list):
        raise EditRejected("birth_death_pairs and graph_edit must be lists")
    pairs: list[tuple[int | None, int | None]] = []
    for i, pair in enumerate(raw_pairs):
        if isinstance(pair, dict):
            dead = pair.get("v_dead", pair.get("dead"))
            spec = pair.get("v_new_spec", pair.get("new", pair.get("spec")))
        elif isinstance(pair, (list, tuple)) and len(pair) == 2:
            dead, spec = pair
        else:
            raise EditRejected(f"birth_death_pairs[{i}] must be [v_dead, v_new_spec], got {pair!r}")
        born: int | None
        if isinstance(spec, dict):
            slot = next((spec[k] for k in ("slot", "agent", "id") if k in spec), None)
            born = ANY_FREE_SLOT if slot is None else _reference(slot, n, f"birth_death_pairs[{i}] birth")
        else:
            born = _reference(spec, n, f"birth_death_pairs[{i}] birth")
        pairs.append((_reference(dead, n, f"birth_death_pairs[{i}] death"), born))
    ops: list[tuple[str, int, int]] = []
    for i, edit in enumerate(raw_edits):
        if not isinstance(edit, dict):
            raise EditRejected(f"graph_edit[{i}] must be an object with op, src, dst")
        op = str(edit.get("op", edit.get("type", ""))).strip().lower()
        op = {"edge_add": "add", "add": "add", "edge_remove": "remove", "remove": "remove"}.get(op, op)
        src = _reference(edit.get("src", edit.get("from")), n, f"graph_edit[{i}] src")
        dst = _reference(edit.get("dst", edit.get("to")), n, f"graph_edit[{i}] dst")
        if src is None or dst is None:
            raise EditRejected(f"graph_edit[{i}] needs both src and dst")
        ops.append((op, src, dst))
    control = str(obj.get("time_control", "continue")).strip().lower()
    return TopologyEdit(pairs, ops, control, str(obj.get("global_rationale", ""))[:500])


def meta_llm_edit(propose: Callable[[str], str], prompt: str, graph: TeamGraph, config: TacoMASConfig
                  ) -> tuple[TeamGraph, TopologyEdit, list[str]]:
    """Ask ``propose`` for an edit and validate it; raises :class:`EditRejected` (with the reason)
    when the reply is unusable, including when ``propose`` itself raises."""
    try:
        reply = propose(prompt)
    except Exception as err:  # a failing meta-LLM call must not end the run
        raise EditRejected(f"the meta-LLM call failed: {type(err).__name__}: {err}") from None
    edit = parse_meta_edit(reply, graph.n_agents)
    return validate_edit(edit, graph, config.max_birth_death_pairs, config.max_edge_edits)


# -- the controller ----------------------------------------------------------------------------

class TacoMASController(Controller):
    """TacoMAS on the orchestrator env's graph mode (see the module docstring).

    ``propose``: the meta-LLM (``prompt -> reply``) for the slow loop; None = the rule-based
    proposer. ``edit_log``: one entry per slow update (round, source, outcome, reason)."""

    name = "tacomas"
    mode = "graph"
    trainable = False
    online = True  # the graph, alive set and weights evolve over the stream: one episode at a time

    def __init__(self, n_agents: int, rounds: int, seed: int, config: TacoMASConfig | None = None,
                 propose: Callable[[str], str] | None = None):
        self.n_agents = n = int(n_agents)
        if n < 1:
            raise ValueError(f"n_agents={n_agents!r} must be >= 1")
        self.rounds = int(rounds)
        self.seed = int(seed)  # nothing here draws at random; kept for the leaderboard's record
        self.config = cfg = config or TacoMASConfig()
        if not -1 <= cfg.leader < n:
            raise ValueError(f"tacomas config: leader={cfg.leader} is not an agent of a team of {n} (use -1..{n - 1})")
        self.propose = propose
        self.template = centralized_template(n, cfg.leader % n)
        self.graph = TeamGraph.initial(self.template)
        self.pi = np.full(n, 1.0 / n)
        self.recent: list[deque] = [deque(maxlen=cfg.death_window) for _ in range(n)]
        self.t = 0  # rounds scored over the stream (Alg. 1's t)
        self.round_scores: deque = deque(maxlen=10)
        self.slow_updates = 0
        self.edit_log: list[dict] = []
        self._slow_again = False
        self._stop = False
        self._pending_calls: np.ndarray | None = None
        self._last_outputs: list | None = None

    # -- episode ---------------------------------------------------------------------------
    def begin(self, observation: dict, info: dict) -> None:
        self._stop = False
        self._pending_calls = None
        self._last_outputs = None

    def act(self, observation: dict, info: dict) -> Any:
        calls = np.asarray(info.get("calls", np.zeros(self.n_agents)), dtype=int)
        if int(observation["round"]) > 0 and calls.sum() > 0:
            outputs = info.get("outputs")
            self._last_outputs = outputs
            judgement = judge_round(outputs, calls > 0, None, self.pi)
            if self.config.halt_on_success and judgement.estimate >= self.config.tau:
                self._pending_calls = calls  # scored at the end, with the outcome
                return graph_action(self.n_agents, halt=True)
            self._observe_round(calls, outputs, None)
        if self._stop:
            return graph_action(self.n_agents, halt=True)
        alive = self.graph.alive.astype(np.int8)
        return graph_action(self.n_agents, adjacency=self.graph.played_edges(), active=alive,
                            verify=alive if self.config.verify else None)

    def end(self, observation: dict, reward: float, info: dict) -> None:
        calls = np.asarray(info.get("calls", np.zeros(self.n_agents)), dtype=int)
        accuracy = float(info.get("accuracy", 0.0))
        if calls.sum() > 0:
            self._observe_round(calls, info.get("outputs"), accuracy)
        elif self._pending_calls is not None:
            self._observe_round(self._pending_calls, info.get("outputs") or self._last_outputs, accuracy)
        else:
            self.round_scores.append(accuracy)
        self._pending_calls = None

    # -- the two loops -----------------------------------------------------------------------
    def _observe_round(self, calls: np.ndarray, outputs: list | None, accuracy: float | None) -> None:
        """Fast loop on one played round, then the slow loop when it is due (Alg. 1 lines 6-12)."""
        called = (np.asarray(calls) > 0) & self.graph.alive
        judgement = judge_round(outputs, called, accuracy, self.pi)
        self.pi = replicator_update(self.pi, judgement.contributions, self.config.eta)
        for v in np.flatnonzero(np.isfinite(judgement.contributions)):
            self.recent[v].append(float(judgement.contributions[v]))
        score = judgement.estimate if accuracy is None else float(accuracy)
        self.round_scores.append(score)
        due = (self.t + 1) % self.config.slow_interval == 0 or self._slow_again
        if due:
            self._slow_again = False
            if score < self.config.tau:
                self._slow_update(outputs)
        self.t += 1

    def mean_contributions(self) -> dict[int, float]:
        """Per alive agent with a history, its mean recent contribution."""
        return {v: float(np.mean(self.recent[v])) for v in range(self.n_agents)
                if self.graph.alive[v] and len(self.recent[v])}

    def _slow_update(self, outputs: list | None) -> None:
        """One slow topology update (Alg. 1 lines 10-11); a rejected proposal leaves T_t as it is."""
        cfg = self.config
        self.slow_updates += 1
        source = "meta_llm" if self.propose is not None else "rule"
        try:
            if self.propose is not None:
                new, edit, notes = meta_llm_edit(self.propose, self.meta_prompt(outputs), self.graph, cfg)
            else:
                edit = rule_based_edit(self.graph, self.recent, self.pi, self.template, self.t, cfg)
                new, edit, notes = validate_edit(edit, self.graph, cfg.max_birth_death_pairs, cfg.max_edge_edits)
        except EditRejected as err:
            logger.warning("tacomas: slow update at round %d: %s edit rejected: %s; the topology is kept",
                           self.t, source, err)
            self.edit_log.append({"round": self.t, "source": source, "applied": False, "reason": str(err)})
            return
        for note in notes:
            logger.warning("tacomas: slow update at round %d: %s", self.t, note)
        self._commit(new, edit)
        self.edit_log.append({"round": self.t, "source": source, "applied": True, "reason": edit.rationale,
                              "pairs": edit.pairs, "edge_ops": edit.edge_ops, "notes": notes})

    def _commit(self, new: TeamGraph, edit: TopologyEdit) -> None:
        """Install ``new`` (validated): stamp deaths, give births a fresh weight, act on time_control."""
        died = np.flatnonzero(self.graph.alive & ~new.alive)
        born = np.flatnonzero(~self.graph.alive & new.alive)
        new.died_at[died] = self.t
        pi = self.pi.copy()
        pi[died] = 0.0
        for v in list(died) + list(born):
            self.recent[v].clear()
        if pi[new.alive].sum() <= 0:
            pi[new.alive] = 1.0
        pi /= pi.sum()
        for v in born:  # a fresh agent gets a uniform share, the others make room
            share = 1.0 / int(new.alive.sum())
            pi *= 1.0 - share
            pi[v] = share
        self.pi = pi / pi.sum()
        self.graph = new
        if edit.time_control == "stop":
            self._stop = True
        elif edit.time_control == "slow_again":
            self._slow_again = True

    def meta_prompt(self, outputs: list | None) -> str:
        """The meta-LLM's prompt for the current state (App. D.1)."""
        means = self.mean_contributions()
        summaries = {}
        for v in range(self.n_agents):
            out = outputs[v] if outputs is not None and v < len(outputs) else None
            summaries[agent_name(v)] = {
                "alive": bool(self.graph.alive[v]),
                "recent_contributions": [round(c, 3) for c in self.recent[v]],
                "last_output": None if out is None else str(out.get("text", ""))[:400],
            }
        task = "(the task text is not shown to the controller; judge from the agents' outputs)"
        return meta_llm_prompt(task, self.graph.to_json(self.pi, means), summaries, list(self.round_scores))

    # -- state -------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {"edges": self.graph.edges.copy(), "alive": self.graph.alive.copy(),
                "died_at": self.graph.died_at.copy(), "pi": self.pi.copy(),
                "recent": [list(r) for r in self.recent], "t": self.t, "round_scores": list(self.round_scores),
                "slow_updates": self.slow_updates, "slow_again": self._slow_again}

    def load_state_dict(self, state: dict) -> None:
        self.graph = TeamGraph(np.asarray(state["edges"], dtype=bool).copy(), np.asarray(state["alive"], dtype=bool).copy(),
                               np.asarray(state["died_at"], dtype=np.int64).copy())
        self.pi = np.asarray(state["pi"], dtype=float).copy()
        self.recent = [deque(r, maxlen=self.config.death_window) for r in state["recent"]]
        self.t = int(state["t"])
        self.round_scores = deque(state["round_scores"], maxlen=10)
        self.slow_updates = int(state["slow_updates"])
        self._slow_again = bool(state["slow_again"])


def build(n_agents: int, rounds: int, seed: int, config: dict | None = None,
          propose: Callable[[str], str] | None = None) -> TacoMASController:
    """A TacoMAS controller for a team of ``n_agents`` (``config``: :class:`TacoMASConfig` keys;
    ``propose``: a meta-LLM for the slow loop, None = the rule-based proposer)."""
    return TacoMASController(n_agents, rounds, seed, TacoMASConfig.from_dict(config), propose)
