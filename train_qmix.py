"""Train Agent Q-Mix (QMIX over communication actions) on the topology env, then compare the
learned policy with every fixed topology on held-out tasks.

    python train_qmix.py                                   # configs/default.yaml, simulated team
    python train_qmix.py --config configs/math.yaml --set qmix.lr=1e-3 --episodes 3000 --out runs/math
    python train_qmix.py --resume runs/math                # continue an interrupted run
    python train_qmix.py --seeds 0 1 2 --out runs/three    # one child process per seed, means and SEs
    python train_qmix.py --config C.yaml --sim2real --real-calls 10000 --out DIR   # C.yaml's team as the real one

A command line over :mod:`learners.training` (``train_and_evaluate(cfg, out_dir, options)``), the
seeds runner (:mod:`learners.seeds`) and the sim-to-real route (:mod:`studies.sim2real`). Writes to
--out: TensorBoard logs, checkpoint.pt, config.json, results.json and PNG pictures; prints a
comparison table at the end (accuracy in points), with QMIX's reward minus each policy's on the
same held-out episodes and its paired standard error, then every file it wrote.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import shlex
import signal
import sys
from pathlib import Path


def _stop_while_loading(signum, frame) -> None:
    """Ctrl-C while the libraries load (a few seconds; nothing is written yet): one line, exit 130."""
    print("python train_qmix.py: interrupted while starting (Ctrl-C); nothing was written", file=sys.stderr, flush=True)
    os._exit(130)  # at once: an exception raised inside a library's import can leave it half loaded and looping


if __name__ == "__main__" and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
    signal.signal(signal.SIGINT, _stop_while_loading)  # not an import traceback; main() restores the default

from learners.config import DEFAULT_CONFIG, load_experiment  # noqa: E402 (after the handler above)
from learners.evaluation import references_apply
from learners.seeds import format_seeds, run_seeds
from learners.training import RunOptions, resumed_config, train_and_evaluate
from studies import sim2real
from topo_env.engine.cli import OneLineParser, positive_int, run_main
from topo_env.engine.config_checks import ConfigError

PROG = "python train_qmix.py"
CONFIG_KEYS_HELP = """\
where every config key is documented (learners/config.py has the sections):
  env:          topo_env/frontends/env_config.py, class EnvConfig (team, rounds, reward, adversaries, ...)
  env.backend:  topo_env/engine/backend_registry.py (sim: SimBackendConfig; llm: LLMBackendConfig: model, base_url, dataset, ...)
  qmix:         learners/config.py, class QMIXConfig (networks, mixer, TD updates)
  exploration:  learners/config.py, class ExplorationConfig (epsilon-greedy and who explores)
  sim_scale:    learners/config.py, class SimScaleConfig (batches of simulated episodes, noise samples, teacher)
  train:        learners/config.py, class TrainConfig (episodes, seed, evaluation, validation, checkpoints, budgets)
  runtime:      learners/config.py, class RuntimeConfig (device, threads, episodes in flight, Ray)
examples: --set qmix.lr=1e-3   --set env.backend.base_url=http://127.0.0.1:8080/v1
"""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = OneLineParser(prog=PROG, description=__doc__.split("\n\n")[0], epilog=CONFIG_KEYS_HELP,
                      formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default=str(DEFAULT_CONFIG),
                   help="YAML with env/qmix/exploration/sim_scale/train/runtime sections (default: configs/default.yaml)")
    p.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override a config key; nested keys with dots (env.backend.model=...); values are YAML")
    p.add_argument("--episodes", type=positive_int, help="training episodes (overrides train.episodes)")
    p.add_argument("--seed", type=int, help="seed (overrides train.seed)")
    p.add_argument("--seeds", type=int, nargs="+", metavar="S",
                   help="train each of these seeds in its own process (--out DIR: DIR/seed<S>/) and report means over "
                        "seeds with their standard errors (DIR/seeds.json)")
    p.add_argument("--jobs", type=positive_int,
                   help="with --seeds: processes at once (default: the CPU count over runtime.torch_threads)")
    p.add_argument("--out", help="output directory (default runs/qmix-<profile>-seed<seed>)")
    p.add_argument("--resume", metavar="DIR", help="continue the run in DIR from its checkpoint")
    p.add_argument("--init-from", metavar="RUN_DIR",
                   help="start from another run's networks (its validation-best agent network if it validated, and "
                        "its mixer); the observation layout and the network sizes must match")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--no-pictures", action="store_true", help="write no PNG pictures at the end")
    p.add_argument("--trace-out", metavar="PATH",
                   help="append every training episode to this JSONL trace file (schema: topo_env/engine/traces.py)")
    s2r = p.add_argument_group("sim to real (studies/sim2real.py): --config's team is the real one")
    s2r.add_argument("--sim2real", action="store_true",
                     help="record the real team, fit a simulated team to it, train on that, evaluate on the real team")
    s2r.add_argument("--real-calls", type=positive_int, metavar="N", help="budget of real LLM calls for training")
    s2r.add_argument("--finetune-calls", type=positive_int, metavar="N",
                     help="of the budget, calls for fine-tuning on the real team after the simulator (default: none)")
    s2r.add_argument("--sim-set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                     help="override a key of the training on the fitted team (configs/default.yaml's)")
    s2r.add_argument("--explore-fixed", type=float, default=0.0, metavar="P",
                     help="share of exploration episodes that play one fixed topology (solo, full, chain, star, "
                          "debate) instead of random actions (default 0)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """One training run from its command line. Returns the exit code: 0 done, 130 stopped (Ctrl-C
    or a budget: checkpointed) or interrupted (a second Ctrl-C: the last checkpoint stands)."""
    args = parse_args(argv)
    command = " ".join([PROG, shlex.join(sys.argv[1:] if argv is None else argv)])
    options = RunOptions(init_from=args.init_from, trace_out=args.trace_out, progress=not args.no_progress,
                         pictures=not args.no_pictures, source=f"config {args.config}", command=command)
    if args.sim2real:
        return main_sim2real(args, options)
    if args.real_calls or args.finetune_calls or args.sim_set or args.explore_fixed:
        raise ConfigError("--real-calls, --finetune-calls, --sim-set and --explore-fixed belong to --sim2real")
    if args.seeds:
        return main_seeds(args, options)
    if args.resume:  # with --init-from: refused in one line by learners.training
        cfg, checkpoint = resumed_config(args.resume, args.set, args.episodes)
        return train_and_evaluate(cfg, args.resume, dataclasses.replace(
            options, checkpoint=checkpoint, source=f"the run resumed from {args.resume}"))
    cfg = load_experiment(args.config, [*args.set, *episodes_and_seed(args)])
    return train_and_evaluate(cfg, args.out or f"runs/qmix-{cfg.env.team_label}-seed{cfg.train.seed}", options)


def episodes_and_seed(args: argparse.Namespace) -> list[str]:
    """``--episodes`` and ``--seed`` as the config keys they override."""
    return ([f"train.episodes={args.episodes}"] if args.episodes is not None else []) + \
        ([f"train.seed={args.seed}"] if args.seed is not None else [])


def main_seeds(args: argparse.Namespace, options: RunOptions) -> int:
    """``--seeds``: each seed in its own process (learners.seeds), then the means over seeds."""
    for flag, value in (("--resume", args.resume), ("--seed", args.seed), ("--trace-out", args.trace_out)):
        if value is not None:
            raise ConfigError(f"{flag} cannot be combined with --seeds: give each seed's run its own command")
    if len(set(args.seeds)) != len(args.seeds):
        raise ConfigError(f"--seeds {args.seeds}: each seed once")
    cfg = load_experiment(args.config, [*args.set, *episodes_and_seed(args)])  # a bad config fails here, once
    out_dir = Path(args.out or f"runs/qmix-{cfg.env.team_label}-seeds{'-'.join(map(str, args.seeds))}")
    if references_apply(cfg):  # select and cache them once here, not once in every seed's process
        from topo_env.references.headroom import cached_references
        cached_references(cfg.env, progress=options.progress)
    summary = run_seeds(cfg, args.seeds, out_dir, args.jobs, options)
    print(f"\n{cfg.env.team_label} (N={cfg.env.n_agents}, T={cfg.env.rounds}), {cfg.train.episodes} training episodes, "
          f"{cfg.train.eval_episodes} held-out episodes per seed:")
    print(format_seeds(summary))
    print(f"Wrote: {out_dir / 'seeds.json'} (the summary) and each seed's run in {out_dir}/seed<S>/")
    return 0


def main_sim2real(args: argparse.Namespace, options: RunOptions) -> int:
    """``--sim2real``: the real team of ``--config`` (studies.sim2real)."""
    if args.resume or args.init_from or args.seeds or args.trace_out:
        raise ConfigError("--sim2real runs its own training and evaluation: leave out --resume, --init-from, --seeds "
                          "and --trace-out")
    if args.real_calls is None:
        raise ConfigError("--sim2real needs --real-calls N: the budget of real LLM calls for training")
    real = load_experiment(args.config, [*args.set, *([f"train.seed={args.seed}"] if args.seed is not None else [])])
    out = Path(args.out or f"runs/sim2real-seed{real.train.seed}")
    if not 0.0 <= args.explore_fixed <= 1.0:
        raise ConfigError(f"--explore-fixed {args.explore_fixed}: give a share between 0 and 1")
    return sim2real.run(real, out, args.real_calls, finetune_calls=args.finetune_calls or 0, sim_sets=args.sim_set,
                        sim_episodes=args.episodes, progress=options.progress, command=options.command,
                        explore_fixed=args.explore_fixed)


if __name__ == "__main__":
    if signal.getsignal(signal.SIGINT) is _stop_while_loading:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.exit(run_main(main, PROG))
