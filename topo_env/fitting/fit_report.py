"""The fit's report: per parameter its estimate, standard error, status and what informed it, the
covariance blocks of jointly fitted parameters, and what data would identify a parameter the traces
leave on a bound or flat (:class:`Report`); and its printed form (:func:`format_report`).

Statuses: ``fitted`` (an interior maximum, with a standard error), ``at bound`` (the maximum lies on
the parameter's bound: no standard error, the bound is written), ``not identified`` (the likelihood is
flat along the parameter: any value nearby fits as well; no standard error, the value found is
written), ``kept from base`` (the traces hold too few calls of the kind that informs it: the base
profile's value is written).
"""
from __future__ import annotations

import math

import numpy as np

from topo_env.engine.cli import format_table
from topo_env.fitting.fit_stats import at_bound

FITTED, AT_BOUND, NOT_IDENTIFIED, KEPT = "fitted", "at bound", "not identified", "kept from base"
ESTIMATED = (FITTED, AT_BOUND, NOT_IDENTIFIED)  # statuses whose value comes from the traces

# What calls identify a parameter (prefix before "[" for the per-subject / per-agent ones).
IDENTIFIED_BY: dict[str, str] = {
    "alpha": "attempts (calls shown nothing, no own answer: round 0 of agents with no in-edge)",
    "subject_offset": "attempts on tasks of that subject",
    "skill_dev": "that agent's attempts on tasks of that subject",
    "beta": "attempts on tasks of differing difficulty",
    "task_spread": "several attempts of one task: episodes repeating tasks (a task pool smaller than the episodes) "
                   "and several agents attempting in an episode",
    "blind_spread": "one agent attempting a task twice in an episode (a re-solve after a failed verification)",
    "debug_gain": "re-solves after a failed verification (execute_verify on a domain with a verifier)",
    "trap_base": "wrong attempts on easy tasks (how often the wrong answer is the trap)",
    "trap_slope": "wrong attempts on tasks of differing difficulty",
    "w_fresh": "update calls of agents without a committed answer that are shown messages (round 0, agents "
               "downstream of an edge: aggregate_refine hubs, broadcast and execute_verify receivers)",
    "w_peer": "update calls with a committed answer and messages (rounds >= 1 with edges)",
    "rho": "update calls shown the right answer",
    "rho_v": "update calls shown the right answer, on subjects of differing verifiability",
    "theta": "update calls shown the trap on hard tasks",
    "theta_v": "update calls shown the trap, on subjects of differing verifiability",
    "tau": "update calls",
    "verifiability": "update calls of that subject shown the right answer or the trap",
    "drift_cw": "committed right answers re-emitted without messages (rounds >= 1, agents with no in-edge)",
    "drift_wc": "committed wrong answers re-emitted without messages",
    "decide_tau": "decisions between two or more different finals",
    "p_invent": "committed answers revised with messages (rounds >= 1 with edges)",
    "p_invent_decide": "decisions with at least one answered final",
    "p_unreadable": "agent calls",
    "p_unreadable_decide": "decisions",
    "contradicted_weight": "decisions in which a final that passed verification is contradicted",
    "mu_correct": "stated confidences of right answers",
    "mu_wrong": "stated confidences of wrong answers",
    "kappa": "stated confidences at differing support",
    "sigma_conf": "stated confidences",
    "revisit": "reasoning tokens of revisions shown new inputs",
    "reemit": "reasoning tokens of re-emitted answers (nothing new shown)",
    "decide_factor": "reasoning tokens of the decision node",
    "conflict": "reasoning tokens of calls whose inputs disagree with the answer",
}


def identified_by(name: str) -> str:
    """What calls identify parameter ``name`` ('' when no hint is known)."""
    return IDENTIFIED_BY.get(name.split("[")[0], "")


class Report:
    """Per-parameter results, covariance blocks and notes."""

    def __init__(self, base):
        self.base = base
        self.rows: dict[str, dict] = {}
        self.blocks: list[tuple[list[str], np.ndarray]] = []
        self.notes: list[str] = []

    def set(self, name: str, value: float, se: float | None, n: int, what: str = "", base=None,
            bounds: tuple[float, float] | None = None, status: str | None = None) -> None:
        """A parameter estimated from the traces. Its status: ``status`` if given, else ``at bound`` when
        ``value`` sits on ``bounds``, ``not identified`` when ``se`` is NaN (a flat likelihood), else
        ``fitted``; only a fitted parameter keeps its standard error."""
        side = at_bound(float(value), bounds)
        if status is None:
            status = AT_BOUND if side else (NOT_IDENTIFIED if se is not None and not np.isfinite(se) else FITTED)
        row = {"parameter": name, "value": float(value),
               "se": float(se) if status == FITTED and se is not None and np.isfinite(se) else None,
               "calls": int(n), "status": status, "base": _base_value(self.base, name) if base is None else float(base),
               "from": what}
        if status == AT_BOUND and bounds is not None:
            row["bound"] = bounds[0] if side == "lower" else bounds[1]
        self.rows[name] = row

    def keep(self, name: str, n: int, why: str, value=None) -> None:
        """A parameter the traces do not inform: the base's value (or ``value``, the base's in the fit's terms)."""
        v = _base_value(self.base, name) if value is None else float(value)
        self.rows[name] = {"parameter": name, "value": v, "se": None, "calls": int(n), "status": KEPT,
                           "base": v, "from": why}

    def block(self, names: list[str], cov: np.ndarray) -> None:
        """The joint covariance of parameters ``names`` (estimated together)."""
        self.blocks.append((list(names), np.asarray(cov, dtype=float)))

    def value(self, name: str) -> float:
        return self.rows[name]["value"]

    def estimated(self) -> dict[str, float]:
        """name -> value of every parameter whose value comes from the traces."""
        return {n: r["value"] for n, r in self.rows.items() if r["status"] in ESTIMATED}

    def identification_notes(self) -> None:
        """A note per parameter at a bound or not identified: where it ended and what would identify it."""
        for name, r in self.rows.items():
            if r["status"] not in (AT_BOUND, NOT_IDENTIFIED):
                continue
            where = f"on its bound {r['bound']:g}" if r["status"] == AT_BOUND else "on a flat stretch of the likelihood"
            hint = identified_by(name)
            self.notes.append(f"{name} = {r['value']:.4g} is {r['status']} ({where}; no standard error)"
                              + (f": more {hint} would identify it" if hint else ""))

    def as_dict(self) -> dict:
        fitted = {n for n, r in self.rows.items() if r["status"] == FITTED}
        blocks = []
        for names, cov in self.blocks:
            keep = [k for k, n in enumerate(names) if n in fitted]
            if len(keep) > 1:
                sub = cov[np.ix_(keep, keep)]
                blocks.append({"parameters": [names[k] for k in keep],
                               "matrix": [[float(x) if math.isfinite(x) else None for x in row] for row in sub]})
        return {"base": self.base.name, "parameters": list(self.rows.values()), "covariance": blocks,
                "notes": self.notes}


def _base_value(base, name: str):
    if hasattr(base, name):
        v = getattr(base, name)
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v
    return None


def format_report(result: dict) -> str:
    """The report as text: the parameter table, the predictive check's table (when the report has
    one, :func:`topo_env.fitting.fit_check.format_check`) and the notes."""
    from topo_env.fitting.fit_check import format_check

    rows = []
    for r in result["parameters"]:
        value = r["value"]
        rows.append({"parameter": r["parameter"], "value": value if isinstance(value, float) else str(value),
                     "se": "" if r["se"] is None else r["se"], "calls": r["calls"], "status": r["status"],
                     "base": r["base"] if isinstance(r["base"], float) else str(r["base"]), "informed by": r["from"]})
    lines = [f"fit of profile {result['base']!r} to {result['episodes']} episodes "
             f"({', '.join(f'{k} {v}' for k, v in result['calls'].items())} calls)",
             format_table(rows, ("parameter", "value", "se", "calls", "status", "base", "informed by")),
             "value: the maximum-likelihood estimate (least squares / rate where said); se: its standard error "
             "(inverse Hessian, OLS or binomial); calls: how many calls informed it; 'at bound': the maximum lies on "
             "the parameter's bound, 'not identified': the likelihood is flat along it (neither has a standard error); "
             "'kept from base': the traces do not inform it, the base profile's value is written."]
    if result.get("check"):
        lines.append(format_check(result["check"]))
    lines += [f"note: {n}" for n in result["notes"]]
    return "\n".join(lines)


def truth_values(truth, base, report: dict, n_agents: int) -> dict[str, float]:
    """What ``report`` (a fit of ``base`` to traces of the team ``truth``) estimates, in its own terms:
    per reported parameter the truth's value where the fit's conventions put it (a simulation study's
    yardstick). The attempt levels keep the base's weighted mean subject offset over the fitted
    subjects (alpha takes the rest; skill_dev is an agent's skill minus the team's on the subject);
    the update model's (rho, rho_v, theta, theta_v, v) are mapped to the fit's gauge
    (:func:`topo_env.fitting.fit_updates.to_gauge`). Parameters of subjects the truth lacks are left out."""
    from topo_env.fitting.fit_updates import UPDATE_PARAMS, Gauge, to_gauge

    rows = {r["parameter"]: r for r in report["parameters"]}
    names_t, names_b = list(truth.subject_names), list(base.subject_names)
    k_t, k_b = np.array(truth.skills(n_agents)), np.array(base.skills(n_agents))
    out = {name: float(getattr(truth, name)) for name in rows
           if hasattr(truth, name) and isinstance(getattr(truth, name), (int, float))}

    def estimated(prefix: str) -> list[str]:
        return [n[len(prefix) + 1:-1] for n, r in rows.items()
                if n.startswith(prefix + "[") and r["status"] in ESTIMATED and n[len(prefix) + 1:-1] in names_t]

    subjects = estimated("subject_offset")
    if subjects:
        level = {s: truth.alpha + truth.subjects[names_t.index(s)][2] + k_t[:, names_t.index(s)].mean()
                 - (k_b[:, names_b.index(s)].mean() if s in names_b else 0.0) for s in subjects}
        b_base = {s: base.subjects[names_b.index(s)][2] if s in names_b else 0.0 for s in subjects}
        w = np.array([base.subjects[names_b.index(s)][1] if s in names_b else 0.0 for s in subjects])
        w = np.ones(len(subjects)) if w.sum() == 0 else w
        alpha = float((w / w.sum()) @ np.array([level[s] - b_base[s] for s in subjects]))
        out["alpha"] = alpha
        out.update({f"subject_offset[{s}]": float(level[s] - alpha) for s in subjects})
    for name, r in rows.items():
        if name.startswith("skill_dev[") and r["status"] in ESTIMATED:
            i, s = name[len("skill_dev["):-1].split(",", 1)
            if s in names_t:
                col = k_t[:, names_t.index(s)]
                out[name] = float(col[int(i)] - col.mean())
    out.update({f"verbosity[{i}]": float(m.verbosity) for i, m in enumerate(truth.team_models(n_agents))})
    t = np.array([getattr(truth, n) for n in UPDATE_PARAMS], dtype=float)
    fitted_v = estimated("verifiability")
    v = np.array([truth.verifiability[names_t.index(s)] for s in fitted_v])
    if fitted_v:
        w = np.array([base.subjects[names_b.index(s)][1] if s in names_b else 1.0 for s in fitted_v])
        v_base = np.array([base.verifiability[names_b.index(s)] if s in names_b else 0.0 for s in fitted_v])
        t, v, _ = to_gauge(t, v, Gauge.of(w, v_base))
    out.update(zip(UPDATE_PARAMS, map(float, t)))
    out.update({f"verifiability[{s}]": float(x) for s, x in zip(fitted_v, v)})
    return out
