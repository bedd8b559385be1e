"""The social parameters: how an agent's answer moves between calls, with messages shown (conformity,
recognition of the right answer, pull of the trap, per subject through its verifiability) and without
(drift of a committed answer).

Contract
--------
``fit_social(data, base, profile, am, updates, skills, mu, report, seed) -> (values, verifiability, fit)``:
``updates`` are the honest calls of :class:`~topo_env.fitting.fit_data.Data` shown messages. The
Gumbel-max choice is a softmax over the labels on the table, scores S(a) / tau. w_commit is the scale
(kept); w_fresh, w_peer, rho, rho_v, theta, theta_v, tau are fitted jointly. A committed own answer's
weight is observed; a fresh one's (w_fresh c_att) is not: its label and confidence are integrated out,
with P(att correct) the posterior predictive of the attempt fit ``am``
(:class:`~topo_env.fitting.fit_ability.AttemptModel`) given the task's observed attempts (a composite
likelihood: several fresh update calls of one task are treated as independent given those attempts).
Each subject with at least :data:`MIN_SUBJECT_CALLS` update calls (and at least ``MIN_V_SUBJECTS`` such
subjects) also gets its verifiability v_s; the update calls of the other subjects are left out. The
search and gauge are :func:`topo_env.fitting.fit_updates.fit_updates`'s. Returns the 7 parameters'
values, every subject's verifiability (fitted or kept from ``base``) and (the update model, its fit),
None when not fitted; the rows go to ``report``.

``fit_drift(drifts, report)``: committed answers shown no message: drift_cw = share of committed right
answers that turn wrong, drift_wc = share of committed wrong answers that turn right (binomial SEs).
"""
from __future__ import annotations

import math

import numpy as np

from topo_env.fitting.fit_ability import AttemptModel
from topo_env.fitting.fit_data import MIN_CALLS, Call, Data
from topo_env.fitting.fit_report import FITTED, Report
from topo_env.fitting.fit_stats import sig
from topo_env.fitting.fit_updates import BOUNDS, MIN_V_SUBJECTS, UPDATE_PARAMS, Gauge, UpdateModel, fit_updates
from topo_env.sim.profiles import SimProfile

MIN_SUBJECT_CALLS = 60  # update calls of a subject needed to fit its verifiability (fewer: left out, v kept)


def fit_social(data: Data, base: SimProfile, profile: SimProfile, am: AttemptModel | None, updates: list[Call],
               skills: np.ndarray, mu: tuple[float, float, float], report: Report, seed: int):
    """The update model (:mod:`topo_env.fitting.fit_updates`) on ``updates``, the confidence levels ``mu``
    (mu_correct, mu_wrong, sigma_conf) and skills k_is fixed: report its rows; returns the 7 parameters'
    values, every subject's verifiability (fitted or kept) and (the model, its fit), None when not fitted."""
    n_sub = len(data.subjects)
    usable, used, v_subjects, counts = _update_calls(data, updates, report)
    v0 = np.array(list(base.verifiability) + [0.0] * (n_sub - len(base.subjects)))
    t0 = np.array([getattr(base, n) for n in UPDATE_PARAMS], dtype=float)
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


def _update_calls(data: Data, updates: list[Call], report: Report):
    """The update calls the model can explain (``usable``: the answer is on the table), those the fit uses
    (``used``: of the subjects whose verifiability is fitted, ``v_subjects``, when there are enough such
    subjects; else all usable) and the usable calls per subject (``counts``)."""
    usable = [c for c in updates if c.label in {m.label for m in c.msgs} | ({c.prev.label} if c.committed else set())
              or not c.committed]
    skipped = len(updates) - len(usable)
    if skipped:
        report.notes.append(f"{skipped} update call(s) answered a label that was not on their table: skipped")
    n_sub = len(data.subjects)
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
    return usable, used, v_subjects, counts


def _keep_verifiabilities(data: Data, v0: np.ndarray, counts: np.ndarray, report: Report, skip=()) -> None:
    for s, name in enumerate(data.subjects):
        if s not in skip:
            report.keep(f"verifiability[{name}]", int(counts[s]), f"fewer than {MIN_SUBJECT_CALLS} update calls "
                        f"(or fewer than {MIN_V_SUBJECTS} subjects with as many)", value=v0[s])


def fit_drift(drifts: list[Call], report: Report) -> None:
    """drift_cw and drift_wc: the shares of committed right (wrong) answers re-emitted shown nothing that turn."""
    right = [c for c in drifts if c.prev.label == 0]
    wrong = [c for c in drifts if c.prev.label != 0]
    for name, group, hit in (("drift_cw", right, lambda c: c.label != 0), ("drift_wc", wrong, lambda c: c.label == 0)):
        if len(group) >= MIN_CALLS:
            r = sum(map(hit, group)) / len(group)
            report.set(name, r, math.sqrt(max(r * (1 - r), 1e-12) / len(group)), len(group),
                       "committed answers, no message")
        else:
            report.keep(name, len(group), "too few committed calls without messages")
