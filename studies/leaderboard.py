"""One leaderboard: every topology method on the same team, tasks, accounting, seeds and adversaries.

    python -m studies.leaderboard --profile mmlu_pro --adversary random --seeds 0 1 2
    python -m studies.leaderboard --profile humaneval --methods full dytopo puppeteer --episodes 500 --json

For each seed, every method (the fixed baselines, random, QMIX, DyTopo, AgentConductor, Puppeteer,
TacoMAS; ``--methods`` picks some) is built through the one controller interface
(:mod:`controllers.base`), trained if it learns (on train-split episodes, with the budget its
module states: ``TRAIN_EPISODES``, the paper's where it gives one; ``--train-episodes NAME=E``
changes it), then played on the same held-out episodes: eval-split reset seeds ``0 .. E - 1``,
so every method meets the same tasks and the same noise (common random numbers). With
``--adversary random`` it plays them again with one adversary at a random position (placed after
the task and noise are drawn: the same episodes, attacked) and reports the accuracy drop with
its paired standard error, and the adversary's out-degree against the honest agents'. Online
methods (TacoMAS) start each of the two evaluations from their state after training.

Per method: accuracy, tokens per task, reward (Eq. 12), density of the rounds' graphs, rounds
used, LLM calls per task, the training episodes and LLM calls it spent, and the drop. Figures are
means over seeds with their standard error over seeds. It prints the table, writes
``OUT/leaderboard.json`` (``--json`` also prints it) and ``OUT/pareto.png`` (accuracy against
tokens per task, every seed a point).

The env is ``configs/default.yaml``'s (or ``--config``'s) with ``--profile``; the rounds are the
profile's unless the config sets them or a method's module asks for its paper's cap
(``ENV_ROUNDS``). With ``backend: llm`` in ``--config`` the same command runs the methods on a
real team. On the simulated team the ranking is the simulator's model of a team, not a real
model's behaviour.

This study sits at the top of the house: it imports the controllers (and, for QMIX, runs
``train_qmix.py``); nothing below imports it.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from controllers.registry import ALL_NAMES, KNOWN_NAMES, LEARNED, LIBRARY, LLM_WRITTEN, SIMULATED_NAMES, make_controller
from topo_env.engine.backend_registry import LLM_SERVER, NAMED_PROFILE, backend_offers
from topo_env.engine.tasks import DEFAULT_ROUNDS
from topo_env.engine.cli import OneLineParser, format_table, run_main
from topo_env.frontends.env_config import EnvConfig
from topo_env.engine.config_checks import ConfigError, load_yaml
from topo_env.references.oracle import standard_error

PROG = "python -m studies.leaderboard"
DEFAULT_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "default.yaml"
DEFAULT_EPISODES = 1000
FIGURES = ("accuracy", "tokens_per_task", "reward", "density", "rounds", "calls_per_task", "train_sim_episodes",
           "train_llm_calls", "drop", "adversary_out_degree", "honest_out_degree")
REFERENCE = "solo"
"""The method every other is compared with, episode by episode (``reward_minus_reference``)."""


@dataclass
class MethodRun:
    """One method on one seed: its held-out figures (means over the episodes) and what its training
    spent of the two budgets: ``train_sim_episodes``, episodes played on a simulated team (with what
    the simulator played beyond them for QMIX: replicas, its teacher's search and demonstrations),
    and ``train_llm_calls``, calls made to a real LLM team (agents' and decision node's; its own
    orchestrator LLM's count in tokens per task)."""

    accuracy: float
    tokens_per_task: float
    reward: float
    density: float
    rounds: float
    calls_per_task: float
    train_sim_episodes: int
    train_llm_calls: int
    train_seconds: float
    drop: float = math.nan
    drop_se: float = math.nan
    adversary_out_degree: float = math.nan
    honest_out_degree: float = math.nan


def env_config(profile: str, config_path: str | Path | None) -> EnvConfig:
    """The comparison's env: the YAML's ``env`` section, with the simulated team's profile set to
    ``profile`` (an LLM team keeps its own tasks); rounds: the YAML's when it sets them for this
    team, else the paper's for the team's domain."""
    path = Path(config_path) if config_path else DEFAULT_CONFIG
    if not path.is_file():
        raise ConfigError(f"--config {str(path)!r} not found: give a YAML file with an 'env' section")
    env = load_yaml(path).get("env") or {}
    if not isinstance(env, dict):
        raise ConfigError(f"{path}: section 'env' holds a {type(env).__name__}, not a mapping; fix the config")
    config = EnvConfig.from_dict(env)
    sets_rounds = "rounds" in env
    if backend_offers(config.backend, NAMED_PROFILE):
        sets_rounds = sets_rounds and config.backend.profile == profile
        config = replace(config, backend=replace(config.backend, profile=profile))  # names a bad profile in one line
    return config if sets_rounds else replace(config, rounds=DEFAULT_ROUNDS[config.resolved_domain])


def config_in_flight(config_path: str | Path | None) -> int:
    """The YAML's ``runtime.episodes_in_flight`` (1 without a config or the key; pre-0.2.0
    ``runtime.episodes_in_flight`` is read there with a note)."""
    from learners.config import say_moved, upgrade_moved_keys  # torch only where a config is read

    if not config_path or not Path(config_path).is_file():
        return 1
    data, moves = upgrade_moved_keys(load_yaml(config_path))
    say_moved(moves)
    value = (data.get("runtime") or {}).get("episodes_in_flight", 1)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"runtime.episodes_in_flight={value!r} in {config_path}: give an integer >= 1")
    return value


def evaluate_method(controller: Any, config: EnvConfig, episodes: int, adversary: str,
                    progress: Callable[[], None] = lambda: None, chat: Any = None,
                    in_flight: int = 1) -> dict[str, list[tuple[Any, tuple[int, ...]]]]:
    """Play ``controller`` on eval seeds ``0 .. episodes - 1``: ``"clean"``, and ``"attacked"`` when
    ``adversary == "random"``. Returns each setting's ``(EpisodeRecord, adversaries)`` per episode
    (the adversaries read from the env after the episode: the controller never sees them); the
    tokens and calls of the controller's own LLM (``chat``) are added to each episode's. With
    ``in_flight`` K > 1, K episodes at a time (:func:`play_in_flight`), except for online methods
    and those that prompt their own LLM, which play one at a time."""
    from controllers.base import play_episode
    from topo_env.frontends.orchestrator_env import OrchestratorEnv

    trained = controller.state_dict()
    settings = [("clean", config)]
    if adversary == "random":
        settings.append(("attacked", replace(config, adversary_position="random", n_adversaries=1,
                                             adversarial_agents=())))
    played: dict[str, list[tuple[Any, tuple[int, ...]]]] = {}
    for label, cfg in settings:
        controller.load_state_dict(trained)  # online methods start each evaluation from the trained state
        env = OrchestratorEnv(cfg, mode=controller.mode)
        if in_flight > 1 and not controller.online and chat is None:
            try:
                played[label] = play_in_flight(env, controller, episodes, in_flight, progress)
            finally:
                env.close()
            continue
        try:
            played[label] = []
            for k in range(episodes):
                before = (chat.tokens, chat.calls) if chat is not None else (0, 0)
                record = play_episode(env, controller, k, {"split": "eval"})
                if chat is not None:
                    record = replace(record, tokens=record.tokens + chat.tokens - before[0],
                                     calls=record.calls + chat.calls - before[1])
                played[label].append((record, tuple(env.episode.adversaries)))
                progress()
        finally:
            env.close()
    return played


def play_in_flight(env: Any, controller: Any, episodes: int, k: int,
                   progress: Callable[[], None]) -> list[tuple[Any, tuple[int, ...]]]:
    """Eval seeds ``0 .. episodes - 1`` played K at a time on ``env`` and K - 1 siblings (one
    shared LLM client), each with its own copy of ``controller``, handed back in seed order
    (:class:`topo_env.frontends.inflight.EpisodesInFlight`). An episode's task, noise and adversaries do not
    depend on K; a controller that draws at random draws from its copy's generator."""
    from controllers.base import aplay_episode
    from topo_env.frontends.inflight import EpisodesInFlight

    envs = [env] + [env.sibling() for _ in range(k - 1)]
    copies = [controller] + [controller.copy() for _ in range(k - 1)]

    async def episode(slot_env: Any, slot: int, seed: int):
        record = await aplay_episode(slot_env, copies[slot], seed, {"split": "eval"})
        return record, tuple(slot_env.episode.adversaries)

    played = []
    try:
        for _, result in EpisodesInFlight(envs).play(range(episodes), episode):
            played.append(result)
            progress()
    finally:
        for sibling in envs[1:]:
            sibling.close()
    return played


def summarize_run(played: dict[str, list], spent: Any, seconds: float, simulated: bool) -> MethodRun:
    """One seed's figures from :func:`evaluate_method`'s episodes and the training report
    (``simulated``: whether the team it trained on is the simulated one)."""
    clean = [r for r, _ in played["clean"]]
    run = MethodRun(
        accuracy=float(np.mean([r.accuracy for r in clean])),
        tokens_per_task=float(np.mean([r.tokens for r in clean])),
        reward=float(np.mean([r.reward for r in clean])),
        density=float(np.mean([r.density for r in clean])),
        rounds=float(np.mean([r.rounds for r in clean])),
        calls_per_task=float(np.mean([r.calls for r in clean])),
        train_sim_episodes=int(spent.episodes + spent.simulator_episodes) if simulated else 0,
        train_llm_calls=0 if simulated else int(spent.calls), train_seconds=float(seconds))
    if "attacked" in played:
        attacked = played["attacked"]
        diff = np.array([c.accuracy - a.accuracy for c, (a, _) in zip(clean, attacked)])
        run.drop, run.drop_se = float(diff.mean()), standard_error(diff)
        adv = [np.mean([r.out_degree[i] for i in who]) for r, who in attacked if who]
        honest = [np.mean([d for i, d in enumerate(r.out_degree) if i not in who]) for r, who in attacked]
        run.adversary_out_degree = float(np.mean(adv)) if adv else math.nan
        run.honest_out_degree = float(np.mean(honest))
    return run


def paired_versus(rewards: dict[int, np.ndarray], reference: dict[int, np.ndarray]) -> dict[str, float]:
    """Reward minus the reference's on the same episodes: per episode the difference averaged over
    seeds, then its mean and the standard error over the episodes (which holds both the seeds' and
    the episodes' noise: every seed plays the same held-out episodes)."""
    seeds = sorted(rewards)
    d = np.mean([rewards[s] - reference[s] for s in seeds], axis=0)
    return {"mean": float(d.mean()), "se": standard_error(d)}


def aggregate(runs: dict[int, MethodRun]) -> dict[str, Any]:
    """Mean and standard error over seeds of every figure, and the per-seed runs."""
    out: dict[str, Any] = {}
    for figure in FIGURES:
        values = np.array([getattr(r, figure) for r in runs.values()], dtype=float)
        out[figure] = {"mean": float(values.mean()), "se": standard_error(values)}
    out["seeds"] = {str(seed): asdict(run) for seed, run in runs.items()}
    return out


def leaderboard(profile: str, methods: Sequence[str], seeds: Sequence[int], episodes: int, adversary: str,
                config_path: str | Path | None, out_dir: Path, train_episodes: dict[str, int],
                progress: bool = True, in_flight: int = 1) -> dict[str, Any]:
    """Train and score every method on every seed (see the module docstring); returns the JSON."""
    from tqdm import tqdm

    from controllers.base import train_counted
    from topo_env.frontends.orchestrator_env import OrchestratorEnv

    config = env_config(profile, config_path)
    out_dir.mkdir(parents=True, exist_ok=True)
    per_method: dict[str, dict[int, MethodRun]] = {m: {} for m in methods}
    rewards: dict[str, dict[int, np.ndarray]] = {m: {} for m in methods}  # per-episode, clean
    drops: dict[str, dict[int, np.ndarray]] = {m: {} for m in methods}  # per-episode accuracy, clean - attacked
    total = len(methods) * len(seeds) * episodes * (2 if adversary == "random" else 1)
    started = time.perf_counter()
    with tqdm(total=total, desc="leaderboard", unit="episode", disable=not progress, file=sys.stderr) as bar:
        for seed in seeds:
            for name in methods:
                bar.set_postfix_str(f"seed {seed}: {name}")
                controller, cfg, budget, chat = make_controller(name, config, seed, out_dir)
                budget = train_episodes.get(name, budget)
                t0 = time.perf_counter()
                spent = train_counted(controller, lambda mode, cfg=cfg: OrchestratorEnv(cfg, mode=mode), budget, seed)
                seconds = time.perf_counter() - t0
                played = evaluate_method(controller, cfg, episodes, adversary, lambda: bar.update(1), chat, in_flight)
                if chat is not None:
                    chat.close()
                per_method[name][seed] = summarize_run(played, spent, seconds,
                                                              not backend_offers(cfg.backend, LLM_SERVER))
                rewards[name][seed] = np.array([r.reward for r, _ in played["clean"]])
                if "attacked" in played:
                    drops[name][seed] = np.array([c.accuracy - a.accuracy
                                                  for (c, _), (a, _) in zip(played["clean"], played["attacked"])])
    table = {name: aggregate(runs) for name, runs in per_method.items()}
    for name in methods:
        if drops[name]:  # the drop's SE over the episodes of the seed-averaged per-episode drop
            table[name]["drop"] = paired_versus(drops[name], {s: np.zeros_like(d) for s, d in drops[name].items()})
    if REFERENCE in rewards:
        for name in methods:
            table[name]["reward_minus_reference"] = paired_versus(rewards[name], rewards[REFERENCE])
    return {"profile": profile, "adversary": adversary, "seeds": list(seeds), "episodes": episodes,
            "reference": REFERENCE if REFERENCE in rewards else None, "env": config.to_dict(),
            "seconds": time.perf_counter() - started, "methods": table}


def format_leaderboard(result: dict[str, Any]) -> str:
    """The table: one row per method, best reward first; figures as mean (SE over seeds)."""
    def cell(figure: dict[str, float], scale: float = 1.0, digits: int = 1) -> str:
        if math.isnan(figure["mean"]):
            return "-"
        return f"{scale * figure['mean']:.{digits}f} ({scale * figure['se']:.{digits}f})"

    rows = []
    for name, m in sorted(result["methods"].items(), key=lambda kv: -kv[1]["reward"]["mean"]):
        row = {"method": name, "accuracy": cell(m["accuracy"], 100), "tokens/task": cell(m["tokens_per_task"], 1, 0),
               "reward": cell(m["reward"], 1, 4)}
        if result.get("reference"):
            row[f"reward - {result['reference']}"] = cell(m["reward_minus_reference"], 1, 4)
        row |= {"density": cell(m["density"], 1, 2), "rounds": cell(m["rounds"], 1, 2),
               "calls/task": cell(m["calls_per_task"], 1, 1),
               "train sim episodes": f"{m['train_sim_episodes']['mean']:,.0f}",
               "train LLM calls": f"{m['train_llm_calls']['mean']:,.0f}"}
        if result["adversary"] == "random":
            row["drop"] = cell(m["drop"], 100)
            row["adv/honest out"] = (f"{m['adversary_out_degree']['mean']:.2f}/{m['honest_out_degree']['mean']:.2f}")
        rows.append(row)
    columns = list(rows[0]) if rows else []
    seeds = " ".join(str(s) for s in result["seeds"])
    head = (f"leaderboard: profile {result['profile']}, {result['episodes']} held-out episodes per seed (the same "
            f"for every method), seeds {seeds}; mean (SE over seeds); accuracy and drop in points")
    notes = [f"reward - {result['reference']}: on the same episodes, averaged over seeds (SE over episodes)"
             if result.get("reference") else "",
             "drop: accuracy clean minus with one adversary at a random position, on the same episodes, averaged over "
             "seeds (SE over episodes)"
             if result["adversary"] == "random" else "",
             "adv/honest out: mean out-degree per round of the adversary and of the honest agents, attacked"
             if result["adversary"] == "random" else "",
             "simulated team: the ranking is the simulator's model of a team, not a real model's behaviour"
             if result["env"]["backend"].get("kind") == "sim" else ""]
    return "\n".join([head, format_table(rows, columns), *[n for n in notes if n]])


def write_pareto(result: dict[str, Any], path: Path) -> Path:
    """Accuracy against tokens per task, every seed a point (:func:`topo_env.frontends.plots.plot_pareto`)."""
    from topo_env.frontends.plots import plot_pareto, save_figure

    points = {name: [(run["tokens_per_task"], run["accuracy"]) for run in m["seeds"].values()]
              for name, m in result["methods"].items()}
    title = f"{result['profile']}: accuracy against tokens ({len(result['seeds'])} seeds)"
    return save_figure(plot_pareto(points, title), path)


def parse_budgets(items: Sequence[str]) -> dict[str, int]:
    """``NAME=E`` pairs of ``--train-episodes``; a one-line error names a bad one."""
    budgets = {}
    for item in items:
        name, _, value = item.partition("=")
        if (name not in LEARNED and name not in LIBRARY) or not value.isdigit():
            raise ConfigError(f"--train-episodes {item!r}: give NAME=EPISODES with NAME one of "
                              f"{[*LEARNED, *LIBRARY]}")
        budgets[name] = int(value)
    return budgets


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", required=True, help="simulated profile (or the LLM config's domain profile)")
    parser.add_argument("--adversary", choices=["none", "random"], default="none",
                        help="also play every method with one adversary at a random position and report the drop")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="seeds (default 0 1 2)")
    parser.add_argument("--episodes", type=int, default=DEFAULT_EPISODES,
                        help=f"held-out episodes per seed and setting (default {DEFAULT_EPISODES})")
    parser.add_argument("--methods", nargs="+", choices=KNOWN_NAMES, default=None, metavar="METHOD",
                        help=f"methods to compare (default: {' '.join(SIMULATED_NAMES)}, and with backend: llm also "
                             f"{' '.join(LLM_WRITTEN)}; on request only: {' '.join(LIBRARY)})")
    parser.add_argument("--train-episodes", nargs="*", default=[], metavar="NAME=E",
                        help="training episodes of a learned method instead of its module's TRAIN_EPISODES")
    parser.add_argument("--episodes-in-flight", type=int, default=None, metavar="K",
                        help="held-out episodes played at once against the team's server (default: the config's "
                             "runtime.episodes_in_flight, else 1; e.g. 16 for an LLM server)")
    parser.add_argument("--config", default=None, help="YAML with an env section (default configs/default.yaml); "
                                                       "backend: llm runs on a real team")
    parser.add_argument("--out", default="runs/leaderboard", help="where leaderboard.json, pareto.png and QMIX runs go")
    parser.add_argument("--json", action="store_true", help="also print the JSON")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.episodes < 1:
        raise ConfigError(f"--episodes {args.episodes}: give at least 1")
    budgets = parse_budgets(args.train_episodes)
    out_dir = Path(args.out)
    methods = args.methods
    if methods is None:
        llm = backend_offers(env_config(args.profile, args.config).backend, LLM_SERVER)
        methods = list(ALL_NAMES if llm else SIMULATED_NAMES)
    in_flight = args.episodes_in_flight if args.episodes_in_flight is not None else config_in_flight(args.config)
    if in_flight < 1:
        raise ConfigError(f"--episodes-in-flight {in_flight}: give at least 1")
    result = leaderboard(args.profile, methods, args.seeds, args.episodes, args.adversary, args.config, out_dir,
                         budgets, progress=not args.no_progress, in_flight=in_flight)
    (out_dir / "leaderboard.json").write_text(json.dumps(result, indent=2))
    picture = write_pareto(result, out_dir / "pareto.png")
    print(format_leaderboard(result))
    print(f"wrote {out_dir / 'leaderboard.json'} and {picture} ({result['seconds']:.0f} s)")
    if args.json:
        print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main, PROG))
