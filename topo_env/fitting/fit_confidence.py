"""The stated confidence's parameters: mu_correct, mu_wrong, kappa and sigma_conf.

Contract
--------
``fit_confidence(profile, calls, w_peer, contradicted)``: OLS of logit(confidence) on [right], [wrong]
and support - 1/2 over the honest ``calls`` (agents' and decision node's, of
:class:`~topo_env.fitting.fit_data.Data`) that state a confidence; returns (coefficients mu_correct,
mu_wrong, kappa; their standard errors; sigma_conf, the residual SD; its standard error; the calls
informing each; the coefficients' covariance), NaN for a coefficient the calls do not vary in, or None
with fewer than ``MIN_CALLS`` such calls. Support is computed exactly as the model does, so only calls
whose raw weights are observed count: attempts (support 1), committed calls (own answer weighted
w_commit, messages ``w_peer``) and the decision node (:func:`~topo_env.fitting.fit_decision.decision_scores`
with ``contradicted``). :func:`report_confidence` writes the rows; :func:`confidence_levels` gives the
(mu_correct, mu_wrong, sigma_conf) the update fit integrates a fresh attempt's confidence with.
"""
from __future__ import annotations

import math
from collections import defaultdict

import numpy as np

from topo_env.fitting.fit_data import MIN_CALLS, Call
from topo_env.fitting.fit_decision import decision_scores
from topo_env.fitting.fit_report import Report
from topo_env.sim.model import verdict_factor
from topo_env.sim.profiles import SimProfile


def _support(p: SimProfile, c: Call, w_peer: float, contradicted: float) -> float | None:
    """The model's support of ``c``'s answer, or None when it depends on an unobserved weight."""
    if c.decision:
        score = decision_scores(p, c.msgs, contradicted)
    elif not c.committed:
        if c.msgs:
            return None  # the fresh attempt's weight w_fresh c_att is not observed
        return 1.0
    else:
        score: dict[int, float] = defaultdict(float)
        score[c.prev.label] += p.w_commit * c.prev.conf * verdict_factor(p, c.prev.verdict)
        for m in c.msgs:
            score[m.label] += w_peer * m.conf * verdict_factor(p, m.verdict)
    total = sum(score.values())
    return score.get(c.label, 0.0) / total if total > 0 else 0.0


def fit_confidence(p: SimProfile, calls: list[Call], w_peer: float, contradicted: float):
    """The OLS of logit(confidence) on [right], [wrong], support - 1/2 (the module's contract), or None."""
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


def report_confidence(conf, report: Report) -> None:
    """Write the rows of a :func:`fit_confidence` result (kept from the base when it is None)."""
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


def confidence_levels(conf, base: SimProfile) -> tuple[float, float, float]:
    """(mu_correct, mu_wrong, sigma_conf) of a :func:`fit_confidence` result, the base's where it has none."""
    if conf is None:
        return base.mu_correct, base.mu_wrong, base.sigma_conf
    return (conf[0][0] if np.isfinite(conf[0][0]) else base.mu_correct,
            conf[0][1] if np.isfinite(conf[0][1]) else base.mu_wrong, conf[2])
