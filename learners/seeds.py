"""Several seeds of one run: ``python train_qmix.py --seeds 0 1 2`` (:func:`run_seeds`) trains each
seed in its own child process (as many at once as ``--jobs``, default the CPU count over
``runtime.torch_threads``), then reports every figure as the mean over seeds with its standard error
(the SD over seeds / sqrt(seeds)).
Each seed is scored on its own held-out episodes (disjoint across seeds,
:func:`topo_env.engine.seeding.held_out_seed`), so that standard error holds the held-out
episodes' noise as well as training's.

Layout of ``--out DIR``: ``DIR/seed<s>/`` holds seed s's run (results.json, checkpoint, logs;
its output in ``DIR/seed<s>/train.log``), and ``DIR/seeds.json`` the summary
(:func:`summarize_seeds`). A seed killed by a signal (e.g. out of memory) takes no other seed down
and says so in its log; the finished seeds are still summarised, and rerunning the same command
trains only what is missing (:func:`plan_seeds`: finished seeds kept, checkpointed ones resumed)."""
from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import sys
from collections.abc import Sequence
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from tqdm import tqdm

from learners.config import ExperimentConfig
from learners.evaluation import read_checkpoint
from learners.child import child_status, killed_by, run_logged, start_child
from learners.training import RESUME_OVERRIDABLE, STOPPED, RunOptions, effective_config, search_references_once
from topo_env.engine.cli import RunError, format_table
from topo_env.engine.config_checks import ConfigError
from topo_env.engine.user_files import output_dir, read_json_file, write_text_atomically

FIGURES = ("reward", "accuracy", "tokens_per_task", "density")


def mean_and_se(values: Sequence[float]) -> dict[str, float]:
    """``{"mean", "se", "values"}`` over seeds (se 0 for one seed)."""
    v = np.asarray(values, dtype=np.float64)
    return {"mean": float(v.mean()), "se": float(v.std(ddof=1) / np.sqrt(len(v))) if len(v) > 1 else 0.0,
            "values": v.tolist()}


def summarize_seeds(results: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """Means over seeds of each seed's results.json: per policy its :data:`FIGURES`; QMIX minus
    each policy (each seed's paired difference); ``headroom_share`` and the training time where
    present."""
    seeds = sorted(results)
    policies = list(dict.fromkeys(k for s in seeds for k, v in results[s]["eval"].items() if isinstance(v, dict)))
    summary: dict[str, Any] = {"seeds": seeds, "policies": {}, "qmix_minus": {}}
    for name in policies:
        figures = [_figures(results[s]["eval"], name) for s in seeds]
        summary["policies"][name] = {f: mean_and_se([seed[f] for seed in figures]) for f in FIGURES if f in figures[0]}
    for name in dict.fromkeys(k for s in seeds for k in results[s]["qmix_minus"]):
        summary["qmix_minus"][name] = mean_and_se([_figures(results[s]["qmix_minus"], name, {"mean": 0.0})["mean"]
                                                   for s in seeds])
    shares = [results[s]["eval"].get("headroom_share") for s in seeds]
    if all(v is not None for v in shares):
        summary["headroom_share"] = mean_and_se(shares)
        summary["headroom"] = mean_and_se([results[s]["eval"]["headroom"] for s in seeds])
    summary["train_seconds"] = mean_and_se([results[s]["train"]["seconds"] for s in seeds])
    return summary


def _figures(section: dict[str, Any], name: str, same_network: dict | None = None) -> dict[str, Any]:
    """``section[name]``; a run whose validation kept its final network has no ``qmix_last``
    (it is ``qmix``): then qmix's own figures, or ``same_network`` for a difference with qmix."""
    if name in section:
        return section[name]
    if name == "qmix_last":
        return same_network if same_network is not None else section["qmix"]
    raise KeyError(f"policy {name!r} is missing from a seed's results")


def format_seeds(summary: dict[str, Any]) -> str:
    """The summary as a table: mean (SE over seeds) per policy; a partial summary (``missing``
    seeds) says so."""
    def cell(d: dict[str, float], scale: float = 1.0, digits: int = 4) -> str:
        return f"{d['mean'] * scale:.{digits}f} ({d['se'] * scale:.{digits}f})"

    rows = []
    for name, figures in summary["policies"].items():
        minus = summary["qmix_minus"].get(name)
        rows.append({"policy": name, "reward": cell(figures["reward"]),
                     "accuracy (pts)": cell(figures["accuracy"], 100, 2),
                     "tokens/task": cell(figures["tokens_per_task"], 1, 0),
                     "qmix - policy": cell(minus) if minus else ""})
    lines = [format_table(rows, ("policy", "reward", "accuracy (pts)", "tokens/task", "qmix - policy"))]
    if "headroom_share" in summary:
        lines.append(f"headroom share (qmix - best_fixed) / (adaptive - best_fixed): {cell(summary['headroom_share'], 1, 2)}")
    partial = f"partial summary: seeds {summary['missing']} did not finish; " if summary.get("missing") else ""
    lines.append(f"{partial}means over seeds {summary['seeds']}, (standard error over seeds: training's noise and the "
                 f"held-out episodes', each seed scored on its own); training took "
                 f"{cell(summary['train_seconds'], 1, 0)} s per seed")
    return "\n".join(lines)


KEEP, RESUME, TRAIN, RETRAIN = "keep", "resume", "train", "retrain"
"""What :func:`run_seeds` does with a seed (:func:`plan_seeds`): keep its finished run, resume it
from its checkpoint, train it, or train it afresh over an earlier run of another config."""

SCORING_KEYS = frozenset({"train.eval_episodes", "train.references"})
"""Keys a resumed run may change that still change a finished run's results.json: a finished seed
is kept only where they are the same too."""


class SeedPlan(NamedTuple):
    """A seed's part in :func:`run_seeds`: ``action`` (:data:`KEEP`, :data:`RESUME`, :data:`TRAIN`
    or :data:`RETRAIN`), the config its child runs, and for RESUME the checkpoint's episode."""
    action: str
    cfg: ExperimentConfig
    episode: int | None = None


def plan_seeds(cfg: ExperimentConfig, seeds: Sequence[int], out_dir: Path) -> dict[int, SeedPlan]:
    """What a run of ``cfg`` over ``seeds`` into ``out_dir`` does with each seed's folder: KEEP
    where its results.json holds a run of the same effective config (but for the keys that change
    no results: :data:`~learners.training.RESUME_OVERRIDABLE` less :data:`SCORING_KEYS`); else
    RESUME where its checkpoint.pt holds a run of the same experiment (its config but for
    RESUME_OVERRIDABLE, which take ``cfg``'s values, as ``--resume --set`` would); else TRAIN, or
    RETRAIN where either file is there of another experiment (the new run sets it aside)."""
    plans = {}
    for seed in seeds:
        run_dir = out_dir / f"seed{seed}"
        seeded = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, seed=int(seed)))
        with contextlib.redirect_stderr(io.StringIO()):  # its notes: the seed's log has them
            effective = effective_config(seeded, RunOptions())  # what a new run saves as its config
        expected = effective.to_dict()
        results = _saved(run_dir / "results.json")
        if results and same_experiment(as_current(results["config"]), expected, RESUME_OVERRIDABLE - SCORING_KEYS):
            plans[seed] = SeedPlan(KEEP, seeded)
            continue
        checkpoint = _saved(run_dir / "checkpoint.pt")  # read only where needed: it holds the replay too
        if checkpoint and same_experiment(as_current(checkpoint["config"]), expected, RESUME_OVERRIDABLE):
            plans[seed] = SeedPlan(RESUME, effective, int(checkpoint["episode"]))
        else:
            plans[seed] = SeedPlan(RETRAIN if results or checkpoint else TRAIN, seeded)
    return plans


def _saved(path: Path) -> dict | None:
    """A run's results.json or checkpoint.pt (a dict with its ``"config"``), or None where it is
    missing or unreadable (half written, damaged: nothing to reuse)."""
    if not path.is_file():
        return None
    try:
        saved = (read_json_file(path, "a seed's results", "") if path.suffix == ".json" else read_checkpoint(path))
    except ConfigError:
        return None
    return saved if "config" in saved else None


def as_current(saved: dict) -> dict:
    """A config dict that a run saved, as this version writes it: keys added since then hold their defaults
    (a key is added with the default that keeps the behaviour before it), moved keys are in their new place.
    One that no longer reads (a key this version does not know) is returned as it is: it matches no config."""
    try:
        with contextlib.redirect_stderr(io.StringIO()):  # the note on moved keys
            return ExperimentConfig.from_dict(saved).to_dict()
    except (ConfigError, TypeError, ValueError):
        return saved


def same_experiment(saved: dict, expected: dict, free: frozenset[str]) -> bool:
    """Whether two config dicts (``{section: {key: value}}``) are equal but for the dotted keys in
    ``free`` and what lies under them."""
    def kept(config: dict) -> dict:
        flat = _flat(json.loads(json.dumps(config)))  # as results.json holds it: tuples as lists
        return {k: v for k, v in flat.items() if not any(k == f or k.startswith(f + ".") for f in free)}
    return kept(saved) == kept(expected)


def _flat(tree: dict, prefix: str = "") -> dict:
    """``{"a": {"b": 1}}`` as ``{"a.b": 1}``."""
    flat = {}
    for key, value in tree.items():
        flat.update(_flat(value, f"{prefix}{key}.") if isinstance(value, dict) else {f"{prefix}{key}": value})
    return flat


def describe_plan(out_dir: Path, plans: dict[int, SeedPlan]) -> str:
    """One line: which seeds :func:`run_seeds` keeps, resumes and trains."""
    def group(action: str, words: str) -> list[str]:
        picked = [f"{s} (from its checkpoint at episode {p.episode} of {p.cfg.train.episodes})" if action == RESUME
                  else str(s) for s, p in plans.items() if p.action == action]
        return [words.format((", " if action == RESUME else " ").join(picked))] if picked else []

    parts = [*group(KEEP, "keeping {} (finished with this config)"), *group(RESUME, "resuming {}"),
             *group(TRAIN, "training {}"),
             *group(RETRAIN, "training {} afresh (the earlier run there is of another config: not reused)")]
    return f"seeds in {out_dir}: {'; '.join(parts)}"


def run_seeds(cfg: ExperimentConfig, seeds: Sequence[int], out_dir: Path, jobs: int | None = None,
              options: RunOptions = RunOptions()) -> dict[str, Any]:
    """Train and evaluate ``cfg`` once per seed in ``seeds`` (``train.seed`` replaced) into
    ``out_dir/seed<s>`` (:func:`learners.training.train_and_evaluate`, its output in
    ``out_dir/seed<s>/train.log``), each in its own child process, ``jobs`` at once (default: the
    CPU count over ``runtime.torch_threads``; 0: one after another in this process, no child: tests and
    debugging), then summarise
    into ``out_dir/seeds.json`` and return the summary. What an earlier run left is reused
    (:func:`plan_seeds`, said in one stderr line): finished seeds are kept, checkpointed ones
    resumed. Where some seeds do not finish, seeds.json (its ``missing``: those seeds) and the
    printed table (:func:`format_seeds`) cover the finished ones, then a one-line RunError names
    each missing seed, why, and its log."""
    out_dir = output_dir(out_dir)
    plans = plan_seeds(cfg, seeds, out_dir)
    print(describe_plan(out_dir, plans), file=sys.stderr)
    todo = {s: p for s, p in plans.items() if p.action != KEEP}
    if len(todo) > 1 and jobs != 0:  # seeds at once: search their references once, not in each
        search_references_once(cfg)
    codes = {s: 0 for s in seeds if s not in todo} | _train(todo, out_dir, jobs, options, len(seeds))
    finished, missing = [s for s in seeds if codes[s] == 0], [s for s in seeds if codes[s] != 0]
    summary_file = out_dir / "seeds.json"
    summary_file.unlink(missing_ok=True)  # an earlier summary: not of these runs
    if finished:
        summary = {**summarize_seeds({s: json.loads((out_dir / f"seed{s}" / "results.json").read_text())
                                      for s in finished}), "missing": missing}
        write_text_atomically(summary_file, json.dumps(summary, indent=2))
    if not missing:
        return summary
    if finished:
        print(format_seeds(summary))
    why = "; ".join(f"seed {s} {_why(codes[s])}" + (f" (log: {out_dir / f'seed{s}' / 'train.log'})"
                                                   if codes[s] is not None else "") for s in missing)
    done = f"{summary_file} summarises seeds {finished} only" if finished else "no seed finished (no summary)"
    raise RunError(f"{len(missing)} of {len(seeds)} seeds did not finish: {why}; {done}; rerunning the same command "
                   f"trains only seeds {missing}, each from its last checkpoint where it saved one")


def _train(todo: dict[int, SeedPlan], out_dir: Path, jobs: int | None, options: RunOptions,
           total: int) -> dict[int, int | None]:
    """Each seed of ``todo`` in its own child process (:func:`learners.child.start_child`), at most
    ``jobs`` at once (0: in this process, one after another, :func:`learners.child.run_logged`);
    returns their statuses (:func:`learners.child.child_status`; None: not started, Ctrl-C came
    first). A progress bar over the ``total`` seeds."""
    child_options = dataclasses.replace(options, progress=False, continue_with=options.continue_with or
                                        "the same --seeds command (it trains only the seeds that did not finish)")
    if jobs == 0:
        codes = {}
        for seed, plan in todo.items():
            run_dir = out_dir / f"seed{seed}"
            run_dir.mkdir(parents=True, exist_ok=True)
            codes[seed] = run_logged(plan.cfg, run_dir, child_options, run_dir / "train.log", plan.action == RESUME)
        return codes
    threads = max(plan.cfg.runtime.torch_threads for plan in todo.values()) if todo else 1
    jobs = max(1, min(jobs or (os.cpu_count() or 1) // threads, len(todo) or 1))  # a core per torch thread
    waiting, running, codes = list(todo), {}, dict.fromkeys(todo)
    with tqdm(initial=total - len(todo), total=total, desc=f"seeds ({jobs} at once)", disable=not options.progress,
              file=sys.stderr) as bar:
        while waiting or running:
            while waiting and len(running) < jobs:
                seed = waiting.pop(0)
                run_dir = out_dir / f"seed{seed}"
                run_dir.mkdir(parents=True, exist_ok=True)
                running[seed] = start_child(todo[seed].cfg, run_dir, child_options, run_dir / "train.log",
                                            resume=todo[seed].action == RESUME)
            try:
                wait([p.sentinel for p in running.values()])
            except KeyboardInterrupt:  # the children got it too: they checkpoint and stop; start no more
                waiting.clear()
            for seed in [s for s, p in running.items() if not p.is_alive()]:
                run_dir = out_dir / f"seed{seed}"
                then = ("rerun the same command to continue it from its last checkpoint"
                        if (run_dir / "checkpoint.pt").is_file() else "rerun the same command to train it again")
                codes[seed] = child_status(running.pop(seed), run_dir / "train.log", then)
                bar.update()
    return codes


def _why(code: int | None) -> str:
    """A seed's status in words."""
    if code is None:
        return "not started (Ctrl-C)"
    if code < 0:
        return killed_by(code)
    if code == STOPPED:
        return f"stopped ({STOPPED}: Ctrl-C or a budget; checkpointed)"
    return "failed with an error" if code == 2 else f"crashed (exit {code})"


__all__ = ["FIGURES", "format_seeds", "mean_and_se", "plan_seeds", "run_seeds", "same_experiment", "summarize_seeds"]
