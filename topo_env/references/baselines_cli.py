"""Score a baseline policy on the topology env from the command line.

    python -m topo_env.references.baselines_cli --policy chain --profile mmlu_pro --episodes 200
    python -m topo_env.references.baselines_cli --policy full --profile aime25 --episodes 50 --json

Episodes run through the PettingZoo API (:func:`topo_env.references.baselines.evaluate_policy`) on the
``eval`` split; a progress bar goes to stderr. stdout gets a table, or with ``--json``
exactly one JSON object (keys ``policy``, ``profile``, ``episodes``, ``reward``,
``accuracy``, ``tokens_per_task``, ``density``) and nothing else.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from typing import Any

from topo_env.references.baselines import BASELINES, DEFAULT_ROUNDS, default_rounds, evaluate_policy, make_baseline
from topo_env.engine.cli import OneLineParser, fail, format_table, points, positive_int, run_main
from topo_env.frontends.parallel_env import parallel_env
from topo_env.sim.profiles import PROFILES, profile_argument

__all__ = ["DEFAULT_ROUNDS", "build_parser", "main", "score_every_baseline"]  # positive_int: topo_env.engine.cli

PROG = "python -m topo_env.references.baselines_cli"
TABLE_COLUMNS = ("policy", "profile", "episodes", "accuracy (pts)", "reward", "reward SE", "tokens_per_task", "density")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("--policy", required=True, choices=BASELINES, help="baseline policy")
    parser.add_argument("--profile", required=True, type=profile_argument,
                        help=f"simulated benchmark profile: one of {sorted(PROFILES)} or a profile YAML file")
    parser.add_argument("--episodes", required=True, type=positive_int, help="episodes to run")
    parser.add_argument("--seed", type=int, default=0, help="episode k uses seed + k (default 0)")
    parser.add_argument("--rounds", type=positive_int, default=None,
                        help=f"rounds per episode (default by domain: {DEFAULT_ROUNDS})")
    parser.add_argument("--n-agents", type=positive_int, default=3, help="team size N >= 2 (default 3)")
    parser.add_argument("--adversarial", type=int, nargs="+", default=[], metavar="i",
                        help="indices of adversarial agents")
    parser.add_argument("--split", choices=("train", "eval"), default="eval", help="task split (default eval)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    return parser


def score_every_baseline(args: argparse.Namespace) -> dict[str, Any]:
    """Build the env from parsed arguments and evaluate; raises ConfigError on bad env settings."""
    rounds = args.rounds if args.rounds is not None else default_rounds(args.profile)
    env = parallel_env(profile=args.profile, rounds=rounds, n_agents=args.n_agents,
                       adversarial_agents=list(args.adversarial))
    try:
        policy = make_baseline(args.policy, seed=args.seed)
        metrics = evaluate_policy(env, policy, args.episodes, seed=args.seed, split=args.split,
                                  progress=not args.no_progress)
    finally:
        env.close()
    return {"policy": args.policy, "profile": args.profile, "rounds": rounds, "n_agents": args.n_agents, **metrics}


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.n_agents < 2:
        fail(PROG, f"argument --n-agents: {args.n_agents} must be >= 2")
    result = score_every_baseline(args)
    if args.json:
        keys = ("policy", "profile", "episodes", "reward", "accuracy", "tokens_per_task", "density")
        print(json.dumps({k: result[k] for k in keys}))
    else:
        se = result["reward_std"] / math.sqrt(max(result["episodes"] - 1, 1))
        print(format_table([{**result, "accuracy (pts)": points(result["accuracy"]), "reward SE": se}], TABLE_COLUMNS))
        print(f"Scored: the {args.policy} topology on the simulated {args.profile} team (rounds={result['rounds']}, "
              f"n_agents={result['n_agents']}, adversarial={args.adversarial}), {args.split} split, episode k with "
              f"seed {args.seed} + k.")
        print(f"reward = w_acc x accuracy - w_tok x min(tokens / max_tokens, 1) per episode: higher is better; "
              f"reward SE: the standard error of the mean reward over the {result['episodes']} episodes.")
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main, PROG))
