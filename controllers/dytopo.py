"""DyTopo (seed 001, "DyTopo: Dynamic Topology Routing for Multi-Agent Reasoning via Semantic
Matching"): every round each agent states what it needs (query) and what it offers (key); the
graph of the next round routes j -> i where i's need matches j's offer. No training.

The method, on the orchestrator env in ``mode="graph"``:

* **Round 1** (Algorithm 1, t = 0): memories are empty and nobody has stated a descriptor yet,
  so every agent runs on the task alone (no edges).
* **Descriptors** (Sec. 3.1, Eq. 2; prompts of App. B.1): each agent's reply carries a need and
  an offer. They are read from ``info["outputs"][i]["text"]`` on every backend by
  :func:`parse_descriptors`: lines ``NEED: ...`` / ``OFFER: ...`` (case-insensitive, markdown
  decoration allowed) or the paper's JSON object (``q_vector`` / ``k_vector``, also ``q_desc`` /
  ``k_desc``, ``query`` / ``key``, ``need`` / ``offer``). The simulated team writes the lines
  from its agents' state (:mod:`topo_env.sim.descriptors`); an LLM team writes them itself.
* **Semantic matching** (Sec. 3.3.1, Eqs. 4-5): both are embedded with all-MiniLM-L6-v2
  (``make_encoder("minilm")``, 384-d, L2-normalised, cached by text; App. B.2) and
  r_ij = q_i . k_j.
* **Sparse graph** (Sec. 3.3.2, Eq. 6; Table 7): edge j -> i iff r_ij > ``tau`` and i != j; each
  agent keeps at most ``k_in`` incoming edges, the most relevant (ties: lower j).
* **Barrier** (Sec. 3.2.2, Eq. 3): round-t private messages reach their recipients' memories for
  round t + 1, never during round t. The edges built from round-t descriptors are therefore sent
  as the action's ``recall`` (``recall[j, i] = 1``: i is shown j's latest output, from the
  previous round), with an empty ``adjacency``: nobody sees a message of the round it runs in.
  Every agent runs every round (Algorithm 1, Phase 1) and also sees its own previous output (its
  memory H_i: the env's ``own_previous``).
* **Manager** (Sec. 3.5, Eqs. 13-14): after each round it decides ``is_complete`` from the round's
  public outputs; complete -> the next action calls nobody and halts, so the decision node answers
  from the outputs just produced. Here Phi >= gamma_success is a rule (:func:`manager_complete`):
  every agent has answered, all answers are equal, every stated confidence is at least
  ``halt_confidence`` and no output failed the verifier (App. B.1: "Only set is_complete=True if
  Solution exists AND Verification passes"). The rounds stop at ``t_max`` (Table 7: T = 10) or at
  the env's own cap, whichever comes first.

Bad input: a reply whose need or offer cannot be read (no lines, no JSON with the fields, an empty
or non-string value) is logged with the reason and that side is left out: an agent without a need
receives nothing next round, one without an offer sends nothing (no descriptor, no semantic match;
the paper states no fallback). An agent that has not spoken has neither. Nothing here raises on a
reply.

Deviations from the paper (and why):

* The manager is a rule over the agents' answers and confidences, not an LLM call (the env has no
  manager agent; a rule costs no tokens and is reproducible). It writes no next-round goal
  C_task^(t+1): the env has no channel to inject one.
* Messages are whole outputs, not separate public / private channels (the env's agents write one
  reply); recalled messages reach an agent in sender order, not by decreasing relevance (Sec. 3.4:
  the env's executor orders them), so the aggregation order sigma is not used.
* ``tau`` defaults to 0.3, the best value on APPS-Competition (Table 3; Table 2's APPS result is
  the tau = 0.3 run); Omni-MATH's best is 0.4. The paper gives no single default (Table 7:
  0.1-0.9) and our tasks are neither; the simulated team's descriptor templates were written to
  separate at both (:mod:`topo_env.sim.descriptors`).
"""
from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from controllers.base import (Controller, config_flag, config_from_dict, config_integer, config_number,
                              graph_action)
from topo_env.frontends.encoders import TaskEncoder, make_encoder

logger = logging.getLogger(__name__)

TRAIN_EPISODES: int = 0
"""DyTopo needs no training (Sec. 3: a fixed encoder, a threshold and a prompted manager)."""

ENV_ROUNDS: int | None = None
"""The profile's default rounds (2 for mmlu_pro, 3 for math), as QMIX and the fixed baselines get.
DyTopo needs two rounds to route anything (round 1 has no descriptors) and its manager halts early;
the paper's T_max = 10 is a cap it rarely reaches (2.6 rounds on average, App. D.1), and tokens are
charged in the reward, so a longer cap is not needed by the method. ``t_max`` caps it further."""

ENV_KEYS: dict = {"descriptors": True}
"""Env keys DyTopo needs: agents end their replies with NEED/OFFER lines (EnvConfig.descriptors)."""

MAX_DESCRIPTOR_CHARS = 500
"""Longer descriptors are cut (MiniLM reads 256 word pieces at most anyway)."""

NEED_FIELDS = ("q_vector", "q_desc", "query", "need")
"""JSON fields holding the need (query) descriptor, in order of preference (App. B.1 uses the first two)."""
OFFER_FIELDS = ("k_vector", "k_desc", "key", "offer")
"""JSON fields holding the offer (key) descriptor."""

_LINE = re.compile(r"^[ \t>*_#-]*(need|offer)[*_ \t]*[:=][ \t]*(.*?)[ \t*_]*$", re.IGNORECASE | re.MULTILINE)


@dataclass(frozen=True)
class DytopoConfig:
    """DyTopo's settings (paper defaults)."""

    tau: float = 0.3  # Sec. 3.3.2 Eq. 6, tau_edge; Table 3: best 0.3 (APPS), 0.4 (Omni-MATH)
    k_in: int = 3  # Table 7: max in-degree K_in = 3
    t_max: int = 10  # Table 7 / Algorithm 1: T_max = 10 rounds
    early_stop: bool = True  # Sec. 4.2: manager-controlled early stopping on by default
    # Eq. 14's gamma_success (the paper gives no value): the least stated confidence with which a unanimous
    # round is complete; 0.5 = every agent rates its answer more likely right than not (on the sim's train
    # split lower is better: a second round after unanimity adds tokens, not accuracy)
    halt_confidence: float = 0.5

    @classmethod
    def from_dict(cls, d: dict | None) -> "DytopoConfig":
        """A config from a mapping of the keys above; unknown keys and bad values raise a one-line
        ValueError naming the key and the fix."""
        return config_from_dict(cls, d, "dytopo config", {
            "tau": config_number(-1.0, 1.0), "k_in": config_integer(1), "t_max": config_integer(1),
            "early_stop": config_flag, "halt_confidence": config_number(0.0, 1.0)})


# -- descriptors -------------------------------------------------------------------------
def _clean(value: Any) -> str | None:
    """A usable descriptor string, or None (not a string, or empty)."""
    if not isinstance(value, str):
        return None
    value = value.strip().strip("\"'`").strip()
    return value[:MAX_DESCRIPTOR_CHARS] or None


def _json_descriptors(text: str) -> tuple[str | None, str | None]:
    """(need, offer) from the last JSON object in ``text`` that has a need or offer field."""
    decoder = json.JSONDecoder()
    found: tuple[str | None, str | None] = (None, None)
    start = text.find("{")
    while start != -1:
        try:
            obj, end = decoder.raw_decode(text, start)
        except ValueError:
            start = text.find("{", start + 1)
            continue
        if isinstance(obj, dict):
            fields = {str(k).lower(): v for k, v in obj.items()}
            need = next((_clean(fields[k]) for k in NEED_FIELDS if k in fields), None)
            offer = next((_clean(fields[k]) for k in OFFER_FIELDS if k in fields), None)
            if need is not None or offer is not None:
                found = (need, offer)
        start = text.find("{", end)
    return found


def parse_descriptors(text: Any) -> tuple[str | None, str | None]:
    """(need, offer) descriptors of one reply, None where absent or unreadable.

    Reads the paper's JSON object (:data:`NEED_FIELDS` / :data:`OFFER_FIELDS`, field names in any
    case; the last object with such a field wins) and, for what it lacks, ``NEED: ...`` /
    ``OFFER: ...`` lines (any case, markdown bullets or bold allowed; the last line wins: a reply
    may quote the format before answering it). Never raises."""
    if not isinstance(text, str) or not text:
        return None, None
    need, offer = _json_descriptors(text) if "{" in text else (None, None)
    if need is None or offer is None:
        lines: dict[str, str | None] = {}
        for match in _LINE.finditer(text):
            value = _clean(match.group(2))
            if value is not None:
                lines[match.group(1).lower()] = value
        need = need if need is not None else lines.get("need")
        offer = offer if offer is not None else lines.get("offer")
    return need, offer


# -- routing -----------------------------------------------------------------------------
def relevance_matrix(queries: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """(N, N) relevance ``r[i, j] = q_i . k_j`` (Eq. 5) of (N, d) unit-norm queries and keys."""
    q = np.asarray(queries, dtype=np.float64)
    k = np.asarray(keys, dtype=np.float64)
    return q @ k.T


def route(relevance: np.ndarray, tau: float, k_in: int, has_need: Any = None, has_offer: Any = None) -> np.ndarray:
    """(N, N) 0/1 ``edges[j, i] = 1`` for j -> i (j's output reaches i): ``relevance[i, j] > tau``
    (Eq. 6), no self-loops, at most ``k_in`` per receiver i, the most relevant (ties: lower j).
    ``has_need[i]`` / ``has_offer[j]`` False: i receives / j sends nothing (no descriptor)."""
    r = np.asarray(relevance, dtype=np.float64)
    n = r.shape[0]
    eligible = r > tau
    np.fill_diagonal(eligible, False)
    if has_need is not None:
        eligible &= np.asarray(has_need, dtype=bool)[:, None]
    if has_offer is not None:
        eligible &= np.asarray(has_offer, dtype=bool)[None, :]
    edges = np.zeros((n, n), dtype=np.int8)
    for i in range(n):
        providers = np.flatnonzero(eligible[i])
        if providers.size > k_in:
            providers = providers[np.lexsort((providers, -r[i, providers]))][:k_in]
        edges[providers, i] = 1
    return edges


# -- manager -----------------------------------------------------------------------------
def manager_complete(outputs: list, halt_confidence: float) -> bool:
    """The manager's ``is_complete`` (Eq. 14) from the round's outputs (``info["outputs"]``): every
    agent has an answer, all answers are equal, every confidence >= ``halt_confidence`` and no
    verdict is a failure (-1)."""
    if not outputs or any(o is None for o in outputs):
        return False
    answers = [o.get("answer") for o in outputs]
    if answers[0] is None or any(a != answers[0] for a in answers):
        return False
    for o in outputs:
        conf = o.get("confidence")
        if conf is None or float(conf) < halt_confidence or int(o.get("verdict") or 0) < 0:
            return False
    return True


class DytopoController(Controller):
    """DyTopo on the orchestrator env in graph mode (module docstring).

    ``trace`` holds the episode's rounds as routed: per round from 2 on, the needs, offers, the
    relevance matrix ``r[i, j] = q_i . k_j`` and the recall edges ``[j, i]`` sent."""

    name = "dytopo"
    mode = "graph"
    trainable = False

    def __init__(self, n_agents: int, rounds: int, seed: int = 0, config: DytopoConfig | None = None,
                 encoder: TaskEncoder | None = None):
        self.n_agents = int(n_agents)
        self.rounds = int(rounds)
        self.seed = int(seed)  # DyTopo draws nothing at random; kept for the common build() signature
        self.config = config or DytopoConfig()
        self.encoder = encoder if encoder is not None else make_encoder("minilm")
        self.trace: list[dict[str, Any]] = []

    def shared(self) -> tuple:
        """Copies for episodes in flight share the MiniLM encoder (and its cache)."""
        return (self.encoder,)

    def begin(self, observation: dict, info: dict) -> None:
        self.trace = []

    def act(self, observation: dict, info: dict) -> dict[str, np.ndarray | int]:
        n, cfg = self.n_agents, self.config
        t = int(observation["round"])  # rounds run so far
        everyone = np.ones(n, dtype=np.int8)
        last = t + 1 >= cfg.t_max
        if t == 0:
            return graph_action(n, active=everyone, halt=last)
        outputs = list(info.get("outputs") or [None] * n)
        if cfg.early_stop and manager_complete(outputs, cfg.halt_confidence):
            self.trace.append({"round": t + 1, "halted": True})
            return graph_action(n, halt=True)  # nobody runs: the decision node reads round t's outputs
        edges = self.round_edges(outputs, t)
        return graph_action(n, active=everyone, recall=edges, halt=last)

    def round_edges(self, outputs: list, t: int) -> np.ndarray:
        """The recall edges ``[j, i]`` of the next round from the outputs' descriptors (logged and
        left out where unreadable)."""
        n = self.n_agents
        needs: list[str | None] = []
        offers: list[str | None] = []
        for i in range(n):
            output = outputs[i] if i < len(outputs) else None
            need, offer = parse_descriptors(output.get("text") if isinstance(output, dict) else None)
            if output is not None and (need is None or offer is None):
                missing = " and ".join(w for w, v in (("NEED", need), ("OFFER", offer)) if v is None)
                logger.warning("dytopo round %d: agent %d's reply has no readable %s descriptor; it %s next "
                               "round", t, i, missing,
                               "neither receives nor sends" if need is None and offer is None
                               else "receives nothing" if need is None else "sends nothing")
            needs.append(need)
            offers.append(offer)
        dim = self.encoder.dim
        queries = np.stack([self.encoder.encode(s) if s else np.zeros(dim, np.float32) for s in needs])
        keys = np.stack([self.encoder.encode(s) if s else np.zeros(dim, np.float32) for s in offers])
        relevance = relevance_matrix(queries, keys)
        edges = route(relevance, self.config.tau, self.config.k_in,
                      [s is not None for s in needs], [s is not None for s in offers])
        self.trace.append({"round": t + 1, "needs": needs, "offers": offers, "relevance": relevance,
                           "edges": edges})
        return edges


def build(n_agents: int, rounds: int, seed: int, config: dict | None = None) -> DytopoController:
    """The leaderboard's constructor: DyTopo for ``n_agents`` agents and ``rounds`` env rounds."""
    return DytopoController(n_agents, rounds, seed, DytopoConfig.from_dict(config))
