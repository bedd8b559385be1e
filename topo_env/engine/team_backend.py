"""The interface between the round executor and whatever answers: simulated or real LLM agents.

The executor (:mod:`topo_env.engine.executor`) builds an :class:`AgentCall` for every agent call
the execution plan asks for and awaits :meth:`TeamBackend.call_agent`. A backend never
sees the graph, only what one agent is shown: this is what makes simulated and real teams
interchangeable.
"""
from __future__ import annotations

from typing import NamedTuple
from enum import IntEnum
from typing import Any, Literal, Protocol

import numpy as np

from topo_env.engine.tasks import Task

Phase = Literal["solo", "draft", "revise"]
"""``solo``: an agent alone in its component; ``draft`` / ``revise``: the two calls of a
member of a multi-agent component (synchronous exchange)."""


class Verdict(IntEnum):
    """Outcome of the domain verifier on one output (execute_verify)."""

    FAIL = -1
    NONE = 0  # no verifier for this domain / output (e.g. math without code)
    PASS = 1


class Message(NamedTuple):
    """One agent output as delivered to a receiver (or kept as its own previous output).

    (Records here are immutable NamedTuples: several are built per agent call, and frozen
    dataclasses cost several times more to construct.)"""

    sender: int
    role: str
    round: int
    phase: Phase
    text: str
    answer: str | None
    confidence: float | None
    content_tokens: int
    verdict: Verdict = Verdict.NONE
    verdict_text: str = ""


class AgentCall(NamedTuple):
    """Everything one agent is shown for one call.

    ``messages`` are the outputs of its predecessors for this phase (final outputs of
    predecessors in earlier layers; in the ``revise`` phase also the drafts of its
    predecessors inside its component). ``own_previous`` is its output of the previous
    round (``solo`` / ``draft``) or its own draft (``revise``); ``None`` in round 0's
    first call.
    """

    agent: int
    role: str
    round: int
    phase: Phase
    task: Task
    messages: tuple[Message, ...]
    own_previous: Message | None
    adversarial: bool = False


class AgentReply(NamedTuple):
    """A backend's answer to one call. Token counts are this call's."""

    text: str
    answer: str | None
    confidence: float | None
    prompt_tokens: int
    completion_tokens: int
    content_tokens: int
    reasoning_tokens: int = 0
    tokens_estimated: bool = False

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class Decision(NamedTuple):
    """The decision node's (FinalRefer) answer for the episode. ``scored`` is False where the task
    had nothing to score against (a user's question without a reference); ``accuracy`` is then 0."""

    reply: AgentReply
    accuracy: float
    scored: bool = True


class TeamSettings(Protocol):
    """What a backend's factory and config checks read of the env config: the team, its episode
    and the backend's own config (``backend``, the kind's frozen dataclass). The front-ends'
    :class:`topo_env.EnvConfig` is one; the engine and the backends never import it."""

    n_agents: int
    rounds: int
    domain: str | None
    backend: Any
    roles: tuple[str, ...]
    personas: tuple[str, ...]
    descriptors: bool
    adversarial_agents: tuple[int, ...]
    adversary_position: str
    n_adversaries: int | None
    w_acc: float
    w_tok: float
    max_tokens: int
    target_rule: str
    decision: str  # "llm", "vote" or "agent:K" (topo_env.engine.decision)
    train_tasks: int | None  # the train split's first K tasks only (topo_env.engine.tasks.draw_task_index)


class TeamBackend(Protocol):
    """What answers the agents' calls for one env instance.

    ``concurrent`` is True for backends that wait on I/O (LLM servers): the executor then
    runs the calls of one layer concurrently with ``asyncio.gather``. CPU-only backends
    (the simulator) set it False and are awaited one by one, which gives identical results
    without an event loop.
    """

    concurrent: bool
    domain: str

    def sample_task(self, rng: np.random.Generator, split: str) -> Task:
        """A task of ``split`` (``"train"`` or ``"eval"``: disjoint tasks) drawn with ``rng``."""
        ...

    def task_at(self, split: str, index: int) -> Task:
        """Task number ``index`` of ``split`` (a ValueError naming the index when there is none)."""
        ...

    def start_episode(self, task: Task, rng: np.random.Generator, n_agents: int, rounds: int) -> None: ...

    async def call_agent(self, call: AgentCall) -> AgentReply:
        """Answer one agent call (the executor never shows a backend the graph)."""
        ...

    async def verify(self, call: AgentCall, reply: AgentReply, phase_index: int) -> tuple[Verdict, str]:
        """Check an execute_verify output; returns the verdict and the tool text sent along."""
        ...

    async def decide(self, task: Task, finals: tuple[Message, ...]) -> Decision:
        """The decision node's answer from ``finals`` (the last output of every agent that ran;
        possibly none, when a controller halts before anyone spoke), scored."""
        ...
