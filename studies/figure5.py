"""The paper's Figure 5 on the simulated team: QMIX against the best fixed sequence and the adaptive
reference as the team size, the rounds, the number of training tasks and the accuracy weight vary.

    python -m studies.figure5 --out runs/figure5                          # every panel, seeds 0 1 2: many hours
    python -m studies.figure5 --panels agents --seeds 0 --dry-run --out runs/figure5   # the points and folders
    python -m studies.figure5 --panels tasks --episodes 4096 --eval-episodes 2000 --out runs/figure5-cheap
    python -m studies.figure5 --no-train --out runs/figure5               # the report of what has finished

Panels (``--panels``; ``--agents``, ``--rounds``, ``--tasks``, ``--w-acc`` replace their values):

    agents  env.n_agents     1, 2, 3, 4, 6, 8, 10    (env.rounds: the base config's)
    rounds  env.rounds       1, 2, 3, 4, 5           (env.n_agents: the base config's)
    tasks   env.train_tasks  100, 1000, 10000, all   (all: a fresh task at every reset)
    w_acc   env.w_acc        0.5, 1.0, 1.25, 2.0

Contract. Every point is the base config (``--config``, default configs/default.yaml, with
``env.profile=--profile``, the ``--set`` keys, ``--episodes`` as train.episodes and
``--eval-episodes`` as train.eval_episodes) with the panel's one key changed, trained and evaluated
once per seed by :func:`learners.seeds.run_seeds` (a child process per seed, ``--jobs`` at once) into
``OUT/points/<point>/seed<s>/``; a point is named by its four coordinates, so one that several
panels share (the base config is on every panel) is trained once. The sweep resumes: a seed whose
results.json is of the same config is kept, one with a checkpoint resumed (run_seeds' rules), so
the same command continues across sessions; ``--no-train`` trains nothing and reports what has
finished. With ``--jobs`` 2 or more a point's references are searched (or found cached) here before
its seeds start, so that they do not each search them. Each seed is scored on its own held-out
episodes; figures are means over the seeds with the standard error over seeds
(:func:`learners.seeds.summarize_seeds`).

A team of one has no topology (the env needs N >= 2: every communication action reaches or names a
peer), so the agents panel's N = 1 is not trained: it is one agent alone, agent 0 of a two-agent
team answering each held-out task once (one call, nobody else called, its answer the team's:
``decision: agent:0``) on the seed's own held-out episodes, played by the batch simulator in
seconds; the three policies' figures there are that one agent's (:func:`one_agent_alone`).

What the tasks panel varies: ``env.train_tasks`` restricts the tasks of training's episodes, its
teacher's demonstrations and validation to the train split's first K. The default recipe's
simulator-scale aids still know the simulated task distribution beyond them: the teacher's policy
is searched on the simulator's own episodes, and the noise samples draw a fresh task latent before
round 1 (docs/training.md). So this panel measures how many tasks the recipe's learner needs to see
beside those aids, not a learner limited to K tasks in everything.

Writes ``OUT/figure5.json`` (per panel and value: each policy's reward, accuracy and tokens per task,
the headroom share, QMIX minus best_fixed, training seconds; the paper's trends beside ours),
``OUT/figure5.png`` (:func:`topo_env.frontends.plots.plot_sweeps`: accuracy and tokens against each
swept value) and ``OUT/figure5.md`` (the tables in markdown, for docs/results.md); prints one table
per panel. A point that did not finish is reported as missing, then one line names it (status 2).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from learners.config import DEFAULT_CONFIG, ExperimentConfig, load_experiment
from learners.seeds import KEEP, mean_and_se, plan_seeds, run_seeds, summarize_seeds
from learners.training import RunOptions, search_references_once
from learners.training_run import GracefulStop
from topo_env.engine.cli import INTERRUPTED_STATUS, OneLineParser, RunError, format_table, positive_int, run_main
from topo_env.engine.seeding import held_out_seed
from topo_env.engine.user_files import output_dir, write_text_atomically
from topo_env.frontends.env_config import EnvConfig
from topo_env.frontends.plots import plot_sweeps, save_figure
from topo_env.frontends.vector_env import SimVectorEnv
from topo_env.sim.batch import BatchRoundSpec

PROG = "python -m studies.figure5"
POLICIES = ("qmix", "best_fixed", "adaptive")
"""The policies every panel compares (the names of results.json's ``eval`` entries)."""
FIGURES = ("reward", "accuracy", "tokens_per_task")
ALL_TASKS = "all"
"""The tasks panel's value for no restriction (``env.train_tasks: null``)."""


class Panel(NamedTuple):
    """One swept setting: the config key it changes, its default values, its axis label and what the
    paper reports for it."""
    key: str
    values: tuple
    label: str
    paper: str


PANELS: dict[str, Panel] = {
    "agents": Panel("env.n_agents", (1, 2, 3, 4, 6, 8, 10), "team size N",
                    "Fig. 5a (Beyond-AIME): accuracy 18% with 1 agent, 38% with 4, 41% with 10 (steep, then "
                    "flat); token usage scales sublinearly with N"),
    "rounds": Panel("env.rounds", (1, 2, 3, 4, 5), "rounds T",
                    "Fig. 5d varies the rounds; its figures were not found in the text available to us"),
    "tasks": Panel("env.train_tasks", (100, 1000, 10000, None), "training tasks K",
                   "a Figure 5 panel; its figures were not found in the text available to us"),
    "w_acc": Panel("env.w_acc", (0.5, 1.0, 1.25, 2.0), "accuracy weight w_acc",
                   "a Figure 5 panel; its figures were not found in the text available to us"),
}


@dataclasses.dataclass(frozen=True)
class Point:
    """One trained setting: its config, its folder name (from its coordinates) and whether it is the
    untrained one-agent point."""
    name: str
    cfg: ExperimentConfig
    alone: bool = False


# -- the sweep ------------------------------------------------------------------------------------


def base_overrides(profile: str | None, sets: Sequence[str], episodes: int | None,
                   eval_episodes: int | None) -> list[str]:
    """The ``--set`` strings every point shares, in the order they apply."""
    return ([f"env.profile={profile}"] if profile else []) + list(sets) + \
        ([f"train.episodes={episodes}"] if episodes else []) + \
        ([f"train.eval_episodes={eval_episodes}"] if eval_episodes else [])


def point_name(env: EnvConfig, n_agents: int | None = None) -> str:
    """A point's folder name: its four coordinates, e.g. ``n3-t2-kall-w1.25`` (``n_agents``: in
    place of the env's)."""
    tasks = ALL_TASKS if env.train_tasks is None else env.train_tasks
    return f"n{env.n_agents if n_agents is None else n_agents}-t{env.rounds}-k{tasks}-w{env.w_acc:g}"


def sweep_points(config: str | Path, shared: Sequence[str],
                 values: dict[str, Sequence]) -> dict[str, list[tuple[Any, Point]]]:
    """Per panel of ``values`` (panel name -> its values) the ``(value, Point)`` pairs: the config
    ``config`` with ``shared`` and the panel's key set to the value. N = 1 is the one-agent point
    (the base config's, marked ``alone``)."""
    base = load_experiment(config, shared)
    panels = {}
    for panel, chosen in values.items():
        key, pairs = PANELS[panel].key, []
        for value in chosen:
            if key == "env.n_agents" and value == 1:
                pairs.append((value, Point(point_name(base.env, 1), base, alone=True)))
                continue
            cfg = load_experiment(config, [*shared, f"{key}={'null' if value is None else value}"])
            pairs.append((value, Point(point_name(cfg.env), cfg)))
        panels[panel] = pairs
    return panels


def one_agent_alone(env: EnvConfig, seed: int, episodes: int) -> dict[str, float]:
    """Agent 0 of ``env``'s team alone on held-out episodes ``held_out_seed(seed) + k``, k <
    ``episodes``: in a two-agent team of the same profile, one round in which only agent 0 is called
    (solo) and its answer is the team's (``decision: agent:0``, no decision call). Its mean reward
    (``env``'s weights), accuracy and tokens per task."""
    alone = dataclasses.replace(env, n_agents=2, rounds=1, roles=None, personas=None, adversarial_agents=(),
                                adversary_position="fixed", n_adversaries=None, decision="agent:0", split="eval")
    venv = SimVectorEnv(alone)
    first = held_out_seed(seed)
    drawn, _ = venv.sample_episodes(range(first, first + episodes), "eval")
    spec = BatchRoundSpec(np.zeros((episodes, 2, 2), np.int8), np.tile([True, False], (episodes, 1)),
                          np.zeros((episodes, 2), bool))
    result = venv.sim.run_specs([spec], drawn.tasks, drawn.noise, drawn.adversaries)
    return {"reward": float(result.reward.mean()), "accuracy": float(result.accuracy.mean()),
            "tokens_per_task": float(result.tokens.mean())}


def alone_summary(point: Point, seeds: Sequence[int]) -> dict[str, Any]:
    """The one-agent point as :func:`learners.seeds.summarize_seeds` would give it: every policy of
    :data:`POLICIES` is the one agent alone."""
    per_seed = [one_agent_alone(point.cfg.env, s, point.cfg.train.eval_episodes) for s in seeds]
    figures = {f: mean_and_se([row[f] for row in per_seed]) for f in FIGURES}
    return {"seeds": list(seeds), "policies": dict.fromkeys(POLICIES, figures), "alone": True, "missing": []}


def finished_summary(point: Point, seeds: Sequence[int], folder: Path) -> dict[str, Any] | None:
    """The summary of the seeds of ``point`` that have finished in ``folder`` (None: none has),
    with ``missing`` the others; trains nothing."""
    plans = plan_seeds(point.cfg, seeds, folder)
    done = [s for s in seeds if plans[s].action == KEEP]
    if not done:
        return None
    results = {s: json.loads((folder / f"seed{s}" / "results.json").read_text()) for s in done}
    return {**summarize_seeds(results), "missing": [s for s in seeds if s not in done]}


def run_point(point: Point, seeds: Sequence[int], folder: Path, jobs: int | None, options: RunOptions,
              train: bool) -> dict[str, Any] | None:
    """``point``'s summary over ``seeds``: the one agent alone, or (``train``) trained by
    :func:`learners.seeds.run_seeds` into ``folder`` (what finished where some seeds did not), or
    without ``train`` what has finished there. None where no seed has."""
    if point.alone:
        return alone_summary(point, seeds)
    if not train:
        return finished_summary(point, seeds, folder)
    plans = plan_seeds(point.cfg, seeds, folder).values() if jobs is None or jobs > 1 else ()
    if any(plan.action != KEEP for plan in plans):
        search_references_once(point.cfg)
    try:
        return run_seeds(point.cfg, seeds, folder, jobs, options)
    except RunError as err:  # some seeds did not finish: their log says why; the others still count
        print(f"{PROG}: point {point.name}: {err}", file=sys.stderr)
        return finished_summary(point, seeds, folder)


def sweep(panels: dict[str, list[tuple[Any, Point]]], seeds: Sequence[int], out: Path, jobs: int | None,
          options: RunOptions, train: bool = True) -> tuple[dict[str, dict | None], bool]:
    """Every distinct point of ``panels`` once, in panel order (:func:`run_point`, into
    ``out/points/<name>``). Returns the summaries by point name and whether a Ctrl-C stopped the
    sweep (after the point it came in; the children checkpoint and stop)."""
    summaries: dict[str, dict | None] = {}
    stop = GracefulStop()  # the first Ctrl-C: the children stop and checkpoint, and no point starts after
    try:
        for pairs in panels.values():
            for _, point in pairs:
                if point.name not in summaries and not stop.requested:
                    summaries[point.name] = run_point(point, seeds, out / "points" / point.name, jobs, options, train)
    finally:
        stop.restore()
    return summaries, stop.requested


# -- the report -----------------------------------------------------------------------------------


def point_figures(summary: dict[str, Any] | None) -> dict[str, Any] | None:
    """What the report keeps of a point's summary: each policy's figures, the headroom share,
    QMIX minus best_fixed, the training seconds, the seeds and the missing ones."""
    if summary is None:
        return None
    kept = {"policies": {p: summary["policies"][p] for p in POLICIES if p in summary["policies"]},
            "seeds": summary["seeds"], "missing": summary.get("missing", [])}
    for key, value in (("headroom_share", summary.get("headroom_share")),
                       ("qmix_minus_best_fixed", summary.get("qmix_minus", {}).get("best_fixed")),
                       ("train_seconds", summary.get("train_seconds"))):
        if value is not None:
            kept[key] = value
    if summary.get("alone"):
        kept["alone"] = True
    return kept


def report(panels: dict[str, list[tuple[Any, Point]]], summaries: dict[str, dict | None], seeds: Sequence[int],
           shared: Sequence[str]) -> dict[str, Any]:
    """figure5.json: per panel its key, label, the paper's trend, ours (:func:`our_trend`) and per
    value its point's folder and figures (only ``missing`` where no seed finished); ``missing_points``:
    the points with seeds that did not finish."""
    out = {"seeds": list(seeds), "shared_overrides": list(shared), "panels": {}}
    for panel, pairs in panels.items():
        rows = [{"value": value, "point": f"points/{point.name}", **(point_figures(summaries.get(point.name)) or
                                                                      {"missing": list(seeds)})}
                for value, point in pairs]
        ours, agrees = our_trend(panel, rows)
        out["panels"][panel] = {"key": PANELS[panel].key, "label": PANELS[panel].label, "paper": PANELS[panel].paper,
                                "ours": ours, "agrees_with_paper": agrees, "points": rows}
    out["missing_points"] = sorted({f"{row['point']} (seeds {', '.join(map(str, row['missing']))})"
                                    for p in out["panels"].values() for row in p["points"] if row["missing"]})
    return out


def _mean(row: dict[str, Any], policy: str, figure: str) -> float | None:
    """A row's mean of one figure of one policy, None where it has none."""
    return row.get("policies", {}).get(policy, {}).get(figure, {}).get("mean")


def our_trend(panel: str, rows: list[dict[str, Any]]) -> tuple[str, bool | None]:
    """Our trend of a panel in words (QMIX's accuracy and tokens from the first to the last value
    with figures, and QMIX - best_fixed at both ends), and for the agents panel whether it agrees
    with the paper's: accuracy rises more from 1 to 4 agents than from 4 to 10 (where it falls by
    0.5 points at most) and tokens grow less than tenfold from 1 to 10 agents (None where a point is
    missing)."""
    have = [r for r in rows if _mean(r, "qmix", "accuracy") is not None]
    if not have:
        return "no point has finished", None
    first, last = have[0], have[-1]
    accuracy, tokens = ([_mean(r, "qmix", figure) for r in (first, last)] for figure in ("accuracy", "tokens_per_task"))
    words = (f"QMIX accuracy {100 * accuracy[0]:.1f} -> {100 * accuracy[1]:.1f} pts and tokens/task "
             f"{tokens[0]:,.0f} -> {tokens[1]:,.0f} from {_label(first['value'])} to {_label(last['value'])}")
    gaps = [r["qmix_minus_best_fixed"]["mean"] for r in (first, last) if "qmix_minus_best_fixed" in r]
    if len(gaps) == 2:
        words += f"; QMIX - best_fixed {gaps[0]:+.4f} -> {gaps[1]:+.4f}"
    if panel != "agents":
        return words, None
    by_n = {r["value"]: r for r in have}
    agrees = None
    if {1, 4, 10} <= set(by_n):
        acc = {n: _mean(by_n[n], "qmix", "accuracy") for n in (1, 4, 10)}
        tokens = _mean(by_n[10], "qmix", "tokens_per_task") / _mean(by_n[1], "qmix", "tokens_per_task")
        steep_then_flat = acc[4] - acc[1] > acc[10] - acc[4] >= -0.005
        agrees = bool(steep_then_flat and tokens < 10)
        words += (f"; accuracy +{100 * (acc[4] - acc[1]):.1f} pts from 1 to 4 agents, {100 * (acc[10] - acc[4]):+.1f} "
                  f"from 4 to 10; tokens x{tokens:.1f} for 10 times the agents "
                  f"({'sublinear' if tokens < 10 else 'not sublinear'})")
    return words, agrees


def _label(value: Any) -> str:
    """A swept value as tables and axes show it."""
    if value is None:
        return ALL_TASKS
    return f"{value:,}" if isinstance(value, int) and value >= 1000 else f"{value:g}"


def _cell(row: dict[str, Any], policy: str, figure: str) -> str:
    """``mean (SE)`` of one figure, accuracy in points; empty where the row has none."""
    d = row.get("policies", {}).get(policy, {}).get(figure)
    if d is None:
        return ""
    if figure == "accuracy":
        return f"{100 * d['mean']:.1f} ({100 * d['se']:.1f})"
    if figure == "tokens_per_task":
        return f"{d['mean']:,.0f} ({d['se']:,.0f})"
    return f"{d['mean']:.4f} ({d['se']:.4f})"


COLUMNS = ("value", *(f"{p} {f}" for f in ("reward", "acc (pts)", "tokens/task") for p in POLICIES),
           "qmix - best_fixed", "headroom share", "seeds")


def table_rows(panel: dict[str, Any]) -> list[dict[str, str]]:
    """One row per value of a panel of figure5.json, :data:`COLUMNS` as keys."""
    rows = []
    for r in panel["points"]:
        row = {"value": _label(r["value"]) + (" (one agent alone)" if r.get("alone") else "")}
        for figure, name in zip(FIGURES, ("reward", "acc (pts)", "tokens/task")):
            row.update({f"{p} {name}": _cell(r, p, figure) for p in POLICIES})
        gap, share = r.get("qmix_minus_best_fixed"), r.get("headroom_share")
        row["qmix - best_fixed"] = f"{gap['mean']:+.4f} ({gap['se']:.4f})" if gap else ""
        row["headroom share"] = f"{share['mean']:.2f} ({share['se']:.2f})" if share else ""
        done = [s for s in r.get("seeds", []) if s not in r.get("missing", [])] if "policies" in r else []
        row["seeds"] = ", ".join(map(str, done)) or "none finished"
        rows.append(row)
    return rows


def format_report(result: dict[str, Any]) -> str:
    """The plain-text tables, one per panel, with our trend and the paper's under each."""
    blocks = []
    for name, panel in result["panels"].items():
        blocks.append(f"{name}: {panel['label']} ({panel['key']}); mean (SE over seeds {result['seeds']})\n"
                      + format_table(table_rows(panel), COLUMNS)
                      + f"\nours: {panel['ours']}\npaper: {panel['paper']}")
    return "\n\n".join(blocks)


def markdown(result: dict[str, Any]) -> str:
    """figure5.md: a markdown table per panel and the trends table (the paper's beside ours)."""
    def table(rows: list[dict[str, str]], columns: Sequence[str]) -> list[str]:
        return ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns),
                *("| " + " | ".join(row.get(c, "") for c in columns) + " |" for row in rows)]

    lines = []
    for name, panel in result["panels"].items():
        lines += [f"**{name}**: {panel['label']} (`{panel['key']}`), mean (SE over seeds "
                  f"{', '.join(map(str, result['seeds']))})", "", *table(table_rows(panel), COLUMNS), ""]
    verdict = {True: "agrees", False: "**differs**", None: "cannot tell"}
    trends = [{"panel": name, "the paper reports": p["paper"], "ours": p["ours"],
               "agrees?": verdict[p["agrees_with_paper"]] if name == "agents" else "no figure to compare"}
              for name, p in result["panels"].items()]
    return "\n".join(lines + table(trends, ("panel", "the paper reports", "ours", "agrees?"))) + "\n"


SERIES = (("qmix", "QMIX", False), ("best_fixed", "best fixed sequence", False),
          ("adaptive", "adaptive reference", False), ("qmix", "one agent alone", True))
"""The picture's series: (policy, label, whether it draws the one-agent point or the trained ones)."""


def _pair(row: dict[str, Any], policy: str, figure: str) -> list[float] | None:
    """``[mean, se]`` of one figure of a row's policy, None where it has none."""
    d = row.get("policies", {}).get(policy, {}).get(figure)
    return None if d is None else [d["mean"], d["se"]]


def picture(result: dict[str, Any]) -> Any:
    """figure5.png's figure: per panel, accuracy and tokens per task against the swept value."""
    panels = {}
    for name, panel in result["panels"].items():
        values = [r["value"] for r in panel["points"]]
        numbers = [v for v in values if v is not None]
        top = max(numbers) if numbers else 1
        panels[f"{name}: {panel['label']}"] = {
            "x": [10 * top if v is None else v for v in values], "ticks": [_label(v) for v in values],
            "log_x": name == "tasks", "xlabel": PANELS[name].label,
            "series": {label: {f: [_pair(r, p, f) if r.get("alone", False) == alone else None for r in panel["points"]]
                               for f in ("accuracy", "tokens_per_task")}
                       for p, label, alone in SERIES if alone is False or any(r.get("alone") for r in panel["points"])}}
    return plot_sweeps(panels, title=f"Figure 5 on the simulated team: mean (SE) over seeds {result['seeds']}")


def write_outputs(result: dict[str, Any], out: Path) -> list[Path]:
    """figure5.json, figure5.md and figure5.png in ``out``; returns their paths."""
    out = output_dir(out)
    write_text_atomically(out / "figure5.json", json.dumps(result, indent=2))
    write_text_atomically(out / "figure5.md", markdown(result))
    return [out / "figure5.json", out / "figure5.md", save_figure(picture(result), out / "figure5.png")]


# -- the command ----------------------------------------------------------------------------------


def task_count(text: str) -> int | None:
    """argparse type of ``--tasks``: a positive integer or ``all`` (None)."""
    return None if text == ALL_TASKS else positive_int(text)


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, metavar="DIR", help="the sweep's folder (points/, figure5.*)")
    p.add_argument("--panels", nargs="+", choices=list(PANELS), default=list(PANELS), help="default: all four")
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2], help="default 0 1 2")
    p.add_argument("--config", default=str(DEFAULT_CONFIG), help="the base config (default configs/default.yaml)")
    p.add_argument("--profile", help="env.profile of every point (default: the config's)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a key of every point")
    p.add_argument("--episodes", type=positive_int, help="train.episodes of every point (a cheap sweep)")
    p.add_argument("--eval-episodes", type=positive_int, help="train.eval_episodes of every point")
    for panel in PANELS:
        p.add_argument(f"--{panel.replace('_', '-')}", nargs="+", dest=panel, metavar="V",
                       type=task_count if panel == "tasks" else float if panel == "w_acc" else positive_int,
                       help=f"the {panel} panel's values (default {' '.join(map(_label, PANELS[panel].values))})")
    p.add_argument("--jobs", type=int, default=1, help="seeds trained at once (default 1: memory; 0: in this process)")
    p.add_argument("--dry-run", action="store_true", help="list the points, their folders and what each would do")
    p.add_argument("--no-train", action="store_true", help="train nothing: report the points that have finished")
    p.add_argument("--markdown", action="store_true", help="print figure5.md instead of the plain tables")
    p.add_argument("--no-pictures", action="store_true", help="no per-run pictures (figure5.png is still drawn)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    return p


def dry_run(panels: dict[str, list[tuple[Any, Point]]], seeds: Sequence[int], out: Path) -> str:
    """The points of every panel, their folders and what the sweep would do with each seed."""
    lines, seen, runs, points_left = [], set(), [], 0
    for panel, pairs in panels.items():
        lines.append(f"{panel} ({PANELS[panel].key}):")
        for value, point in pairs:
            folder = out / "points" / point.name
            if point.alone:
                folder, what = "(no folder)", "one agent alone, by the batch simulator in seconds (no training)"
            elif point.name in seen:
                what = "shared with a panel above"
            else:
                plans = plan_seeds(point.cfg, seeds, folder)
                what = "; ".join(f"seed {s}: {plan.action}" for s, plan in plans.items())
                runs += [plan.action for plan in plans.values()]
                points_left += any(plan.action != KEEP for plan in plans.values())
            seen.add(point.name)
            lines.append(f"  {_label(value):>6}  {folder}  {what}")
    todo = sum(action != KEEP for action in runs)
    lines.append(f"{len(runs) // max(len(seeds), 1)} trained points, {points_left} with seeds left: {todo} of their "
                 f"{len(runs)} seed runs still to run (at the default recipe about 2 minutes each for N = 3, T = 2 on "
                 f"2 cores, more for larger teams)")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.jobs < 0:
        parser.error(f"--jobs {args.jobs}: must be 0 (in this process) or more")
    shared = base_overrides(args.profile, args.set, args.episodes, args.eval_episodes)
    values = {panel: getattr(args, panel) or PANELS[panel].values for panel in args.panels}
    panels = sweep_points(args.config, shared, values)
    out = Path(args.out)
    if args.dry_run:
        print(dry_run(panels, args.seeds, out))
        return 0
    command = " ".join([PROG, *(argv if argv is not None else sys.argv[1:])])
    options = RunOptions(progress=not args.no_progress, pictures=not args.no_pictures, source=PROG, command=command,
                         continue_with=f"the same command ({command})")
    summaries, stopped = sweep(panels, args.seeds, out, args.jobs, options, train=not args.no_train)
    result = report(panels, summaries, args.seeds, shared)
    written = write_outputs(result, out)
    print(markdown(result) if args.markdown else format_report(result))
    print("Wrote: " + ", ".join(map(str, written)))
    missing = result["missing_points"]
    if stopped:
        print(f"{PROG}: stopped (Ctrl-C); the same command continues the sweep", file=sys.stderr)
        return INTERRUPTED_STATUS
    if missing and not args.no_train:
        raise RunError(f"{len(missing)} point(s) did not finish every seed: {'; '.join(missing)} (each seed's "
                       "train.log says why); rerunning the same command trains only what is missing")
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main, PROG))
