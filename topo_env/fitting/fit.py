"""Fit the simulated agent model (:mod:`topo_env.sim.model`) to episode traces by maximum likelihood.

Contract
--------
``fit_profile(traces, base) -> (profile, report)``: ``traces`` are episode records of schema
``topomarl.trace/1`` (:mod:`topo_env.engine.traces`; from the simulated team or a real one, e.g.
``agents_llm/probe.py``), ``base`` a :class:`~topo_env.sim.profiles.SimProfile`. The result is a copy
of ``base`` whose parameters the traces inform are replaced by their estimates; every other parameter
keeps the base's value. ``report`` lists per parameter the value, its standard error (inverse Hessian
or outer product of the scores of the negative log-likelihood, or the OLS / binomial formula), the
number of calls that informed it and its status (``fitted``, ``at bound``, ``not identified`` or
``kept from base``: :mod:`topo_env.fitting.fit_report`), the covariance blocks of jointly fitted
parameters, plus notes on what was estimated or assumed and, for each parameter on a bound or on a
flat stretch of the likelihood, what calls would identify it. :func:`fit_records` is the same fit
returning a :class:`~topo_env.fitting.fit_result.Fitted` (with the parsed traces and the profile builder).

:func:`fit_traces` (trace files and a base profile name, path or None) is the entry from Python: it
adds the predictive check (:mod:`topo_env.fitting.fit_check`: the fitted team on solo, full, star and
debate, and replaying the recorded episodes) to the report. ``python -m topo_env.fitting.fit traces.jsonl
[more.jsonl ...] --out profile.yaml [--base mmlu_pro] [--json] [--seed 0] [--no-check]`` writes the
profile (:func:`write_profile`; the env loads it with ``profile: profile.yaml``) and prints the report
and the check as tables (``--json``: one JSON object). A missing file, a malformed line, traces without
a usable call or a bad base print one line naming the file, line and field (or the value) and exit with
status 2.

Which calls identify which parameters (adversaries' calls are left out of every behavioural part), in
the order the fit runs; each module's docstring states its model:

* **Traces** (:mod:`~topo_env.fitting.fit_data`): calls in the model's label space; difficulties and
  traps the traces lack are latent (:mod:`~topo_env.fitting.fit_latents`), subjects defaulted (notes).
* **Attempts** (no message shown, no committed own answer; :mod:`~topo_env.fitting.fit_ability`): the
  per-(agent, subject) ability alpha + b_s + k_is, beta, task_spread, blind_spread, debug_gain, and
  trap_base, trap_slope.
* **Drift** (committed answer, no message) and **updates** (messages shown;
  :mod:`~topo_env.fitting.fit_social`, :mod:`~topo_env.fitting.fit_updates`): drift_cw, drift_wc;
  w_fresh, w_peer, rho, rho_v, theta, theta_v, tau and each subject's verifiability. w_commit (the
  scale) and rho_d are kept.
* **Decision node** (:mod:`~topo_env.fitting.fit_decision`): decide_tau, contradicted_weight (kept from the
  base, with decide_factor, where the traces decided by a vote or one agent's answer: ``decision.mode``).
* **Slips** (:mod:`~topo_env.fitting.fit_slips`): p_invent (committed answers revised with messages),
  p_invent_decide (decisions), p_unreadable, p_unreadable_decide (replies without an answer, which the
  other parts leave out: a message without an answer is on no table, an agent whose own had none solves
  afresh).
* **Confidence** (:mod:`~topo_env.fitting.fit_confidence`): mu_correct, mu_wrong, kappa, sigma_conf;
  fitted first with the base's weights (the update fit integrates a fresh attempt's confidence with
  them), then again with the fitted w_peer and contradicted_weight.
* **Verifier** (verified calls; :mod:`~topo_env.fitting.fit_verifier`): verify_pass_correct,
  verify_detect, p_wrote_code.
* **Tokens** (:mod:`~topo_env.fitting.fit_tokens`): content_mean, reason_mean, revisit, reemit,
  decide_factor, conflict, each agent's verbosity, sys_tokens, header_tokens, verdict_tokens.
* **Tasks** (the tasks' metadata; :mod:`~topo_env.fitting.fit_tasks`): diff_a, diff_b, task_tokens_mean.

The fitted values become a profile through :class:`~topo_env.fitting.fit_result.ProfileBuilder`.

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
import sys
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from topo_env.engine.cli import OneLineParser, RunError, run_main
from topo_env.engine.threads import one_blas_thread
from topo_env.fitting.fit_ability import fit_ability
from topo_env.fitting.fit_confidence import confidence_levels, fit_confidence, report_confidence
from topo_env.fitting.fit_data import Data, FitError, load_traces
from topo_env.fitting.fit_decision import fit_decision, keep_without_node
from topo_env.fitting.fit_report import Report, format_report
from topo_env.fitting.fit_result import Fitted, ProfileBuilder
from topo_env.fitting.fit_slips import fit_slips
from topo_env.fitting.fit_social import fit_drift, fit_social
from topo_env.fitting.fit_tasks import fit_tasks
from topo_env.fitting.fit_tokens import fit_tokens
from topo_env.fitting.fit_verifier import fit_verifier
from topo_env.frontends.env_config import EnvConfig
from topo_env.sim.profiles import PROFILES, ProfileFileError, SimProfile, get_profile, load_profile, save_profile

__all__ = ["DEFAULT_BASE", "PROG", "Data", "FitError", "Fitted", "build_parser", "fit_profile", "fit_records",
           "fit_traces", "load_traces", "main", "write_profile"]

PROG = "python -m topo_env.fitting.fit"
DEFAULT_BASE = {"reasoning": "mmlu_pro", "code": "humaneval", "math": "aime25"}


# ---------------------------------------------------------------------------------------------
# the fit


def fit_profile(traces: Iterable[dict], base: SimProfile, where: str = "traces",
                seed: int = 0) -> tuple[SimProfile, dict]:
    """Fit ``base``'s parameters to episode ``traces`` (records of :func:`topo_env.engine.traces.read_traces`).
    Returns the fitted profile and the report (:meth:`Report.as_dict`); ``seed`` seeds the random starts
    of the update model's search (:func:`topo_env.fitting.fit_updates.fit_updates`). No predictive check:
    :func:`fit_traces` adds it."""
    result = fit_records(list(traces), base, where, seed)
    return result.profile, result.report


def fit_records(records: list[dict], base: SimProfile, where: str = "traces", seed: int = 0) -> Fitted:
    """:func:`fit_profile`, returning the parsed traces and the profile builder with the result."""
    with one_blas_thread(preload=("scipy.optimize",)):
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

    am, skills, shrink = fit_ability(data, base, attempts, report)
    profile = replace(base, trap_base=report.value("trap_base"), trap_slope=report.value("trap_slope"))
    fit_drift(drifts, report)

    # confidence (first with the base's w_peer, refitted after the update fit)
    mu = confidence_levels(fit_confidence(profile, data.calls + data.decisions, base.w_peer,
                                          base.contradicted_weight), base)
    upd, verif, update_fit = fit_social(data, base, profile, am, updates, skills, mu, report, seed)
    report.keep("w_commit", len(updates), "the scale of the update scores (fixed)")
    report.keep("rho_d", len(updates), "not fitted (modelling choice)")

    # decision node, then confidence with the fitted weights
    profile = replace(profile, **upd)
    fit_decision(profile, data.decisions, report)
    fit_slips(data, base, report)
    report_confidence(fit_confidence(profile, data.calls + data.decisions, upd["w_peer"],
                                     report.value("contradicted_weight")), report)

    # verifier, tokens, task distribution
    verifier = fit_verifier(profile, data.calls, report)
    verbosity = np.array([m.verbosity for m in base.team_models(data.n_agents)])
    fit_tokens(data, profile, data.calls + data.decisions, verbosity, report)
    fit_tasks(data, report)
    keep_without_node(data.decision_modes, data.decisions, report)  # a vote's or one agent's traces
    report.identification_notes()

    builder = ProfileBuilder(base, data, am, verifier, verif, shrink)
    out = report.as_dict()
    out["episodes"] = len(records)
    out["calls"] = {"attempts": len(attempts), "updates": len(updates), "drift": len(drifts),
                    "decisions": len(data.decisions), "adversary": len(data.calls) - len(honest),
                    "unreadable": len(data.unreadable) + len(data.unreadable_decisions)}
    return Fitted(builder.build(report.estimated()), out, data, builder, records, update_fit)


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
