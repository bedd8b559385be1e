"""The verifier's parameters: verify_pass_correct, verify_detect and p_wrote_code, as rates.

Contract
--------
``fit_verifier(profile, calls, report) -> verifier``: ``calls`` are the agents' calls of
:class:`~topo_env.fitting.fit_data.Data`; the verified ones (round field ``verify``) count.
verify_pass_correct is the share of right answers with a verdict that passed, verify_detect the share of
wrong answers other than the trap (which passes shallow checks more often) that failed; for the python
verifier p_wrote_code is the share of verified calls that got a verdict (the tests verifier always gives
one). Binomial standard errors; with fewer than ``MIN_CALLS`` calls of a kind the base's value is kept.
Returns the verifier the profile gets: ``profile``'s, or when it has none but the traces have verdicts,
``tests`` (every verified call got one) or ``python`` (a note says so).
"""
from __future__ import annotations

import math

from topo_env.fitting.fit_data import MIN_CALLS, Call
from topo_env.fitting.fit_report import Report
from topo_env.sim.profiles import SimProfile


def fit_verifier(p: SimProfile, calls: list[Call], report: Report) -> str | None:
    """Fit the verifier's rates to the verified ``calls``; report their rows; returns the verifier."""
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
