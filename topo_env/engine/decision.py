"""How a team's episode is decided (``env.decision``), read by every backend.

* ``"llm"`` (the default): the paper's decision node (FinalRefer), an LLM call that reads the last
  output of every agent that ran and answers. One call, its tokens count in the team's.
* ``"vote"``: a plurality vote over the final answers of the agents that ran (self-consistency;
  "Debate or Vote", Choi et al. 2025, compare multi-agent debate with such a vote). No decision call:
  no tokens, no LLM call. Ties between answers are broken by the summed stated confidence of their
  voters (an agent without a stated confidence adds 0; the simulator reads such an output as 0.5,
  as everywhere), then by the lowest agent index holding the answer. Agents without a parsed answer
  do not vote; where nobody has one, the team answers nothing (scored wrong).
* ``"agent:K"``: agent K's final answer, with no decision call; where agent K never ran, the vote.

The answer a vote or an agent picks is that agent's final output as it stands: its text, answer and
stated confidence (the lowest-index voter of the winning answer speaks for the vote); the decision's
token counts are 0.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from topo_env.engine.config_checks import ConfigError
from topo_env.engine.team_backend import AgentReply, Message

DECISION_KINDS = ("llm", "vote", "agent:K")


class DecisionMode(NamedTuple):
    """A parsed ``decision`` setting: ``kind`` ``"llm"`` / ``"vote"`` / ``"agent"``; ``agent`` K for the last."""

    kind: str
    agent: int | None = None

    def __str__(self) -> str:
        return f"agent:{self.agent}" if self.kind == "agent" else self.kind

    @property
    def calls(self) -> int:
        """LLM calls the decision makes: 1 for the decision node, 0 for a vote or an agent's answer."""
        return 1 if self.kind == "llm" else 0


LLM_DECISION = DecisionMode("llm")


def parse_decision(value: object, n_agents: int | None = None, key: str = "decision") -> DecisionMode:
    """``value`` (``"llm"``, ``"vote"`` or ``"agent:K"``, K in 0..n_agents-1 where ``n_agents`` is
    given) as a :class:`DecisionMode`; a one-line ConfigError naming the bad value otherwise."""
    if isinstance(value, DecisionMode):
        value = str(value)
    if value in ("llm", "vote"):
        return DecisionMode(value)
    if isinstance(value, str) and value.startswith("agent:"):
        k = value[len("agent:"):]
        if k.isdigit() and (n_agents is None or int(k) < n_agents):
            return DecisionMode("agent", int(k))
        where = f" (the team has agents 0..{n_agents - 1})" if n_agents is not None else ""
        raise ConfigError(f"{key}={value!r}: agent index must be an integer in range{where}")
    raise ConfigError(f"{key}={value!r}: must be one of 'llm', 'vote' or 'agent:K' (K an agent index)")


def settings_decision(config: object) -> DecisionMode:
    """The decision mode of a team's settings (``config.decision``; ``"llm"`` where it has none)."""
    return parse_decision(getattr(config, "decision", "llm"), getattr(config, "n_agents", None))


def pick_final(finals: Sequence[Message], mode: DecisionMode) -> Message | None:
    """The final output a vote or ``agent:K`` decision picks (module docstring for the rule), None
    where nobody has an answer. ``finals`` are in agent order (as the engine shows them)."""
    if mode.kind == "agent":
        for m in finals:
            if m.sender == mode.agent and m.answer is not None:
                return m
    votes: dict[str, list] = {}  # answer -> [count, summed confidence, first voter]
    for m in finals:
        if m.answer is None:
            continue
        key = m.answer.strip()
        entry = votes.setdefault(key, [0, 0.0, m])
        entry[0] += 1
        entry[1] += 0.0 if m.confidence is None else float(m.confidence)
    best = None
    for count, conf, first in votes.values():
        if best is None or (count, conf, -first.sender) > (best[0], best[1], -best[2].sender):
            best = (count, conf, first)
    return None if best is None else best[2]


def picked_reply(picked: Message | None) -> AgentReply:
    """The decision's reply for a picked final (no call: zero tokens); an empty reply where none."""
    if picked is None:
        return AgentReply(text="", answer=None, confidence=None, prompt_tokens=0, completion_tokens=0, content_tokens=0)
    return AgentReply(text=picked.text, answer=picked.answer, confidence=picked.confidence, prompt_tokens=0,
                      completion_tokens=0, content_tokens=0)
