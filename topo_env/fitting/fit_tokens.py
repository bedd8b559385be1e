"""The token parameters: content, reasoning (with each agent's verbosity) and prompt tokens.

Contract
--------
``fit_tokens(data, profile, calls, verbosity, report)``: ``calls`` are the agents' and the decision
node's calls of :class:`~topo_env.fitting.fit_data.Data`, ``verbosity`` the base team's per agent. Rows
go to ``report`` (a part with fewer than ``MIN_CALLS`` calls keeps the base's values):

* **content** = completion - reasoning: log content_mean = mean of log(content / f_role).
* **reasoning**: nonlinear least squares of log(reasoning) on log(reason_mean verbosity (0.6 + 0.8 d)
  (f + conflict share)) with f in {1, revisit, reemit, decide_factor} (fresh, revised, re-emitted,
  decision calls) and share the inputs disagreeing with the answer; where the decision node (verbosity 1)
  anchors the scale (enough calls of every agent, decisions at two or more shares), every agent's
  verbosity (``verbosity[i]`` rows). Where no call reported reasoning tokens, reason_mean is 0 (a
  model without a reasoning channel).
* **prompt** = sys + task + sum over inputs (header + content + verdict tokens) by linear least squares
  over the calls whose inputs' content is known; with task fixed effects when a task's prompt tokens are
  unknown, and then sys_tokens and task_tokens_mean the base's scaled to the tasks' mean effect (only
  their sum is identified).
"""
from __future__ import annotations

import math

import numpy as np

from topo_env.fitting.fit_data import MIN_CALLS, Call, Data, Inp
from topo_env.fitting.fit_report import Report
from topo_env.fitting.fit_stats import std_errors
from topo_env.sim.profiles import SimProfile

REASONING_FACTORS = ("revisit", "reemit", "decide_factor")  # f of call kinds 1, 2, 3 (0: a fresh answer, f = 1)


def fit_tokens(data: Data, p: SimProfile, calls: list[Call], verbosity: np.ndarray, report: Report) -> None:
    """Fit the content, reasoning and prompt token parameters to ``calls``; report their rows."""
    _fit_content(p, calls, report)
    _fit_reasoning(data, p, calls, verbosity, report)
    _fit_prompt(data, p, calls, report)


def _inputs(c: Call) -> list[Inp]:
    return c.msgs if c.prev is None else [c.prev] + c.msgs


def _fit_content(p: SimProfile, calls: list[Call], report: Report) -> None:
    role = lambda c: p.roles.get(c.role, (0.0, 1.0, 1.0))
    rows = [(math.log(c.completion - c.reasoning) - math.log(role(c)[2])) for c in calls if c.completion - c.reasoning > 0]
    if len(rows) >= MIN_CALLS:
        a = np.array(rows)
        m = float(np.exp(a.mean()))
        report.set("content_mean", m, m * a.std(ddof=1) / math.sqrt(len(a)), len(a),
                   f"log content tokens (residual SD {a.std(ddof=1):.3f}; model 0.3)")
    else:
        report.keep("content_mean", len(rows), "too few calls with content tokens")


def _reasoning_rows(data: Data, calls: list[Call], verbosity: np.ndarray) -> list[tuple]:
    """Per call with reasoning tokens: (kind: 0 fresh, 1 revised, 2 re-emitted, 3 decision; share of inputs
    disagreeing with the answer; log(reasoning) - log(verbosity (0.6 + 0.8 d)); agent, -1 the decision node)."""
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
    return X


def _fit_reasoning(data: Data, p: SimProfile, calls: list[Call], verbosity: np.ndarray, report: Report) -> None:
    # log(reasoning) = log(reason_mean verbosity_i (0.6 + 0.8 d) (f + conflict share)) + noise
    X = _reasoning_rows(data, calls, verbosity)
    cats_present = {k for k in (1, 2, 3) if sum(x[0] == k for x in X) >= MIN_CALLS}
    has_fresh = sum(x[0] == 0 for x in X) >= MIN_CALLS
    has_conflict = sum(x[1] > 0 for x in X) >= MIN_CALLS
    n = len(verbosity)
    per_agent = np.bincount([x[3] for x in X if x[3] >= 0], minlength=n) if X else np.zeros(n, int)
    # the agents' verbosities are fitted where the decision node (verbosity 1 in the model) anchors the scale:
    # enough agent calls each and decisions whose inputs disagree in differing shares
    decision_shares = {round(x[1], 6) for x in X if x[0] == 3}
    fit_verbosity = (per_agent >= MIN_CALLS).all() and 3 in cats_present and len(decision_shares) >= 2
    if not X and len(calls) >= MIN_CALLS:  # a model without a reasoning channel (SmolLM2, most small models)
        report.set("reason_mean", 0.0, 0.0, len(calls), "no call reported reasoning tokens")
        for name in ("revisit", "reemit", "decide_factor", "conflict"):
            report.keep(name, 0, "no reasoning tokens to scale")
    elif len(X) >= MIN_CALLS and has_fresh:
        free = (["log_reason_mean"] + [REASONING_FACTORS[k - 1] for k in sorted(cats_present)]
                + (["conflict"] if has_conflict else []))
        _reasoning_least_squares(p, np.array(X), free, verbosity, per_agent, fit_verbosity, report)
    else:
        report.keep("reason_mean", len(X), "too few attempts with reasoning tokens")
        for name in ("revisit", "reemit", "decide_factor", "conflict"):
            report.keep(name, 0, "too few calls")


def _reasoning_least_squares(p: SimProfile, a: np.ndarray, free: list[str], verbosity: np.ndarray,
                             per_agent: np.ndarray, fit_verbosity: bool, report: Report) -> None:
    """The least squares of :func:`_fit_reasoning` on its rows ``a`` for the parameters ``free`` (and the
    agents' log verbosities relative to the base's when ``fit_verbosity``); report their rows."""
    from scipy.optimize import least_squares

    n = len(verbosity)
    cat, share, y, agent = a[:, 0].astype(int), a[:, 1], a[:, 2], a[:, 3].astype(int)
    fixed = {"revisit": p.revisit, "reemit": p.reemit, "decide_factor": p.decide_factor, "conflict": p.conflict}
    n_dev = n if fit_verbosity else 0  # log verbosity of each agent relative to the base's

    def resid(x):
        v = dict(fixed)
        v.update(zip(free[1:], x[1:len(free)]))
        f = np.choose(cat, [1.0, v["revisit"], v["reemit"], v["decide_factor"]])
        dev = x[len(free):] if n_dev else np.zeros(n)
        return y - x[0] - np.where(agent >= 0, dev[agent], 0.0) - np.log(np.maximum(f + v["conflict"] * share, 1e-9))

    x0 = [math.log(max(p.reason_mean, 1.0))] + [fixed[name] for name in free[1:]] + [0.0] * n_dev
    res = least_squares(resid, x0, bounds=([-np.inf] + [1e-4] * (len(free) - 1) + [-np.inf] * n_dev,
                                           [np.inf] * (len(free) + n_dev)))
    dof = max(len(y) - len(free) - n_dev, 1)
    s2 = float(res.fun @ res.fun / dof)
    se, cov = std_errors(res.jac.T @ res.jac / s2)
    rm = math.exp(res.x[0])
    report.set("reason_mean", rm, rm * se[0], len(y), f"log reasoning tokens (residual SD {math.sqrt(s2):.3f}; model 0.4)")
    for k, name in enumerate(free[1:], start=1):
        kind = REASONING_FACTORS.index(name) + 1 if name != "conflict" else None
        n_calls = int((share > 0).sum()) if kind is None else int((cat == kind).sum())
        report.set(name, res.x[k], se[k], n_calls, "log reasoning tokens", bounds=(1e-4, None))
    for i in range(n_dev):
        vi = float(verbosity[i] * math.exp(res.x[len(free) + i]))
        report.set(f"verbosity[{i}]", vi, vi * se[len(free) + i], int(per_agent[i]),
                   "the agent's log reasoning tokens (the decision node's, verbosity 1, set the scale)",
                   base=float(verbosity[i]))
    for name in fixed:
        if name not in free:
            report.keep(name, 0, "no calls of that kind")


def _prompt_rows(calls: list[Call]) -> tuple[list[tuple[int, int, int]], list[int]]:
    """Per call whose inputs' content is known: (prompt minus the inputs' content, inputs, inputs with a
    verdict), and its task."""
    rows, tasks = [], []
    for c in calls:
        inputs = _inputs(c)
        if any(x.content is None for x in inputs):
            continue
        rows.append((c.prompt - sum(x.content for x in inputs), len(inputs), sum(x.verdict != 0 for x in inputs)))
        tasks.append(c.task)
    return rows, tasks


def _fit_prompt(data: Data, p: SimProfile, calls: list[Call], report: Report) -> None:
    rows, tasks = _prompt_rows(calls)
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
        if not cols:
            _scale_sys_and_task(data, p, tasks, a[:, 0], report)
            report.keep("verdict_tokens", int((a[:, 2] > 0).sum()), "too few inputs with a verdict")
            return
        y, X = a[:, 0].copy(), np.column_stack([c for _, c in cols])
        for j in np.unique(tasks):
            m = tasks == j
            y[m] -= y[m].mean()
            X[m] -= X[m].mean(axis=0)
        names = [n for n, _ in cols]
    beta, *_ = np.linalg.lstsq(X, y, rcond=None)
    if not known.all():
        _scale_sys_and_task(data, p, tasks, a[:, 0] - np.column_stack([c for _, c in cols]) @ beta, report)
    r = y - X @ beta
    s2 = float(r @ r / max(len(y) - len(names), 1))
    se = np.sqrt(np.diag(s2 * np.linalg.pinv(X.T @ X)))
    for name, b, e in zip(names, beta, se):
        report.set(name, b, e, len(y), "prompt tokens minus the inputs' content")
    if "verdict_tokens" not in names:
        report.keep("verdict_tokens", int((a[:, 2] > 0).sum()), "too few inputs with a verdict")


def _scale_sys_and_task(data: Data, p: SimProfile, tasks: np.ndarray, own: np.ndarray, report: Report) -> None:
    """sys_tokens and task_tokens_mean where the tasks' own prompt tokens are unknown: per call ``own`` is
    its prompt minus what its inputs add (sys + task j, each task's effect). Only their sum is identified,
    so both are the base's scaled by one factor to the tasks' mean effect (the model's task tokens
    grow as 0.7 + 0.6 d), split as the base splits them."""
    effects = np.array([own[tasks == j].mean() for j in np.unique(tasks)])
    d = np.nan_to_num(data.difficulty[np.unique(tasks)], nan=0.5)
    base_total = p.sys_tokens + p.task_tokens_mean * (0.7 + 0.6 * d)
    factor = max(float(effects.mean() / base_total.mean()), 1e-3)
    se = float(effects.std(ddof=1) / math.sqrt(len(effects)) / base_total.mean()) if len(effects) > 1 else float("nan")
    why = (f"the prompts' mean without their inputs ({len(effects)} tasks; only sys + task is identified: the "
           f"base's split, scaled by {factor:.3f})")
    report.set("sys_tokens", p.sys_tokens * factor, p.sys_tokens * se, len(own), why)
    report.set("task_tokens_mean", p.task_tokens_mean * factor, p.task_tokens_mean * se, len(own), why)
