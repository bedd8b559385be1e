"""The task distribution's parameters: diff_a, diff_b and task_tokens_mean, from the tasks' metadata.

Contract
--------
``fit_tasks(data, report)``: with at least ``MIN_CALLS`` tasks of :class:`~topo_env.fitting.fit_data.Data`
whose difficulty the traces give, Beta(diff_a, diff_b) is fitted to those difficulties by maximum
likelihood (standard errors from the Fisher information), and, with as many tasks also giving their
prompt tokens, task_tokens_mean = exp(mean of log(tokens) - log(0.7 + 0.6 d)). Otherwise the base's
values are kept (task_tokens_mean: unless the prompt fit of :mod:`~topo_env.fitting.fit_tokens`, which
runs first, scaled it). Difficulties the fit estimated from attempts do not count. The rows go to ``report``.
"""
from __future__ import annotations

import math

import numpy as np

from topo_env.fitting.fit_data import MIN_CALLS, Data
from topo_env.fitting.fit_report import Report
from topo_env.fitting.fit_stats import std_errors


def fit_tasks(data: Data, report: Report) -> None:
    """Fit the task distribution to the tasks' own difficulties and prompt tokens; report its rows."""
    from scipy.special import polygamma
    from scipy.stats import beta as beta_dist

    d = np.array([t.difficulty for t in data.tasks if t.difficulty is not None], dtype=float)
    if len(d) >= MIN_CALLS:
        a, b, _, _ = beta_dist.fit(np.clip(d, 1e-6, 1 - 1e-6), floc=0, fscale=1)
        t1 = polygamma(1, [a, b, a + b])  # Fisher information of Beta(a, b)
        se, _ = std_errors(len(d) * np.array([[t1[0] - t1[2], -t1[2]], [-t1[2], t1[1] - t1[2]]]))
        report.set("diff_a", a, se[0], len(d), "the tasks' difficulties")
        report.set("diff_b", b, se[1], len(d), "the tasks' difficulties")
        rows = [(t.prompt_tokens, t.difficulty) for t in data.tasks if t.prompt_tokens and t.difficulty is not None]
        if len(rows) >= MIN_CALLS:
            x = np.array([math.log(n) - math.log(0.7 + 0.6 * dd) for n, dd in rows])
            m = float(np.exp(x.mean()))
            report.set("task_tokens_mean", m, m * x.std(ddof=1) / math.sqrt(len(x)), len(x), "the tasks' prompt tokens")
        elif "task_tokens_mean" not in report.rows:  # else scaled by the prompt fit (fit_tokens)
            report.keep("task_tokens_mean", len(rows), "the tasks' prompt tokens are unknown")
    else:
        for name in ("diff_a", "diff_b", "task_tokens_mean"):
            if name not in report.rows:
                report.keep(name, len(d), "the tasks' difficulties are unknown")
