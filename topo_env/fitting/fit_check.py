"""The fit's predictive check: does the fitted team reproduce the team that made the traces?

:func:`predictive_check` sets the fitted team (:class:`topo_env.sim.batch.BatchSimulator`) on the
traces' own tasks (their difficulty, a latent one drawn from its posterior, subject and prompt length;
a fresh task latent per episode) and reports, with standard errors:

* **replay**: every recorded episode that an env played (rounds 0..T-1, no synthetic senders: a
  probe's controlled calls are not replayed) is played again by the fitted team, :data:`REPLAYS`
  times, with the recorded graph of each round; the recorded accuracy and tokens stand next to the
  fitted team's, for all those episodes and by how dense their rounds were (mean density below 1/3,
  1/3 to 2/3, above 2/3: whether exchange helps or hurts is the part a misfit gets wrong). ``z`` is
  the difference over its standard error (recorded noise, replay noise and the fit's uncertainty).
* **fixed topologies** (solo, full, star, debate, :mod:`topo_env.references.baselines`): the fitted team's
  accuracy, tokens and reward over :data:`EPISODES` episodes, next to the recorded episodes that
  played that topology in every round (uniform random exploration plays a given one rarely: then
  the replay rows are the evidence).

Standard errors of the fitted team's figures combine the simulation's own (episodes) with the fit's
uncertainty: :data:`DRAWS` parameter sets are drawn from the report (its covariance blocks jointly,
other fitted parameters independently, from their standard errors), each played on common random
numbers; the spread of their figures is the fit's part.
"""
from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

import numpy as np

from topo_env.references.baselines import FIXED_BASELINES, analyzer_index, open_loop_actions
from topo_env.frontends.env_config import EnvConfig
from topo_env.sim.batch import BatchRoundSpec, TaskArrays
from topo_env.frontends.comm_batch import CommBatchSimulator
from topo_env.sim.model import draw_noise
from topo_env.sim.config import SimBackendConfig
from topo_env.sim.profiles import PROFILES, SimProfile
from topo_env.engine.tasks import DEFAULT_ROUNDS
from topo_env.engine.threads import one_blas_thread
from topo_env.engine.traces import decision_mode

TOPOLOGIES = tuple(t for t in FIXED_BASELINES if t != "chain")  # solo, full, star, debate
EPISODES = 4000  # per fixed topology, the fitted team's point estimate
DRAWS = 30  # parameter draws for the fit's part of the standard errors
DRAW_EPISODES = 1000  # episodes per draw and topology
REPLAYS = 10  # replays of every recorded episode
MISFIT_Z = 3.0  # |z| above this is reported as a misfit
DENSITY_BINS = ((0.0, 1 / 3, "density < 1/3"), (1 / 3, 2 / 3, "density 1/3..2/3"), (2 / 3, 1.01, "density >= 2/3"))
# where a drawn parameter must stay (rates, scales; per-agent ones by prefix); others are unbounded
DOMAINS = {**{n: (0.0, 1.0) for n in ("drift_cw", "drift_wc", "trap_base", "verify_pass_correct", "verify_detect",
                                        "p_wrote_code", "p_invent", "p_invent_decide", "p_unreadable",
                                        "p_unreadable_decide")},
           **{n: (0.0, None) for n in ("w_fresh", "w_peer", "task_spread", "blind_spread", "sigma_conf",
                                         "contradicted_weight", "revisit", "reemit", "conflict", "decide_factor",
                                         "content_mean", "reason_mean", "task_tokens_mean")},
           **{n: (1e-3, None) for n in ("tau", "decide_tau")}, **{n: (0.05, None) for n in ("diff_a", "diff_b")},
           "verbosity": (0.01, None)}


def simulator(profile: SimProfile, n_agents: int, rounds: int, roles, config: EnvConfig,
              decision: str | None = None) -> CommBatchSimulator:
    """A batch simulator of ``profile`` (an in-memory one too) with ``config``'s target rule and reward, and
    ``config``'s decision (``decision``: another one, e.g. the traces')."""
    # CommBatchSimulator validates its EnvConfig by profile name; a fitted profile not on disk has none, so it
    # is checked as the built-in profile of its domain (the name is all that is read)
    named = profile if (profile.source or profile.name in PROFILES) else replace(
        profile, name=next(p.name for p in PROFILES.values() if p.domain == profile.domain))
    return CommBatchSimulator(named, n_agents, rounds, tuple(roles), target_rule=config.target_rule, w_acc=config.w_acc,
                          w_tok=config.w_tok, max_tokens=config.max_tokens,
                          decision=config.decision if decision is None else decision)


def trace_decision(records: list[dict]) -> str:
    """How the recorded team decided (``decision.mode`` of :mod:`topo_env.engine.traces`): the most common
    mode among ``records`` ("llm" where none), so that a replay decides the same way."""
    modes = [str(decision_mode(r)) for r in records]
    return max(sorted(set(modes)), key=modes.count) if modes else "llm"


class TraceTasks(NamedTuple):
    """Per recorded episode (E of them) its task as the simulator reads it: ``difficulty`` (E,) the known or
    posterior-mean d, ``posterior`` (E, G) the probabilities of ``nodes`` (G,) where d is latent (None where
    every d is known), ``subject`` (E,) and ``tokens`` (E,) prompt tokens."""

    difficulty: np.ndarray
    posterior: np.ndarray | None
    nodes: np.ndarray
    subject: np.ndarray
    tokens: np.ndarray


def trace_tasks(data, profile: SimProfile) -> TraceTasks:
    """Per episode of ``data`` (:class:`topo_env.fitting.fit_data.Data`): its task's difficulty (a latent one as
    its posterior, so that replays draw it and keep its spread), subject index and prompt tokens (the task's
    own; else its calls shown nothing: prompt minus ``sys_tokens``; else ``task_tokens_mean``)."""
    seen: dict[int, list[int]] = {}
    for c in data.calls + data.decisions:
        if not c.msgs and c.prev is None and not c.decision:
            seen.setdefault(c.task, []).append(c.prompt - profile.sys_tokens)
    tokens = np.array([t.prompt_tokens if t.prompt_tokens is not None
                       else (np.median(seen[j]) if j in seen else profile.task_tokens_mean)
                       for j, t in enumerate(data.tasks)], dtype=float)
    j = np.array(data.episode_task)
    posterior = None
    if data.d_estimated.any():
        posterior = np.where(data.d_estimated[j][:, None], data.d_posterior[j], np.nan)
    return TraceTasks(data.difficulty[j], posterior, data.d_nodes, data.subject_of[j],
                      np.maximum(1, np.round(tokens[j])).astype(np.int64))


def _task_arrays(tasks: TraceTasks, idx: np.ndarray, rng: np.random.Generator) -> TaskArrays:
    """The episodes ``idx`` of ``tasks`` as the batch simulator's task arrays: a latent difficulty drawn from
    its posterior, a fresh task latent."""
    d = tasks.difficulty[idx]
    if tasks.posterior is not None:
        post = tasks.posterior[idx]
        latent = ~np.isnan(post[:, 0])
        cum = np.cumsum(post[latent], axis=1)
        pick = (cum < rng.random(int(latent.sum()))[:, None] * cum[:, -1:]).sum(axis=1)
        d = d.copy()
        d[latent] = tasks.nodes[np.minimum(pick, len(tasks.nodes) - 1)]
    return TaskArrays(d, rng.standard_normal(len(idx)), tasks.tokens[idx], tasks.subject[idx])


# ---------------------------------------------------------------------------------------------
# which recorded episodes can be replayed, and which played a fixed topology


def replayable(record: dict, n_agents: int) -> bool:
    """Whether an env played ``record``: rounds 0..T-1, every edge between agents called that round,
    no recall, and a decision (a probe's episodes have synthetic senders or no decision)."""
    rounds = record["rounds"]
    if record["n_agents"] != n_agents or not rounds or record["decision"].get("called") is False:
        return False
    for t, rnd in enumerate(rounds):
        if rnd["round"] != t or rnd.get("recall") is not None:
            return False
        adj, active = np.array(rnd["adjacency"], dtype=bool), np.array(rnd["active"], dtype=bool)
        if (adj & ~(active[:, None] & active[None, :])).any() or (np.array(rnd["verify"], dtype=bool) & ~active).any():
            return False
    return True


def plays(topology: str, rnd: dict, roles) -> bool:
    """Whether round ``rnd`` of a record is the round ``topology`` plays (any targets for debate)."""
    adj = np.array(rnd["adjacency"], dtype=bool)
    n = len(adj)
    if any(rnd["verify"]) or not all(rnd["active"]):
        return False
    off = ~np.eye(n, dtype=bool)
    if topology == "solo":
        return not adj.any()
    if topology == "full":
        return bool((adj == off).all())
    if topology == "star":
        hub = analyzer_index(n, roles)
        want = np.zeros((n, n), dtype=bool)
        want[:, hub] = off[:, hub]
        return bool((adj == want).all())
    if topology == "debate":  # i <-> t_i for some targets: symmetric, nobody alone, no component with a spare edge
        if not (adj == adj.T).all() or not adj.any(axis=1).all():
            return False
        seen = np.zeros(n, dtype=bool)
        for start in range(n):
            if seen[start]:
                continue
            comp, todo = set(), [start]
            while todo:
                u = todo.pop()
                if u not in comp:
                    comp.add(u)
                    todo.extend(np.flatnonzero(adj[u]).tolist())
            seen[list(comp)] = True
            idx = sorted(comp)
            if adj[np.ix_(idx, idx)].sum() // 2 > len(idx):
                return False
        return True
    raise ValueError(f"unknown topology {topology!r}; known: {list(TOPOLOGIES)}")


def _round_specs(records: list[dict], n_agents: int, rounds: int) -> list[BatchRoundSpec]:
    """The recorded rounds as batched specs (episodes with fewer rounds idle after their last)."""
    b = len(records)
    specs = []
    for t in range(rounds):
        adj = np.zeros((b, n_agents, n_agents), np.int8)
        active = np.zeros((b, n_agents), bool)
        verify = np.zeros((b, n_agents), bool)
        for k, rec in enumerate(records):
            if t < len(rec["rounds"]):
                rnd = rec["rounds"][t]
                adj[k], active[k], verify[k] = rnd["adjacency"], rnd["active"], rnd["verify"]
        specs.append(BatchRoundSpec(adj, active, verify))
    return specs


def _density(rec: dict) -> float:
    n = rec["n_agents"]
    return float(np.mean([np.array(r["adjacency"]).sum() / (n * (n - 1)) for r in rec["rounds"]]))


# ---------------------------------------------------------------------------------------------
# parameter draws


def draw_values(report: dict, rng: np.random.Generator, k: int) -> list[dict[str, float]]:
    """``k`` draws of the fitted parameters' values: each covariance block of the report jointly
    normal, every other fitted parameter with a standard error independently normal, each clipped to
    its domain (:data:`DOMAINS`); parameters without a standard error keep their value."""
    rows = {r["parameter"]: r for r in report["parameters"]}
    base = {n: r["value"] for n, r in rows.items() if isinstance(r["value"], float)}
    draws = [dict(base) for _ in range(k)]
    in_block = set()
    for block in report.get("covariance", []):
        names = block["parameters"]
        cov = np.array([[np.nan if x is None else x for x in row] for row in block["matrix"]], dtype=float)
        if not np.isfinite(cov).all():
            continue
        in_block.update(names)
        mean = np.array([rows[n]["value"] for n in names])
        lam, q = np.linalg.eigh((cov + cov.T) / 2)
        root = q * np.sqrt(np.clip(lam, 0.0, None))
        z = rng.standard_normal((k, len(names)))
        for d, x in zip(draws, mean + z @ root.T):
            d.update(zip(names, x))
    for name, r in rows.items():
        if name not in in_block and r["se"] is not None:
            for d, x in zip(draws, r["value"] + r["se"] * rng.standard_normal(k)):
                d[name] = x
    for d in draws:
        for name in d:
            lo, hi = DOMAINS.get(name.split("[")[0], (None, None))
            d[name] = float(np.clip(d[name], lo, hi))
    return draws


# ---------------------------------------------------------------------------------------------
# the check


def _mean_se(x: np.ndarray) -> dict:
    x = np.asarray(x, dtype=float)
    return {"mean": float(x.mean()), "se": float(x.std(ddof=1) / np.sqrt(len(x))) if len(x) > 1 else None}


def _with_fit_se(point: dict, spread: float) -> dict:
    se = point["se"] if point["se"] is not None else 0.0
    return {"mean": point["mean"], "se": float(np.hypot(se, spread))}


def topology_figures(profile: SimProfile, tasks, n_agents: int, rounds: int, roles, config: EnvConfig,
                     episodes: int, rng: np.random.Generator) -> dict[str, dict]:
    """The team of ``profile`` on each of :data:`TOPOLOGIES` over ``episodes`` episodes on tasks drawn
    from ``tasks`` (:func:`trace_tasks`): accuracy, tokens and reward, each mean and its simulation SE."""
    sim = simulator(profile, n_agents, rounds, roles, config)
    out = {}
    for name in TOPOLOGIES:
        idx = rng.integers(len(tasks[0]), size=episodes)
        res = sim.run(open_loop_actions(name, n_agents, rounds, roles), _task_arrays(tasks, idx, rng),
                      draw_noise(rng, profile, episodes, rounds, n_agents))
        out[name] = {"accuracy": _mean_se(res.accuracy), "tokens": _mean_se(res.tokens), "reward": _mean_se(res.reward)}
    return out


def predictive_check(fitted, config: EnvConfig | None = None, seed: int = 0, episodes: int = EPISODES,
                     draws: int = DRAWS, replays: int = REPLAYS) -> dict:
    """The predictive check of a fit (``fitted``: :class:`topo_env.fitting.fit_result.Fitted`, from
    :func:`topo_env.fitting.fit.fit_records`). ``config``: the env the team will be trained in (its
    rounds, roles, target rule and reward weights; None: the traces' agents and roles, their most
    common number of rounds, else the domain's, and the default reward). Seeded by ``seed``."""
    with one_blas_thread(preload=("scipy.optimize",)):
        return _check(fitted, config, seed, episodes, draws, replays)


def _check(fitted, config: EnvConfig | None, seed: int, episodes: int, draws: int, replays: int) -> dict:
    data, profile, records = fitted.data, fitted.profile, fitted.records
    n = data.n_agents
    trace_roles = roles = tuple(records[0]["roles"])
    ok_idx = [k for k, r in enumerate(records) if replayable(r, n)]
    ok = [records[k] for k in ok_idx]
    if config is None:
        lengths = [len(r["rounds"]) for r in ok]
        rounds = max(set(lengths), key=lengths.count) if lengths else DEFAULT_ROUNDS[profile.domain]
        built_in = next(p.name for p in PROFILES.values() if p.domain == profile.domain)
        config = EnvConfig(n_agents=n, rounds=rounds, backend=SimBackendConfig(profile=built_in), roles=roles,
                           decision=trace_decision(ok or records))
    rounds, roles = config.rounds, tuple(config.roles)
    tasks = trace_tasks(data, profile)
    rng = np.random.default_rng(seed)
    values = draw_values(fitted.report, rng, draws)
    drawn = [fitted.builder.build(v) for v in values]
    check = {"episodes": episodes, "draws": draws, "replays": replays, "seed": seed, "rounds": rounds,
             "topologies": [], "replay": [], "notes": []}

    # fixed topologies: the fitted team (point estimate), its spread over the draws, the recorded episodes
    point = topology_figures(profile, tasks, n, rounds, roles, config, episodes, rng)
    state = rng.bit_generator.state
    spread = []
    for p in drawn:  # common random numbers: every draw plays the same episodes
        rng.bit_generator.state = state
        spread.append(topology_figures(p, tasks, n, rounds, roles, config, DRAW_EPISODES, rng))
    for name in TOPOLOGIES:
        row = {"topology": name, "fitted": {}}
        for what in ("accuracy", "tokens", "reward"):
            sd = float(np.std([s[name][what]["mean"] for s in spread], ddof=1)) if len(spread) > 1 else 0.0
            row["fitted"][what] = _with_fit_se(point[name][what], sd)
        played = [r for r in ok if len(r["rounds"]) == rounds and all(plays(name, rnd, roles) for rnd in r["rounds"])]
        row["recorded"] = {"episodes": len(played)}
        if played:
            row["recorded"].update(accuracy=_mean_se([r["decision"]["accuracy"] for r in played]),
                                   tokens=_mean_se([r["team_tokens"] for r in played]))
        check["topologies"].append(row)

    # replay of the recorded episodes
    if ok:
        check["replay"] = _replay(ok, np.array(ok_idx), tasks, profile, drawn, n, trace_roles, config, replays, rng)
    skipped = len(records) - len(ok)
    if skipped:
        check["notes"].append(f"{skipped} recorded episode(s) are not replayed (not played by an env: a probe's "
                              "controlled calls, another team size, recall, or no decision)")
    for r in check["replay"]:
        for what in ("accuracy", "tokens"):
            z = r["z"][what]
            if z is not None and abs(z) > MISFIT_Z:
                check["notes"].append(f"MISFIT: replaying the recorded episodes ({r['group']}), the fitted team's "
                                      f"{what} is {r['fitted'][what]['mean']:.4g} against the recorded "
                                      f"{r['recorded'][what]['mean']:.4g} (z = {z:+.1f}): it does not reproduce "
                                      "the recorded team there")
    return check


def _replay(records: list[dict], ep: np.ndarray, tasks, profile: SimProfile, drawn: list[SimProfile], n: int, roles,
            config: EnvConfig, replays: int, rng: np.random.Generator) -> list[dict]:
    """Replay rows: the replayable ``records`` (episodes ``ep`` of the traces) and their density groups
    (see the module docstring)."""
    rounds = max(len(r["rounds"]) for r in records)
    specs = _round_specs(records, n, rounds)
    adv = np.zeros((len(records), n), dtype=bool)
    for k, r in enumerate(records):
        adv[k, list(r.get("adversaries") or [])] = True
    observed = {"accuracy": np.array([r["decision"]["accuracy"] for r in records], dtype=float),
                "tokens": np.array([r["team_tokens"] for r in records], dtype=float)}

    decision = trace_decision(records)  # the recorded team's decision, whatever the env's

    def play(p: SimProfile, reps: int) -> dict[str, np.ndarray]:
        sim = simulator(p, n, rounds, roles, config, decision)
        acc, tok = np.zeros(len(records)), np.zeros(len(records))
        for _ in range(reps):
            res = sim.run_specs(specs, _task_arrays(tasks, ep, rng), draw_noise(rng, p, len(records), rounds, n), adv)
            acc += res.accuracy
            tok += res.tokens
        return {"accuracy": acc / reps, "tokens": tok / reps}

    fit = play(profile, replays)
    state = rng.bit_generator.state
    spread = []
    for p in drawn:
        rng.bit_generator.state = state
        spread.append(play(p, 1))
    density = np.array([_density(r) for r in records])
    groups = [("all recorded episodes", np.ones(len(records), dtype=bool))]
    groups += [(label, (density >= lo) & (density < hi)) for lo, hi, label in DENSITY_BINS]
    rows = []
    for label, mask in groups:
        if mask.sum() < 2:
            continue
        row = {"group": label, "episodes": int(mask.sum()), "recorded": {}, "fitted": {}, "z": {}}
        for what in ("accuracy", "tokens"):
            sd = float(np.std([s[what][mask].mean() for s in spread], ddof=1)) if len(spread) > 1 else 0.0
            diff = _mean_se(fit[what][mask] - observed[what][mask])
            row["recorded"][what] = _mean_se(observed[what][mask])
            row["fitted"][what] = _with_fit_se(_mean_se(fit[what][mask]), sd)
            se = float(np.hypot(diff["se"] or 0.0, sd))
            row["z"][what] = diff["mean"] / se if se > 0 else None
        rows.append(row)
    return rows


def format_check(check: dict) -> str:
    """The predictive check as two tables."""
    from topo_env.engine.cli import format_table

    def cell(x: dict | None, digits: int) -> str:
        if not x:
            return "-"
        se = "" if x.get("se") is None else f" ({x['se']:.{digits}f})"
        return f"{x['mean']:.{digits}f}{se}"

    rows = [{"topology": r["topology"], "fitted accuracy": cell(r["fitted"]["accuracy"], 4),
             "fitted tokens": cell(r["fitted"]["tokens"], 0), "fitted reward": cell(r["fitted"]["reward"], 4),
             "recorded episodes": r["recorded"]["episodes"], "recorded accuracy": cell(r["recorded"].get("accuracy"), 4),
             "recorded tokens": cell(r["recorded"].get("tokens"), 0)} for r in check["topologies"]]
    lines = [f"predictive check: the fitted team on the traces' tasks, {check['rounds']} rounds "
             f"({check['episodes']} episodes per topology; SEs include the fit's uncertainty, {check['draws']} draws)",
             format_table(rows, ("topology", "fitted accuracy", "fitted tokens", "fitted reward", "recorded episodes",
                                 "recorded accuracy", "recorded tokens"))]
    if check["replay"]:
        rep = [{"recorded episodes replayed": r["group"], "n": r["episodes"],
                "recorded accuracy": cell(r["recorded"]["accuracy"], 4), "fitted accuracy": cell(r["fitted"]["accuracy"], 4),
                "z acc": "-" if r["z"]["accuracy"] is None else f"{r['z']['accuracy']:+.1f}",
                "recorded tokens": cell(r["recorded"]["tokens"], 0), "fitted tokens": cell(r["fitted"]["tokens"], 0),
                "z tok": "-" if r["z"]["tokens"] is None else f"{r['z']['tokens']:+.1f}"} for r in check["replay"]]
        lines += [f"the recorded episodes replayed by the fitted team ({check['replays']} times each, their own graphs "
                  "and tasks); z: (fitted - recorded) / SE",
                  format_table(rep, ("recorded episodes replayed", "n", "recorded accuracy", "fitted accuracy", "z acc",
                                     "recorded tokens", "fitted tokens", "z tok"))]
    lines += [f"check: {n}" for n in check["notes"]]
    return "\n".join(lines)
