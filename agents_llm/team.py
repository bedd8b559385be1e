"""Real LLM teams behind the env's :class:`topo_env.engine.team_backend.TeamBackend` interface.

Every agent call becomes one chat completion on an OpenAI-compatible server
(:class:`agents_llm.client.LLMClient`: concurrent within a layer, retried, cached, token counts
from usage). Sampling is reproducible: each call's cache key includes a sample index derived
from the episode's seed and the call's (round, agent, phase), so re-running an episode with
the same seed replays the same responses from the cache.

``execute_verify``: for code, the candidate runs in the sandbox against the task's *visible*
tests (``metadata["visible_tests"]``, else the examples of the prompt's docstring); for math,
python code blocks in the reply run in the sandbox and pass when they print the stated
answer; reasoning has no verifier.
"""
from __future__ import annotations

import asyncio
import random
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from agents_llm.client import LLMClient
from agents_llm.prompts import agent_messages, decision_messages, parse_reply
from agents_llm.scoring import build_program, score, scorable
from agents_llm.datasets import load_dataset
from agents_llm.tasks import split_tasks
from topo_env.engine.team_backend import AgentCall, AgentReply, Decision, Message, Verdict
from agents_llm.config import LLMSettings
from topo_env.engine.config_checks import ConfigError
from topo_env.engine.decision import (
    LLM_DECISION, DecisionMode, parse_decision, pick_final, picked_reply, settings_decision,
)
from topo_env.engine.roles import default_personas
from topo_env.engine.tasks import Task, draw_task_index

if TYPE_CHECKING:
    from topo_env.engine.team_backend import TeamSettings

_PHASES = {"solo": 0, "draft": 1, "revise": 2}
_DOCTEST = re.compile(r"^\s*>>>\s*(.+)\n\s*([^\n>].*)$", re.MULTILINE)
_PY_BLOCK = re.compile(r"```(?:python|py)\s*\n(.*?)```", re.DOTALL)


def visible_tests(task: Task) -> str | None:
    """Tests an agent may see: ``metadata["visible_tests"]``, else asserts built from the
    ``>>> call`` / ``result`` examples of the prompt (HumanEval style); None if neither."""
    if task.metadata.get("visible_tests"):
        return task.metadata["visible_tests"]
    asserts = [f"assert ({call.strip()}) == ({want.strip()})" for call, want in _DOCTEST.findall(task.prompt)]
    return "\n".join(asserts) or None


class TaskPool:
    """Train / eval task lists of one domain (``task(split, index)`` as the simulator's). Each
    split is in a fixed shuffled order (seeded), so tasks 0..k-1 of a split are a sample without
    replacement: an evaluation that plays them in order (:func:`learners.evaluation.evaluate`)
    meets every subject even where the dataset's file is sorted by subject. ``train_tasks`` K (the
    env's ``train_tasks``): :meth:`sample` draws train tasks among the first K of the split only."""

    def __init__(self, tasks: Sequence[Task], train_size: int, seed: int = 0, train_tasks: int | None = None):
        train, held_out = split_tasks(list(tasks), train_size=train_size, seed=seed)
        for split in (train, held_out):
            random.Random(f"task order/{seed}").shuffle(split)
        self.splits = {"train": train, "eval": held_out}
        self.train_tasks = None if train_tasks is None else min(int(train_tasks), max(len(train), 1))

    def task(self, split: str, index: int) -> Task:
        if split not in self.splits:
            raise ValueError(f"unknown split {split!r}; known splits: {sorted(self.splits)}")
        tasks = self.splits[split]
        if not tasks:
            raise ValueError(f"split {split!r} holds no tasks")
        return tasks[int(index) % len(tasks)]

    def sample(self, rng: np.random.Generator, split: str) -> Task:
        return self.task(split, draw_task_index(rng, split, self.train_tasks))


class LLMTeamBackend:
    """LLM agents for one env instance. ``roles[i]`` is agent i's role kind; ``personas``
    (optional) fixes each agent's persona explicitly."""

    concurrent = True

    def __init__(self, domain: str, llm: LLMSettings, tasks: TaskPool, roles: Sequence[str],
                 personas: Sequence[str] | None = None, client: LLMClient | None = None, descriptors: bool = False,
                 decision: DecisionMode | str = LLM_DECISION):
        self.domain, self.tasks = domain, tasks
        self.decision = parse_decision(decision, len(roles))  # the decision node, a vote or one agent
        self.descriptors = descriptors  # ask for DyTopo's NEED/OFFER lines (EnvConfig.descriptors)
        self.client = client if client is not None else LLMClient(llm)  # shared by sibling() teams
        self.roles = tuple(roles)
        self.personas = tuple(personas) if personas else default_personas(domain, self.roles)
        if len(self.personas) != len(self.roles):
            raise ValueError(f"personas={list(self.personas)!r}: need one per agent ({len(self.roles)})")
        self.task: Task | None = None
        self._episode_key = 0

    @classmethod
    def from_config(cls, config: TeamSettings) -> "LLMTeamBackend":
        """The team ``config.backend`` (an :class:`~agents_llm.config.LLMBackendConfig`) describes:
        its dataset's ``config.domain`` tasks, ``train_size`` of them for training (at least one
        held out). The ``"llm"`` factory of :mod:`topo_env.engine.backend_registry`."""
        backend = config.backend
        tasks = load_dataset(backend.dataset, "backend.dataset", config.domain)
        tasks = [t for t in tasks if t.domain == config.domain]
        if not tasks:
            raise ConfigError(f"backend.dataset={backend.dataset!r} holds no {config.domain} tasks")
        pool = TaskPool(tasks, train_size=min(backend.train_size, len(tasks) - 1), train_tasks=config.train_tasks)
        return cls(config.domain, backend, pool, config.roles, config.personas, descriptors=config.descriptors,
                   decision=settings_decision(config))

    def sibling(self) -> "LLMTeamBackend":
        """The same team for another episode in flight: its own episode state, this team's
        tasks and :class:`~agents_llm.client.LLMClient` (one connection pool, one
        ``max_concurrency`` for all episodes)."""
        return LLMTeamBackend(self.domain, self.client.config, self.tasks, self.roles, self.personas, self.client,
                              self.descriptors, self.decision)

    def sample_task(self, rng: np.random.Generator, split: str) -> Task:
        return self.tasks.sample(rng, split)

    def task_at(self, split: str, index: int) -> Task:
        """Task ``index`` of ``split`` (modulo the split's size)."""
        return self.tasks.task(split, index)

    def start_episode(self, task: Task, rng: np.random.Generator, n_agents: int, rounds: int) -> None:
        if task.domain != self.domain:
            raise ValueError(f"task {task.id!r} is a {task.domain} task; this team solves {self.domain} tasks")
        self._episode_key = int(rng.integers(2**31 - 1))
        self.task = task

    def _sample_index(self, round_index: int, agent: int, phase: str) -> int:
        return ((self._episode_key * 64 + round_index) * 64 + agent) * 4 + _PHASES.get(phase, 3)

    async def call_agent(self, call: AgentCall) -> AgentReply:
        messages = agent_messages(call, self.domain, self.personas[call.agent], self.roles, self.descriptors)
        res = await self.client.complete(messages, sample_index=self._sample_index(call.round, call.agent, call.phase))
        answer, confidence = parse_reply(res.content, call.task)
        return AgentReply(text=res.content, answer=answer, confidence=confidence, prompt_tokens=res.prompt_tokens,
                          completion_tokens=res.completion_tokens,
                          content_tokens=max(res.completion_tokens - res.reasoning_tokens, 0),
                          reasoning_tokens=res.reasoning_tokens, tokens_estimated=res.estimated)

    async def verify(self, call: AgentCall, reply: AgentReply, phase_index: int) -> tuple[Verdict, str]:
        from agents_llm.sandbox import execute

        task = call.task
        if task.domain == "code":
            tests = visible_tests(task)
            if not tests or not reply.answer:
                return Verdict.NONE, ""
            program = build_program(Task(task.id, task.domain, task.prompt, tests=tests, metadata=task.metadata),
                                    reply.answer)
            result = await asyncio.to_thread(execute, program, timeout_s=10.0)
            tail = (result.stderr.strip().splitlines() or ["ok"])[-1][:200]
            return (Verdict.PASS, "visible tests passed") if result.ok else (Verdict.FAIL, f"visible tests failed: {tail}")
        if task.domain == "math":
            blocks = _PY_BLOCK.findall(reply.text)
            if not blocks or reply.answer is None:
                return Verdict.NONE, ""
            result = await asyncio.to_thread(execute, blocks[-1], timeout_s=10.0)
            printed = result.stdout.strip().splitlines()[-1:] if result.ok else []
            if printed and printed[0].strip() == reply.answer.strip():
                return Verdict.PASS, f"python check printed {printed[0].strip()!r}"
            return Verdict.FAIL, "python check " + (f"printed {printed[0].strip()!r}" if printed else "failed")
        return Verdict.NONE, ""

    async def decide(self, task: Task, finals: tuple[Message, ...]) -> Decision:
        scored = scorable(task)  # a user's question may have no reference: answered, not scored
        if self.decision.kind != "llm":  # a vote or one agent's answer (topo_env.engine.decision): no call
            picked = pick_final(finals, self.decision)
            text = None if picked is None else picked.text
            accuracy = await asyncio.to_thread(score, task, text) if scored and text else 0.0
            return Decision(reply=picked_reply(picked), accuracy=float(accuracy), scored=scored)
        messages = decision_messages(task, finals, self.domain, self.roles)
        res = await self.client.complete(messages, sample_index=self._sample_index(99, 0, "decide"))
        answer, confidence = parse_reply(res.content, task)
        accuracy = await asyncio.to_thread(score, task, res.content) if scored else 0.0
        reply = AgentReply(text=res.content, answer=answer, confidence=confidence, prompt_tokens=res.prompt_tokens,
                           completion_tokens=res.completion_tokens,
                           content_tokens=max(res.completion_tokens - res.reasoning_tokens, 0),
                           reasoning_tokens=res.reasoning_tokens, tokens_estimated=res.estimated)
        return Decision(reply=reply, accuracy=float(accuracy), scored=scored)
