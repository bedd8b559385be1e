"""A benchmark of off-the-shelf MARL algorithms on the simulated team, against our QMIX and the headroom references.

    python -m studies.marl_benchmark --profiles mmlu_pro mmlu_pro_mixed --algorithms mappo ippo qmix vdn iql masac \\
        ppo_central --seeds 0 1 2 --episodes 20000 --out runs/marl_benchmark \\
        --qmix-runs runs/default/seed? runs/mixed/seed?
    python -m studies.marl_benchmark --profiles mmlu_pro --algorithms mappo --seeds 0 --frames 90000   # one run

Per (profile, algorithm, seed) it trains, then scores on the seed's held-out episodes, and writes
``OUT/<profile>/<method>_seed<seed>.json``:

- BenchMARL's discrete-action algorithms (``mappo ippo qmix vdn iql masac``, rows ``benchmarl_<algorithm>``)
  with BenchMARL's default hyperparameters (:func:`controllers.benchmarl_policy.train_benchmarl` lists the
  few overrides and why), and ``ppo_central``, one central controller trained with PPO on the orchestrator
  env (:func:`controllers.central_ppo.train_central_ppo`), each for ``--frames`` frames (env steps times env
  rows; episodes = frames / rounds; ``--frames ALGORITHM=F`` gives one its own budget; default: each
  algorithm's measured 20-minute budget on 2 cores, :func:`default_frames`);
- the env is ``configs/default.yaml``'s with the profile (:func:`studies.leaderboard.env_config`), the team
  our QMIX runs train on (``python train_qmix.py --set env.profile=...``);
- every policy plays greedily the eval-split episodes ``held_out_seed(seed) + k``, k < ``--episodes``: the
  held-out episodes a ``train_qmix.py`` run of that seed is scored on; the fixed baselines and the headroom
  references (:func:`learners.evaluation.score_on_simulator`: ``best_fixed``, the best open-loop joint-action
  sequence, and ``adaptive``, the privileged reference) are played on the same episodes, so
  ``policy - best_fixed`` is paired episode by episode (:func:`learners.evaluation.paired_difference`) and
  the headroom share is (policy - best_fixed) / (adaptive - best_fixed) on those episodes.

A run whose JSON exists with the same budget and episodes is skipped, so an interrupted study continues
where it stopped when the same command is run again (in this session or a later one); the JSON of a run with
another budget or episode count is an error, not overwritten. The table is built from the JSONs in OUT, so it
shows every finished run, and ``--table-only`` prints it without training anything.

The table (markdown, ready for docs/leaderboard.md; also ``OUT/table.md`` and ``OUT/summary.json``): one row
per profile and method, figures as mean (SE over seeds), the per-seed headroom shares, frames and wall minutes
per seed; rows of our own QMIX from ``--qmix-runs`` (``train_qmix.py`` run folders' ``results.json``, on the
same held-out episodes where their seed and ``train.eval_episodes`` match).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from controllers.registry import BENCHMARL_ALGORITHMS
from topo_env.engine.cli import OneLineParser, RunError, run_main
from topo_env.engine.config_checks import ConfigError
from topo_env.engine.seeding import held_out_seed
from topo_env.engine.user_files import write_text_atomically
from topo_env.frontends.env_config import EnvConfig
from topo_env.references.oracle import standard_error

PROG = "python -m studies.marl_benchmark"
CENTRAL = "ppo_central"
ALGORITHMS: tuple[str, ...] = (*BENCHMARL_ALGORITHMS, CENTRAL)
"""Every algorithm the study trains: BenchMARL's and the central-controller PPO."""
CENTRAL_FRAMES = 300_000
"""The central PPO's frames unless ``--frames`` says otherwise: its leaderboard budget (controllers/central_ppo.py,
100,000 episodes of T + 1 frames at T = 2)."""
DEFAULT_EPISODES = 20_000
"""Held-out episodes per seed: ``train.eval_episodes`` of configs/default.yaml, our QMIX's."""
RUN_KEYS = ("profile", "method", "library", "algorithm", "seed", "frames_budget", "frames", "train_episodes",
            "episodes", "held_out_seed", "reward", "accuracy", "tokens_per_task", "minus_best_fixed", "minus_solo",
            "best_fixed", "adaptive", "headroom", "headroom_share", "train_seconds", "score_seconds",
            "wall_seconds", "curve", "env")
"""What every run's JSON holds."""


def method_name(algorithm: str) -> str:
    """The row's name, by library and algorithm: ``benchmarl_mappo``, ...; ``ppo_central`` (ours)."""
    return algorithm if algorithm == CENTRAL else f"benchmarl_{algorithm}"


def headroom_figures(policy: float, best_fixed: float, adaptive: float) -> dict[str, float | None]:
    """``headroom`` = adaptive - best_fixed and ``headroom_share`` = (policy - best_fixed) / headroom
    (None where the headroom is not positive), from mean rewards on the same episodes."""
    gap = adaptive - best_fixed
    return {"headroom": gap, "headroom_share": (policy - best_fixed) / gap if gap > 0 else None}


def held_out_figures(scores: dict[str, np.ndarray], references: dict[str, np.ndarray]) -> dict[str, Any]:
    """A policy's figures on held-out episodes: its per-episode ``scores`` (``reward``, ``accuracy``,
    ``team_tokens``) against the references' per-episode rewards on the same episodes (``best_fixed``,
    ``adaptive``, ``solo``)."""
    from learners.evaluation import paired_difference

    reward = np.asarray(scores["reward"], dtype=np.float64)
    best, adaptive = float(np.mean(references["best_fixed"])), float(np.mean(references["adaptive"]))
    return {"reward": float(reward.mean()), "reward_se": standard_error(reward),
            "accuracy": float(np.mean(scores["accuracy"])), "tokens_per_task": float(np.mean(scores["team_tokens"])),
            "minus_best_fixed": paired_difference(reward, references["best_fixed"]),
            "minus_solo": paired_difference(reward, references["solo"]), "best_fixed": best, "adaptive": adaptive,
            **headroom_figures(float(reward.mean()), best, adaptive)}


def reference_rewards(config: EnvConfig, seed: int, episodes: int) -> dict[str, np.ndarray]:
    """Per-episode rewards of the fixed baselines and the headroom references on the held-out episodes of
    ``seed`` (:func:`learners.evaluation.score_on_simulator`; the references' first search on a team takes a
    minute or two, then they come from the cache)."""
    from learners.evaluation import score_on_simulator
    from topo_env.frontends.parallel_env import TopologyParallelEnv

    env = TopologyParallelEnv(replace(config, split="eval"))
    try:
        _, rewards = score_on_simulator(env, episodes, held_out_seed(seed), progress=False, references=True)
    finally:
        env.close()
    return rewards


def train_and_score(algorithm: str, config: EnvConfig, seed: int, frames: int, episodes: int,
                    log_dir: Path | None, torch_threads: int | None) -> dict[str, Any]:
    """Train ``algorithm`` for ``frames`` frames and play it on the held-out episodes of ``seed``; its
    per-episode scores, the frames and episodes it trained and the seconds of each part."""
    started = time.perf_counter()
    if algorithm == CENTRAL:
        from controllers.central_ppo import play_held_out, train_central_ppo

        extra = {} if torch_threads is None else {"torch_threads": torch_threads}
        player = train_central_ppo(config, seed, frames, **extra)
        done = {"frames": player.frames_trained, "train_episodes": player.episodes_trained,
                "curve": [[h.get("frames"), h.get("episodic_return")] for h in player.history]}
    else:
        from controllers.benchmarl_policy import play_held_out, train_benchmarl

        trained = train_benchmarl(algorithm, config, seed, frames, log_dir, torch_threads=torch_threads)
        player, done = trained.policy, {"frames": trained.frames, "train_episodes": trained.episodes,
                                        "curve": trained.curve}
    train_seconds = time.perf_counter() - started
    scores = play_held_out(player, config, seed, episodes)
    return {**done, "scores": scores, "train_seconds": train_seconds,
            "score_seconds": time.perf_counter() - started - train_seconds}


def run_path(out: Path, profile: str, algorithm: str, seed: int) -> Path:
    return out / profile / f"{method_name(algorithm)}_seed{seed}.json"


def finished_run(path: Path, frames: int, episodes: int) -> dict[str, Any] | None:
    """The run of ``path`` if it finished with this budget and episode count; None if there is none.
    A run with another budget or episode count is a one-line ConfigError."""
    if not path.is_file():
        return None
    try:
        run = json.loads(path.read_text())
    except json.JSONDecodeError:
        return None  # a damaged file: run it again
    if run.get("frames_budget") != frames or run.get("episodes") != episodes:
        raise ConfigError(f"{path} was run with --frames {run.get('frames_budget')} and --episodes "
                          f"{run.get('episodes')}, not {frames} and {episodes}: give those, another --out, or "
                          "delete the file")
    return run


def benchmark_run(profile: str, algorithm: str, seed: int, frames: int, episodes: int, out: Path,
                  references: dict[str, np.ndarray], torch_threads: int | None) -> dict[str, Any]:
    """One run, written to its JSON (:data:`RUN_KEYS`); ``references``: the seed's reference rewards."""
    from studies.leaderboard import env_config

    config = env_config(profile, None)
    path = run_path(out, profile, algorithm, seed)
    started = time.perf_counter()
    played = train_and_score(algorithm, config, seed, frames, episodes, path.with_suffix(""), torch_threads)
    run = {"profile": profile, "method": method_name(algorithm),
           "library": "ours" if algorithm == CENTRAL else "benchmarl", "algorithm": algorithm, "seed": seed,
           "frames_budget": frames, "frames": played["frames"], "train_episodes": played["train_episodes"],
           "episodes": episodes, "held_out_seed": held_out_seed(seed),
           **held_out_figures(played["scores"], references),
           "train_seconds": played["train_seconds"], "score_seconds": played["score_seconds"],
           "wall_seconds": time.perf_counter() - started, "curve": played["curve"], "env": config.to_dict()}
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomically(path, json.dumps(run, indent=2))
    return run


def benchmark(profiles: Sequence[str], algorithms: Sequence[str], seeds: Sequence[int], frames: dict[str, int],
              episodes: int, out: Path, torch_threads: int | None = 1, say=print) -> list[str]:
    """Every (profile, algorithm, seed) run not finished yet (module docstring), one line each through
    ``say``; returns the runs that failed, one line each (the others are written)."""
    from studies.leaderboard import env_config

    todo = {(profile, seed): [a for a in algorithms if finished_run(run_path(out, profile, a, seed), frames[a],
                                                                    episodes) is None]
            for profile in profiles for seed in seeds}  # a run of another budget fails here, before any training
    failed = []
    for (profile, seed), algorithms_left in todo.items():
        for algorithm in (a for a in algorithms if a not in algorithms_left):
            say(f"{profile} {method_name(algorithm)} seed {seed}: finished earlier, skipped")
        if not algorithms_left:
            continue
        references = reference_rewards(env_config(profile, None), seed, episodes)
        for algorithm in algorithms_left:
            say(f"{profile} {method_name(algorithm)} seed {seed}: training {frames[algorithm]:,} frames ...")
            try:
                run = benchmark_run(profile, algorithm, seed, frames[algorithm], episodes, out, references,
                                    torch_threads)
            except ImportError as err:  # a module or library that is not here: that row only
                failed.append(f"{profile} {method_name(algorithm)} seed {seed}: skipped, cannot import ({err})")
                say(failed[-1])
                continue
            say(f"{profile} {run['method']} seed {seed}: headroom share {_number(run['headroom_share'], 3)}, "
                f"reward {run['reward']:.4f}, - best_fixed {run['minus_best_fixed']['mean']:+.4f} "
                f"({run['minus_best_fixed']['se']:.4f}), {run['frames']:,} frames, {run['wall_seconds'] / 60:.1f} min")
    return failed


# -- the table --------------------------------------------------------------------------------
def qmix_run(folder: Path) -> dict[str, Any]:
    """A ``train_qmix.py`` run's held-out figures in the form of a benchmark run (``results.json``);
    its frames are every simulated episode the run played (teacher, TD with noise samples, validation)
    times the rounds. A folder without a readable results.json, or a run on another env than the
    study's (:func:`studies.leaderboard.env_config` of its profile), is a one-line ConfigError."""
    path = folder / "results.json"
    try:
        result = json.loads(path.read_text())
        env, train, evaluation = result["config"]["env"], result["config"]["train"], result["eval"]
        qmix = evaluation["qmix"]
        run = {"profile": env["backend"]["profile"], "method": "qmix (ours)", "library": "ours", "algorithm": "qmix",
               "seed": int(train["seed"]), "episodes": int(qmix["episodes"]),
               "frames": int(env["rounds"]) * (int(result["train"]["episodes"])
                                              + int(result["train"].get("simulator_episodes", 0))),
               "reward": qmix["reward"], "accuracy": qmix["accuracy"], "tokens_per_task": qmix["tokens_per_task"],
               "minus_best_fixed": result["qmix_minus"]["best_fixed"], "headroom_share": evaluation["headroom_share"],
               "wall_seconds": result["train"]["seconds"], "held_out_seed": held_out_seed(int(train["seed"]))}
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ConfigError(f"--qmix-runs {folder}: no readable results.json of a train_qmix.py run with references "
                          f"({type(err).__name__}: {err})") from None
    from studies.leaderboard import env_config

    ours = env_config(run["profile"], None).to_dict()
    differs = sorted(k for k in env if k != "split" and k in ours and env[k] != ours[k])
    if differs:
        raise ConfigError(f"--qmix-runs {folder}: its env differs from the study's at {differs}, so its held-out "
                          "episodes are not the study's: give a run of configs/default.yaml with only the profile set")
    return run


def aggregate(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Mean and SE over seeds of one method's runs on one profile, and the per-seed shares."""
    def over_seeds(values: Sequence[float]) -> dict[str, float]:
        v = np.asarray(values, dtype=np.float64)
        return {"mean": float(v.mean()), "se": standard_error(v), "seeds": len(v)}

    shares = [r["headroom_share"] for r in runs]
    out = {key: over_seeds([r[key] for r in runs]) for key in ("reward", "accuracy", "tokens_per_task", "frames",
                                                                "wall_seconds")}
    out["minus_best_fixed"] = over_seeds([r["minus_best_fixed"]["mean"] for r in runs])
    out["paired_se"] = float(np.mean([r["minus_best_fixed"]["se"] for r in runs]))
    out["headroom_share"] = over_seeds(shares) if None not in shares else None
    out["seeds"] = {str(r["seed"]): r["headroom_share"] for r in runs}
    out["episodes"] = sorted({r["episodes"] for r in runs})
    return out


def collect(out: Path, profiles: Sequence[str], algorithms: Sequence[str], seeds: Sequence[int],
            qmix_folders: Sequence[Path] = ()) -> dict[str, dict[str, Any]]:
    """``{profile: {method: aggregate}}`` of the finished runs in ``out`` (and of the QMIX runs) for these
    profiles and seeds, methods in the order given, QMIX first."""
    qmix = [qmix_run(Path(f)) for f in qmix_folders]
    table: dict[str, dict[str, Any]] = {}
    for profile in profiles:
        rows = {}
        ours = [r for r in qmix if r["profile"] == profile and r["seed"] in seeds]
        if ours:
            rows["qmix (ours)"] = aggregate(sorted(ours, key=lambda r: r["seed"]))
        for algorithm in algorithms:
            runs = [json.loads(p.read_text()) for s in seeds if (p := run_path(out, profile, algorithm, s)).is_file()]
            if runs:
                rows[method_name(algorithm)] = aggregate(runs)
        table[profile] = rows
    return table


def _number(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _cell(figure: dict[str, float] | None, digits: int = 4, scale: float = 1.0, sign: str = "") -> str:
    """``mean (SE over seeds)``; the mean alone for one seed, which has no SE over seeds."""
    if figure is None:
        return "-"
    mean = f"{scale * figure['mean']:{sign}.{digits}f}"
    return mean if figure["seeds"] < 2 else f"{mean} ({scale * figure['se']:.{digits}f})"


COLUMNS = ("profile", "method", "seeds", "headroom share", "per-seed shares", "reward", "− best fixed",
           "paired SE", "accuracy (pts)", "tokens/task", "frames", "wall (min)")


def markdown_table(table: dict[str, dict[str, Any]], episodes: int) -> str:
    """The markdown table of :func:`collect`'s result, with a note on what the figures are."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for profile, rows in table.items():
        for method, m in rows.items():
            shares = ", ".join(f"{s}: {_number(v, 2)}" for s, v in m["seeds"].items())
            cells = [profile, method, str(len(m["seeds"])), _cell(m["headroom_share"], 2), shares, _cell(m["reward"]),
                     _cell(m["minus_best_fixed"], sign="+"), f"{m['paired_se']:.4f}", _cell(m["accuracy"], 1, 100),
                     f"{m['tokens_per_task']['mean']:,.0f}", f"{m['frames']['mean']:,.0f}",
                     f"{m['wall_seconds']['mean'] / 60:.1f}"]
            lines.append("| " + " | ".join(cells) + " |")
    others = sorted({e for rows in table.values() for m in rows.values() for e in m["episodes"]} - {episodes})
    notes = [f"Mean (SE over seeds; a row of one seed shows its figures alone); each seed scored on its own "
             f"{episodes:,} held-out episodes (env seeds held_out_seed(seed) + k, eval split), the same for every "
             "row and for best_fixed and adaptive. "
             "Headroom share = (policy − best_fixed) / (adaptive − best_fixed); − best fixed is paired episode by "
             "episode, paired SE its mean standard error within a seed. Frames: env steps times env rows "
             "(QMIX: every simulated episode its run played, times the rounds); wall: training and scoring, "
             "per seed, on 2 cores."]
    if others:
        notes.append(f"Some rows were scored on {others} held-out episodes per seed (their runs' own).")
    return "\n".join(lines + [""] + notes)


def default_frames(algorithm: str) -> int:
    """A run's frames unless ``--frames`` gives them: BenchMARL's algorithms their measured 20-minute budgets
    (:data:`controllers.benchmarl_policy.TRAIN_FRAMES`), the central PPO :data:`CENTRAL_FRAMES`."""
    if algorithm == CENTRAL:
        return CENTRAL_FRAMES
    from controllers.benchmarl_policy import TRAIN_FRAMES

    return TRAIN_FRAMES[algorithm]


def parse_frames(items: Sequence[str], algorithms: Sequence[str]) -> dict[str, int]:
    """``--frames``: ``F`` (every algorithm) and/or ``ALGORITHM=F`` (default :func:`default_frames`); a one-line
    ConfigError names a bad item."""
    frames = {algorithm: default_frames(algorithm) for algorithm in algorithms}
    for item in items:
        name, _, value = item.rpartition("=")
        if not value.replace("_", "").isdigit() or int(value) < 1 or (name and name not in ALGORITHMS):
            raise ConfigError(f"--frames {item!r}: give F or ALGORITHM=F with F >= 1 and ALGORITHM one of "
                              f"{list(ALGORITHMS)}")
        for algorithm in ([name] if name else algorithms):
            frames[algorithm] = int(value)
    return frames


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("--profiles", nargs="+", default=["mmlu_pro"], help="simulated profiles (default mmlu_pro)")
    parser.add_argument("--algorithms", nargs="+", choices=ALGORITHMS, default=list(ALGORITHMS), metavar="ALGORITHM",
                        help=f"of {' '.join(ALGORITHMS)} (default: all)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="seeds (default 0 1 2)")
    parser.add_argument("--frames", nargs="+", default=[], metavar="F|ALGORITHM=F",
                        help="training frames per run (env steps x env rows; default: each algorithm's 20-minute "
                             "budget, controllers/benchmarl_policy.py TRAIN_FRAMES)")
    parser.add_argument("--episodes", type=int, default=DEFAULT_EPISODES,
                        help=f"held-out episodes per seed (default {DEFAULT_EPISODES:,}, our QMIX's)")
    parser.add_argument("--out", default="runs/marl_benchmark", help="where the runs' JSONs and the table go")
    parser.add_argument("--qmix-runs", nargs="*", default=[], metavar="DIR",
                        help="train_qmix.py run folders whose results.json rows join the table")
    parser.add_argument("--torch-threads", type=int, default=1,
                        help="torch threads while training (default 1: on 2 busy cores 2 threads were 4x slower)")
    parser.add_argument("--table-only", action="store_true", help="print the table of the finished runs only")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.episodes < 1:
        raise ConfigError(f"--episodes {args.episodes}: give at least 1")
    if args.torch_threads < 1:
        raise ConfigError(f"--torch-threads {args.torch_threads}: give at least 1")
    out = Path(args.out)
    frames = parse_frames(args.frames, args.algorithms)
    qmix_folders = [Path(f) for f in args.qmix_runs]
    for folder in qmix_folders:
        qmix_run(folder)  # a bad folder fails now, not after hours of training
    failed = [] if args.table_only else benchmark(args.profiles, args.algorithms, args.seeds, frames, args.episodes,
                                                  out, args.torch_threads, lambda line: print(line, flush=True))
    table = collect(out, args.profiles, args.algorithms, args.seeds, qmix_folders)
    text = markdown_table(table, args.episodes)
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomically(out / "table.md", text + "\n")
    write_text_atomically(out / "summary.json", json.dumps(table, indent=2))
    print(text)
    print(f"wrote {out / 'table.md'} and {out / 'summary.json'}")
    if failed:
        raise RunError(f"{len(failed)} run(s) did not run: {'; '.join(failed)}")
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main, PROG))
