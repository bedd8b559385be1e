"""From a real team to a learned controller on a budget of real LLM calls: the sim-to-real route.

    python train_qmix.py --config C.yaml --sim2real --real-calls 10000 --out DIR

``C.yaml``'s env is the real team: an LLM backend, or a simulated team standing in for one
(``env.profile: real.yaml``), whose parameters are never read for training: only its traces and
rewards, as with an LLM team. The route:

1. **record**: episodes of uniform random joint actions on the real team's train tasks
   (:func:`topo_env.fitting.explore.record_exploration`), as many as the budget allows (an episode
   makes at most ``2 N T + 1`` calls), into ``DIR/traces.jsonl``;
2. **fit** a simulated team to them (:func:`topo_env.fitting.fit.fit_traces`, from the domain's built-in
   profile), written to ``DIR/fitted.yaml``, its report and predictive check to
   ``DIR/fit_report.json``;
3. **train** at simulator scale on the fitted team (:func:`learners.training.train_and_evaluate`):
   ``configs/default.yaml``'s sections (teacher, batches, noise samples) with the real team's layout (agents, rounds, roles, reward,
   encoder), into ``DIR/sim_run`` (``--sim-set`` overrides them, ``--episodes`` its TD episodes);
4. **fine-tune** (``--finetune-calls C``): the one-episode loop on the real team from the sim run's
   networks within C more real calls, into ``DIR/finetune``;
5. **evaluate** the greedy policy on the real team's held-out tasks against every fixed topology
   (a simulated real team: also its headroom references, read for this score only).

``DIR/results.json`` holds ``sim2real`` (``real_calls``: every real call spent on training, at most
the budget; ``record``, ``fitted_profile``, ``fit``, ``sim_run``, ``finetune``, and
``predicted_vs_measured``: what the fitted team predicts for each fixed topology, from
:data:`PREDICTION_EPISODES` simulated held-out episodes, against what the real team scored) and
``eval`` / ``qmix_minus`` on the real team as a training run's results.json does.

A stopped run continues: Ctrl-C in any stage ends it with one line (the stage, what is kept, the
command that continues) and status 130. After that, or a kill, rerunning the same command keeps
every finished stage whose inputs are unchanged, continues the stopped one (a recording after its
last complete episode, a training from its checkpoint: the fine-tune's is saved after every
episode) and ends with the results of an uninterrupted run: no more than the episodes in flight
when it stopped spend their real calls twice. ``DIR/stages.json`` records the stages
(:class:`Stages`); what a rerun makes anew, results.json included, is first moved into
``DIR/earlier/<time>/``.

    python -m studies.sim2real DIR      # the closing tables of a finished run again (from DIR/results.json)
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from learners.config import DEFAULT_CONFIG, ExperimentConfig, load_experiment, with_overrides
from learners.runner import space_dims
from learners.training import STOPPED, RunOptions, resumed_config, train_and_evaluate
from learners.evaluation import (OBSERVATION_LAYOUT, QMIXPolicy, agent_from_checkpoint,
                                 held_out_comparison, layout_difference, load_checkpoint, score_on_simulator)
from topo_env.engine.decision import parse_decision
from topo_env.engine.cli import OneLineParser, closing_note, format_table, points, run_main, standard_error_note
from topo_env.engine.user_files import output_dir, read_json_file, set_aside, write_text_atomically
from topo_env.references.baselines import BASELINES
from topo_env.engine.seeding import held_out_seed
from topo_env.frontends.env_config import EnvConfig
from topo_env.engine.config_checks import ConfigError
from topo_env.frontends.inflight import sibling_envs
from topo_env.frontends.parallel_env import TopologyParallelEnv
from topo_env.fitting.explore import record_exploration
from topo_env.fitting.fit import DEFAULT_BASE, fit_traces, write_profile

TEAM_KEYS = ("n_agents", "rounds", "roles", "personas", "encoder", "embed_dim", "w_acc", "w_tok", "max_tokens",
             "reward_mode", "target_rule", "adversarial_agents", "adversary_position", "n_adversaries",
             "disabled_actions")
"""The real team's env keys the simulated training copies: the episode, the reward and the observation layout."""
PROG = "python -m studies.sim2real"
PREDICTION_EPISODES = 20_000
"""Simulated held-out episodes per fixed topology behind the fitted team's predictions (their SE is
well under a point)."""
RECORD_CHUNK = 64
"""Exploration episodes recorded per call of record_exploration, the budget checked between calls."""
# The recording's task pool, per episode the budget affords: the fitted team's ability is pinned only as
# well as the average of the recorded tasks' hidden latents is (each task draws its own), so the more
# distinct tasks the better. Measured (experiments/held_back.py, held-back team 11, about 8,000 calls):
# a pool of a third of the episodes (257 tasks, latent mean -0.09) predicted every fixed topology 2-3
# points too low, a pool of four times the episodes (about 690 distinct tasks) within 0.6 points.
DISTINCT_TASKS = 4
STAGES = {"record": "recording the real team", "fit": "fitting a simulated team to its traces",
          "train": "training on the fitted team", "finetune": "fine-tuning on the real team",
          "evaluate": "evaluating on the real team's held-out tasks"}
"""The route's stages, in order (module docstring)."""
PRODUCTS = {"record": ("traces.jsonl",), "fit": ("fitted.yaml", "fit_report.json"), "train": ("sim_run",),
            "finetune": ("finetune",), "evaluate": ("results.json",)}
"""What each stage writes into the run's folder."""
SPEND = ("episodes", "calls", "tokens")


class Stopped(Exception):
    """A training stage stopped early (Ctrl-C); the training printed where."""


def max_episode_calls(n_agents: int, rounds: int, decision: str = "llm") -> int:
    """The most LLM calls one episode can make: a draft and a revision per agent and round, and the
    decision node's (none where the team decides by a vote or one agent's answer, ``env.decision``)."""
    return 2 * n_agents * rounds + parse_decision(decision).calls


def record(real: ExperimentConfig, path: Path, budget: int, seed: int, partial: dict | None = None,
           keep: Callable[[dict], None] = lambda partial: None, explore_fixed: float = 0.0) -> dict:
    """Exploration episodes on the real team's train split until the next chunk could pass
    ``budget`` calls: chunks of at most :data:`RECORD_CHUNK` episodes on one task pool of
    :data:`DISTINCT_TASKS` times the episodes the budget affords (most episodes meet a task of their own), chunk ``c`` seeded by ``seed`` and
    ``c``. After each episode, ``keep(partial)``: where the recording is (:func:`record_chunk`) and
    the size of ``path`` (synced); given such a ``partial``, the recording goes on from there,
    ``path`` cut back to its complete episodes (None: afresh). Returns episodes, calls, tokens,
    pool, max_calls_per_episode."""
    bound = max_episode_calls(real.env.n_agents, real.env.rounds, real.env.decision)
    pool = DISTINCT_TASKS * max(1, budget // bound)
    done = dict(partial or {"chunk": 0, "size": 0, "played": 0, "rng": None, "bytes": 0, **dict.fromkeys(SPEND, 0)})
    if path.exists() and path.stat().st_size >= done["bytes"]:
        os.truncate(path, done["bytes"])  # an interrupted episode's trace goes
    elif done["bytes"]:
        raise ConfigError(f"{path}: missing, or shorter than the {done['episodes']} episodes recorded "
                          f"({done['bytes']} bytes, says {path.parent / 'stages.json'}); delete that to record afresh")
    say(f"sim2real: recording exploration episodes on the real team (budget {budget} calls)"
        + (f", continuing after {done['episodes']} episodes ({done['calls']} calls)" if done["episodes"] else ""))
    env = TopologyParallelEnv(dataclasses.replace(real.env, split="train"))
    try:
        while (size := done["size"] if done["played"] else min(RECORD_CHUNK, (budget - done["calls"]) // bound)) >= 1:
            record_chunk(env, path, size, seed * 1_000_003 + done["chunk"], pool, done, keep,
                         real.runtime.episodes_in_flight, explore_fixed)
    finally:
        env.close()
    return {**{key: done[key] for key in SPEND}, "pool": pool, "max_calls_per_episode": bound}


def record_chunk(env: TopologyParallelEnv, path: Path, size: int, seed: int, pool: int, done: dict,
                 keep: Callable[[dict], None], in_flight: int = 1, explore_fixed: float = 0.0) -> None:
    """Chunk ``done["chunk"]`` of ``size`` episodes (:func:`record_exploration` with ``seed``), from
    its episode ``done["played"]`` on, its generator in state ``done["rng"]`` (None: at the start).
    After each episode ``done`` (also ``episodes``, ``calls``, ``tokens`` of the whole recording,
    ``bytes`` of ``path``) is brought up to date and kept; once the chunk is complete it names the
    next one, at its start. ``in_flight``: episodes played at once (``runtime.episodes_in_flight``)."""
    start = {**done, "size": size}

    def after_episode(now: dict) -> None:
        done.update(start, played=start["played"] + now["episodes"], rng=now["rng"],
                    **{key: start[key] + now[key] for key in SPEND})
        if done["played"] == size:
            done.update(chunk=start["chunk"] + 1, size=0, played=0, rng=None)
        done["bytes"] = synced_size(path)
        keep(dict(done))

    record_exploration(env, path, size - start["played"], seed=seed, pool=pool, rng_state=start["rng"],
                       after_episode=after_episode, in_flight=in_flight, fixed_share=explore_fixed)


def synced_size(path: Path) -> int:
    """``path``'s size, its content flushed to disk first."""
    with open(path, "ab") as fh:
        os.fsync(fh.fileno())
        return fh.tell()


def sim_training_config(real: ExperimentConfig, fitted: Path, episodes: int | None,
                        sim_sets: Sequence[str]) -> ExperimentConfig:
    """The training on the fitted team: the default config (:data:`learners.config.DEFAULT_CONFIG`)
    with the real team's layout (:data:`TEAM_KEYS`), the fitted profile and the real run's seed, then
    ``sim_sets`` (``section.key=value``) and ``episodes`` (its TD episodes; None: the default's)."""
    base = load_experiment(DEFAULT_CONFIG)
    team = {key: value for key, value in real.env.to_dict().items() if key in TEAM_KEYS}
    env = EnvConfig.from_dict({**base.env.to_dict(), **team, "backend": {"kind": "sim", "profile": str(fitted)}})
    cfg = with_overrides(dataclasses.replace(base, env=env, train=dataclasses.replace(base.train, seed=real.train.seed)),
                         sim_sets)
    return cfg if not episodes else dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, episodes=episodes))


def record_budget(real_calls: int, finetune: int, bound: int) -> int:
    """The calls left for the recording; a one-line ConfigError where the fine-tune's share leaves
    none, or too few for 4 episodes of at most ``bound`` calls."""
    if finetune >= real_calls:
        raise ConfigError(f"--finetune-calls {finetune} is not below --real-calls {real_calls}: the fine-tune's calls "
                          f"are a share of the budget, which also pays for the recording (at least {4 * bound} "
                          "calls); give a smaller --finetune-calls or a larger --real-calls")
    if real_calls - finetune < 4 * bound:
        raise ConfigError(f"--real-calls {real_calls} (with --finetune-calls {finetune}): recording needs at least "
                          f"{4 * bound} calls (4 episodes of at most {bound}); give a larger budget")
    return real_calls - finetune


def stage_inputs(real: ExperimentConfig, real_calls: int, finetune: int, sim_sets: Sequence[str],
                 sim_episodes: int | None, explore_fixed: float = 0.0) -> dict[str, Any]:
    """What each stage's outcome depends on beyond the stages before it (:func:`fingerprints`): the
    recording on the real team, its seed and budget; the fit on nothing more; the training on the
    default config and ``--sim-set`` / ``--episodes``; the fine-tune and the evaluation on the whole
    real config and the budget."""
    exploration = {"explore_fixed": explore_fixed} if explore_fixed else {}  # 0: the keys of runs made before it
    return {"record": {"env": real.env.to_dict(), "seed": real.train.seed, "calls": real_calls - finetune,
                       **exploration},
            "fit": {}, "train": {"default": load_experiment(DEFAULT_CONFIG).to_dict(), "sets": list(sim_sets),
                                 "episodes": sim_episodes},
            "finetune": {"config": real.to_dict(), "finetune": finetune}, "evaluate": {"budget": real_calls}}


def run(real: ExperimentConfig, out: Path, real_calls: int, finetune_calls: int = 0, sim_sets: Sequence[str] = (),
        sim_episodes: int | None = None, progress: bool = True, command: str | None = None,
        explore_fixed: float = 0.0) -> int:
    """The sim-to-real route (module docstring) for the real team ``real`` into ``out`` on
    ``real_calls`` real LLM calls, ``finetune_calls`` of them for fine-tuning; ``sim_sets`` and
    ``sim_episodes`` change the training on the fitted team; ``explore_fixed``: the share of
    exploration episodes that play a fixed topology (:func:`topo_env.fitting.explore.record_exploration`). Returns 0; or, after Ctrl-C in any
    stage, :data:`STOPPED` and one line on stdout: the stage, what is kept, and ``command`` (this
    call's command line; None: generic words) as what continues it. Rerun, the same call keeps each
    finished stage and continues the stopped one (:class:`Stages`)."""
    seed, finetune = real.train.seed, int(finetune_calls or 0)
    bound = max_episode_calls(real.env.n_agents, real.env.rounds, real.env.decision)
    budget = record_budget(real_calls, finetune, bound)
    out = output_dir(out)
    stages = Stages(out, stage_inputs(real, real_calls, finetune, sim_sets, sim_episodes, explore_fixed))
    traces, fitted, sim_run, ft_run = out / "traces.jsonl", out / "fitted.yaml", out / "sim_run", out / "finetune"
    again = command or "the same train_qmix.py --sim2real command again"
    quiet = RunOptions(progress=False, pictures=False, command=again, continue_with=again)
    on_fitted = dataclasses.replace(quiet, source=f"the fitted team {fitted}")
    on_real = dataclasses.replace(quiet, init_from=sim_run, source=f"the real team, from {sim_run}")
    started = time.perf_counter()
    try:
        # 1. record the real team; 2. fit a simulated team to its traces
        recorded = stages.run("record", lambda partial: record(real, traces, budget, seed, partial, stages.keep,
                                                               explore_fixed))
        fit = stages.run("fit", lambda _: fit_team(real, traces, fitted, recorded))
        # 3. train at simulator scale on the fitted team
        stages.run("train", lambda partial: train_stage(sim_training_config(real, fitted, sim_episodes, sim_sets),
                                                        sim_run, on_fitted, partial, "training on the fitted team"))
        # 4. fine-tune on the real team with the calls left (optional)
        spare = max(1, real_calls - recorded["calls"] - bound)  # the episode that reaches the budget still finishes
        finetuned = stages.run("finetune", lambda partial: fine_tune(real, ft_run, spare, on_real, partial)
                               if finetune else None)
        # 5. the greedy policy on the real team's held-out tasks
        stages.run("evaluate", lambda _: evaluate_stage(
            real, out, ft_run if finetuned else sim_run, progress, started,
            {"real_calls": recorded["calls"] + (finetuned["calls"] if finetuned else 0), "budget": real_calls,
             "record": recorded, "fitted_profile": str(fitted), "fit_report": str(out / "fit_report.json"), "fit": fit,
             "sim_run": str(sim_run), "finetune": finetuned}))
    except (KeyboardInterrupt, Stopped):  # one line: where, what is kept, what continues
        print(stages.stopped(again), flush=True)
        return STOPPED
    print_run(out)
    return 0


def fit_team(real: ExperimentConfig, traces: Path, fitted: Path, recorded: dict) -> dict:
    """Fit a simulated team to ``traces`` from the domain's built-in profile, into ``fitted`` and
    ``fit_report.json`` beside it. Returns :func:`fit_summary` of the report."""
    base = DEFAULT_BASE.get(real.env.resolved_domain, "mmlu_pro")
    say(f"sim2real: fitting a simulated team to {recorded['episodes']} episodes ({recorded['calls']} calls), "
        f"from the built-in {base!r}")
    profile, report = fit_traces(traces, base, seed=real.train.seed, config=simulated_team(real, base))
    write_profile(profile, fitted)
    write_text_atomically(fitted.parent / "fit_report.json", json.dumps(report, indent=1, default=str))
    return fit_summary(report)


def train_stage(cfg: ExperimentConfig, run_dir: Path, options: RunOptions, partial: dict | None, what: str,
                call_budget: int = 0) -> None:
    """``what`` (said on stderr): train ``cfg`` into ``run_dir``
    (:func:`learners.training.train_and_evaluate`); where the stage had started with the same inputs
    (``partial`` not None) and left a checkpoint there, resume it. Returns once the training is
    complete: trained and evaluated, or ``call_budget`` (0: none) spent; raises :class:`Stopped`
    where Ctrl-C stopped it."""
    say(f"sim2real: {what} ({run_dir})")
    if partial is not None and (run_dir / "checkpoint.pt").is_file():
        cfg, checkpoint = resumed_config(run_dir)
        if (run_dir / "results.json").is_file() or budget_spent(run_dir, call_budget):
            return
        options = dataclasses.replace(options, checkpoint=checkpoint, init_from=None)
    if train_and_evaluate(cfg, run_dir, options) != 0 and not budget_spent(run_dir, call_budget):
        raise Stopped


def budget_spent(run_dir: Path, call_budget: int) -> bool:
    """Whether the checkpoint in ``run_dir`` has spent ``call_budget`` calls (0: no budget)."""
    return bool(call_budget) and (run_dir / "checkpoint.pt").is_file() and \
        load_checkpoint(run_dir)[1]["calls_spent"] >= call_budget


def fine_tune(real: ExperimentConfig, ft_run: Path, spare: int, options: RunOptions, partial: dict | None) -> dict:
    """The one-episode loop on the real team from ``options.init_from``'s networks into ``ft_run``,
    until it spent ``spare`` calls (:func:`train_stage`; a checkpoint after every episode, so that a
    kill loses no more than the episodes in flight). Returns its run, episodes and calls."""
    ft_cfg = dataclasses.replace(real, train=dataclasses.replace(real.train, episodes=spare, call_budget=spare,
                                                                 checkpoint_every=1))
    train_stage(ft_cfg, ft_run, options, partial, f"fine-tuning on the real team within {spare} calls", spare)
    ft = load_checkpoint(ft_run)[1]
    say(f"sim2real: the fine-tune is done: {ft['episode']} episodes, {ft['calls_spent']} real calls")
    return {"run": str(ft_run), "episodes": int(ft["episode"]), "calls": int(ft["calls_spent"])}


def evaluate_stage(real: ExperimentConfig, out: Path, policy_run: Path, progress: bool, started: float,
                   s2r: dict) -> None:
    """Score ``policy_run``'s greedy policy and every fixed topology on the real team's held-out
    tasks, set the fitted team's predictions beside them, and write ``out/results.json`` with
    ``s2r`` (what the stages before spent and made) as its ``sim2real`` section."""
    say(f"sim2real: the greedy policy and every fixed topology on {real.train.eval_episodes} held-out tasks")
    results, paired, headroom = evaluate_on_real(real, policy_run, progress=progress)
    summary = {"config": real.to_dict(), "eval": {**results, **headroom}, "qmix_minus": paired,
               "sim2real": {**s2r, "predicted_vs_measured": predicted_vs_measured(real, Path(s2r["fitted_profile"]),
                                                                                  results),
                            "seconds": time.perf_counter() - started}}
    write_text_atomically(out / "results.json", json.dumps(summary, indent=2, default=str))


def fingerprints(inputs: dict[str, Any]) -> dict[str, str]:
    """Each stage's fingerprint: a hash of its ``inputs`` and of the stage before's fingerprint (a
    change reaches every later stage)."""
    keys, key = {}, ""
    for stage in STAGES:
        key = hashlib.sha256(json.dumps([key, inputs[stage]], sort_keys=True, default=str).encode()).hexdigest()
        keys[stage] = key
    return keys


class Stages:
    """The stage record of a run, ``DIR/stages.json`` (rewritten atomically at each change): per
    stage its fingerprint (:func:`fingerprints`), and either ``done`` with its ``result`` and the
    ``products`` it wrote, or unfinished with its ``partial`` progress. On a rerun the finished
    stages with the same fingerprint whose products are there are kept; the first other stage is
    continued where it had started with the same fingerprint, else redone; what it and the stages
    after it wrote before is moved aside first (:func:`set_aside_earlier`)."""

    def __init__(self, out: Path, inputs: dict[str, Any]):
        self.out, self.path, self.keys = out, out / "stages.json", fingerprints(inputs)
        earlier = read_json_file(self.path, "the run's stage record", "delete it to redo every stage (the earlier "
                                 "files are then moved aside)", ("stages",))["stages"] if self.path.exists() else {}
        self.entries: dict[str, dict] = {}
        for stage in STAGES:
            entry = earlier.get(stage) or {}
            if entry.get("key") != self.keys[stage] or (entry.get("done") and not self.present(entry)):
                break
            self.entries[stage] = entry
            if not entry.get("done"):
                break
        set_aside_earlier(out, [name for stage in STAGES if stage not in self.entries for name in PRODUCTS[stage]])
        self.current = next((stage for stage in STAGES if not self.done(stage)), "evaluate")
        self.save()

    def run(self, stage: str, do: Callable[[dict | None], Any]) -> Any:
        """``stage``'s result: kept from an earlier run, or ``do(partial)``'s (``partial``: None
        afresh, else the progress it kept, :meth:`keep`; ``{}`` where none)."""
        self.current, entry = stage, self.entries.get(stage)
        if self.done(stage):
            say(f"sim2real: {STAGES[stage]}: done by an earlier run with the same inputs, kept ({self.path})")
            return entry["result"]
        partial = None if entry is None else entry.get("partial") or {}
        if partial is not None:
            say(f"sim2real: {STAGES[stage]}: an earlier run stopped in this stage; taking it up again")
        self.entries[stage] = {"key": self.keys[stage], "done": False, "partial": partial}
        self.save()
        result = json.loads(json.dumps(do(partial), default=str))  # as a rerun reads it back
        self.entries[stage] = {"key": self.keys[stage], "done": True, "result": result,
                               "products": [name for name in PRODUCTS[stage] if (self.out / name).exists()]}
        self.save()
        return result

    def keep(self, partial: dict) -> None:
        """Record the current stage's progress: what a rerun continues from."""
        self.entries[self.current]["partial"] = partial
        self.save()

    def done(self, stage: str) -> bool:
        return bool(self.entries.get(stage, {}).get("done"))

    def present(self, entry: dict) -> bool:
        return all((self.out / name).exists() for name in entry.get("products", ()))

    def save(self) -> None:
        write_text_atomically(self.path, json.dumps({"stages": self.entries}, indent=1))

    def stopped(self, again: str) -> str:
        """The one line of a run stopped in the current stage: which, what is kept, what continues."""
        stage, done = self.current, [name for name in STAGES if self.done(name)]
        kept = [f"the finished {', '.join(done[:-1])}{' and ' * (len(done) > 1)}{done[-1]} "
                f"stage{'s' * (len(done) > 1)}"] if done else []
        partial = self.entries.get(stage, {}).get("partial")
        if stage == "record" and partial:
            kept.append(f"the recording's first {partial['episodes']} episodes ({partial['calls']} real calls)")
        folder = self.out / PRODUCTS[stage][0]
        if stage in ("train", "finetune") and (folder / "checkpoint.pt").is_file():
            kept.append(f"the checkpoint in {folder}")
        return (f"sim2real: stopped in stage {list(STAGES).index(stage) + 1} of {len(STAGES)}, {stage} "
                f"({STAGES[stage]}); kept in {self.out}: {', and '.join(kept) or 'nothing yet'}; "
                f"continue with: {again}")


def set_aside_earlier(out: Path, names: Sequence[str]) -> None:
    """Move an earlier run's ``names`` in ``out`` that this run makes anew into ``out/earlier/<UTC
    time>/`` (:func:`topo_env.engine.user_files.set_aside`), with one stderr line."""
    aside = set_aside(out, names)
    if aside is not None:
        say(f"sim2real: {out} held an earlier run's {', '.join(n for n in names if (aside / n).exists())}: "
            f"moved to {aside}")


def evaluate_on_real(real: ExperimentConfig, run: Path, progress: bool = True) -> tuple[dict, dict, dict]:
    """The greedy policy of the training run in ``run`` against every fixed topology on the real
    team's held-out tasks (:func:`learners.evaluation.held_out_comparison`), ``runtime.episodes_in_flight``
    episodes at a time (each episode's figures are the sequential evaluation's): ``(results, paired,
    headroom)``. The run's network is built from its own config; it must read the real team's
    observations (:data:`learners.evaluation.OBSERVATION_LAYOUT`)."""
    results, _, _, paired, headroom = compare_on_real(real, run, progress)
    return results, paired, headroom


def compare_on_real(real: ExperimentConfig, run: Path, progress: bool = True):
    """:func:`evaluate_on_real` with everything :func:`learners.evaluation.held_out_comparison` returns:
    ``(results, traces, rewards, paired, headroom)`` (``traces``: per policy its episodes' traces in
    held-out order, for pairing episode by episode with another evaluation of the same tasks)."""
    run_cfg, checkpoint = load_checkpoint(run)
    differs = layout_difference(real, run_cfg, OBSERVATION_LAYOUT)
    if differs:
        raise ConfigError(f"the trained network does not read the real team's observations: {differs}")
    eval_env = TopologyParallelEnv(dataclasses.replace(real.env, split="eval"))
    agent = agent_from_checkpoint(checkpoint, run_cfg, space_dims(eval_env)[0])
    siblings = sibling_envs(eval_env, real.runtime.episodes_in_flight)[1:]
    return held_out_comparison(real, [QMIXPolicy(agent, torch.device("cpu"))], eval_env, siblings=siblings,
                               progress=progress)


def simulated_team(real: ExperimentConfig, profile: str | Path, split: str = "train") -> EnvConfig:
    """The real team's layout (agents, rounds, roles, reward, encoder) as a simulated team of ``profile``."""
    team = {k: v for k, v in real.env.to_dict().items() if k not in ("backend", "domain", "profile", "split", "render_mode")}
    return EnvConfig.from_dict({**team, "profile": str(profile), "split": split})


def predicted_vs_measured(real: ExperimentConfig, fitted: Path, measured: dict,
                          episodes: int = PREDICTION_EPISODES) -> list[dict]:
    """Per fixed topology (and the random policy) in ``measured`` (the real team's held-out
    figures): the fitted team's accuracy and tokens per task over ``episodes`` simulated held-out
    episodes against the real team's, the standard error of the difference (both samples'), and
    ``miss``: the difference is beyond 2 SE."""
    env = TopologyParallelEnv(simulated_team(real, fitted, split="eval"))
    try:
        predicted, _ = score_on_simulator(env, episodes, held_out_seed(real.train.seed), progress=False,
                                          references=False)
    finally:
        env.close()
    rows = []
    for name in BASELINES:
        if name not in measured:
            continue
        p, n, q = measured[name]["accuracy"], measured[name]["episodes"], predicted[name]["accuracy"]
        se = math.sqrt(p * (1 - p) / max(n - 1, 1) + q * (1 - q) / (episodes - 1))
        rows.append({"policy": name, "predicted_accuracy": q, "measured_accuracy": p, "se": se,
                     "difference": p - q, "miss": abs(p - q) > 2 * se,
                     "predicted_tokens": predicted[name]["tokens_per_task"],
                     "measured_tokens": measured[name]["tokens_per_task"]})
    return rows


def fit_summary(report: dict) -> dict:
    """What results.json keeps of the fit's report: parameters per status, and the check's fixed
    topologies (fitted team against the traces)."""
    statuses: dict[str, int] = {}
    for row in report.get("parameters", []):
        statuses[row["status"]] = statuses.get(row["status"], 0) + 1
    return {"parameters": statuses, "check": (report.get("check") or {}).get("topologies")}


def print_table(summary: dict, real: ExperimentConfig, out: Path) -> None:
    """The closing table: every policy on the real team's held-out tasks, and what training spent."""
    results, paired = summary["eval"], summary["qmix_minus"]
    rows = [{"policy": name, "reward": v["reward"], "accuracy (pts)": points(v["accuracy"]),
             "tokens/task": v.get("tokens_per_task", ""),
             "qmix - policy (SE)": f"{paired[name]['mean']:+.4f} ({paired[name]['se']:.4f})" if name in paired else ""}
            for name, v in results.items() if isinstance(v, dict)]
    s2r = summary["sim2real"]
    print(f"\nThe real team's held-out tasks ({real.train.eval_episodes} episodes, N={real.env.n_agents}, "
          f"T={real.env.rounds}):")
    print(format_table(rows, ("policy", "reward", "accuracy (pts)", "tokens/task", "qmix - policy (SE)")))
    if results.get("headroom_share") is not None:
        print(f"headroom share on the real team: {results['headroom_share']:+.2f} (headroom {results['headroom']:+.4f})")
    notes = [f"real LLM calls spent on training: {s2r['real_calls']} of {s2r['budget']} ({s2r['record']['calls']} recording "
             f"{s2r['record']['episodes']} exploration episodes"
             + (f", {s2r['finetune']['calls']} fine-tuning" if s2r["finetune"] else "") + "); the held-out evaluation's "
             "calls are not training spend.", standard_error_note("qmix - policy (SE)")]
    prediction = s2r.get("predicted_vs_measured")
    if prediction:
        print("\nThe fitted simulated team's prediction for each fixed topology against the real team (accuracy in "
              "points; SE of the difference, both samples):")
        print(format_table([{"policy": r["policy"], "predicted": points(r["predicted_accuracy"]),
                             "measured": points(r["measured_accuracy"]),
                             "measured - predicted (SE)": f"{100 * r['difference']:+.2f} ({100 * r['se']:.2f})",
                             "beyond 2 SE": "yes" if r["miss"] else "no",
                             "tokens/task predicted": f"{r['predicted_tokens']:.0f}",
                             "tokens/task measured": f"{r['measured_tokens']:.0f}"} for r in prediction],
                           ("policy", "predicted", "measured", "measured - predicted (SE)", "beyond 2 SE",
                            "tokens/task predicted", "tokens/task measured")))
    print("\n" + closing_note(f"sim2real from {real.env.team_label}",
                              notes, [("results", out / "results.json"), ("fitted team", Path(s2r["fitted_profile"])),
                                      ("fit report", Path(s2r["fit_report"])), ("training run", Path(s2r["sim_run"]))]))


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def show(argv: Sequence[str] | None = None) -> int:
    """``python -m studies.sim2real DIR``: the closing tables of a finished run, from
    ``DIR/results.json``; a run from before the prediction table gets it computed and saved."""
    parser = OneLineParser(prog=PROG, description="The closing tables of a finished --sim2real run.")
    parser.add_argument("run", help="the run's --out folder (holds results.json)")
    print_run(Path(parser.parse_args(argv).run))
    return 0


def print_run(out: Path) -> None:
    """The closing tables of the run in ``out`` from its results.json (a missing, truncated or
    incomplete one: a one-line ConfigError); an older run's prediction table is computed and saved."""
    summary = read_json_file(out / "results.json", "the run's results.json", "give the --out folder of a finished "
                             "--sim2real run, or rerun the command that made it to finish it",
                             ("config", "eval", "qmix_minus", "sim2real"))
    real = ExperimentConfig.from_dict(summary["config"])
    s2r = summary["sim2real"]
    if "predicted_vs_measured" not in s2r:
        s2r["predicted_vs_measured"] = predicted_vs_measured(real, Path(s2r["fitted_profile"]), summary["eval"])
        write_text_atomically(out / "results.json", json.dumps(summary, indent=2, default=str))
    print_table(summary, real, out)


if __name__ == "__main__":
    sys.exit(run_main(show, PROG))
