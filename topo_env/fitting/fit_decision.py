"""The decision node's parameters: decide_tau and contradicted_weight.

Contract
--------
``fit_decision(profile, decisions, report)``: ``decisions`` are the decision node's calls of
:class:`~topo_env.fitting.fit_data.Data`. Those between two or more different finals whose answer is one
of them count; their likelihood is the softmax over the finals' labels of the scores
:func:`decision_scores` / decide_tau. decide_tau is fitted within :data:`DECISION_BOUNDS` (>= 0.01: below,
the vote is deterministic and the bound is reported); contradicted_weight only when at least ``MIN_CALLS``
such decisions have a final that passed verification (else kept from ``profile``). Standard errors from
the numerical Hessian; the rows go to ``report``.

``keep_without_node(modes, decisions, report)``: traces of a team that decided by a vote or by one agent's
answer (``env.decision``; ``modes`` counts the episodes per ``decision.mode``) hold no decision node's call,
so the node's parameters (:data:`NODE_PARAMETERS`) are not identified: where no decision node spoke at
all, their rows are kept from the base, saying so.
"""
from __future__ import annotations

from collections import defaultdict

import numpy as np

from topo_env.fitting.fit_data import MIN_CALLS, Call, Inp
from topo_env.fitting.fit_report import Report
from topo_env.fitting.fit_stats import hessian, lse, std_errors
from topo_env.sim.model import verdict_factor
from topo_env.sim.profiles import SimProfile

DECISION_BOUNDS = ((1e-2, 10.0), (0.0, 5.0))  # decide_tau (below 0.01 the vote is deterministic), contradicted_weight
NODE_PARAMETERS = ("decide_tau", "contradicted_weight", "decide_factor")  # what only the decision node's calls inform


def decision_scores(p: SimProfile, finals: list[Inp], contradicted: float) -> dict[int, float]:
    """The decision node's score per label of ``finals``: confidence times the verdict's factor, times
    ``contradicted`` for a final that did not pass verification while a different one did."""
    passed = {m.label for m in finals if m.verdict == 1}
    score: dict[int, float] = defaultdict(float)
    for m in finals:
        trust = contradicted if (m.verdict != 1 and any(a != m.label for a in passed)) else 1.0
        score[m.label] += m.conf * verdict_factor(p, m.verdict) * trust
    return score


def fit_decision(p: SimProfile, decisions: list[Call], report: Report) -> None:
    """Fit decide_tau (and contradicted_weight where identified) to ``decisions``; report their rows."""
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
            score = decision_scores(p, c.msgs, cw)
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


def keep_without_node(modes, decisions: list[Call], report: Report) -> bool:
    """Keep the decision node's parameters from the base where the traces decided without it (every episode
    a vote or one agent's answer, :mod:`topo_env.engine.decision`); True where it did so."""
    others = sorted(m for m, k in modes.items() if k and m != "llm")
    if decisions or not others:
        return False
    why = f"not identified: no decision node's call (decision {', '.join(repr(m) for m in others)})"
    for name in NODE_PARAMETERS:
        if name in report.rows or name != "decide_factor":
            report.keep(name, 0, why)
    return True
