"""Fit the simulated agent model (:mod:`topo_env.sim.model`) to episode traces by maximum likelihood.

Contract
--------
``fit(traces, base) -> (profile, report)``: ``traces`` are episode records of schema
``topomarl.trace/1`` (:mod:`topo_env.engine.traces`; from the simulated team or a real one, e.g.
``agents_llm/probe.py``), ``base`` a :class:`~topo_env.sim.profiles.SimProfile`. The result is a copy
of ``base`` whose parameters the traces inform are replaced by their estimates; every other parameter
keeps the base's value. ``report`` lists per parameter the value, its standard error (inverse Hessian
or outer product of the scores of the negative log-likelihood, or the OLS / binomial formula), the
number of calls that informed it and its status (``fitted``, ``at bound``, ``not identified`` or
``kept from base``: :mod:`topo_env.fitting.fit_report`), the covariance blocks of jointly fitted
parameters, plus notes on what was estimated or assumed and, for each parameter on a bound or on a
flat stretch of the likelihood, what calls would identify it.

:func:`fit_traces` (trace files and a base profile name, path or None) is the entry from Python: it
adds the predictive check (:mod:`topo_env.fitting.fit_check`: the fitted team on solo, full, star and
debate, and replaying the recorded episodes) to the report. ``python -m topo_env.fitting.fit traces.jsonl
[more.jsonl ...] --out profile.yaml [--base mmlu_pro] [--json] [--seed 0] [--no-check]`` writes the
profile (:func:`~topo_env.sim.profiles.save_profile`; the env loads it with ``profile: profile.yaml``)
and prints the report and the check as tables (``--json``: one JSON object). A missing file, a
malformed line, traces without a usable call or a bad base print one line naming the file, line and
field (or the value) and exit with status 2.

Which calls identify which parameters (adversaries' calls are left out of every behavioural part)
--------------------------------------------------------------------------------------------------
* **Attempts** (no message shown, no committed own answer: round 0's first call, or a re-solve after
  a failed verification): P(correct) = sigma(eta), eta = alpha + b_s + k_is + a_r - beta (d - 1/2)
  + debug_gain [failed] + task_spread z + blind_spread u_i. z is integrated out per task (all the
  task's attempts in every episode share it) and u_i per (episode, agent) with Gauss-Hermite
  quadrature. Fits the per-(agent, subject) level alpha + b_s + k_is, beta, task_spread (identified
  by several attempts on one task), blind_spread (only when one agent attempts a task twice in an
  episode, >= ``MIN_REPEATS`` times; else kept), debug_gain (when re-solves exist). Gauge: the
  frequency-weighted mean of the fitted subjects' b_s and the team-average skill per subject stay at
  the base's values (attempts only see the sum; the split shows only in the recognition term), so
  the agents' differences per subject become explicit ``skills`` of the team's AgentModels (shrunk
  toward the team's mean by the empirical-Bayes factor 1 - mean SE^2 / mean deviation^2, also in the
  recognition term of the updates; the report's ``skill_dev`` rows are unshrunk). Weak N(0, 2^2)
  priors on the subject levels and skill deviations keep cells with all-right attempts finite.
  P(trap | wrong) = min(1, trap_base + trap_slope d): trap_base, trap_slope (standard errors from the
  outer product of the scores: an attempt past the corner where the probability reaches 1 tells nothing).
* **Updates** (messages shown): the Gumbel-max choice is a softmax over the labels on the table,
  scores S(a) / tau. w_commit is the scale (kept); w_fresh, w_peer, rho, rho_v, theta, theta_v, tau
  are fitted jointly. A committed own answer's weight is observed; a fresh one's (w_fresh c_att) is
  not: its label and confidence are integrated out, with P(att correct) the posterior predictive of
  the attempt fit given the task's observed attempts (a composite likelihood: several fresh update
  calls of one task are treated as independent given those attempts). Each subject with at least
  ``MIN_SUBJECT_CALLS`` update calls (and at least ``MIN_V_SUBJECTS`` such subjects) also gets its
  verifiability v_s; the update calls of the other subjects are left out. The likelihood is not
  concave (max(0, .) has plateaus): :func:`topo_env.fitting.fit_updates.fit_updates` searches from a free
  per-subject fit, the base and seeded random starts, reports the best and how many reached it, tests
  the model's linear-in-v form against the free fit, and puts the v in the base's gauge (weighted mean
  and spread); standard errors from the outer product of the per-task scores.
* **Drift** (committed answer, no message): drift_cw = share of committed right answers that turn
  wrong, drift_wc = share of committed wrong answers that turn right.
* **Confidence**: OLS of logit(confidence) on [right], [wrong], support - 1/2 -> mu_correct,
  mu_wrong, kappa; sigma_conf the residual SD. Support is computed exactly as the model does, so
  only calls whose raw weights are observed count: attempts (support 1), committed calls, and the
  decision node.
* **Decision node**: softmax likelihood over the finals' labels -> decide_tau (>= 0.01: below, the vote
  is deterministic and the bound is reported), contradicted_weight (only when a final that passed
  verification is contradicted).
* **Verifier** (verified calls: round field ``verify``): verify_pass_correct, verify_detect (from
  wrong answers other than the trap) and, for
  the python verifier, p_wrote_code as rates.
* **Tokens**: content = completion - reasoning: log content_mean = mean of log(content / f_role);
  reasoning: nonlinear least squares of log(reasoning) on log(reason_mean verbosity (0.6 + 0.8 d)
  (f + conflict share)) with f in {1, revisit, reemit, decide_factor} and, where the decision node
  (verbosity 1) anchors the scale, every agent's verbosity; prompt = sys + task + sum over
  inputs (header + content + verdict tokens) by linear least squares (task fixed effects when the
  task's prompt tokens are unknown, leaving sys_tokens kept); task_tokens_mean, diff_a, diff_b from
  the tasks' metadata where present.

Real traces: a task without ``difficulty`` gets one from its attempts' accuracy (its rank among the
tasks mapped to the base's Beta(diff_a, diff_b) quantile), a task without ``trap`` takes its most
common wrong attempt as the trap (raising P(trap | wrong) by construction), other wrong answers are
ranked by frequency to place them on the Zipf labels; answers not on the table of an update or
decision cannot come from the model and those calls are skipped. The report says each of these.

Tolerances held by ``tests/test_fit.py`` (3000 two-round episodes of random actions over a pool of
1000 tasks of a known mmlu_pro-like profile, fitted from a base with every checked parameter moved
outside its tolerance, the verifiabilities rotated among the subjects): each checked parameter
within 3 standard errors of the truth (in the fit's gauge) *and* within its absolute tolerance:
alpha 0.3, beta 1.2, task_spread 0.35, trap_base 0.08, trap_slope 0.15, w_fresh 0.2, w_peer 0.08,
rho 0.3, rho_v 0.5, theta 0.3, theta_v 0.6, tau 0.08, drift_cw 0.02, drift_wc 0.03, mu_correct /
mu_wrong 0.08, kappa 0.25, sigma_conf 0.05, decide_tau 0.06, content_mean 7.5 tokens, reason_mean 40
tokens, revisit 0.05, reemit 0.02, conflict 0.15; sys_tokens and header_tokens exact (+-1); every
subject's verifiability within 0.35 and the largest |z| of the 14 within 3.5; the fitted
per-(agent, subject) logits alpha + b_s + k_is within 0.3 of the truth's on average.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from topo_env.engine.cli import OneLineParser, RunError, run_main
from topo_env.frontends.env_config import EnvConfig
from topo_env.engine.config_checks import ConfigError
from topo_env.fitting.fit_stats import gauss_hermite, hessian, log_sig, lse, one_blas_thread, sig, std_errors
from topo_env.fitting.fit_report import FITTED, Report, format_report
from topo_env.fitting.fit_updates import (
    BOUNDS, MIN_V_SUBJECTS, UPDATE_PARAMS, Gauge, UpdateFit, UpdateModel, fit_updates,
)
from topo_env.sim.model import verdict_factor
from topo_env.engine.traces import TraceError, read_traces
from topo_env.sim.profiles import (
    PROFILES, AgentModel, ProfileFileError, SimProfile, get_profile, load_profile, save_profile,
)

PROG = "python -m topo_env.fitting.fit"
MIN_REPEATS = 50  # (episode, agent) pairs with two attempts needed to fit blind_spread
MIN_SUBJECT_CALLS = 60  # update calls of a subject needed to fit its verifiability (fewer: left out, v kept)
MIN_CELL_ATTEMPTS = 20  # attempts of an (agent, subject) needed to fit the agent's skill there
MIN_CALLS = 30  # calls needed to fit any other part
PRIOR_SD = 2.0
N_Z, N_U, N_C = 16, 6, 6  # Gauss-Hermite nodes: task latent, blind spot, attempt confidence
DEFAULT_BASE = {"reasoning": "mmlu_pro", "code": "humaneval", "math": "aime25"}
DECISION_BOUNDS = ((1e-2, 10.0), (0.0, 5.0))  # decide_tau (below 0.01 the vote is deterministic), contradicted_weight


class FitError(ConfigError):
    """Traces that cannot be fitted (none usable, a bad base); the message says what to do."""


# ---------------------------------------------------------------------------------------------
# reading traces


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
        except (OSError, UnicodeDecodeError) as err:
            raise FitError(f"trace file {str(path)!r}: cannot be read ({err})") from None
    return records


def _norm(x: Any) -> str | None:
    return None if x is None else str(x).strip()


def _conf(x: Any) -> float:
    return 0.5 if not isinstance(x, (int, float)) or isinstance(x, bool) else float(x)


class Data:
    """The traces as calls in the model's label space (0 right, 1 trap, 2.. other wrong answers)."""

    def __init__(self, records: list[dict], base: SimProfile, where: str = "traces"):
        self.notes: list[str] = []
        self.tasks: list[TaskInfo] = []
        task_index: dict[str, int] = {}
        answers_of: dict[int, list[tuple[str | None, bool]]] = defaultdict(list)  # (answer, is_attempt)
        n_agents = 1
        for rec in records:
            t = rec["task"]
            meta = t.get("metadata") or {}
            key = str(t.get("id"))
            if key not in task_index:
                diff = meta.get("difficulty")
                choices = meta.get("choices")
                subject = meta.get("subject", meta.get("category"))  # MMLU-Pro's JSONL calls it category
                self.tasks.append(TaskInfo(
                    key=key, subject=None if subject is None else str(subject),
                    difficulty=float(diff) if isinstance(diff, (int, float)) and not isinstance(diff, bool) else None,
                    prompt_tokens=meta.get("prompt_tokens") if isinstance(meta.get("prompt_tokens"), int) else None,
                    trap=_norm(meta.get("trap")), reference=_norm(t.get("reference")),
                    choices=[_norm(c) for c in choices] if isinstance(choices, (list, tuple)) else None))
                task_index[key] = len(self.tasks) - 1
            j = task_index[key]
            n_agents = max(n_agents, int(rec["n_agents"]))
            for rnd in rec["rounds"]:
                for c in rnd["calls"]:
                    attempt = not c["shown"] and c["own_previous"] is None
                    answers_of[j].append((_norm(c["answer"]), attempt))
        self.n_agents = n_agents
        self._label_tasks(answers_of)
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
        self.calls: list[Call] = []
        self.decisions: list[Call] = []
        self.episode_task: list[int] = []
        for e, rec in enumerate(records):
            j = task_index[str(rec["task"].get("id"))]
            self.episode_task.append(j)
            self._episode(e, j, rec)
        self.difficulty = np.array([np.nan if t.difficulty is None else t.difficulty for t in self.tasks])
        self.subject_of = np.array([self.subjects.index(t.subject) for t in self.tasks], dtype=int)
        self.d_estimated = np.isnan(self.difficulty)
        if self.d_estimated.any():
            self._estimate_difficulty(base)
        if not any(self._usable(c) for c in self.calls):
            raise FitError(f"{where}: no usable calls (every call lacks an answer or belongs to an adversary); "
                           "record episodes with env.record(path) or agents_llm/probe.py and fit those")

    @staticmethod
    def _usable(c: Call) -> bool:
        return not c.adversary

    def _label_tasks(self, answers_of: dict) -> None:
        inferred = 0
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
            if info.choices:
                for k, c in enumerate(info.choices):
                    labels.setdefault(c, k)
            others = Counter(a for a, _ in answers if a not in labels)
            for a, _ in sorted(others.items(), key=lambda kv: -kv[1]):
                labels[a] = len(labels) + (0 if info.trap is not None else 1)
            info.labels = labels
        if inferred:
            self.notes.append(f"{inferred} task(s) have no trap in their metadata: the most common wrong attempt "
                              "is taken as the trap (this raises the fitted P(trap | wrong))")

    def label(self, j: int, answer: Any) -> int:
        info = self.tasks[j]
        a = _norm(answer)
        if a is None and info.choices:
            return 1  # the simulator reads a missing answer as the trap
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

        for rnd in rec["rounds"]:
            verify = rnd.get("verify") or []
            for c in rnd["calls"]:
                i = c["agent"]
                conf = c["confidence"]
                self.calls.append(Call(
                    ep=e, task=j, agent=i, role=str(c["role"]), round=int(rnd["round"]), adversary=i in adversaries,
                    prev=inp(c["own_previous"]), msgs=[inp(m) for m in c["shown"]], label=self.label(j, c["answer"]),
                    conf=float(conf) if isinstance(conf, (int, float)) and not isinstance(conf, bool) else None,
                    verdict=int(c["verdict"] or 0), verified=bool(i < len(verify) and verify[i]),
                    prompt=c["prompt_tokens"], completion=c["completion_tokens"], reasoning=c["reasoning_tokens"]))
        dec = rec["decision"]
        if dec.get("called") is False:  # a probe episode without a decision (agents_llm.probe)
            return
        conf = dec["confidence"]
        self.decisions.append(Call(
            ep=e, task=j, agent=-1, role="decider", round=len(rec["rounds"]), adversary=False, prev=None,
            msgs=[inp(m) for m in dec["shown"]], label=self.label(j, dec["answer"]),
            conf=float(conf) if isinstance(conf, (int, float)) and not isinstance(conf, bool) else None,
            verdict=0, verified=False, prompt=dec["prompt_tokens"], completion=dec["completion_tokens"],
            reasoning=int(dec.get("reasoning_tokens") or 0), decision=True))

    def _estimate_difficulty(self, base: SimProfile) -> None:
        from scipy.stats import beta as beta_dist, rankdata

        right, n = np.zeros(len(self.tasks)), np.zeros(len(self.tasks))
        for c in self.calls:
            if not c.adversary and not c.msgs and c.prev is None:
                right[c.task] += c.label == 0
                n[c.task] += 1
        missing = np.flatnonzero(self.d_estimated)
        acc = (right[missing] + 0.5) / (n[missing] + 1.0)
        acc[n[missing] == 0] = (right.sum() + 0.5) / (n.sum() + 1.0)
        q = (rankdata(-acc) - 0.5) / len(missing)
        self.difficulty[missing] = beta_dist.ppf(q, base.diff_a, base.diff_b)
        self.notes.append(f"{len(missing)} task(s) have no difficulty: estimated from their attempts' accuracy "
                          f"(rank mapped to the base's Beta({base.diff_a:g}, {base.diff_b:g}) quantiles); beta and "
                          "task_spread then describe the residual after that estimate")


# ---------------------------------------------------------------------------------------------
# attempts


class AttemptModel:
    """Marginal likelihood of the observed attempts (task latent and blind spots integrated out)."""

    def __init__(self, data: Data, base: SimProfile, calls: list[Call]):
        self.data, self.base = data, base
        n_sub = len(data.subjects)
        base_skills = np.array(base.skills(data.n_agents))  # (N, S_base)
        kbar = np.zeros(n_sub)
        kbar[:base_skills.shape[1]] = base_skills.mean(axis=0)
        dev = np.zeros((data.n_agents, n_sub))
        dev[:, :base_skills.shape[1]] = base_skills - base_skills.mean(axis=0)
        self.kbar, self.base_dev = kbar, dev
        b_base = np.zeros(n_sub)
        b_base[:len(base.subjects)] = base.subject_offsets
        self.b_base = b_base
        self.calls = sorted(calls, key=lambda c: (c.task, c.ep, c.agent))
        cs = self.calls
        self.y = np.array([c.label == 0 for c in cs], dtype=float)
        self.sign = 2.0 * self.y - 1.0
        self.subject = np.array([data.subject_of[c.task] for c in cs])
        self.agent = np.array([c.agent for c in cs])
        self.d = np.array([data.difficulty[c.task] for c in cs])
        self.failed = np.array([c.failed for c in cs], dtype=float)
        self.role_off = np.array([base.roles.get(c.role, (0.0, 1.0, 1.0))[0] for c in cs])
        # groups (task, episode, agent) nested in tasks
        gkey = [(c.task, c.ep, c.agent) for c in cs]
        starts = [0] + [k for k in range(1, len(cs)) if gkey[k] != gkey[k - 1]]
        self.g_start = np.array(starts)
        self.g_of = np.repeat(np.arange(len(starts)), np.diff(starts + [len(cs)]))
        g_task = [cs[s].task for s in starts]
        t_starts = [0] + [g for g in range(1, len(starts)) if g_task[g] != g_task[g - 1]]
        self.t_start = np.array(t_starts)
        self.t_of_g = np.repeat(np.arange(len(t_starts)), np.diff(t_starts + [len(starts)]))
        self.task_ids = np.array([g_task[s] for s in t_starts])
        sizes = np.diff(starts + [len(cs)])
        self.repeats = int((sizes >= 2).sum())
        tasks_n = np.bincount(self.t_of_g[self.g_of], minlength=len(t_starts))
        self.multi_tasks = int((tasks_n >= 2).sum())
        # which subject levels and agent deviations are free
        counts = np.zeros((data.n_agents, n_sub))
        np.add.at(counts, (self.agent, self.subject), 1)
        self.counts = counts
        self.fit_sub = [s for s in range(n_sub) if counts[:, s].sum() >= MIN_CELL_ATTEMPTS]
        self.fit_dev = [(i, s) for s in self.fit_sub for i in range(data.n_agents - 1)
                        if (counts[:, s] >= MIN_CELL_ATTEMPTS).all()] if data.n_agents > 1 else []
        self.dev_subjects = sorted({s for _, s in self.fit_dev})
        self.fit_blind = self.repeats >= MIN_REPEATS
        self.fit_debug = self.failed.sum() >= MIN_CALLS
        # design
        k_sub, k_dev = len(self.fit_sub), len(self.fit_dev)
        self.names = ([f"level[{data.subjects[s]}]" for s in self.fit_sub]
                      + [f"skill_dev[{i},{data.subjects[s]}]" for i, s in self.fit_dev] + ["beta", "task_spread"]
                      + (["blind_spread"] if self.fit_blind else []) + (["debug_gain"] if self.fit_debug else []))
        n = len(cs)
        X = np.zeros((n, k_sub + k_dev + 1 + (1 if self.fit_debug else 0)))
        sub_col = {s: k for k, s in enumerate(self.fit_sub)}
        for k, s in enumerate(self.subject):
            if s in sub_col:
                X[k, sub_col[s]] = 1.0
        last = data.n_agents - 1
        for k, (i, s) in enumerate(self.fit_dev):
            X[(self.agent == i) & (self.subject == s), k_sub + k] = 1.0
            X[(self.agent == last) & (self.subject == s), k_sub + k] = -1.0
        X[:, k_sub + k_dev] = -(self.d - 0.5)
        if self.fit_debug:
            X[:, -1] = self.failed
        self.X = X
        # fixed offset: role, base gauge pieces for subjects/devs that are not fitted
        off = self.role_off + self.kbar[self.subject]
        not_fit_sub = ~np.isin(self.subject, self.fit_sub)
        off[not_fit_sub] += base.alpha + self.b_base[self.subject[not_fit_sub]]
        dev_fixed = np.array([(a, s) not in set(self.fit_dev) and not (a == last and s in self.dev_subjects)
                              for a, s in zip(self.agent, self.subject)])
        off[dev_fixed] += self.base_dev[self.agent[dev_fixed], self.subject[dev_fixed]]
        if not self.fit_debug:
            off += base.debug_gain * self.failed
        self.offset = off
        self.zx, self.lwz = gauss_hermite(N_Z)
        self.ux, self.lwu = gauss_hermite(N_U)
        self.k_lin = X.shape[1]
        self.prior = np.zeros(len(self.names))
        self.prior[:k_sub + k_dev] = 1.0 / PRIOR_SD ** 2

    def _unpack(self, theta):
        k = self.k_lin
        coef = np.concatenate([theta[:k - (1 if self.fit_debug else 0)], theta[-1:] if self.fit_debug else []])
        ts = theta[k - (1 if self.fit_debug else 0)]
        bs = theta[k + 1 - (1 if self.fit_debug else 0)] if self.fit_blind else self.base.blind_spread
        return coef, ts, bs

    def _prior_mean(self, theta):
        mean = np.zeros_like(theta)
        k_sub = len(self.fit_sub)
        mean[:k_sub] = self.base.alpha + self.b_base[self.fit_sub]
        return mean

    def nll(self, theta, grad=True):
        coef, ts, bs = self._unpack(theta)
        eta0 = self.X @ coef + self.offset
        e = eta0[:, None, None] + ts * self.zx[None, :, None] + bs * self.ux[None, None, :]
        y = self.y[:, None, None]
        lp = log_sig(self.sign[:, None, None] * e)
        LG = np.add.reduceat(lp, self.g_start, axis=0)  # (G, Qz, Qu)
        lg = lse(LG + self.lwu[None, None, :], axis=2)  # (G, Qz)
        LT = np.add.reduceat(lg, self.t_start, axis=0)  # (T, Qz)
        ll_t = lse(LT + self.lwz[None, :], axis=1)
        pm = self._prior_mean(theta)
        f = -ll_t.sum() + 0.5 * np.sum(self.prior * (theta - pm) ** 2)
        if not grad:
            return f
        piz = np.exp(LT + self.lwz[None, :] - ll_t[:, None])  # (T, Qz)
        piu = np.exp(LG + self.lwu[None, None, :] - lg[:, :, None])  # (G, Qz, Qu)
        W = piz[self.t_of_g][self.g_of][:, :, None] * piu[self.g_of]
        r = W * (y - sig(e))
        g_eta = r.sum(axis=(1, 2))
        g_lin = self.X.T @ g_eta
        g_ts = np.einsum("kqm,q->", r, self.zx)
        g_bs = np.einsum("kqm,m->", r, self.ux)
        k = self.k_lin
        if self.fit_debug:
            g = np.concatenate([g_lin[:k - 1], [g_ts], [g_bs] if self.fit_blind else [], g_lin[k - 1:]])
        else:
            g = np.concatenate([g_lin, [g_ts], [g_bs] if self.fit_blind else []])
        return f, -g + self.prior * (theta - pm)

    def fit(self):
        from scipy.optimize import minimize

        k_sub = len(self.fit_sub)
        x0 = np.concatenate([self.base.alpha + self.b_base[self.fit_sub], np.zeros(len(self.fit_dev)),
                             [self.base.beta, max(self.base.task_spread, 0.3)],
                             [max(self.base.blind_spread, 0.3)] if self.fit_blind else [],
                             [self.base.debug_gain] if self.fit_debug else []])
        self.bounds = bounds = [(-15, 15)] * (k_sub + len(self.fit_dev)) + [(-30, 30), (1e-3, 8)] + (
            [(1e-3, 8)] if self.fit_blind else []) + ([(-5, 5)] if self.fit_debug else [])
        res = minimize(lambda t: self.nll(t), x0, jac=True, method="L-BFGS-B", bounds=bounds,
                       options={"maxiter": 500})
        self.theta = res.x
        h = hessian(lambda t: self.nll(t), res.x, step=1e-5)
        self.se, self.cov = std_errors(h)
        return res

    def predictive(self, calls: list[Call]) -> np.ndarray:
        """P(attempt right) of ``calls`` given the attempts of their task (posterior of the latent)."""
        coef, ts, bs = self._unpack(self.theta)
        eta0 = self.X @ coef + self.offset
        e = eta0[:, None, None] + ts * self.zx[None, :, None] + bs * self.ux[None, None, :]
        lp = log_sig(self.sign[:, None, None] * e)
        LG = np.add.reduceat(lp, self.g_start, axis=0)
        lg = lse(LG + self.lwu[None, None, :], axis=2)
        LT = np.add.reduceat(lg, self.t_start, axis=0)
        post = LT + self.lwz[None, :]
        post = np.exp(post - lse(post, axis=1)[:, None])
        row_of_task = {int(t): r for r, t in enumerate(self.task_ids)}
        prior = np.exp(self.lwz)
        out = np.empty(len(calls))
        levels, skills = self.levels(), self.skill_matrix()
        for k, c in enumerate(calls):
            s = self.data.subject_of[c.task]
            d = self.data.difficulty[c.task]
            eta = (levels[s] + skills[c.agent, s] + self.base.roles.get(c.role, (0.0, 1.0, 1.0))[0]
                   - self.beta() * (d - 0.5) + (self.debug_gain() if c.failed else 0.0))
            w = post[row_of_task[c.task]] if c.task in row_of_task else prior
            p = sig(eta + ts * self.zx[:, None] + bs * self.ux[None, :]) @ np.exp(self.lwu)
            out[k] = float(w @ p)
        return out

    # fitted quantities in the model's terms
    def levels(self) -> np.ndarray:
        """alpha + b_s per subject (base for subjects without attempts)."""
        lev = self.base.alpha + self.b_base.copy()
        lev[self.fit_sub] = self.theta[:len(self.fit_sub)]
        return lev

    def skill_matrix(self, shrink: float = 1.0) -> np.ndarray:
        """k_is: the base's team-average skill per subject plus the fitted deviations, times ``shrink``."""
        dev = self.base_dev.copy()
        k_sub = len(self.fit_sub)
        for s in self.dev_subjects:
            dev[:, s] = 0.0
        for k, (i, s) in enumerate(self.fit_dev):
            dev[i, s] = shrink * self.theta[k_sub + k]
            dev[-1, s] -= shrink * self.theta[k_sub + k]
        return self.kbar[None, :] + dev

    def shrinkage(self) -> float:
        """The empirical-Bayes factor for the fitted skill deviations: 1 - mean(SE^2) / mean(dev^2), in [0, 1]
        (the share of their spread that is not estimation noise). Shrunk deviations predict an agent's
        attempts on new tasks better, and inside the recognition term max(0, . + skill) unshrunk noise
        would raise the recognition on average (the fit would bend rho, rho_v and the v to cancel it)."""
        k_sub = len(self.fit_sub)
        dev = self.theta[k_sub:k_sub + len(self.fit_dev)]
        se = self.se[k_sub:k_sub + len(self.fit_dev)]
        if not len(dev) or not np.isfinite(se).all() or not (dev ** 2).mean() > 0:
            return 1.0
        return float(np.clip(1.0 - (se ** 2).mean() / (dev ** 2).mean(), 0.0, 1.0))

    def beta(self) -> float:
        return float(self.theta[len(self.fit_sub) + len(self.fit_dev)])

    def debug_gain(self) -> float:
        return float(self.theta[-1]) if self.fit_debug else self.base.debug_gain


def fit_trap(data: Data, calls: list[Call], base: SimProfile, report: Report) -> None:
    from scipy.optimize import minimize

    wrong = [c for c in calls if c.label != 0]
    if len(wrong) < MIN_CALLS:
        report.keep("trap_base", len(wrong), "too few wrong attempts")
        report.keep("trap_slope", len(wrong), "too few wrong attempts")
        return
    d = np.array([data.difficulty[c.task] for c in wrong])
    y = np.array([c.label == 1 for c in wrong], dtype=float)

    def nll(t):
        p = np.clip(t[0] + t[1] * d, 1e-6, 1 - 1e-6)
        return -np.sum(y * np.log(p) + (1 - y) * np.log1p(-p))

    res = minimize(nll, np.array([base.trap_base, base.trap_slope]), method="Nelder-Mead",
                   options={"xatol": 1e-6, "fatol": 1e-8, "maxiter": 2000})
    # standard errors from the outer product of the scores: a wrong attempt on a task hard enough that
    # P(trap | wrong) reaches 1 carries no information (the Hessian of the clipped likelihood would
    # read its corner as curvature)
    p = res.x[0] + res.x[1] * d
    inside = (p > 1e-6) & (p < 1 - 1e-6)
    score = np.where(inside, y / np.clip(p, 1e-6, None) - (1 - y) / np.clip(1 - p, 1e-6, None), 0.0)
    scores = np.column_stack([score, score * d])
    se, cov = std_errors(scores.T @ scores)
    report.set("trap_base", res.x[0], se[0], len(wrong), "wrong attempts: trap or not")
    report.set("trap_slope", res.x[1], se[1], len(wrong), "wrong attempts: trap or not")
    report.block(["trap_base", "trap_slope"], cov)


# ---------------------------------------------------------------------------------------------
# confidence, decision, tokens


def _support(p: SimProfile, c: Call, w_peer: float, contradicted: float) -> float | None:
    """The model's support of ``c``'s answer, or None when it depends on an unobserved weight."""
    score: dict[int, float] = defaultdict(float)
    if c.decision:
        passed = {m.label for m in c.msgs if m.verdict == 1}
        for m in c.msgs:
            trust = contradicted if (m.verdict != 1 and any(a != m.label for a in passed)) else 1.0
            score[m.label] += m.conf * verdict_factor(p, m.verdict) * trust
    elif not c.committed:
        if c.msgs:
            return None  # the fresh attempt's weight w_fresh c_att is not observed
        return 1.0
    else:
        score[c.prev.label] += p.w_commit * c.prev.conf * verdict_factor(p, c.prev.verdict)
        for m in c.msgs:
            score[m.label] += w_peer * m.conf * verdict_factor(p, m.verdict)
    total = sum(score.values())
    return score.get(c.label, 0.0) / total if total > 0 else 0.0


def fit_confidence(p: SimProfile, calls: list[Call], w_peer: float, contradicted: float):
    rows = []
    for c in calls:
        if c.conf is None or c.adversary:
            continue
        s = _support(p, c, w_peer, contradicted)
        if s is None:
            continue
        conf = min(max(c.conf, 1e-6), 1 - 1e-6)
        rows.append((c.label == 0, s, math.log(conf / (1 - conf))))
    if len(rows) < MIN_CALLS:
        return None
    a = np.array(rows, dtype=float)
    X = np.column_stack([a[:, 0], 1 - a[:, 0], a[:, 1] - 0.5])
    y = a[:, 2]
    identified = [k for k in range(3) if np.ptp(X[:, k]) > 0 or k < 2 and X[:, k].any()]
    beta, *_ = np.linalg.lstsq(X[:, identified], y, rcond=None)
    resid = y - X[:, identified] @ beta
    dof = max(len(y) - len(identified), 1)
    s2 = float(resid @ resid / dof)
    cov = s2 * np.linalg.pinv(X[:, identified].T @ X[:, identified])
    coef, se, cov3 = np.full(3, np.nan), np.full(3, np.nan), np.full((3, 3), np.nan)
    coef[identified], se[identified] = beta, np.sqrt(np.diag(cov))
    cov3[np.ix_(identified, identified)] = cov
    n_each = [int(X[:, 0].sum()), int(X[:, 1].sum()), len(y)]
    return coef, se, math.sqrt(s2), math.sqrt(s2 / (2 * dof)), n_each, cov3


def fit_decision(p: SimProfile, decisions: list[Call], report: Report) -> None:
    from scipy.optimize import minimize

    usable = [c for c in decisions if len({m.label for m in c.msgs}) >= 2 and c.label in {m.label for m in c.msgs}]
    contradicted_calls = [c for c in usable if any(m.verdict == 1 for m in c.msgs)
                          and len({m.label for m in c.msgs}) >= 2]
    if len(usable) < MIN_CALLS:
        report.keep("decide_tau", len(usable), "too few decisions between two or more answers")
        report.keep("contradicted_weight", len(contradicted_calls), "too few decisions")
        return
    fit_cw = len(contradicted_calls) >= MIN_CALLS

    def ll(t):
        tau, cw = t[0], (t[1] if fit_cw else p.contradicted_weight)
        total = 0.0
        for c in usable:
            passed = {m.label for m in c.msgs if m.verdict == 1}
            score: dict[int, float] = defaultdict(float)
            for m in c.msgs:
                trust = cw if (m.verdict != 1 and any(a != m.label for a in passed)) else 1.0
                score[m.label] += m.conf * verdict_factor(p, m.verdict) * trust
            s = np.array(list(score.values())) / tau
            total += score[c.label] / tau - lse(s, axis=0)
        return -total

    bounds = DECISION_BOUNDS[:2 if fit_cw else 1]
    x0 = np.clip([max(p.decide_tau, 0.05)] + ([p.contradicted_weight] if fit_cw else []), *zip(*bounds))
    res = minimize(ll, x0, method="L-BFGS-B", bounds=bounds, options={"ftol": 1e-12, "gtol": 1e-8})
    se, _ = std_errors(hessian(ll, res.x, step=1e-4))
    report.set("decide_tau", res.x[0], se[0], len(usable), "decisions: softmax over the finals' labels",
               bounds=bounds[0])
    if fit_cw:
        report.set("contradicted_weight", res.x[1], se[1], len(contradicted_calls), "decisions with a passed final",
                   bounds=bounds[1])
    else:
        report.keep("contradicted_weight", len(contradicted_calls), "no decision with a final that passed verification")


def fit_verifier(p: SimProfile, calls: list[Call], report: Report) -> str | None:
    checked = [c for c in calls if c.verified]
    names = ("verify_pass_correct", "verify_detect", "p_wrote_code")
    if len(checked) < MIN_CALLS:
        for n in names:
            report.keep(n, len(checked), "no verified calls")
        return p.verifier
    verifier = p.verifier
    with_verdict = [c for c in checked if c.verdict != 0]
    if verifier is None and not with_verdict:
        for n in names:
            report.keep(n, len(checked), "no verifier: verified calls got no verdict")
        return None
    if verifier is None:
        verifier = "tests" if len(with_verdict) == len(checked) else "python"
        report.notes.append(f"the base has no verifier but the traces have verdicts: verifier set to {verifier!r}")
    if verifier == "python":
        r = len(with_verdict) / len(checked)
        report.set("p_wrote_code", r, math.sqrt(r * (1 - r) / len(checked)), len(checked), "verified calls with a verdict")
    else:
        report.keep("p_wrote_code", len(checked), "the tests verifier always gives a verdict")
    right = [c for c in with_verdict if c.label == 0]
    wrong = [c for c in with_verdict if c.label >= 2]  # the trap passes shallow checks more often (model docstring)
    for name, group, hit in (("verify_pass_correct", right, 1), ("verify_detect", wrong, -1)):
        if len(group) >= MIN_CALLS:
            r = sum(c.verdict == hit for c in group) / len(group)
            report.set(name, r, math.sqrt(max(r * (1 - r), 1e-12) / len(group)), len(group), "verdicts")
        else:
            report.keep(name, len(group), "too few verdicts")
    return verifier


def _inputs(c: Call) -> list[Inp]:
    return c.msgs if c.prev is None else [c.prev] + c.msgs


def fit_tokens(data: Data, p: SimProfile, calls: list[Call], verbosity: np.ndarray, report: Report) -> None:
    from scipy.optimize import least_squares

    role = lambda c: p.roles.get(c.role, (0.0, 1.0, 1.0))
    # content
    rows = [(math.log(c.completion - c.reasoning) - math.log(role(c)[2])) for c in calls if c.completion - c.reasoning > 0]
    if len(rows) >= MIN_CALLS:
        a = np.array(rows)
        m = float(np.exp(a.mean()))
        report.set("content_mean", m, m * a.std(ddof=1) / math.sqrt(len(a)), len(a),
                   f"log content tokens (residual SD {a.std(ddof=1):.3f}; model 0.3)")
    else:
        report.keep("content_mean", len(rows), "too few calls with content tokens")
    # reasoning: log(reasoning) = log(reason_mean verbosity_i (0.6 + 0.8 d) (f + conflict share)) + noise
    cat_names = ("revisit", "reemit", "decide_factor")
    X = []
    for c in calls:
        if c.reasoning <= 0:
            continue
        inputs = _inputs(c)
        share = sum(x.label != c.label for x in inputs) / len(inputs) if inputs else 0.0
        if c.decision:
            cat, verb, agent = 3, 1.0, -1
        else:
            cat, verb, agent = (0 if not c.committed else 1 if c.msgs else 2), verbosity[c.agent], c.agent
        d = data.difficulty[c.task]
        X.append((cat, share, math.log(c.reasoning) - math.log(verb * (0.6 + 0.8 * d)), agent))
    cats_present = {k for k in (1, 2, 3) if sum(x[0] == k for x in X) >= MIN_CALLS}
    has_fresh = sum(x[0] == 0 for x in X) >= MIN_CALLS
    has_conflict = sum(x[1] > 0 for x in X) >= MIN_CALLS
    n = len(verbosity)
    per_agent = np.bincount([x[3] for x in X if x[3] >= 0], minlength=n) if X else np.zeros(n, int)
    # the agents' verbosities are fitted where the decision node (verbosity 1 in the model) anchors the scale:
    # enough agent calls each and decisions whose inputs disagree in differing shares
    decision_shares = {round(x[1], 6) for x in X if x[0] == 3}
    fit_verbosity = (per_agent >= MIN_CALLS).all() and 3 in cats_present and len(decision_shares) >= 2
    if len(X) >= MIN_CALLS and has_fresh:
        a = np.array(X)
        cat, share, y, agent = a[:, 0].astype(int), a[:, 1], a[:, 2], a[:, 3].astype(int)
        free = ["log_reason_mean"] + [cat_names[k - 1] for k in sorted(cats_present)] + (["conflict"] if has_conflict else [])
        fixed = {"revisit": p.revisit, "reemit": p.reemit, "decide_factor": p.decide_factor, "conflict": p.conflict}
        n_dev = n if fit_verbosity else 0  # log verbosity of each agent relative to the base's

        def resid(x):
            v = dict(fixed)
            v.update(zip(free[1:], x[1:len(free)]))
            f = np.choose(cat, [1.0, v["revisit"], v["reemit"], v["decide_factor"]])
            dev = x[len(free):] if n_dev else np.zeros(n)
            return y - x[0] - np.where(agent >= 0, dev[agent], 0.0) - np.log(np.maximum(f + v["conflict"] * share, 1e-9))

        x0 = [math.log(p.reason_mean)] + [fixed[name] for name in free[1:]] + [0.0] * n_dev
        res = least_squares(resid, x0, bounds=([-np.inf] + [1e-4] * (len(free) - 1) + [-np.inf] * n_dev,
                                               [np.inf] * (len(free) + n_dev)))
        dof = max(len(y) - len(free) - n_dev, 1)
        s2 = float(res.fun @ res.fun / dof)
        se, cov = std_errors(res.jac.T @ res.jac / s2)
        rm = math.exp(res.x[0])
        report.set("reason_mean", rm, rm * se[0], len(y), f"log reasoning tokens (residual SD {math.sqrt(s2):.3f}; model 0.4)")
        for k, name in enumerate(free[1:], start=1):
            n_calls = int((share > 0).sum()) if name == "conflict" else int((cat == cat_names.index(name) + 1).sum())
            report.set(name, res.x[k], se[k], n_calls, "log reasoning tokens", bounds=(1e-4, None))
        for i in range(n_dev):
            vi = float(verbosity[i] * math.exp(res.x[len(free) + i]))
            report.set(f"verbosity[{i}]", vi, vi * se[len(free) + i], int(per_agent[i]),
                       "the agent's log reasoning tokens (the decision node's, verbosity 1, set the scale)",
                       base=float(verbosity[i]))
        for name in fixed:
            if name not in free:
                report.keep(name, 0, "no calls of that kind")
    else:
        report.keep("reason_mean", len(X), "too few attempts with reasoning tokens")
        for name in ("revisit", "reemit", "decide_factor", "conflict"):
            report.keep(name, 0, "too few calls")
    # prompt tokens
    rows, tasks = [], []
    for c in calls:
        inputs = _inputs(c)
        if any(x.content is None for x in inputs):
            continue
        rows.append((c.prompt - sum(x.content for x in inputs), len(inputs), sum(x.verdict != 0 for x in inputs)))
        tasks.append(c.task)
    if len(rows) < MIN_CALLS:
        for name in ("sys_tokens", "header_tokens", "verdict_tokens"):
            report.keep(name, len(rows), "too few calls with known input sizes")
        return
    a = np.array(rows, dtype=float)
    tasks = np.array(tasks)
    task_tokens = np.array([data.tasks[j].prompt_tokens if data.tasks[j].prompt_tokens is not None else np.nan
                            for j in tasks], dtype=float)
    known = ~np.isnan(task_tokens)
    with_inputs = int((a[:, 1] > 0).sum())
    cols = (([("header_tokens", a[:, 1])] if with_inputs >= MIN_CALLS else [])
            + ([("verdict_tokens", a[:, 2])] if (a[:, 2] > 0).sum() >= MIN_CALLS else []))
    if not with_inputs >= MIN_CALLS:
        report.keep("header_tokens", with_inputs, "too few calls shown inputs of known size")
    if known.all():
        y = a[:, 0] - task_tokens
        X = np.column_stack([np.ones(len(y))] + [c for _, c in cols])
        names = ["sys_tokens"] + [n for n, _ in cols]
    else:  # task fixed effects: demean within task
        report.keep("sys_tokens", len(a), "the tasks' own prompt tokens are unknown (task effects absorb it)")
        if not cols:
            report.keep("verdict_tokens", int((a[:, 2] > 0).sum()), "too few inputs with a verdict")
            return
        y, X = a[:, 0].copy(), np.column_stack([c for _, c in cols])
        for j in np.unique(tasks):
            m = tasks == j
            y[m] -= y[m].mean()
            X[m] -= X[m].mean(axis=0)
        names = [n for n, _ in cols]
    beta, *_ = np.linalg.lstsq(X, y, rcond=None)
    r = y - X @ beta
    s2 = float(r @ r / max(len(y) - len(names), 1))
    se = np.sqrt(np.diag(s2 * np.linalg.pinv(X.T @ X)))
    for name, b, e in zip(names, beta, se):
        report.set(name, b, e, len(y), "prompt tokens minus the inputs' content")
    if "verdict_tokens" not in names:
        report.keep("verdict_tokens", int((a[:, 2] > 0).sum()), "too few inputs with a verdict")


# ---------------------------------------------------------------------------------------------
# the fit


class ProfileBuilder:
    """Makes the profile a set of parameter values describes: ``build({name: value})`` for the names of
    the report's rows (scalar fields, ``subject_offset[s]``, ``verifiability[s]``, ``skill_dev[i,s]``);
    what a value is not given for keeps the base's (or the fit's kept) value. The fit writes
    ``build(report.estimated())``; the predictive check builds profiles from draws of the estimates."""

    def __init__(self, base: SimProfile, data: Data, am: AttemptModel | None, verifier: str | None,
                 verifiability: list[float], shrink: float = 1.0):
        self.base, self.subjects, self.n_agents = base, list(data.subjects), data.n_agents
        self.shrink = shrink
        self.verifier, self.verifiability = verifier, list(verifiability)
        if am is not None:
            self.kbar, self.dev = am.kbar, am.base_dev.copy()
            self.dev[:, am.dev_subjects] = 0.0
        else:
            skills = np.array(base.skills(data.n_agents))
            skills = np.pad(skills, ((0, 0), (0, len(data.subjects) - skills.shape[1])))
            self.kbar, self.dev = skills.mean(axis=0), skills - skills.mean(axis=0)
        self.mean_weight = float(np.mean([s[1] for s in base.subjects]))

    def skills(self, values: dict[str, float]) -> np.ndarray:
        """(N, S) k_is: the base team's average skill per subject plus the deviations shrunk by the fit's
        factor (the last agent's is minus the others' sum on every subject with fitted deviations)."""
        dev = self.dev.copy()
        for s, subject in enumerate(self.subjects):
            for i in range(self.n_agents - 1):
                x = values.get(f"skill_dev[{i},{subject}]")
                if x is not None:
                    dev[i, s] = self.shrink * x
                    dev[-1, s] -= self.shrink * x
        return self.kbar[None, :] + dev

    def build(self, values: dict[str, float]) -> SimProfile:
        base = self.base
        subjects = []
        for s, name in enumerate(self.subjects):
            known = s < len(base.subjects)
            weight = base.subjects[s][1] if known else self.mean_weight
            offset = values.get(f"subject_offset[{name}]", base.subjects[s][2] if known else 0.0)
            v = values.get(f"verifiability[{name}]", self.verifiability[s])
            subjects.append((name, float(weight), float(offset), float(v)))
        skills = self.skills(values)
        team = []
        for i, m in enumerate(base.team_models(self.n_agents)):
            ability = float(m.ability)
            team.append(AgentModel(name=f"{m.name}/fit-{i}", ability=ability, spread=float(m.spread),
                                   verbosity=float(values.get(f"verbosity[{i}]", m.verbosity)),
                                   skills=tuple((name, float(skills[i, s] - ability)) for s, name in enumerate(self.subjects))))
        scalars = {}
        for name, v in values.items():
            if hasattr(base, name) and name not in ("subjects", "team"):
                scalars[name] = max(0, int(round(v))) if isinstance(getattr(base, name), int) else float(v)
        return replace(base, **scalars, name=f"{base.name}-fit", task_set=base.task_set or base.name,
                       subjects=tuple(subjects), team=tuple(team), verifier=self.verifier, source=None)


@dataclass
class Fitted:
    """Everything :func:`fit` computed: the profile, the report, the parsed traces and the builder of
    profiles from parameter values (for the predictive check)."""

    profile: SimProfile
    report: dict
    data: Data
    builder: ProfileBuilder
    records: list[dict]
    updates: tuple[UpdateModel, UpdateFit] | None = None  # the update calls' likelihood and its maximum


def fit(traces: Iterable[dict], base: SimProfile, where: str = "traces", seed: int = 0) -> tuple[SimProfile, dict]:
    """Fit ``base``'s parameters to episode ``traces`` (records of :func:`topo_env.engine.traces.read_traces`).
    Returns the fitted profile and the report (:meth:`Report.as_dict`); ``seed`` seeds the random starts
    of the update model's search (:func:`topo_env.fitting.fit_updates.fit_updates`). No predictive check:
    :func:`fit_traces` adds it."""
    result = fit_records(list(traces), base, where, seed)
    return result.profile, result.report


def fit_records(records: list[dict], base: SimProfile, where: str = "traces", seed: int = 0) -> Fitted:
    """:func:`fit`, returning the parsed traces and the profile builder with the result."""
    with one_blas_thread():
        return _fit_records(records, base, where, seed)


def _fit_records(records: list[dict], base: SimProfile, where: str, seed: int) -> Fitted:
    if not records:
        raise FitError(f"{where}: no episodes; record some with env.record(path) and fit that file")
    data = Data(records, base, where)
    report = Report(base)
    report.notes.extend(data.notes)
    honest = [c for c in data.calls if not c.adversary]
    attempts = [c for c in honest if not c.msgs and not c.committed]
    updates = [c for c in honest if c.msgs]
    drifts = [c for c in honest if not c.msgs and c.committed]

    # attempts
    skills = np.array(base.skills(data.n_agents))
    skills = np.pad(skills, ((0, 0), (0, len(data.subjects) - skills.shape[1])))
    am, shrink = None, 1.0
    if len(attempts) >= MIN_CALLS:
        am = AttemptModel(data, base, attempts)
        am.fit()
        _report_attempts(am, data, base, report)
        shrink = am.shrinkage()
        skills = am.skill_matrix(shrink)
        if am.fit_dev:
            report.notes.append(f"the agents' fitted skill deviations are shrunk by {shrink:.2f} toward the team's "
                                "mean in the written profile and in the update fit's recognition term (empirical "
                                "Bayes: 1 - mean SE^2 / mean deviation^2); the skill_dev rows are the unshrunk estimates")
        fit_trap(data, attempts, base, report)
    else:
        for name in ("alpha", "beta", "task_spread", "blind_spread", "debug_gain", "trap_base", "trap_slope"):
            report.keep(name, len(attempts), "too few attempts")
    profile = replace(base, trap_base=report.value("trap_base"), trap_slope=report.value("trap_slope"))
    _fit_drift(drifts, report)

    # confidence (first with the base's w_peer, refitted after the update fit)
    conf = fit_confidence(profile, data.calls + data.decisions, base.w_peer, base.contradicted_weight)
    mu = (base.mu_correct, base.mu_wrong, base.sigma_conf) if conf is None else (
        conf[0][0] if np.isfinite(conf[0][0]) else base.mu_correct,
        conf[0][1] if np.isfinite(conf[0][1]) else base.mu_wrong, conf[2])
    upd, verif, update_fit = _fit_updates(data, base, profile, am, updates, skills, mu, report, seed)
    report.keep("w_commit", len(updates), "the scale of the update scores (fixed)")
    report.keep("rho_d", len(updates), "not fitted (modelling choice)")

    # decision node, then confidence with the fitted weights
    profile = replace(profile, **upd)
    fit_decision(profile, data.decisions, report)
    _report_confidence(fit_confidence(profile, data.calls + data.decisions, upd["w_peer"],
                                      report.value("contradicted_weight")), report)

    # verifier, tokens, task distribution
    verifier = fit_verifier(profile, data.calls, report)
    verbosity = np.array([m.verbosity for m in base.team_models(data.n_agents)])
    fit_tokens(data, profile, data.calls + data.decisions, verbosity, report)
    _fit_tasks(data, base, report)
    report.identification_notes()

    builder = ProfileBuilder(base, data, am, verifier, verif, shrink)
    out = report.as_dict()
    out["episodes"] = len(records)
    out["calls"] = {"attempts": len(attempts), "updates": len(updates), "drift": len(drifts),
                    "decisions": len(data.decisions), "adversary": len(data.calls) - len(honest)}
    return Fitted(builder.build(report.estimated()), out, data, builder, records, update_fit)


def _fit_drift(drifts: list[Call], report: Report) -> None:
    right = [c for c in drifts if c.prev.label == 0]
    wrong = [c for c in drifts if c.prev.label != 0]
    for name, group, hit in (("drift_cw", right, lambda c: c.label != 0), ("drift_wc", wrong, lambda c: c.label == 0)):
        if len(group) >= MIN_CALLS:
            r = sum(map(hit, group)) / len(group)
            report.set(name, r, math.sqrt(max(r * (1 - r), 1e-12) / len(group)), len(group),
                       "committed answers, no message")
        else:
            report.keep(name, len(group), "too few committed calls without messages")


def _report_confidence(conf, report: Report) -> None:
    if conf is None:
        for name in ("mu_correct", "mu_wrong", "kappa", "sigma_conf"):
            report.keep(name, 0, "too few calls with a stated confidence and observed support")
        return
    coef, se, sd, sd_se, n_each, cov = conf
    names = ("mu_correct", "mu_wrong", "kappa")
    for k, name in enumerate(names):
        if np.isfinite(coef[k]):
            report.set(name, coef[k], se[k], n_each[k], "OLS on logit(confidence)")
        else:
            report.keep(name, n_each[k], "no variation in the traces")
    report.block(list(names), cov)
    report.set("sigma_conf", sd, sd_se, n_each[2], "residual SD of logit(confidence)")


def _fit_updates(data: Data, base: SimProfile, profile: SimProfile, am: AttemptModel | None, updates: list[Call],
                 skills: np.ndarray, mu: tuple[float, float, float], report: Report, seed: int):
    """The update model (:mod:`topo_env.fitting.fit_updates`): report its rows; returns the 7 parameters'
    values, every subject's verifiability (fitted or kept) and (the model, its fit), None when not fitted."""
    usable = [c for c in updates if c.label in {m.label for m in c.msgs} | ({c.prev.label} if c.committed else set())
              or not c.committed]
    skipped = len(updates) - len(usable)
    if skipped:
        report.notes.append(f"{skipped} update call(s) answered a label that was not on their table: skipped")
    n_sub = len(data.subjects)
    v0 = np.array(list(base.verifiability) + [0.0] * (n_sub - len(base.subjects)))
    t0 = np.array([getattr(base, n) for n in UPDATE_PARAMS], dtype=float)
    counts = np.bincount([data.subject_of[c.task] for c in usable], minlength=n_sub) if usable else np.zeros(n_sub, int)
    v_subjects = [s for s in range(n_sub) if counts[s] >= MIN_SUBJECT_CALLS]
    if len(v_subjects) >= MIN_V_SUBJECTS:
        used = [c for c in usable if data.subject_of[c.task] in set(v_subjects)]
        if len(used) < len(usable):
            few = [data.subjects[s] for s in range(n_sub) if 0 < counts[s] < MIN_SUBJECT_CALLS]
            report.notes.append(f"{len(usable) - len(used)} update call(s) of subjects with fewer than "
                                f"{MIN_SUBJECT_CALLS} update calls ({', '.join(few)}) are left out of the update fit: "
                                "their verifiabilities are kept from the base")
    else:
        v_subjects, used = [], usable
    if len(used) < MIN_CALLS:
        for name in UPDATE_PARAMS:
            report.keep(name, len(usable), "too few update calls")
        _keep_verifiabilities(data, v0, counts, report)
        return dict(zip(UPDATE_PARAMS, map(float, t0))), list(v0), None
    p_right = am.predictive(used) if am is not None else np.full(len(used), sig(base.alpha))
    um = UpdateModel(data, profile, used, p_right, skills, mu)
    weights = np.array([base.subjects[s][1] if s < len(base.subjects) else 1.0 for s in v_subjects])
    res = fit_updates(um, t0, v0, v_subjects, um.n_fresh >= MIN_CALLS,
                      Gauge.of(weights, v0[v_subjects]) if v_subjects else None, seed)
    report.notes.extend(res.notes)
    for k, name in enumerate(UPDATE_PARAMS):
        n = um.n_fresh if name == "w_fresh" else len(used)
        if res.status[k] == "kept":
            report.keep(name, n, "too few update calls without a committed answer")
        else:
            report.set(name, res.t[k], res.se[k], n, "update calls: softmax over the table",
                       status=None if res.status[k] == FITTED else res.status[k], bounds=BOUNDS[k])
    verif = v0.copy()
    verif[res.subjects] = res.v
    for k, s in enumerate(res.subjects):
        report.set(f"verifiability[{data.subjects[s]}]", res.v[k], res.v_se[k], int(counts[s]),
                   "update calls of the subject (joint with the globals)", base=v0[s])
    _keep_verifiabilities(data, v0, counts, report, skip=res.subjects)
    names = [n if not n.startswith("v[") else f"verifiability[{data.subjects[int(n[2:-1])]}]" for n in res.cov_names]
    report.block(names, res.cov)
    return dict(zip(UPDATE_PARAMS, map(float, res.t))), list(verif), (um, res)


def _keep_verifiabilities(data: Data, v0: np.ndarray, counts: np.ndarray, report: Report, skip=()) -> None:
    for s, name in enumerate(data.subjects):
        if s not in skip:
            report.keep(f"verifiability[{name}]", int(counts[s]), f"fewer than {MIN_SUBJECT_CALLS} update calls "
                        f"(or fewer than {MIN_V_SUBJECTS} subjects with as many)", value=v0[s])


def _report_attempts(am: AttemptModel, data: Data, base: SimProfile, report: Report) -> None:
    """Report the attempt model's parameters, which are a linear map J of its own (the subject levels
    keep the base's weighted mean offset: alpha takes the rest), with the covariance J cov J^T."""
    k_sub, k_dev = len(am.fit_sub), len(am.fit_dev)
    n, k = len(am.calls), len(am.theta)
    names, rows, shift, calls, what, bounds, base_values = [], [], [], [], [], [], []

    def add(name, row, c, n_calls, informed, bound=None, base_value=None):
        names.append(name), rows.append(row), shift.append(c), calls.append(n_calls), what.append(informed)
        bounds.append(bound), base_values.append(base_value)

    unit = np.eye(k)
    if k_sub:  # alpha: the part of the levels left after the base's weighted mean offset
        w = np.array([base.subjects[s][1] if s < len(base.subjects) else 0.0 for s in am.fit_sub], dtype=float)
        w = np.ones(k_sub) if w.sum() == 0 else w
        w = w / w.sum()
        a_row = np.zeros(k)
        a_row[:k_sub] = w
        a_shift = -float(w @ am.b_base[am.fit_sub])
        add("alpha", a_row, a_shift, n, "attempts (subject offsets keep the base's weighted mean)")
        for j, s in enumerate(am.fit_sub):
            add(f"subject_offset[{data.subjects[s]}]", unit[j] - a_row, -a_shift, int(am.counts[:, s].sum()),
                "attempts of the subject", None, am.b_base[s])  # the priors keep the levels off their bounds
    else:
        report.keep("alpha", n, "no subject with enough attempts")
    for j, (i, s) in enumerate(am.fit_dev):
        add(f"skill_dev[{i},{data.subjects[s]}]", unit[k_sub + j], 0.0, int(am.counts[i, s]),
            "agent's attempts minus the team's, per subject", am.bounds[k_sub + j], am.base_dev[i, s])
    at = k_sub + k_dev
    add("beta", unit[at], 0.0, n, "attempts vs difficulty", am.bounds[at])
    add("task_spread", unit[at + 1], 0.0, n, f"attempts sharing a task ({am.multi_tasks} tasks with two or more)",
        am.bounds[at + 1])
    if am.fit_blind:
        add("blind_spread", unit[at + 2], 0.0, am.repeats, "one agent's repeated attempts in an episode",
            am.bounds[at + 2])
    else:
        report.keep("blind_spread", am.repeats, f"fewer than {MIN_REPEATS} repeated attempts by one agent in an episode")
    if am.fit_debug:
        add("debug_gain", unit[-1], 0.0, int(am.failed.sum()), "re-solves after a failed verification", am.bounds[-1])
    else:
        report.keep("debug_gain", int(am.failed.sum()), "too few re-solves after a failed verification")
    J = np.array(rows)
    values = J @ am.theta + np.array(shift)
    cov = J @ am.cov @ J.T
    se = np.sqrt(np.clip(np.diag(cov), 0.0, None))
    for j, name in enumerate(names):
        report.set(name, values[j], se[j], calls[j], what[j], base=base_values[j], bounds=bounds[j])
    report.block(names, cov)


def _fit_tasks(data: Data, base: SimProfile, report: Report) -> None:
    from scipy.stats import beta as beta_dist

    d = np.array([t.difficulty for t in data.tasks if t.difficulty is not None], dtype=float)
    if len(d) >= MIN_CALLS:
        a, b, _, _ = beta_dist.fit(np.clip(d, 1e-6, 1 - 1e-6), floc=0, fscale=1)
        from scipy.special import polygamma

        t1 = polygamma(1, [a, b, a + b])  # Fisher information of Beta(a, b)
        se, _ = std_errors(len(d) * np.array([[t1[0] - t1[2], -t1[2]], [-t1[2], t1[1] - t1[2]]]))
        report.set("diff_a", a, se[0], len(d), "the tasks' difficulties")
        report.set("diff_b", b, se[1], len(d), "the tasks' difficulties")
        rows = [(t.prompt_tokens, t.difficulty) for t in data.tasks if t.prompt_tokens and t.difficulty is not None]
        if len(rows) >= MIN_CALLS:
            x = np.array([math.log(n) - math.log(0.7 + 0.6 * dd) for n, dd in rows])
            m = float(np.exp(x.mean()))
            report.set("task_tokens_mean", m, m * x.std(ddof=1) / math.sqrt(len(x)), len(x), "the tasks' prompt tokens")
        else:
            report.keep("task_tokens_mean", len(rows), "the tasks' prompt tokens are unknown")
    else:
        for name in ("diff_a", "diff_b", "task_tokens_mean"):
            report.keep(name, len(d), "the tasks' difficulties are unknown")


# ---------------------------------------------------------------------------------------------
# command line


def write_profile(profile: SimProfile, path: str | Path) -> SimProfile:
    """Write ``profile`` with :func:`~topo_env.sim.profiles.save_profile` and load it back (the
    profile the env will run)."""
    save_profile(profile, path)
    return load_profile(path)


def fit_traces(paths: str | Path | Sequence[str | Path], base: str | SimProfile | None = None, *, seed: int = 0,
               check: bool = True, config: EnvConfig | None = None) -> tuple[SimProfile, dict]:
    """The fit from Python: fit the trace files ``paths`` (JSON lines, :func:`load_traces`) starting from
    ``base`` (a profile name, a profile YAML path, a :class:`SimProfile`, or None: the traces' own
    profile, else the domain's default, :data:`DEFAULT_BASE`).

    Returns the fitted profile (write it with :func:`write_profile`) and the report: per parameter
    its value, standard error and status (``fitted`` / ``at bound`` / ``not identified`` /
    ``kept from base``, :mod:`topo_env.fitting.fit_report`), the covariance blocks, notes (among them
    the update model's search: how many starts reached the best maximum), ``episodes``, ``calls``
    and, with ``check``, ``check``: :func:`topo_env.fitting.fit_check.predictive_check` for the env
    ``config`` (None: the traces' own team, rounds and the default reward). ``seed`` seeds the
    search's random starts and the check. Bad input raises :class:`FitError` (one line: the bad value
    and what to do)."""
    from topo_env.fitting.fit_check import predictive_check

    if isinstance(paths, (str, Path)):
        paths = [paths]
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise FitError(f"seed={seed!r}: give an integer")
    if config is not None and not isinstance(config, EnvConfig):
        raise FitError(f"config={config!r}: give a topo_env.EnvConfig (or None: the traces' own team)")
    try:
        records = load_traces(paths)
        profile = base if isinstance(base, SimProfile) else _choose_base(base, records)
        result = fit_records(records, profile, where=", ".join(repr(str(p)) for p in paths), seed=int(seed))
    except ProfileFileError as err:
        raise FitError(str(err)) from None
    if check:
        result.report["check"] = predictive_check(result, config, seed=int(seed))
    return result.profile, result.report


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog=PROG, description="Fit the simulated team's parameters to episode traces "
                                                  "(topomarl.trace/1) by maximum likelihood; write a profile YAML.")
    parser.add_argument("traces", nargs="+", help="trace files (JSON lines, e.g. from env.record(path))")
    parser.add_argument("--out", required=True, help="where to write the fitted profile (*.yaml)")
    parser.add_argument("--base", default=None,
                        help="base profile (a name or a YAML path) whose values are kept where the traces say "
                             "nothing (default: the traces' profile, else by domain: "
                             + ", ".join(f"{k} -> {v}" for k, v in DEFAULT_BASE.items()) + ")")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    parser.add_argument("--seed", type=int, default=0, help="seed of the search's random starts and the check")
    parser.add_argument("--no-check", action="store_true",
                        help="skip the predictive check (the fitted team on fixed topologies and replaying the traces)")
    return parser


def _choose_base(name: str | None, records: list[dict]) -> SimProfile:
    if name is None:
        seen = {str((r["task"].get("metadata") or {}).get("profile")) for r in records}
        if len(seen) == 1 and next(iter(seen)) in PROFILES:
            name = next(iter(seen))
        else:
            domains = {r["task"].get("domain") for r in records}
            name = DEFAULT_BASE.get(next(iter(domains)) if len(domains) == 1 else "reasoning", "mmlu_pro")
    try:
        return get_profile(name)
    except (ValueError, OSError) as err:  # ProfileFileError is a ValueError
        raise FitError(f"--base {name!r}: {err}") from None


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    out = Path(args.out)
    if not str(out).endswith((".yaml", ".yml")):
        raise FitError(f"--out {args.out!r}: must end in .yaml or .yml (the env loads profile: <path>.yaml)")
    profile, result = fit_traces(args.traces, args.base, seed=args.seed, check=not args.no_check)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        write_profile(profile, out)
    except OSError as err:
        raise RunError(f"cannot write {str(out)!r}: {err}") from None
    result["out"] = str(out)
    print(json.dumps(result) if args.json else format_report(result) + f"\nWrote: profile {out} "
          f"(use it with profile: {out})")
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main, PROG))
