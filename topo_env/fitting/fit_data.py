"""Reading traces for the fit: episode records as calls in the simulated model's label space.

Contract
--------
:func:`load_traces` reads trace files (schema ``topomarl.trace/1``, :mod:`topo_env.engine.traces`); a
missing file or malformed line raises :class:`FitError` naming the file, line and field.
``Data(records, base)`` turns the records into what the fit's modules read:

* ``calls``: every agent call (:class:`Call`: its task, agent, role, round, whether it is an adversary's,
  the own previous answer and the messages shown as :class:`Inp`, its label, confidence, verdict and
  tokens); ``decisions``: the decision node's calls; ``episode_task``: each episode's task index;
  ``decision_modes``: how many episodes decided each way (``decision.mode``: a vote's or one agent's
  decision is no decision node's call, so it is not among ``decisions``).
* ``tasks`` (:class:`TaskInfo`): per task its labels, 0 the right answer, 1 the trap, 2.. the other
  wrong answers ranked by frequency; ``subjects`` (the base's, then
  new ones), ``subject_of`` and ``difficulty`` per task (``d_estimated`` where it was missing).
* ``notes``: what was inferred. Real traces: a task without ``difficulty`` has a latent one (``d_nodes``, the
  base prior's quantile nodes, ``d_evidence`` its tokens' log-likelihood there, :mod:`topo_env.fitting.fit_latents`;
  ``difficulty`` its posterior mean, refined by the attempt model), a task without ``trap`` a latent trap,
  first its most common wrong attempt (``trap_known`` False; :meth:`set_trap` moves it), a task without a
  subject counts as the base's ``other`` (else first) subject. Traces without a usable (non-adversary) call
  raise :class:`FitError`.

:data:`MIN_CALLS`, the calls any part of the fit needs, is shared by the fit's modules.
"""
from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from topo_env.engine.config_checks import ConfigError
from topo_env.engine.traces import TraceError, decision_mode, read_traces
from topo_env.fitting.fit_latents import difficulty_evidence, difficulty_nodes
from topo_env.fitting.fit_stats import softmax
from topo_env.sim.model import NO_ANSWER
from topo_env.sim.profiles import SimProfile

MIN_CALLS = 30  # calls needed to fit any part (the per-subject and per-agent parts have their own)


class FitError(ConfigError):
    """Traces that cannot be fitted (none usable, a bad base); the message says what to do."""


@dataclass
class Inp:
    label: int
    conf: float
    content: int | None
    verdict: int


@dataclass
class Call:
    ep: int
    task: int
    agent: int
    role: str
    round: int
    adversary: bool
    prev: Inp | None
    msgs: list[Inp]
    label: int
    conf: float | None
    verdict: int
    verified: bool
    prompt: int
    completion: int
    reasoning: int
    decision: bool = False

    @property
    def failed(self) -> bool:
        return self.prev is not None and self.prev.verdict == -1

    @property
    def committed(self) -> bool:
        return self.prev is not None and self.prev.verdict != -1


@dataclass
class TaskInfo:
    key: str
    subject: str | None
    difficulty: float | None
    prompt_tokens: int | None
    trap: str | None
    reference: str
    choices: list[str] | None
    labels: dict = field(default_factory=dict)


def load_traces(paths: Sequence[str | Path]) -> list[dict]:
    """The episode records of ``paths`` (read and checked by :func:`topo_env.engine.traces.read_traces`);
    a FitError names the file, line and field of the first malformed one."""
    records = []
    for path in paths:
        if not Path(path).is_file():
            raise FitError(f"trace file {str(path)!r} does not exist; give the path of a JSON-lines trace file "
                           "(written by env.record(path) or agents_llm/probe.py)")
        try:
            records.extend(read_traces(path))
        except TraceError as err:
            raise FitError(f"{err}; fix or drop that line (traces are written by env.record(path), schema "
                           "topomarl.trace/1)") from None
        except OSError as err:
            raise FitError(f"trace file {str(path)!r}: cannot be read ({err.strerror or err})") from None
    return records


def _norm(x: Any) -> str | None:
    return None if x is None else str(x).strip()


def _conf(x: Any) -> float:
    return 0.5 if not isinstance(x, (int, float)) or isinstance(x, bool) else float(x)


class Data:
    """The traces as calls in the model's label space (0 right, 1 trap, 2.. other wrong answers)."""

    def __init__(self, records: list[dict], base: SimProfile, where: str = "traces"):
        self.notes: list[str] = []
        task_index, answers_of = self._read_tasks(records)
        self._label_tasks(answers_of)
        self._place_subjects(base)
        self.calls: list[Call] = []
        self.decisions: list[Call] = []
        self.unreadable: list[Call] = []  # agent calls without a readable answer (not in ``calls``)
        self.unreadable_decisions: list[Call] = []  # the decision node's (not in ``decisions``)
        self.decision_modes: Counter = Counter()  # mode ("llm", "vote", "agent:K") -> episodes
        self.episode_task: list[int] = []
        for e, rec in enumerate(records):
            j = task_index[str(rec["task"].get("id"))]
            self.episode_task.append(j)
            self._episode(e, j, rec)
        self._task_calls: dict[int, list[Call]] = defaultdict(list)  # what set_trap relabels
        for c in self.calls + self.decisions:
            self._task_calls[c.task].append(c)
        self.difficulty = np.array([np.nan if t.difficulty is None else t.difficulty for t in self.tasks])
        self.subject_of = np.array([self.subjects.index(t.subject) for t in self.tasks], dtype=int)
        self.d_estimated = np.isnan(self.difficulty)
        self.d_nodes = difficulty_nodes(base)
        self.d_evidence = np.zeros((len(self.tasks), len(self.d_nodes)))
        self.d_posterior = np.full_like(self.d_evidence, 1.0 / len(self.d_nodes))
        if self.d_estimated.any():
            self._estimate_difficulty(base)
        if not any(self._usable(c) for c in self.calls):
            raise FitError(f"{where}: no usable calls (every call lacks an answer or belongs to an adversary); "
                           "record episodes with env.record(path) or agents_llm/probe.py and fit those")

    def _read_tasks(self, records: list[dict]) -> tuple[dict[str, int], dict[int, list[tuple[str | None, bool]]]]:
        """Set ``tasks`` (in order of first appearance) and ``n_agents``; returns each task id's index and
        each task's answers as (answer, is_attempt)."""
        self.tasks: list[TaskInfo] = []
        task_index: dict[str, int] = {}
        answers_of: dict[int, list[tuple[str | None, bool]]] = defaultdict(list)
        n_agents = 1
        for rec in records:
            key = str(rec["task"].get("id"))
            if key not in task_index:
                self.tasks.append(self._task_info(key, rec["task"]))
                task_index[key] = len(self.tasks) - 1
            j = task_index[key]
            n_agents = max(n_agents, int(rec["n_agents"]))
            for rnd in rec["rounds"]:
                for c in rnd["calls"]:
                    attempt = not c["shown"] and c["own_previous"] is None
                    answers_of[j].append((_norm(c["answer"]), attempt))
        self.n_agents = n_agents
        return task_index, answers_of

    @staticmethod
    def _task_info(key: str, t: dict) -> TaskInfo:
        meta = t.get("metadata") or {}
        diff = meta.get("difficulty")
        choices = meta.get("choices")
        subject = meta.get("subject", meta.get("category"))  # MMLU-Pro's JSONL calls it category
        return TaskInfo(
            key=key, subject=None if subject is None else str(subject),
            difficulty=float(diff) if isinstance(diff, (int, float)) and not isinstance(diff, bool) else None,
            prompt_tokens=meta.get("prompt_tokens") if isinstance(meta.get("prompt_tokens"), int) else None,
            trap=_norm(meta.get("trap")), reference=_norm(t.get("reference")),
            choices=[_norm(c) for c in choices] if isinstance(choices, (list, tuple)) else None)

    def _place_subjects(self, base: SimProfile) -> None:
        """``subjects``: the base's, then the traces' new ones; a task without a subject gets ``other``."""
        self.subjects = list(base.subject_names)
        missing_subject = 0
        for info in self.tasks:
            if info.subject is None:
                missing_subject += 1
                info.subject = "other" if "other" in self.subjects else self.subjects[0]
            if info.subject not in self.subjects:
                self.subjects.append(info.subject)
        if missing_subject:
            self.notes.append(f"{missing_subject} task(s) have no subject: counted as {self.tasks[0].subject!r}-like "
                              f"subject {'other' if 'other' in self.subjects else self.subjects[0]!r}")
        new = self.subjects[len(base.subject_names):]
        if new:
            self.notes.append(f"subjects not in the base profile, added with weight = the base's mean weight: {new}")

    @staticmethod
    def _usable(c: Call) -> bool:
        return not c.adversary

    def _label_tasks(self, answers_of: dict) -> None:
        inferred = 0
        self.trap_known = np.array([info.trap is not None for info in self.tasks], dtype=bool)
        for j, info in enumerate(self.tasks):
            answers = answers_of.get(j, [])
            if info.trap is None:
                wrong = Counter(a for a, att in answers if att and a is not None and a != info.reference)
                if not wrong:
                    wrong = Counter(a for a, _ in answers if a is not None and a != info.reference)
                if wrong:
                    info.trap = wrong.most_common(1)[0][0]
                    inferred += 1
            labels = {info.reference: 0}
            if info.trap is not None:
                labels[info.trap] = 1
            others = Counter(a for a, _ in answers if a is not None and a not in labels)
            for a, _ in sorted(others.items(), key=lambda kv: -kv[1]):
                labels[a] = len(labels) + (0 if info.trap is not None else 1)
            info.labels = labels
        if inferred:
            self.notes.append(f"{inferred} task(s) have no trap in their metadata: a latent answer, first their most "
                              "common wrong attempt (topo_env.fitting.fit_latents.fit_latent_trap then chooses it)")

    def label(self, j: int, answer: Any) -> int:
        """Task ``j``'s label of ``answer``; :data:`~topo_env.sim.model.NO_ANSWER` for none."""
        info = self.tasks[j]
        a = _norm(answer)
        if a is None:
            return NO_ANSWER
        if a not in info.labels:
            info.labels[a] = max(info.labels.values()) + 1
        return info.labels[a]

    def _episode(self, e: int, j: int, rec: dict) -> None:
        adversaries = set(rec.get("adversaries") or [])
        content: dict[tuple, int] = {}
        for rnd in rec["rounds"]:
            for c in rnd["calls"]:
                content[(c["agent"], rnd["round"], c["phase"])] = c["completion_tokens"] - c["reasoning_tokens"]

        def inp(m: dict | None) -> Inp | None:
            if m is None:
                return None
            return Inp(self.label(j, m["answer"]), _conf(m["confidence"]),
                       content.get((m["sender"], m["round"], m["phase"])), int(m["verdict"] or 0))

        def answered(inputs: list[Inp | None]) -> list[Inp]:  # a reply without an answer puts none on the table
            return [m for m in inputs if m is not None and m.label != NO_ANSWER]

        for rnd in rec["rounds"]:
            verify = rnd.get("verify") or []
            for c in rnd["calls"]:
                i = c["agent"]
                conf = c["confidence"]
                prev = answered([inp(c["own_previous"])])  # none to hold: the agent solves afresh
                call = Call(
                    ep=e, task=j, agent=i, role=str(c["role"]), round=int(rnd["round"]), adversary=i in adversaries,
                    prev=prev[0] if prev else None, msgs=answered([inp(m) for m in c["shown"]]),
                    label=self.label(j, c["answer"]),
                    conf=float(conf) if isinstance(conf, (int, float)) and not isinstance(conf, bool) else None,
                    verdict=int(c["verdict"] or 0), verified=bool(i < len(verify) and verify[i]),
                    prompt=c["prompt_tokens"], completion=c["completion_tokens"], reasoning=c["reasoning_tokens"])
                (self.unreadable if call.label == NO_ANSWER else self.calls).append(call)
        dec = rec["decision"]
        if dec.get("called") is False:  # a probe episode without a decision (agents_llm.probe)
            return
        mode = str(decision_mode(rec))
        self.decision_modes[mode] += 1
        if mode != "llm":  # a vote or one agent's answer: no decision node spoke (topo_env.engine.decision)
            return
        conf = dec["confidence"]
        decision = Call(
            ep=e, task=j, agent=-1, role="decider", round=len(rec["rounds"]), adversary=False, prev=None,
            msgs=answered([inp(m) for m in dec["shown"]]), label=self.label(j, dec["answer"]),
            conf=float(conf) if isinstance(conf, (int, float)) and not isinstance(conf, bool) else None,
            verdict=0, verified=False, prompt=dec["prompt_tokens"], completion=dec["completion_tokens"],
            reasoning=int(dec.get("reasoning_tokens") or 0), decision=True)
        (self.unreadable_decisions if decision.label == NO_ANSWER else self.decisions).append(decision)

    def _estimate_difficulty(self, base: SimProfile) -> None:
        """``d_evidence`` from the tokens (:func:`~topo_env.fitting.fit_latents.difficulty_evidence`) and, for
        the tasks without a difficulty, its posterior mean under the base's prior (the attempt model refines it)."""
        evidence, notes = difficulty_evidence(self, base, self.d_nodes)
        self.d_evidence[self.d_estimated] = evidence[self.d_estimated]
        self.set_difficulty_posterior(np.flatnonzero(self.d_estimated), self.d_evidence[self.d_estimated])
        self.notes.append(f"{int(self.d_estimated.sum())} task(s) have no difficulty: a latent with the base's prior "
                          f"Beta({base.diff_a:g}, {base.diff_b:g}), integrated out where the attempts are fitted, its "
                          "posterior mean elsewhere")
        self.notes.extend(notes)

    def set_difficulty_posterior(self, tasks: np.ndarray, log_post: np.ndarray) -> None:
        """Keep the (unnormalised) log posterior of ``tasks``' difficulty over ``d_nodes`` (``d_posterior``:
        (T, G) probabilities, rows of tasks with a known difficulty unused) and set their difficulty to its mean."""
        w = softmax(log_post, axis=1)
        self.d_posterior[tasks] = w
        self.difficulty[tasks] = w @ self.d_nodes

    def set_trap(self, j: int, label: int | None) -> None:
        """Make the answer labelled ``label`` task ``j``'s trap (label 1), or, with None, give the task no
        trap: every call's and message's label of the task follows."""
        old_trap = max(self.tasks[j].labels.values()) + 1 if label is None else label
        swap = {1: old_trap, old_trap: 1}
        info = self.tasks[j]
        info.labels = {a: swap.get(k, k) for a, k in info.labels.items()}
        info.trap = next((a for a, k in info.labels.items() if k == 1), None)
        for c in self._task_calls[j]:
            c.label = swap.get(c.label, c.label)
            for m in [c.prev, *c.msgs]:
                if m is not None:
                    m.label = swap.get(m.label, m.label)
