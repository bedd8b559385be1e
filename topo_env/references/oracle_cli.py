"""The oracle's command line: ``python -m topo_env.references.oracle_cli --profile P --rounds T``
searches the best open-loop sequences (:mod:`topo_env.references.oracle`); with ``--headroom`` it
measures what a privileged adaptive controller gains over the best fixed one
(:mod:`topo_env.references.headroom`). ``--json`` prints the result as JSON."""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from topo_env.engine.cli import OneLineParser, positive_int
from topo_env.references.headroom import format_headroom, measure_headroom
from topo_env.frontends.targets import TARGET_RULES
from topo_env.references.oracle import (
    DEFAULT_CONTEXT_SHORTLIST, DEFAULT_HEADROOM_SAMPLES, DEFAULT_LARGE_SAMPLES, DEFAULT_SAMPLES, DEFAULT_SHORTLIST,
    ORACLE_AGENTS, check_setting, format_report, search,
)
from topo_env.sim.profiles import PROFILES, profile_argument


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="python -m topo_env.references.oracle_cli",
                           description="Exhaustive open-loop oracle over joint action sequences (N=3, T<=2); "
                                       "with --headroom, what a privileged adaptive controller gains over "
                                       "the best fixed sequence.")
    parser.add_argument("--profile", required=True, type=profile_argument,
                        help=f"simulated benchmark profile: one of {sorted(PROFILES)} or a profile YAML file")
    parser.add_argument("--rounds", type=positive_int, default=2, help="rounds, 1 or 2 (default 2)")
    parser.add_argument("--headroom", action="store_true",
                        help="measure the headroom: best fixed sequence against the privileged adaptive reference "
                             "(topo_env/references/headroom.py), on the same held-out episodes")
    parser.add_argument("--adversary", default="none", choices=("none", "random"),
                        help="with --headroom: 'random' puts one adversary at a random position per episode")
    parser.add_argument("--samples", type=positive_int, default=None,
                        help=f"episodes M scoring every sequence (default {DEFAULT_SAMPLES}; "
                             f"{DEFAULT_HEADROOM_SAMPLES} with --headroom)")
    parser.add_argument("--shortlist", type=positive_int, default=DEFAULT_SHORTLIST,
                        help=f"sequences re-ranked, overall and per bucket (default {DEFAULT_SHORTLIST})")
    parser.add_argument("--context-shortlist", type=positive_int, default=DEFAULT_CONTEXT_SHORTLIST,
                        help="with --headroom: open-loop and adaptive candidates re-ranked per hidden context "
                             f"(default {DEFAULT_CONTEXT_SHORTLIST})")
    parser.add_argument("--rerank-samples", type=positive_int, default=DEFAULT_LARGE_SAMPLES,
                        help=f"fresh episodes the shortlist is re-ranked on (default {DEFAULT_LARGE_SAMPLES})")
    parser.add_argument("--eval-samples", "--episodes", dest="eval_samples", type=positive_int,
                        default=DEFAULT_LARGE_SAMPLES,
                        help=f"fresh held-out episodes the winners are reported on (default {DEFAULT_LARGE_SAMPLES})")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--n-agents", type=positive_int, default=ORACLE_AGENTS,
                        help="3 (with --headroom: any; beyond N = 3, T = 2 searched by coordinate ascent)")
    parser.add_argument("--adversarial", type=int, nargs="+", default=[], metavar="i",
                        help="indices of adversarial agents (fixed positions)")
    parser.add_argument("--target-rule", default="disagree", choices=TARGET_RULES,
                        help="who selective_query / debate_check point at (default disagree)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a report")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.adversary != "none" and not args.headroom:
        parser.error(f"--adversary {args.adversary}: only with --headroom (the search takes --adversarial i)")
    try:
        if not args.headroom:  # the headroom references are searched for any team (coordinate ascent)
            check_setting(args.n_agents, args.rounds)
        if args.headroom:
            result = measure_headroom(args.profile, rounds=args.rounds, adversary=args.adversary,
                                      samples=args.samples or DEFAULT_HEADROOM_SAMPLES,
                                      rerank_samples=args.rerank_samples, episodes=args.eval_samples, seed=args.seed,
                                      adversarial_agents=tuple(args.adversarial), shortlist=args.shortlist,
                                      context_shortlist=args.context_shortlist, target_rule=args.target_rule,
                                      progress=not args.no_progress, n_agents=args.n_agents)
            report = format_headroom
        else:
            result = search(args.profile, rounds=args.rounds, samples=args.samples or DEFAULT_SAMPLES, seed=args.seed,
                            adversarial_agents=tuple(args.adversarial), target_rule=args.target_rule,
                            progress=not args.no_progress, n_agents=args.n_agents, shortlist=args.shortlist,
                            rerank_samples=args.rerank_samples, eval_samples=args.eval_samples)
            report = format_report
    except ValueError as err:  # ConfigError is a ValueError
        parser.error(str(err))
    print(json.dumps(result) if args.json else report(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
