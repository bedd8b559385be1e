"""AgentConductor's topology language: a layered DAG written in YAML (paper Sec. 2.1, Fig. 1, App. A.3).

A plan is a YAML list of steps; each step lists nodes, and a node is ONE call of one team member::

    - step: 1
      agents:
        - {name: draft_a, agent: 0, ref: []}
        - {name: draft_b, agent: specialist, ref: []}
    - step: 2
      agents:
        - {name: review, agent: analyzer, ref: [draft_a, draft_b]}

``name``: the node's id (unique; what ``ref`` lists). ``agent``: the team member: an index
``0..N-1``, ``"agent_k"``, or a role kind (``specialist`` / ``analyzer``: the first member of that
role not yet called in the same step). ``ref`` (optional, default ``[]``): names of nodes of
earlier steps (or, in turn 2, of the previous turn's plan) whose outputs this node reads; a ref
``u`` in node ``v`` is the edge u -> v.

Checking (:func:`check_plan`) sorts every text into the paper's four error classes (Table 1,
Eq. 10) or accepts it, in this order:

* ``no_yaml`` [NO YAML FOUND] (-2.0): empty text, only comments, or prose (a plain scalar) with
  no fenced block;
* ``parse`` [YAML PARSE ERROR] (-1.5): :func:`yaml.safe_load` raised;
* ``schema`` [YAML SCHEMA INVALID] (-1.0): not a non-empty list of ``{step: int, agents:
  non-empty list}``, a node without ``name``/``agent``, an unknown key, a wrong type, an
  ``agent`` that names no team member;
* ``logic`` [YAML LOGIC INVALID] (-0.5): the App. A.3 / Definition 1 rules: steps numbered
  1..s in order, unique names, first step refs empty (but for refs to the previous turn's nodes,
  as in Fig. 1's turn 2), refs only to nodes of earlier steps
  (sequentiality), no duplicate ref, every node outside the final step referenced by a later
  node (conciseness); and ours: one member at most once per step, and the plan must fit the
  env rounds the turn has (see :func:`pack_rounds`).

Valid YAML earns 0 (Sec. 2.3: "no reward value is applied for successful YAML validation").

Decoding (:func:`pack_rounds`) maps a plan onto env rounds (graph mode RoundSpecs): steps are put
in order into the current round while none of the step's members was already called in it, else
a new round starts. A ref to a node of the same round becomes ``adjacency[u, v]`` (the executor
runs a round in dependency layers, so earlier steps run first); a ref to a node of an earlier
round becomes ``recall[u, v]`` (the env shows u's latest output of an earlier round: if u's
member spoke again in a round between, v sees that later output, an approximation of the paper's
per-node memory). The final step's nodes are verified (``verify``): our verifier plays the
paper's tester (App. C.3.6), which the team does not have as a member.

Density (:func:`s_complex`, :func:`graph_term`) follows Eqs. 4-7 and 12-13 exactly.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import yaml

from topo_env.engine.episode import RoundSpec
from topo_env.engine.roles import ROLE_KINDS

NO_YAML, PARSE, SCHEMA, LOGIC = "no_yaml", "parse", "schema", "logic"
ERROR_PENALTY: dict[str, float] = {NO_YAML: -2.0, PARSE: -1.5, SCHEMA: -1.0, LOGIC: -0.5}
"""Table 1 (YAML topology correctness rewards); a valid plan earns 0."""

NODE_CAPS: dict[str, int] = {"easy": 4, "medium": 7, "hard": 10}
"""N_max(l): the per-turn node caps of Eq. 12 for difficulty levels 1 / 2 / 3."""

# yaml.safe_load's loader (and safe_dump's dumper) in libyaml's C build when installed: the same
# safe subset of YAML, several times faster (the learned writer's plans are parsed back every turn).
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_SAFE_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
_FENCE = re.compile(r"```[ \t]*(?:yaml|yml)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)
_NODE_KEYS = {"name", "agent", "ref"}


@dataclass(frozen=True)
class Node:
    """One call of team member ``agent`` in step ``step`` (1-based), reading the nodes ``refs``."""

    name: str
    agent: int
    step: int
    refs: tuple[str, ...] = ()


@dataclass(frozen=True)
class Plan:
    """A checked layered DAG: ``steps[i]`` holds the nodes of step i + 1."""

    steps: tuple[tuple[Node, ...], ...]

    @property
    def nodes(self) -> list[Node]:
        return [node for step in self.steps for node in step]

    @property
    def n_nodes(self) -> int:
        """|V| (Eq. 4)."""
        return sum(len(step) for step in self.steps)

    @property
    def n_edges(self) -> int:
        """|E| = the total length of the ref lists (Eq. 5), refs to a previous turn included."""
        return sum(len(node.refs) for node in self.nodes)

    @property
    def n_steps(self) -> int:
        """s, the depth stand-in of Eq. 6."""
        return len(self.steps)


@dataclass
class CheckResult:
    """The outcome of :func:`check_plan`: ``error`` is None (valid) or one of the four classes,
    ``reason`` says why; ``plan`` and ``rounds`` (one RoundSpec per env round, in order) are set
    when valid; ``placement[name] = (round offset, member)`` for every node of the plan."""

    error: str | None
    reason: str = ""
    plan: Plan | None = None
    rounds: list[RoundSpec] = field(default_factory=list)
    placement: dict[str, tuple[int, int]] = field(default_factory=dict)

    @property
    def penalty(self) -> float:
        """The YAML term of the reward (Table 1): 0 when valid."""
        return 0.0 if self.error is None else ERROR_PENALTY[self.error]


class PlanError(Exception):
    """A plan rejected with error class ``kind`` (one of the four) and a reason."""

    def __init__(self, kind: str, reason: str):
        super().__init__(reason)
        self.kind, self.reason = kind, reason


# -- density -------------------------------------------------------------------------------
def s_complex(n_nodes: int, n_edges: int, n_steps: int, n_max: int) -> float:
    """Eq. 6-7: S_complex = exp(S_node + 2 S_edge + S_depth) with S_node = exp(-|V|/N_max),
    S_edge = exp(-|E| / (|V| (|V| - 0.5))), S_depth = 1 - s/|V|. Needs |V| >= 1."""
    if n_nodes < 1:
        raise ValueError(f"s_complex needs at least one node, got |V|={n_nodes}")
    v = float(n_nodes)
    s_node = math.exp(-v / n_max)
    s_edge = math.exp(-n_edges / (v * (v - 0.5)))
    s_depth = 1.0 - n_steps / v
    return math.exp(s_node + 2.0 * s_edge + s_depth)


def graph_term(n_nodes: int, n_edges: int, n_steps: int, n_max: int) -> float:
    """Eq. 13: S_complex if |V| <= N_max, else tanh((N_max - |V|) / N_max) (negative)."""
    if n_nodes <= n_max:
        return s_complex(n_nodes, n_edges, n_steps, n_max)
    return math.tanh((n_max - n_nodes) / n_max)


# -- parsing and checking ------------------------------------------------------------------
def extract_yaml(text: Any) -> tuple[str | None, bool]:
    """The YAML part of an orchestrator's output: the first fenced block if there is one, else
    the whole text; returns (body or None when there is nothing, whether it was fenced)."""
    if not isinstance(text, str):
        return None, False
    match = _FENCE.search(text)
    body, fenced = (match.group(1), True) if match else (text, False)
    return (body if body.strip() else None), fenced


def _member(value: Any, where: str, n_agents: int, roles: Sequence[str] | None, taken: set[int]) -> int:
    """The team member a node's ``agent`` names (schema errors for names of nobody, logic errors
    for a role whose members are all already called in this step)."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise PlanError(SCHEMA, f"{where}.agent is {value!r}: must be a member index 0..{n_agents - 1}, "
                                f"'agent_k' or a role ({', '.join(ROLE_KINDS)})")
    if isinstance(value, str) and re.fullmatch(r"agent_\d+", value):
        value = int(value.split("_")[1])
    if isinstance(value, int):
        if not 0 <= value < n_agents:
            raise PlanError(SCHEMA, f"{where}.agent is {value}: the team has members 0..{n_agents - 1}")
        return value
    if value not in ROLE_KINDS or roles is None or value not in roles:
        known = sorted(set(roles)) if roles is not None else []
        raise PlanError(SCHEMA, f"{where}.agent is {value!r}: names no team member (indices 0..{n_agents - 1}"
                                f"{', roles ' + ', '.join(known) if known else ''})")
    for k, role in enumerate(roles):
        if role == value and k not in taken:
            return k
    raise PlanError(LOGIC, f"{where}.agent {value!r}: every {value} is already called in this step")


def _parse_structure(data: Any, n_agents: int, roles: Sequence[str] | None) -> list[list[dict]]:
    """Schema check; returns per step a list of {name, agent, refs, where} (logic not yet checked)."""
    if not isinstance(data, list) or not data:
        raise PlanError(SCHEMA, f"the plan must be a non-empty list of steps, got {type(data).__name__}"
                                f"{' (empty)' if isinstance(data, list) else ''}")
    steps: list[list[dict]] = []
    for i, step in enumerate(data):
        where = f"steps[{i}]"
        if not isinstance(step, dict):
            raise PlanError(SCHEMA, f"{where} is a {type(step).__name__}: must be a mapping {{step, agents}}")
        if set(step) != {"step", "agents"}:
            raise PlanError(SCHEMA, f"{where} has keys {sorted(map(str, step))}: must be exactly ['agents', 'step']")
        if isinstance(step["step"], bool) or not isinstance(step["step"], int):
            raise PlanError(SCHEMA, f"{where}.step is {step['step']!r}: must be an integer")
        agents = step["agents"]
        if not isinstance(agents, list) or not agents:
            raise PlanError(SCHEMA, f"{where}.agents must be a non-empty list of nodes, got {agents!r}")
        nodes = []
        for j, entry in enumerate(agents):
            at = f"{where}.agents[{j}]"
            if not isinstance(entry, dict):
                raise PlanError(SCHEMA, f"{at} is a {type(entry).__name__}: must be a mapping {{name, agent, ref}}")
            unknown = set(map(str, entry)) - _NODE_KEYS
            if unknown:
                raise PlanError(SCHEMA, f"{at} has unknown keys {sorted(unknown)}: allowed are ['agent', 'name', 'ref']")
            if "name" not in entry or "agent" not in entry:
                raise PlanError(SCHEMA, f"{at} needs both 'name' and 'agent'")
            name = entry["name"]
            if not isinstance(name, str) or not name:
                raise PlanError(SCHEMA, f"{at}.name is {name!r}: must be a non-empty string")
            refs = entry.get("ref", [])
            refs = [] if refs is None else refs
            if not isinstance(refs, list) or not all(isinstance(r, str) for r in refs):
                raise PlanError(SCHEMA, f"{at}.ref is {refs!r}: must be a list of node names")
            nodes.append({"name": name, "agent": entry["agent"], "refs": refs, "where": at})
        steps.append(nodes)
    # members are resolved after the structure is known to be well formed
    for nodes in steps:
        taken: set[int] = set()
        for node in nodes:
            k = _member(node["agent"], node["where"], n_agents, roles, taken)
            if k in taken:
                raise PlanError(LOGIC, f"{node['where']}: member {k} is called twice in one step")
            taken.add(k)
            node["member"] = k
    return steps


def _check_logic(data: list, steps: list[list[dict]], known: Sequence[str]) -> Plan:
    """Definition 1 / App. A.3 rules on a schema-valid plan."""
    numbers = [step["step"] for step in data]
    if numbers != list(range(1, len(numbers) + 1)):
        raise PlanError(LOGIC, f"steps are numbered {numbers}: must be 1..{len(numbers)} in order")
    step_of: dict[str, int] = {}
    for i, nodes in enumerate(steps):
        for node in nodes:
            if node["name"] in step_of or node["name"] in known:
                raise PlanError(LOGIC, f"{node['where']}: the name {node['name']!r} is used twice")
            step_of[node["name"]] = i
    referenced: set[str] = set()
    for i, nodes in enumerate(steps):
        for node in nodes:
            refs = node["refs"]
            if i == 0 and any(ref not in known for ref in refs):  # refs to the previous turn are allowed
                raise PlanError(LOGIC, f"{node['where']}: nodes of step 1 must have empty ref (or ref only the "
                                       f"previous turn's nodes), got {refs}")
            if len(set(refs)) != len(refs):
                raise PlanError(LOGIC, f"{node['where']}: ref {refs} lists a node twice")
            for ref in refs:
                if ref in known:
                    continue
                if ref not in step_of:
                    raise PlanError(LOGIC, f"{node['where']}: ref {ref!r} names no node")
                if step_of[ref] >= i:
                    raise PlanError(LOGIC, f"{node['where']}: ref {ref!r} is in step {step_of[ref] + 1}, "
                                           f"not an earlier step than {i + 1}")
                referenced.add(ref)
    for nodes in steps[:-1]:
        for node in nodes:
            if node["name"] not in referenced:
                raise PlanError(LOGIC, f"{node['where']} ({node['name']!r}) is outside the final step and no later "
                                       "node refs it (conciseness)")
    return Plan(tuple(tuple(Node(n["name"], n["member"], i + 1, tuple(n["refs"])) for n in nodes)
                      for i, nodes in enumerate(steps)))


def pack_rounds(plan: Plan, n_agents: int, max_rounds: int,
                known: dict[str, tuple[int, int]] | None = None) -> tuple[list[RoundSpec], dict[str, tuple[int, int]]]:
    """Decode ``plan`` into env rounds (see the module docstring). ``known[name] = (round offset
    < 0, member)`` places the previous turn's nodes before this plan's first round (offset 0).
    Returns the RoundSpecs and ``placement[name] = (round offset, member)``; raises a logic
    PlanError when the plan needs more than ``max_rounds`` rounds."""
    placement: dict[str, tuple[int, int]] = dict(known or {})
    own: dict[str, tuple[int, int]] = {}
    round_index, used = 0, set()
    for step in plan.steps:
        members = {node.agent for node in step}
        if members & used:
            round_index, used = round_index + 1, set()
        used |= members
        for node in step:
            own[node.name] = placement[node.name] = (round_index, node.agent)
    needed = round_index + 1
    if needed > max_rounds:
        raise PlanError(LOGIC, f"the plan needs {needed} env rounds (each member once per round), the turn has "
                               f"{max_rounds}")
    n = n_agents
    adjacency = np.zeros((needed, n, n), dtype=bool)
    recall = np.zeros((needed, n, n), dtype=bool)
    active = np.zeros((needed, n), dtype=bool)
    verify = np.zeros((needed, n), dtype=bool)
    for node in plan.nodes:
        r, v = own[node.name]
        active[r, v] = True
        if node.step == plan.n_steps:
            verify[r, v] = True
        for ref in node.refs:
            r_u, u = placement[ref]
            if u == v:
                continue  # the member's own earlier output: the executor shows it anyway (self-edge)
            if r_u == r:
                adjacency[r, u, v] = True
            else:
                recall[r, u, v] = True
    specs = [RoundSpec(adjacency[r], active[r], verify[r], recall[r]) for r in range(needed)]
    return specs, own


def check_plan(text: Any, n_agents: int, roles: Sequence[str] | None = None, max_rounds: int = 1_000_000,
               known: dict[str, tuple[int, int]] | None = None) -> CheckResult:
    """Parse, classify and decode an orchestrator's output ``text`` (see the module docstring).
    ``roles``: each member's role kind (for ``agent: <role>``); ``known``: the previous turn's
    node placements (refs to them become recalls). Never raises on bad text."""
    body, fenced = extract_yaml(text)
    if body is None:
        return CheckResult(NO_YAML, "no YAML found (empty output or not text)")
    try:
        data = yaml.load(body, Loader=_SAFE_LOADER)  # = yaml.safe_load
    except Exception as exc:  # yaml.YAMLError, and recursion errors on pathological nesting
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return CheckResult(PARSE, f"YAML parse failed: {first}")
    if data is None or (not fenced and not isinstance(data, (list, dict))):
        return CheckResult(NO_YAML, "no YAML block found: the output is prose or empty")
    try:
        steps = _parse_structure(data, n_agents, roles)
        plan = _check_logic(data, steps, tuple(known or {}))
        rounds, placement = pack_rounds(plan, n_agents, max_rounds, known)
    except PlanError as exc:
        return CheckResult(exc.kind, exc.reason)
    return CheckResult(None, "valid", plan, rounds, placement)


def plan_to_yaml(steps: Sequence[Sequence[tuple[str, int, Sequence[str]]]]) -> str:
    """Serialise steps of ``(name, member, refs)`` nodes to the plan YAML (empty steps are written
    as ``agents: []``, which :func:`check_plan` rejects as a schema error)."""
    data = [{"step": i + 1, "agents": [{"name": name, "agent": int(member), "ref": list(refs)}
                                        for name, member, refs in nodes]}
            for i, nodes in enumerate(steps)]
    return yaml.dump(data, Dumper=_SAFE_DUMPER, sort_keys=False, default_flow_style=None)  # = yaml.safe_dump


# -- the LLM orchestrator's prompt (App. A.4, Fig. 6, adapted to our team) ----------------------
def build_prompt(question: str, n_agents: int, roles: Sequence[str] | None, max_turns: int, level_caps: dict[str, int],
                 turn: int = 1, feedback: str = "", previous_nodes: Sequence[str] = ()) -> str:
    """The orchestrator's system prompt of App. A.4 with the paper's roles replaced by our team's
    members, the node caps of Eq. 12 stated, and (turn 2) the previous turn's feedback."""
    members = "\n".join(f"- agent {k}: <{roles[k] if roles else 'agent'}>" for k in range(n_agents))
    caps = ", ".join(f"{level}: at most {cap} nodes" for level, cap in level_caps.items())
    lines = [
        "You are an Orchestrator agent. Your goal is to coordinate a multi-agent team to solve the given problem "
        "by generating a YAML-formatted interaction plan.",
        "Each plan should specify:",
        "- Which agents to activate at each step;",
        "- Which previous agents' outputs are referenced.",
        "",
        "Team members (`agent` is the member index, 'agent_k', or a role name):",
        members,
        "",
        "Format:",
        "Output only the YAML plan, a list of steps like:",
        "- step: 1",
        "  agents:",
        "    - {name: a, agent: 0, ref: []}",
        "- step: 2",
        "  agents:",
        "    - {name: b, agent: 1, ref: [a]}",
        "",
        "### Notes:",
        "1. There are three levels of difficulty, arranged from low to high as follows: easy, medium, hard.",
        "2. Determine whether the task difficulty is easy, medium or hard.",
        f"3. **Dynamically adjust the number of steps and agents** based on the difficulty ({caps}).",
        "4. For **more difficult problems**, **involve more agents** if necessary. For **simpler problems**, you "
        "may **reduce both the number of agents** and **the number of steps** involved.",
        "5. Every node outside the last step must be referenced by a node of a later step; a member appears at "
        "most once per step; node names are unique.",
        f"6. Execute up to max **{max_turns}** rounds in total, until the answer passes verification.",
        "7. In the first step, all agents must have empty `ref` fields.",
    ]
    if turn > 1:
        lines += ["", f"### Turn {turn}: feedback on the previous turn:", feedback or "(none)"]
        if previous_nodes:
            lines.append("Nodes of the previous turn you may ref: " + ", ".join(previous_nodes))
    lines += ["", "### The Problem is:", f"**Task**: `{question}`", "",
              "### Your output should be a YAML-formatted plan only.", "your output:"]
    return "\n".join(lines)
