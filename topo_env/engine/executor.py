"""Running one communication round over its graph (the part the reference gets wrong).

Contract, for every joint action:

* every active agent runs at least once per round, and every edge's message reaches its receiver;
* the condensation of the graph is run layer by layer (:func:`topo_env.engine.plan.execution_plan`);
  the calls of one layer run concurrently when the backend waits on I/O;
* an agent alone in its component makes one ``solo`` call and sees the task, the final
  outputs of its predecessors (all in earlier layers) and its own previous-round output;
* the members of a multi-agent component (a debate pair, mutual broadcasts) make a
  synchronous exchange: each first ``draft``s (seeing its predecessors outside the
  component and its previous-round output), then each ``revise``s once, seeing the same
  outside outputs plus the drafts of its predecessors inside the component, with its own
  draft as its previous output. Both calls cost tokens;
* an agent marked in ``spec.verify`` has each output it sends checked by the backend's
  verifier; the verdict travels with the message (and with its own previous output);
* an agent not in ``spec.active`` is not called and keeps its previous output;
* ``spec.recall[u, v]``: v is also shown u's latest output from an earlier round, after the
  messages of this round (in every call v makes this round).

The executor sees :class:`~topo_env.engine.episode.RoundSpec`-like objects only (``adjacency``,
``active``, ``verify``, ``recall``): it never knows how a controller chose them.
"""
from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from topo_env.engine.team_backend import AgentCall, AgentReply, Message, Phase, TeamBackend, Verdict
from topo_env.engine.plan import ExecutionPlan, execution_plan
from topo_env.engine.tasks import Task

_NO_VERDICT = (Verdict.NONE, "")


class CallRecord(NamedTuple):
    """One agent call as it happened: who, when, what it was shown, what it answered."""

    agent: int
    phase: Phase
    layer: int
    received: tuple[tuple[int, Phase], ...]  # (sender, sender's phase) in the order shown
    had_previous: bool
    reply: AgentReply
    shown: tuple[Message, ...] = ()  # the messages themselves, in the order shown
    own_previous: Message | None = None  # its own previous output (or own draft, when revising)
    verdict: Verdict = Verdict.NONE  # the verifier's verdict on this call's output


@dataclass
class RoundResult:
    """Everything one round produced. ``finals[i]`` is agent i's output after the round (its
    previous output if it was inactive; None if it has never run). ``adjacency`` is the spec's
    graph as (N, N) int8."""

    round: int
    spec: Any
    adjacency: np.ndarray
    plan: ExecutionPlan
    finals: tuple[Message | None, ...]
    calls: list[CallRecord]
    agent_tokens: list[int]  # per agent, the tokens of its calls this round
    agent_calls: list[int]  # per agent, its calls this round (0, 1 or 2)
    tokens_estimated: bool  # some call's tokens were estimated (no usage from the server)


async def gather_calls(backend: TeamBackend, coros: Sequence[Awaitable]) -> list:
    """Run one layer's calls: concurrently for I/O backends, in order for CPU ones."""
    if backend.concurrent:
        return list(await asyncio.gather(*coros))
    return [await c for c in coros]


class Schedule(NamedTuple):
    """One graph's round, precomputed: per layer, the first-phase calls
    ``(agent, "solo" | "draft", senders)`` (senders: predecessors outside the agent's
    component, whose final outputs it sees) and the ``revise`` calls
    ``(agent, ((sender, is_inside_component), ...))`` of multi-agent components."""

    layers: tuple[tuple[tuple, tuple], ...]

    @classmethod
    def build(cls, adjacency: np.ndarray, plan: ExecutionPlan, active: np.ndarray | None = None) -> "Schedule":
        """``active``: (N,) bool, None for everyone; inactive agents (edge-free by the
        RoundSpec contract) are left out of every layer."""
        n = adjacency.shape[0]
        preds = [np.flatnonzero(adjacency[:, v]).tolist() for v in range(n)]
        component = {a: comp for layer in plan for comp in layer for a in comp}
        layers = []
        for layer in plan:
            if active is not None:
                layer = [comp for comp in layer if active[comp[0]]]
                if not layer:
                    continue
            first = tuple(
                (a, "solo" if len(comp) == 1 else "draft", tuple(u for u in preds[a] if component[u] != comp))
                for comp in layer for a in comp
            )
            second = tuple(
                (a, tuple((u, component[u] == comp) for u in preds[a]))
                for comp in layer if len(comp) > 1 for a in comp
            )
            layers.append((first, second))
        return cls(tuple(layers))


class RoundExecutor:
    """Runs rounds for one team. ``roles[i]`` is agent i's role kind; ``adversarial`` the
    indices of injected adversarial agents."""

    def __init__(self, backend: TeamBackend, roles: Sequence[str], adversarial: Sequence[int] = ()):
        self.backend = backend
        self.roles = tuple(roles)
        self.adversarial = frozenset(adversarial)
        self._schedules: dict[bytes, Schedule] = {}

    def schedule(self, spec: Any) -> tuple[ExecutionPlan, "Schedule"]:
        """The execution plan of a RoundSpec's graph, and who calls in which phase and sees whose
        output for its active set (memoised per graph and active set)."""
        sched = self._schedules.get(spec.key)
        if sched is None:
            plan = execution_plan(spec.adjacency)
            sched = plan, Schedule.build(spec.adjacency.view(np.int8), plan, None if spec.everyone else spec.active)
            if len(self._schedules) >= 65536:
                self._schedules.clear()
            self._schedules[spec.key] = sched
        return sched

    async def run_round(
        self,
        task: Task,
        round_index: int,
        spec: Any,
        previous: Sequence[Message | None],
    ) -> RoundResult:
        """Run the round ``spec`` (a :class:`~topo_env.engine.episode.RoundSpec`) in its SCC layers;
        ``previous[i]`` is agent i's latest output before this round (None if it never ran)."""
        n = len(self.roles)
        adjacency = spec.adjacency.view(np.int8)
        plan, sched = self.schedule(spec)
        verifying = spec.verified
        recalled = None
        if spec.recall is not None:
            recalled = [tuple(previous[u] for u in np.flatnonzero(spec.recall[:, v]).tolist() if previous[u] is not None)
                        for v in range(n)]
        finals: list[Message | None] = [None] * n
        drafts: list[Message | None] = [None] * n
        result = RoundResult(round_index, spec, adjacency, plan, (), [], [0] * n, [0] * n, False)
        for layer_index, (first, second) in enumerate(sched.layers):
            calls = [
                self._call(task, round_index, agent, phase, tuple([finals[u] for u in senders]) + recalled[agent],
                           previous[agent])
                for agent, phase, senders in first
            ] if recalled else [
                self._call(task, round_index, agent, phase, tuple([finals[u] for u in senders]), previous[agent])
                for agent, phase, senders in first
            ]
            outputs = await self._run_calls(calls, layer_index, result, verifying, phase_index=0)
            for (agent, phase, _), msg in zip(first, outputs):
                (finals if phase == "solo" else drafts)[agent] = msg
            if second:
                calls = [
                    self._call(task, round_index, agent, "revise",
                               tuple([drafts[u] if inside else finals[u] for u, inside in senders])
                               + (recalled[agent] if recalled else ()), drafts[agent])
                    for agent, senders in second
                ]
                outputs = await self._run_calls(calls, layer_index, result, verifying, phase_index=1)
                for (agent, _), msg in zip(second, outputs):
                    finals[agent] = msg
        if not spec.everyone:
            finals = [previous[i] if not spec.active[i] else m for i, m in enumerate(finals)]
        result.finals = tuple(finals)
        return result

    def _call(self, task: Task, round_index: int, agent: int, phase: Phase,
              shown: tuple[Message, ...], own_previous: Message | None) -> AgentCall:
        return AgentCall(agent=agent, role=self.roles[agent], round=round_index, phase=phase, task=task,
                         messages=shown, own_previous=own_previous, adversarial=agent in self.adversarial)

    async def _run_calls(self, calls: list[AgentCall], layer_index: int, result: RoundResult,
                         verifying: frozenset[int], phase_index: int) -> list[Message]:
        replies = await gather_calls(self.backend, [self.backend.call_agent(c) for c in calls])
        verdict_of = {}
        if verifying:
            checked = [(c, r) for c, r in zip(calls, replies) if c.agent in verifying]
            verdicts = await gather_calls(self.backend, [self.backend.verify(c, r, phase_index) for c, r in checked])
            verdict_of = {c.agent: v for (c, _), v in zip(checked, verdicts)}
        messages = []
        tokens, counts = result.agent_tokens, result.agent_calls
        for call, reply in zip(calls, replies):
            tokens[call.agent] += reply.prompt_tokens + reply.completion_tokens
            counts[call.agent] += 1
            if reply.tokens_estimated:
                result.tokens_estimated = True
            verdict, verdict_text = verdict_of.get(call.agent, _NO_VERDICT)
            result.calls.append(CallRecord(call.agent, call.phase, layer_index,
                                           tuple([(m.sender, m.phase) for m in call.messages]),
                                           call.own_previous is not None, reply, call.messages, call.own_previous,
                                           verdict))
            messages.append(Message(sender=call.agent, role=call.role, round=call.round, phase=call.phase,
                                    text=reply.text, answer=reply.answer, confidence=reply.confidence,
                                    content_tokens=reply.content_tokens, verdict=verdict, verdict_text=verdict_text))
        return messages
