"""Probe a real LLM team with controlled calls, so that every parameter of the simulated team's model
(:mod:`topo_env.sim.model`) can be fitted from its traces.

    python -m agents_llm.probe --dataset humaneval --tasks 20 --out traces.jsonl --model gpt-4o-mini
    python -m agents_llm.probe --dataset tasks.jsonl --tasks 5 --out traces.jsonl --local --yes

The team is the env's LLM team (:class:`agents_llm.team.LLMTeamBackend`: N-1 specialists and an
analyzer, the same prompts, parsing, token counts and cache); only what each call is shown is chosen
by the probe. Per task (N agents, S solo samples, peer confidences C, e.g. 0.6 and 0.9):

========================  ==============================================================  ===========
kind                      what the call is shown                                          calls/task
========================  ==============================================================  ===========
``solo``                  nothing (no messages, no own previous): ability, the task's     S N
                          latent (agents' answers correlate), the trap, confidences,
                          tokens
``drift``                 its own solo answer back and nothing new: self-revision drift   S N
``peer_right``            own solo answer + one peer showing the right answer             |C| N
``peer_trap``             own solo answer + one peer showing the trap                     |C| N
``peer_trap2``            own solo answer + two peers showing the trap                    |C| N
``peer_right_pass``       own solo answer + one peer with the right answer, verifier      |C| N
                          passed
``peer_trap_fail``        own solo answer + one peer with the trap, verifier failed       |C| N
``peer_other``            own solo answer + one peer showing another wrong answer         |C| N
``decide_2right_1trap``   decision node: finals 2 right vs 1 trap                          |C|
``decide_1right_2trap``   decision node: finals 1 right vs 2 trap                          |C|
``decide_pass_vs_trap``   decision node: a right final that passed verification vs 1 trap |C|
``decide_pass_vs_2trap``  decision node: a passed right final vs 2 traps                   |C|
========================  ==============================================================  ===========

Defaults (N=3, S=3, C={0.6, 0.9}): 9 + 9 + 6 x 6 + 4 x 2 = 62 calls per task. The revision probes
(``peer_*``) vary the stated peer confidence over C (each confidence starts from another of the
agent's solo samples, solo sample ``c mod S``); the decision probes pair the right finals' and the
wrong finals' confidences as ``zip(C, reversed(C))`` (0.6 vs 0.9, then 0.9 vs 0.6), in a seeded
order. The *trap* is the most common wrong answer of the task's solo samples (all agents); the
*other* wrong answer the next most common. Where the solo samples show none, one is fabricated
(a wrong option, a perturbed number, a stub program; ``probe.trap_source`` says which). Code tasks
show the dataset's ``canonical_solution`` as the right answer; a code task without one gets no
probe that shows a right answer, and a two-option question no ``peer_other`` probe: the plan (and
its call count, printed before any call) knows this from the dataset alone.

Trace file: schema ``topomarl.trace/1`` (:mod:`topo_env.engine.traces`), one episode per probe unit:

* ``solo``: round 0, every agent alone (no edges), one episode per sample.
* ``drift`` / ``peer_*``: one call (round 1, phase ``solo``, layer 1 when shown peers, else 0) whose
  ``own_previous`` is the agent's round-0 solo output and whose ``shown`` are the peer messages.
  Peer messages are *synthetic*: written by the probe (a plausible text stating the answer and the
  confidence, ``text`` and ``verdict_text`` kept in the record), sent in the names of the other
  agents (round 1, phase ``solo``), who make no call in that episode; ``adjacency`` holds those
  edges, ``active`` only the probed agent, ``verify`` the senders with a stated verdict.
* ``decide_*``: no rounds; ``decision`` is the decision node's call on synthetic finals.

Extra fields (the schema allows them): every call has ``correct`` (its score) and ``label``
(``right`` / ``trap`` / ``other`` / ``none``: no parsable answer); every shown message
``synthetic`` and ``label``; ``decision.called`` is false in the episodes without a decision (whose
``decision`` holds no answer, zero tokens and accuracy 0). ``task.metadata`` is the dataset's own
(reference, subject or category where the dataset has one, ...) plus ``probe``: the kind, the agent,
the sample, the peer confidence, the labels shown, the right / trap / other answers and where they
came from, the seed and the model. ``reward`` is Eq. 12 with the default weights for the decision
probes and 0 elsewhere. No API key or other setting of the client is written.

Reproducible: the tasks and every call's sample index come from ``--seed``; responses are cached
(``--cache``), so a rerun of the same command replays every call without contacting the server
(``--local`` serves on a fixed port, ``--port``, as the cache key holds the address).
"""
from __future__ import annotations

import asyncio
import copy
import hashlib
import math
import re
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from topo_env.engine.team_backend import AgentCall, AgentReply, Message, Verdict
from topo_env.engine.backend_registry import BackendFailed
from agents_llm.config import LLMSettings
from agents_llm.datasets import load_dataset as load_named_dataset
from topo_env.engine.cli import OneLineParser, RunError, format_table, run_main
from topo_env.engine.config_checks import ConfigError
from topo_env.engine.episode import RewardConfig
from topo_env.engine.roles import default_personas
from topo_env.engine.tasks import Task
from topo_env.engine.traces import SCHEMA, plain_data, reply_record, append_trace, check_record, message_record

PROG = "python -m agents_llm.probe"
PROTOCOL = "topomarl.probe/1"
DEFAULT_LOCAL_PORT = 8093

KIND_DESCRIPTIONS: dict[str, str] = {
    "solo": "alone: no messages, no own previous answer",
    "drift": "own solo answer back, nothing new (self-revision)",
    "peer_right": "own solo answer + 1 peer showing the right answer",
    "peer_trap": "own solo answer + 1 peer showing the trap",
    "peer_trap2": "own solo answer + 2 peers showing the trap",
    "peer_right_pass": "own solo answer + 1 peer showing the right answer, verifier passed",
    "peer_trap_fail": "own solo answer + 1 peer showing the trap, verifier failed",
    "peer_other": "own solo answer + 1 peer showing another wrong answer",
    "decide_2right_1trap": "decision node on finals: 2 right vs 1 trap",
    "decide_1right_2trap": "decision node on finals: 1 right vs 2 trap",
    "decide_pass_vs_trap": "decision node on finals: 1 right that passed verification vs 1 trap",
    "decide_pass_vs_2trap": "decision node on finals: 1 right that passed verification vs 2 trap",
}
KINDS = tuple(KIND_DESCRIPTIONS)

# peer messages of the revision probes: (label, verdict) per peer
REVISION_PROBES: dict[str, tuple[tuple[str, Verdict], ...]] = {
    "peer_right": (("right", Verdict.NONE),),
    "peer_trap": (("trap", Verdict.NONE),),
    "peer_trap2": (("trap", Verdict.NONE), ("trap", Verdict.NONE)),
    "peer_right_pass": (("right", Verdict.PASS),),
    "peer_trap_fail": (("trap", Verdict.FAIL),),
    "peer_other": (("other", Verdict.NONE),),
}
# finals shown to the decision node: (label, verdict) per final (shown in a seeded order)
DECISION_PROBES: dict[str, tuple[tuple[str, Verdict], ...]] = {
    "decide_2right_1trap": (("right", Verdict.NONE), ("right", Verdict.NONE), ("trap", Verdict.NONE)),
    "decide_1right_2trap": (("right", Verdict.NONE), ("trap", Verdict.NONE), ("trap", Verdict.NONE)),
    "decide_pass_vs_trap": (("right", Verdict.PASS), ("trap", Verdict.NONE)),
    "decide_pass_vs_2trap": (("right", Verdict.PASS), ("trap", Verdict.NONE), ("trap", Verdict.NONE)),
}
REVISION_ROUND = 1


# --------------------------------------------------------------------------- plan
@dataclass(frozen=True)
class ProbeOptions:
    n_agents: int = 3
    samples: int = 3
    confidences: tuple[float, ...] = (0.6, 0.9)
    seed: int = 0


def has_right(task: Task) -> bool:
    """Whether the probe can show the right answer: always, except a code task without a
    ``canonical_solution``."""
    return task.domain != "code" or bool(task.metadata.get("canonical_solution"))


def has_other(task: Task) -> bool:
    """Whether a second wrong answer exists to show: not for a two-option question."""
    choices = task.metadata.get("choices")
    return not (choices and len(choices) < 3)


def task_plan(task: Task, opts: ProbeOptions) -> dict[str, int]:
    """Calls per probe kind for ``task`` (known before any call)."""
    n, s, c = opts.n_agents, opts.samples, len(opts.confidences)
    counts = {"solo": s * n, "drift": s * n}
    for kind, peers in REVISION_PROBES.items():
        labels = {label for label, _ in peers}
        ok = ("right" not in labels or has_right(task)) and ("other" not in labels or has_other(task))
        counts[kind] = c * n if ok else 0
    for kind in DECISION_PROBES:
        counts[kind] = c if has_right(task) else 0
    return counts


def plan_counts(tasks: Sequence[Task], opts: ProbeOptions) -> dict[str, int]:
    """Calls per probe kind over ``tasks``, in :data:`KINDS` order."""
    total = dict.fromkeys(KINDS, 0)
    for task in tasks:
        for kind, k in task_plan(task, opts).items():
            total[kind] += k
    return total


# --------------------------------------------------------------------------- answers
def answer_key(domain: str, answer: str | None) -> str | None:
    """What makes two answers the same answer: whitespace-insensitive text (per line for code)."""
    if answer is None:
        return None
    if domain == "code":
        lines = [line.rstrip() for line in str(answer).strip().splitlines() if line.strip()]
        return "\n".join(lines) or None
    return "".join(str(answer).split()) or None


def _stable_int(*parts: Any) -> int:
    digest = hashlib.sha256("|".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") % (2**31 - 1)


def _number(text: str) -> float | None:
    try:
        value = float(str(text).replace(",", "").strip())
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _format_number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def _choice_letters(task: Task) -> list[str]:
    return [chr(ord("A") + i) for i in range(len(task.metadata["choices"]))]


def right_answer(task: Task) -> str | None:
    """The right answer the probe shows: the reference; for code, the prompt + canonical solution."""
    if task.domain == "code":
        body = task.metadata.get("canonical_solution")
        if not body:
            return None
        entry = task.metadata.get("entry_point")
        defines = bool(entry) and re.search(rf"(?m)^def\s+{re.escape(entry)}\s*\(", body) is not None
        return body if defines else task.prompt + body
    return task.reference


def wrong_candidates(task: Task, rng: np.random.Generator) -> list[str]:
    """Fabricated wrong answers, in a seeded order (used where the solo samples show too few)."""
    if task.domain == "code":
        return [task.prompt + "    return None\n", task.prompt + "    raise NotImplementedError\n",
                task.prompt + "    return 0\n"]
    if task.metadata.get("choices"):
        letters = [x for x in _choice_letters(task) if x != task.reference]
        return [letters[i] for i in rng.permutation(len(letters))]
    ref = str(task.reference)
    x = _number(ref)
    if x is not None:
        values = [x + 1, x - 1, 2 * x + 1, x + 10]
        return [_format_number(values[i]) for i in rng.permutation(len(values))]
    return [f"{ref}+1", f"{ref}-1", f"2({ref})"]


@dataclass
class TaskAnswers:
    """The answers a task's probes show, and where they came from."""

    right: str | None
    trap: str
    trap_source: str  # "observed" | "fabricated"
    trap_count: int  # solo samples that gave the trap
    other: str | None
    other_source: str | None

    def answer(self, label: str) -> str | None:
        return {"right": self.right, "trap": self.trap, "other": self.other}[label]

    def label(self, domain: str, answer: str | None, correct: float) -> str:
        if correct >= 1.0:
            return "right"
        key = answer_key(domain, answer)
        if key is None:
            return "none"
        if key == answer_key(domain, self.trap):
            return "trap"
        return "other"

    def info(self) -> dict[str, Any]:
        return {"right": self.right, "trap": self.trap, "trap_source": self.trap_source,
                "trap_count": self.trap_count, "other": self.other, "other_source": self.other_source}


def task_answers(task: Task, solo: Sequence[tuple[AgentReply, float]], seed: int) -> TaskAnswers:
    """Right, trap (most common wrong solo answer) and other wrong answer of ``task``."""
    counts: Counter[str] = Counter()
    first: dict[str, str] = {}
    for reply, correct in solo:
        key = answer_key(task.domain, reply.answer)
        if key is not None and correct < 1.0:
            counts[key] += 1
            first.setdefault(key, reply.answer)
    ranked = [first[k] for k, _ in counts.most_common()]  # ties: first seen first
    right = right_answer(task)
    taken = {answer_key(task.domain, right)}
    fabricated = iter(a for a in wrong_candidates(task, np.random.default_rng(_stable_int(seed, task.id, "wrong")))
                      if answer_key(task.domain, a) not in taken)

    def pick() -> tuple[str | None, str | None]:
        for answer in ranked:
            if answer_key(task.domain, answer) not in taken:
                return answer, "observed"
        for answer in fabricated:
            if answer_key(task.domain, answer) not in taken:
                return answer, "fabricated"
        return None, None

    trap, trap_source = pick()
    taken.add(answer_key(task.domain, trap))
    other, other_source = pick() if has_other(task) else (None, None)
    trap_count = counts.get(answer_key(task.domain, trap), 0)
    return TaskAnswers(right, trap, trap_source, trap_count, other, other_source)


# --------------------------------------------------------------------------- synthetic messages
def synthetic_text(task: Task, answer: str, confidence: float) -> str:
    """A plausible reply stating ``answer`` and ``confidence`` in the format the agents use."""
    conf = f"Confidence: {confidence:g}"  # as stated: the parser reads back exactly ``confidence``
    if task.domain == "code":
        return f"Here is my solution; it handles the cases in the docstring.\n```python\n{answer.rstrip()}\n```\n{conf}"
    choices = task.metadata.get("choices")
    if choices:
        text = choices[ord(answer) - ord("A")]
        return (f"I went through the options one by one. Option {answer} ({text}) is the one that holds up; "
                f"the others do not fit the question.\nAnswer: {answer}\n{conf}")
    return f"Working through the problem step by step, I get \\boxed{{{answer}}}.\n{conf}"


def verdict_text(task: Task, verdict: Verdict, answer: str) -> str:
    if verdict == Verdict.NONE:
        return ""
    ok = verdict == Verdict.PASS
    if task.domain == "code":
        return "visible tests passed" if ok else "visible tests failed: AssertionError"
    if task.domain == "math":
        return f"python check printed {answer!r}" if ok else "python check failed"
    return "an independent check confirmed this answer" if ok else "an independent check rejected this answer"


def synthetic_message(task: Task, sender: int, role: str, answer: str, confidence: float, verdict: Verdict,
                      round_index: int = REVISION_ROUND) -> Message:
    """A fabricated output of agent ``sender`` (the stated answer is what the agents' parser reads)."""
    from agents_llm.client import estimate_tokens
    from agents_llm.prompts import parse_reply

    text = synthetic_text(task, answer, confidence)
    parsed, stated = parse_reply(text, task)
    return Message(sender=sender, role=role, round=round_index, phase="solo", text=text, answer=parsed,
                   confidence=stated, content_tokens=estimate_tokens(text), verdict=verdict,
                   verdict_text=verdict_text(task, verdict, answer))


def shown_record(m: Message, label: str | None, synthetic: bool) -> dict[str, Any]:
    record = {**message_record(m), "synthetic": synthetic, "label": label}
    if synthetic:
        record.update(text=m.text, verdict_text=m.verdict_text)
    return record


# --------------------------------------------------------------------------- running
@dataclass
class _Done:
    """One finished agent call."""

    agent: int
    call: AgentCall
    reply: AgentReply
    correct: float


class Prober:
    """Runs the probe of one task after another against LLM teams (one per domain, one shared
    client), and builds the trace episodes."""

    def __init__(self, teams: dict[str, Any], opts: ProbeOptions, model: str,
                 on_call: Callable[[], None] = lambda: None):
        self.teams, self.opts, self.model, self.on_call = teams, opts, model, on_call
        self.reward = RewardConfig()

    # -- calls ------------------------------------------------------------------------------
    def _unit(self, task: Task, *key: Any) -> Any:
        """A copy of the domain's team (sharing its client) whose episode key, hence every call's
        sample index, is a function of the seed, the task and ``key``."""
        unit = copy.copy(self.teams[task.domain])
        rng = np.random.default_rng(_stable_int(self.opts.seed, task.id, *key))
        unit.start_episode(task, rng, self.opts.n_agents, REVISION_ROUND + 1)
        return unit

    async def _call(self, unit: Any, call: AgentCall) -> _Done:
        from agents_llm.scoring import score

        reply = await unit.call_agent(call)
        correct = float(await asyncio.to_thread(score, call.task, reply.text))
        self.on_call()
        return _Done(call.agent, call, reply, correct)

    # -- records -----------------------------------------------------------------------------
    def _roles(self, task: Task) -> tuple[str, ...]:
        return self.teams[task.domain].roles

    def _call_record(self, task: Task, done: _Done, layer: int, answers: TaskAnswers,
                     shown_labels: Sequence[str], own_label: str | None) -> dict[str, Any]:
        call = done.call
        return {"agent": done.agent, "role": call.role, "phase": call.phase, "layer": layer,
                "shown": [shown_record(m, lab, True) for m, lab in zip(call.messages, shown_labels)],
                "own_previous": (None if call.own_previous is None
                                 else shown_record(call.own_previous, own_label, False)),
                "verdict": int(Verdict.NONE), **reply_record(done.reply),
                "correct": done.correct, "label": answers.label(task.domain, done.reply.answer, done.correct)}

    def _episode(self, task: Task, probe: dict[str, Any], rounds: list[dict], decision: dict | None) -> dict:
        n = self.opts.n_agents
        tokens = sum(c["prompt_tokens"] + c["completion_tokens"] for r in rounds for c in r["calls"])
        if decision is None:
            decision = {"shown": [], "answer": None, "confidence": None, "text": "", "prompt_tokens": 0,
                        "completion_tokens": 0, "reasoning_tokens": 0, "tokens_estimated": False,
                        "accuracy": 0.0, "called": False, "label": None}
            reward = 0.0
        else:
            tokens += decision["prompt_tokens"] + decision["completion_tokens"]
            reward = self.reward.w_acc * decision["accuracy"] - self.reward.penalty(tokens)
        meta = plain_data({**task.metadata, "probe": {"protocol": PROTOCOL, **probe, "model": self.model,
                                                  "seed": self.opts.seed, "solo_samples": self.opts.samples}})
        record = {"schema": SCHEMA,
                  "task": {"id": task.id, "domain": task.domain, "prompt": task.prompt, "reference": task.reference,
                           "metadata": meta},
                  "n_agents": n, "roles": list(self._roles(task)), "adversaries": [], "rounds": rounds,
                  "decision": decision, "team_tokens": int(tokens), "reward": float(reward)}
        check_record(record, f"probe episode of task {task.id!r}")
        return record

    def _round(self, round_index: int, active: Sequence[int], edges: Sequence[tuple[int, int]],
               verified: Sequence[int], calls: list[dict]) -> dict[str, Any]:
        n = self.opts.n_agents
        adjacency = [[0] * n for _ in range(n)]
        for u, v in edges:
            adjacency[u][v] = 1
        return {"round": round_index, "adjacency": adjacency, "active": [int(i in active) for i in range(n)],
                "verify": [int(i in verified) for i in range(n)], "recall": None, "calls": calls}

    # -- one task ------------------------------------------------------------------------------
    async def run_task(self, task: Task) -> list[dict[str, Any]]:
        """Every probe episode of ``task``: the solo samples first (they define the trap), then the
        rest concurrently (the client bounds the calls in flight)."""
        opts, roles = self.opts, self._roles(task)
        n, plan = opts.n_agents, task_plan(task, opts)
        solo_jobs = []
        for s in range(opts.samples):
            unit = self._unit(task, "solo", s)
            solo_jobs += [self._call(unit, AgentCall(i, roles[i], 0, "solo", task, (), None)) for i in range(n)]
        solo_done = await asyncio.gather(*solo_jobs)
        solo = [solo_done[s * n:(s + 1) * n] for s in range(opts.samples)]  # solo[s][i]
        answers = task_answers(task, [(d.reply, d.correct) for d in solo_done], opts.seed)
        base = {"answers": answers.info()}

        def own_message(i: int, s: int) -> tuple[Message, str]:
            d = solo[s][i]
            msg = Message(sender=i, role=roles[i], round=0, phase="solo", text=d.reply.text, answer=d.reply.answer,
                          confidence=d.reply.confidence, content_tokens=d.reply.content_tokens)
            return msg, answers.label(task.domain, d.reply.answer, d.correct)

        jobs, builders = [], []

        # drift: own solo answer back, nothing new
        for i in range(n):
            for s in range(opts.samples):
                own, own_label = own_message(i, s)
                unit = self._unit(task, "drift", i, s)
                jobs.append(self._call(unit, AgentCall(i, roles[i], REVISION_ROUND, "solo", task, (), own)))
                builders.append(("drift", {"agent": i, "sample": s, "own_sample": s, "confidence": None,
                                           "shown_labels": [], "synthetic_senders": []}, own_label))

        # revisions under controlled peer messages
        for kind, peers in REVISION_PROBES.items():
            if not plan[kind]:
                continue
            for ci, conf in enumerate(opts.confidences):
                for i in range(n):
                    s = ci % opts.samples
                    own, own_label = own_message(i, s)
                    senders = [j for j in range(n) if j != i][:len(peers)]
                    shown = tuple(synthetic_message(task, j, roles[j], answers.answer(label), conf, verdict)
                                  for j, (label, verdict) in zip(senders, peers))
                    unit = self._unit(task, kind, ci, i)
                    jobs.append(self._call(unit, AgentCall(i, roles[i], REVISION_ROUND, "solo", task, shown, own)))
                    builders.append((kind, {"agent": i, "sample": ci, "own_sample": s, "confidence": conf,
                                            "shown_labels": [label for label, _ in peers],
                                            "synthetic_senders": senders}, own_label))

        # decision node on controlled finals
        decision_jobs, decision_meta = [], []
        confs = opts.confidences
        for kind, finals in DECISION_PROBES.items():
            if not plan[kind]:
                continue
            for ci, (c_right, c_wrong) in enumerate(zip(confs, reversed(confs))):
                order_rng = np.random.default_rng(_stable_int(opts.seed, task.id, kind, ci, "order"))
                order = order_rng.permutation(len(finals))
                placed = [finals[k] for k in order]
                shown = tuple(synthetic_message(task, j, roles[j], answers.answer(label),
                                                c_right if label == "right" else c_wrong, verdict)
                              for j, (label, verdict) in enumerate(placed))
                unit = self._unit(task, kind, ci)
                decision_jobs.append(self._decide(unit, task, shown))
                decision_meta.append((kind, ci, c_right, c_wrong, [label for label, _ in placed], shown))

        done = await asyncio.gather(*jobs, *decision_jobs)
        revised, decided = done[:len(jobs)], done[len(jobs):]

        episodes = []
        for s in range(opts.samples):
            calls = [self._call_record(task, d, 0, answers, [], None) for d in solo[s]]
            probe = {"kind": "solo", "description": KIND_DESCRIPTIONS["solo"], "agent": None, "sample": s,
                     "own_sample": None, "confidence": None, "shown_labels": [], "synthetic_senders": [], **base}
            episodes.append(self._episode(task, probe, [self._round(0, range(n), [], [], calls)], None))
        for d, (kind, info, own_label) in zip(revised, builders):
            labels = info["shown_labels"]
            layer = 1 if labels else 0
            rec = self._call_record(task, d, layer, answers, labels, own_label)
            senders = info["synthetic_senders"]
            verified = [m.sender for m in d.call.messages if m.verdict != Verdict.NONE]
            rnd = self._round(REVISION_ROUND, [d.agent], [(j, d.agent) for j in senders], verified, [rec])
            probe = {"kind": kind, "description": KIND_DESCRIPTIONS[kind], **info, **base}
            episodes.append(self._episode(task, probe, [rnd], None))
        for decision, (kind, ci, c_right, c_wrong, labels, shown) in zip(decided, decision_meta):
            rec = {"shown": [shown_record(m, lab, True) for m, lab in zip(shown, labels)],
                   **reply_record(decision.reply), "accuracy": float(decision.accuracy), "called": True,
                   "label": answers.label(task.domain, decision.reply.answer, float(decision.accuracy))}
            probe = {"kind": kind, "description": KIND_DESCRIPTIONS[kind], "agent": None, "sample": ci,
                     "own_sample": None, "confidence": {"right": c_right, "wrong": c_wrong}, "shown_labels": labels,
                     "synthetic_senders": list(range(len(shown))), **base}
            episodes.append(self._episode(task, probe, [], rec))
        return episodes

    async def _decide(self, unit: Any, task: Task, finals: tuple[Message, ...]):
        decision = await unit.decide(task, finals)
        self.on_call()
        return decision


# --------------------------------------------------------------------------- summary
def probe_calls(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The calls an episode of a probe trace made (its agent calls, and its decision if called)."""
    calls = [c for r in record["rounds"] for c in r["calls"]]
    if record["decision"].get("called", True):
        calls.append({**record["decision"], "correct": record["decision"]["accuracy"], "own_previous": None})
    return calls


def summarize(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per probe kind: calls, share correct, share answering the trap, share switched (revision
    calls whose answer differs from their own previous answer), mean tokens per call."""
    acc: dict[str, dict[str, float]] = {}
    for record in records:
        kind = record["task"]["metadata"]["probe"]["kind"]
        domain = record["task"]["domain"]
        row = acc.setdefault(kind, {"calls": 0, "correct": 0.0, "trap": 0, "switched": 0, "revisions": 0, "tokens": 0})
        for c in probe_calls(record):
            row["calls"] += 1
            row["correct"] += float(c["correct"])
            row["trap"] += c.get("label") == "trap"
            row["tokens"] += c["prompt_tokens"] + c["completion_tokens"]
            own = c.get("own_previous")
            if own is not None:
                row["revisions"] += 1
                new = answer_key(domain, c["answer"])
                row["switched"] += new is not None and new != answer_key(domain, own["answer"])
    rows = []
    for kind in [k for k in KINDS if k in acc] + sorted(k for k in acc if k not in KINDS):
        r = acc[kind]
        rows.append({"probe": kind, "calls": int(r["calls"]), "correct": r["correct"] / r["calls"],
                     "trap": r["trap"] / r["calls"],
                     "switched": (f"{r['switched'] / r['revisions']:.4f}" if r["revisions"] else "-"),
                     "tokens/call": r["tokens"] / r["calls"], "shown": KIND_DESCRIPTIONS.get(kind, "")})
    return rows


SUMMARY_NOTES = (
    "correct: share of the calls whose answer is right (scored against the task's reference or hidden tests; "
    "for decide_* the decision's accuracy). trap: share answering the task's trap (its most common wrong solo "
    "answer). switched: share of the calls that revise an own previous answer whose new answer differs from it "
    "('-' where no own answer was shown). tokens/call: prompt + completion tokens per call."
)


# --------------------------------------------------------------------------- command line
def _tasks_arg(text: str) -> int:
    import argparse

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer: give the number of tasks to probe, "
                                         "e.g. 5") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: the number of tasks to probe must be >= 1")
    return value


def _int_at_least(low: int, what: str) -> Callable[[str], int]:
    import argparse

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer ({what})") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"{text!r}: {what} must be >= {low}")
        return value

    return parse


def _number_at_least(low: float, strict: bool, what: str) -> Callable[[str], float]:
    import argparse

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number ({what})") from None
        if not math.isfinite(value) or (value <= low if strict else value < low):
            bound = f"{'>' if strict else '>='} {low:g}"
            raise argparse.ArgumentTypeError(f"{text!r}: {what} must be a finite number {bound}")
        return value

    return parse


def _confidences(text: str) -> tuple[float, ...]:
    import argparse

    values = []
    for part in text.split(","):
        try:
            x = float(part)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{part!r} is not a number: give stated peer confidences in (0, 1], "
                                             "e.g. 0.6,0.9") from None
        if not 0.0 < x <= 1.0:
            raise argparse.ArgumentTypeError(f"{part!r}: a stated confidence must be in (0, 1]")
        values.append(x)
    return tuple(values)


def build_parser() -> OneLineParser:
    parser = OneLineParser(prog=PROG, description="Probe a real LLM team with controlled calls and write its "
                           "traces (topomarl.trace/1) for fitting the simulated team.")
    parser.add_argument("--dataset", required=True, help="'humaneval', 'small_math' or the path of a JSONL task file "
                        "(schema in agents_llm.tasks)")
    parser.add_argument("--tasks", type=_tasks_arg, default=10, help="number of tasks to probe (default 10), "
                        "drawn with --seed")
    parser.add_argument("--out", required=True, help="trace file to write (JSON lines; replaced)")
    parser.add_argument("--model", help="model name on the server (not with --local)")
    parser.add_argument("--base-url", help="OpenAI-compatible server (default $OPENAI_BASE_URL, else OpenAI); the "
                        "API key comes from $OPENAI_API_KEY")
    parser.add_argument("--local", action="store_true", help="start the bundled SmolLM2-135M llama.cpp server "
                        "for the run")
    parser.add_argument("--port", type=_int_at_least(1, "the local server's port"), default=DEFAULT_LOCAL_PORT,
                        help=f"port of the --local server (default {DEFAULT_LOCAL_PORT}; fixed so the cache replays)")
    parser.add_argument("--n-ctx", type=_int_at_least(256, "the local server's context size"), default=2048)
    parser.add_argument("--threads", type=_int_at_least(1, "the local server's threads"), default=2)
    parser.add_argument("--samples", type=_int_at_least(1, "solo samples per agent"), default=3,
                        help="solo samples per agent and task (default 3)")
    parser.add_argument("--agents", type=_int_at_least(3, "the team size"), default=3,
                        help="team size: N-1 specialists and an analyzer (default 3)")
    parser.add_argument("--confidences", type=_confidences, default=(0.6, 0.9),
                        help="stated confidences of the synthetic peers (default 0.6,0.9)")
    parser.add_argument("--seed", type=_int_at_least(0, "the seed"), default=0)
    parser.add_argument("--temperature", type=_number_at_least(0.0, False, "the sampling temperature"), default=0.7)
    parser.add_argument("--max-tokens", type=_int_at_least(1, "max completion tokens"), default=512)
    parser.add_argument("--timeout", type=_number_at_least(0.0, True, "seconds per call"), default=60.0,
                        help="seconds per call (default 60)")
    parser.add_argument("--concurrency", type=_int_at_least(1, "calls in flight"), default=8)
    parser.add_argument("--cache", default=".cache/llm_responses.sqlite", help="response cache (sqlite); "
                        "'none' turns it off")
    parser.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    return parser


def load_dataset(name: str) -> list[Task]:
    """The tasks of ``--dataset`` (ConfigError naming the value and what to do)."""
    return load_named_dataset(name, key="--dataset")


def select_tasks(tasks: Sequence[Task], k: int, seed: int) -> list[Task]:
    """``k`` tasks drawn with ``seed`` (in dataset order)."""
    if k > len(tasks):
        raise ConfigError(f"--tasks {k}: the dataset holds only {len(tasks)} task(s); ask for at most {len(tasks)}")
    picked = np.sort(np.random.default_rng(_stable_int(seed, "tasks")).choice(len(tasks), size=k, replace=False))
    return [tasks[int(i)] for i in picked]


def plan_table(counts: dict[str, int]) -> str:
    rows = [{"probe": k, "calls": counts[k], "shown": KIND_DESCRIPTIONS[k]} for k in KINDS]
    return format_table(rows, ["probe", "calls", "shown"])


def _confirm(total: int) -> bool:
    if not sys.stdin.isatty():
        return True
    try:
        reply = input(f"Make these {total} calls? [y/N] ")
    except EOFError:
        return False
    return reply.strip().lower() in ("y", "yes")


def _local_server(args: Any) -> Any:
    from agents_llm.local_server import LocalLlamaServer, LocalServerError, free_port

    port = args.port
    try:
        import socket

        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server binds it
            s.bind(("127.0.0.1", port))
    except OSError:
        new = free_port()
        print(f"port {port} is taken: the local server uses port {new} (cached responses of port {port} are not "
              "replayed)", file=sys.stderr)
        port = new
    try:
        server = LocalLlamaServer(port=port, n_ctx=args.n_ctx, n_threads=args.threads)
        server.start()
    except (LocalServerError, TimeoutError, OSError) as err:  # each says what to do (a missing model too)
        line = " ".join(str(err).split()) or type(err).__name__
        raise RunError(f"could not start the local SmolLM2 server: {line} (or use --base-url)") from None
    return server


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.local and (args.model or args.base_url):
        raise ConfigError("--local serves its own model (SmolLM2): leave out --model and --base-url, or drop --local")
    if not args.local and not args.model:
        raise ConfigError("no model: give --model NAME (and --base-url URL of an OpenAI-compatible server), "
                          "or --local for the bundled SmolLM2 server")
    out = Path(args.out)
    if out.is_dir():
        raise ConfigError(f"--out {args.out!r} is a folder: give the path of a trace file (e.g. traces.jsonl)")
    opts = ProbeOptions(n_agents=args.agents, samples=args.samples, confidences=args.confidences, seed=args.seed)
    tasks = select_tasks(load_dataset(args.dataset), args.tasks, args.seed)
    counts = plan_counts(tasks, opts)
    total = sum(counts.values())
    domains = sorted({t.domain for t in tasks})
    print(f"Probe plan: {len(tasks)} task(s) of {args.dataset} ({', '.join(domains)}), {opts.n_agents} agents, "
          f"{opts.samples} solo sample(s) per agent, peer confidences {', '.join(f'{c:g}' for c in opts.confidences)}, "
          f"seed {opts.seed}.")
    print(plan_table(counts))
    print("The trap is a task's most common wrong solo answer; peer messages and finals are written by the probe "
          "(synthetic), the own answer is the agent's own solo output.")
    print(f"total: {total} calls")
    sys.stdout.flush()
    if not args.yes and not _confirm(total):
        print("aborted: no call was made")
        return 1

    server = _local_server(args) if args.local else None
    try:
        return _run(args, opts, tasks, total, server, out)
    finally:
        if server is not None:
            server.stop()


def _run(args: Any, opts: ProbeOptions, tasks: list[Task], total: int, server: Any, out: Path) -> int:
    from tqdm import tqdm

    from agents_llm.client import LLMClient, LLMError, ServerUnreachable
    from agents_llm.local_server import MODEL_ALIAS
    from agents_llm.team import LLMTeamBackend, TaskPool

    model = MODEL_ALIAS if server is not None else args.model
    settings = LLMSettings(model=model, base_url=server.base_url if server is not None else args.base_url,
                           temperature=args.temperature, max_tokens=args.max_tokens, timeout_s=args.timeout,
                           max_concurrency=args.concurrency,
                           cache_path=None if args.cache.lower() == "none" else args.cache)
    client = LLMClient(settings)
    served = {"cache": 0, "calls": 0}
    complete = client.complete

    async def counting(messages, sample_index=0):
        result = await complete(messages, sample_index)
        served["calls"] += 1
        served["cache"] += bool(result.cached)
        return result

    client.complete = counting
    roles = ("specialist",) * (opts.n_agents - 1) + ("analyzer",)
    teams = {}
    for domain in sorted({t.domain for t in tasks}):
        team = LLMTeamBackend(domain, settings, TaskPool([t for t in tasks if t.domain == domain], train_size=0),
                              roles, default_personas(domain, roles))
        team.client = client
        teams[domain] = team

    bar = _LazyBar(lambda: tqdm(total=total, desc="probe", unit="call", file=sys.stderr, dynamic_ncols=True),
                   enabled=not args.no_progress)
    prober = Prober(teams, opts, model, on_call=bar.update)
    records: list[dict[str, Any]] = []
    written = 0
    loop = asyncio.new_event_loop()
    try:
        for task in tasks:
            try:
                episodes = loop.run_until_complete(prober.run_task(task))
            except ServerUnreachable as err:
                raise RunError(str(err).replace("env.backend.base_url", "--base-url")) from None
            except (LLMError, BackendFailed) as err:
                where = f"{written} of {len(tasks)} task(s) were written to {out}" if written else "nothing was written"
                raise RunError(f"the probe stopped at task {task.id!r}: {err}; {where}; rerun the same command to "
                               "go on (finished calls replay from the cache)") from None
            if written == 0:
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_text("")
            for episode in episodes:
                append_trace(out, episode)
            records += episodes
            written += 1
    finally:
        bar.close()
        _close_loop(loop)

    made = sum(len(probe_calls(r)) for r in records)
    print(format_table(summarize(records), ["probe", "calls", "correct", "trap", "switched", "tokens/call", "shown"]))
    print(SUMMARY_NOTES)
    print(f"Made {made} calls ({served['cache']} served from the cache, {client.calls_made} request(s) to "
          f"{_public_url(settings.resolved_base_url())}, retries included).")
    print(f"Wrote: {len(records)} probe episodes to {out}")
    return 0


class _LazyBar:
    """A progress bar shown from the first finished call on (a server that cannot be reached then
    leaves only its one-line error on stderr)."""

    def __init__(self, make: Callable[[], Any], enabled: bool):
        self.make, self.enabled, self.bar = make, enabled, None

    def update(self) -> None:
        if not self.enabled:
            return
        if self.bar is None:
            self.bar = self.make()
        self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _close_loop(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel what a failed task left running (other calls of its gather), then close the loop."""
    pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
    for t in pending:
        t.cancel()
    if pending:
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
    loop.run_until_complete(loop.shutdown_asyncgens())
    loop.close()


def _public_url(url: str) -> str:
    """``url`` without any user:password part or query (never print a secret)."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    netloc = parts.hostname or ""
    if parts.port:
        netloc += f":{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


if __name__ == "__main__":
    sys.exit(run_main(main, PROG))
