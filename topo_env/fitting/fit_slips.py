"""A small model's slips (:mod:`topo_env.sim.model`, step 6b): answers nobody proposed, replies without an answer.

Contract
--------
``fit_slips(data, base, report)`` sets four rows of ``report`` from :class:`~topo_env.fitting.fit_data.Data`:

* ``p_unreadable``: the share of the honest agents' calls with no readable answer (``data.unreadable``),
  ``p_unreadable_decide`` the decision node's (``data.unreadable_decisions``); binomial standard errors.
* ``p_invent``: from the honest committed calls shown messages (an update of an answer the agent holds;
  where the agent's own answer is a fresh attempt, an answer off the table is that attempt, not a slip);
  ``p_invent_decide`` from the decision node's calls with at least one answered final. In the model an
  invented answer is a Zipf-drawn other wrong label (labels 2.., ``base.wrong_zipf``), which lands on the
  table with the Zipf mass of the table's labels from 2 on; so call k answers off its table with
  probability p q_k, q_k = 1 - that mass. p maximises sum_off log(p q_k) + sum_on log(1 - p q_k) on [0, 1];
  its standard error is the observed information's.

With fewer than ``MIN_CALLS`` calls a row is kept from ``base`` (0 in every built-in profile).
"""
from __future__ import annotations

import math

import numpy as np

from topo_env.fitting.fit_data import MIN_CALLS, Call, Data
from topo_env.fitting.fit_report import Report
from topo_env.sim.profiles import SimProfile


def fit_slips(data: Data, base: SimProfile, report: Report) -> None:
    """Fit the four slip probabilities (module docstring) into ``report``."""
    honest_unreadable = [c for c in data.unreadable if not c.adversary]
    honest = [c for c in data.calls if not c.adversary]
    _share(report, "p_unreadable", len(honest_unreadable), len(honest_unreadable) + len(honest),
           "honest agent calls: share without a readable answer")
    _share(report, "p_unreadable_decide", len(data.unreadable_decisions),
           len(data.unreadable_decisions) + len(data.decisions), "decisions: share without a readable answer")
    zipf = _zipf_masses(base)
    revisions = [c for c in honest if c.committed and c.msgs]
    _invented(report, "p_invent", revisions, [[c.prev, *c.msgs] for c in revisions], zipf,
              "committed answers revised with messages: answers off the table")
    decided = [c for c in data.decisions if c.msgs]
    _invented(report, "p_invent_decide", decided, [c.msgs for c in decided], zipf,
              "decisions: answers no final gave")


def _share(report: Report, name: str, hits: int, n: int, how: str) -> None:
    if n < MIN_CALLS:
        report.keep(name, n, "too few calls")
        return
    r = hits / n
    report.set(name, r, math.sqrt(max(r * (1 - r), 1.0 / n) / n), n, how, bounds=(0.0, 1.0))


def _zipf_masses(base: SimProfile) -> np.ndarray:
    """P(an invented answer is label a), a = 0..n_wrong (0 for the right answer and the trap)."""
    w = np.array([0.0, 0.0] + [k ** -base.wrong_zipf for k in range(1, base.n_wrong)])
    return w / w.sum()


def _invented(report: Report, name: str, calls: list[Call], tables: list[list], zipf: np.ndarray, how: str) -> None:
    """The MLE of an invention probability from ``calls`` and each call's table (module docstring)."""
    from scipy.optimize import minimize_scalar

    if len(calls) < MIN_CALLS:
        report.keep(name, len(calls), "too few calls")
        return
    off, q = np.zeros(len(calls), bool), np.ones(len(calls))
    for k, (c, table) in enumerate(zip(calls, tables)):
        labels = {m.label for m in table}
        off[k] = c.label not in labels
        q[k] = 1.0 - sum(zipf[a] for a in labels if 0 <= a < len(zipf))
    q = np.clip(q, 1e-9, 1.0)
    if not off.any():
        p = 0.0
    else:
        def nll(x: float) -> float:
            return -(np.log(x * q[off]).sum() + np.log1p(-np.minimum(x * q[~off], 1 - 1e-12)).sum())
        p = float(minimize_scalar(nll, bounds=(1e-9, 1.0), method="bounded", options={"xatol": 1e-10}).x)
    on = q[~off]
    info = off.sum() / max(p, 1e-9) ** 2 + np.sum(on ** 2 / np.maximum(1 - p * on, 1e-12) ** 2)
    se = 1.0 / math.sqrt(info) if off.any() else 1.0 / (len(calls) * max(float(q.mean()), 1e-9))  # none off: about 1/n
    report.set(name, p, se, len(calls), how, bounds=(0.0, 1.0))
