"""Score a train_qmix.py run's policy against its oracle on more held-out episodes than the run used.

    python -m experiments.rescore_run runs/hmmt --episodes 40000
    python -m experiments.rescore_run runs/a runs/b --episodes 20000 --baselines full,solo --json
    python -m experiments.rescore_run runs/s1 --episodes 20000 --oracles-of runs/s0 runs/s2 runs/s3

A run's results.json compares QMIX with the fixed oracle on ``train.eval_episodes`` held-out
episodes (4,000 in the shipped configs), where the paired standard error of a difference is
about 0.004 reward: the gaps the issue's criterion is about (0.005-0.01) sit at one or two
standard errors. This script plays the run's greedy policy (the network validation kept, else
the last one, as ``robustness.py`` loads it), the fixed oracle's sequence from the run's
results.json, and the fixed baselines named, on ``--episodes`` held-out episodes of the run's
env (simulated team). Episode k uses the run's seed ``train.seed + EVAL_SEED_OFFSET + k``, so
the first ``train.eval_episodes`` are the run's own and the rest extend them. It prints, per
run, each policy's reward and QMIX's paired difference with it, on the run's own episodes and
on all of them.

``--oracles-of RUN ...`` also plays the fixed oracle sequences that other runs' searches picked
(runs of the same env: other seeds, say), on the same episodes. Each search scores 46,656
sequences on a few thousand episodes, so seeds' searches may pick different near-optimal
sequences; a run picked among seeds (``python -m experiments.select_run``) is then compared with every
one of them, not only with its own search's pick.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from experiments.run_oracles import oracle_sequences, run_oracle
from learners.evaluation import QMIXPolicy, agent_from_checkpoint, evaluate, load_checkpoint, paired_difference
from topo_env.baselines import FIXED_BASELINES, SequencePolicy, make_baseline
from topo_env.cli import format_table
from topo_env.config import ConfigError
from topo_env.env import TopologyParallelEnv
from topo_env.oracle import actions_from_names
from topo_env.seeding import EVAL_SEED_OFFSET


def rescore(run: str | Path, episodes: int, baselines: Sequence[str], progress: bool = True,
            oracles_of: Sequence[str | Path] = ()) -> dict[str, Any]:
    """QMIX, the run's fixed oracle, the fixed oracles of the runs ``oracles_of`` and
    ``baselines`` on ``episodes`` held-out episodes.

    Returns ``{"run", "episodes", "run_episodes", "oracle_sequence", "other_oracles": {policy:
    sequence}, "reward": {policy: mean}, "qmix_minus": {policy: {"all": {"mean", "se"}, "run":
    {"mean", "se"}}}}`` ("run": the first ``train.eval_episodes``, the episodes of the run's
    results.json). Another run's oracle is the policy ``"oracle_fixed of RUN"``; it is left out
    where it is a sequence already played. Raises ConfigError when a run in ``oracles_of``
    trained another env.
    """
    run = Path(run)
    _, sequence = run_oracle(run)
    cfg, checkpoint = load_checkpoint(run)
    sequences = {"oracle_fixed": sequence}
    for name, other_sequence in oracle_sequences(oracles_of, cfg.env, str(run)).items():
        if other_sequence not in sequences.values():
            sequences[name] = other_sequence
    torch.set_num_threads(cfg.learner.torch_threads)
    env = TopologyParallelEnv(dataclasses.replace(cfg.env, split="eval"))
    policies = [QMIXPolicy(agent_from_checkpoint(checkpoint, cfg, env.obs_builder.dim))]
    policies += [SequencePolicy(name, {"all": actions_from_names(seq)}) for name, seq in sequences.items()]
    policies += [make_baseline(name) for name in baselines]
    seed = cfg.train.seed + EVAL_SEED_OFFSET
    rewards = {}
    for policy in policies:
        _, traces = evaluate(env, policy, episodes, seed=seed, split="eval", progress=progress)
        rewards[policy.name] = [t.reward for t in traces]
    own = min(episodes, cfg.train.eval_episodes)
    qmix = rewards["qmix"]
    return {
        "run": str(run), "episodes": episodes, "run_episodes": own, "oracle_sequence": sequence,
        "other_oracles": {name: seq for name, seq in sequences.items() if name != "oracle_fixed"},
        "reward": {name: float(sum(r) / len(r)) for name, r in rewards.items()},
        "qmix_minus": {name: {"all": paired_difference(qmix, r), "run": paired_difference(qmix[:own], r[:own])}
                       for name, r in rewards.items() if name != "qmix"},
    }


def format_report(result: dict[str, Any]) -> str:
    """A table of one run's :func:`rescore` result."""
    run_col, all_col = f"qmix - policy, first {result['run_episodes']}", f"qmix - policy, all {result['episodes']}"
    rows = []
    for name, reward in result["reward"].items():
        row = {"policy": name, "reward": reward}
        for column, part in ((run_col, "run"), (all_col, "all")):
            if name != "qmix":
                d = result["qmix_minus"][name][part]
                row[column] = f"{d['mean']:+.4f} ({d['se']:.4f})"
        rows.append(row)
    sequences = {"oracle_fixed": result["oracle_sequence"], **result.get("other_oracles", {})}
    header = "\n".join(f"  {name}: {' / '.join(','.join(row) for row in seq)}" for name, seq in sequences.items())
    return f"{result['run']}\n{header}\n{format_table(rows, ('policy', 'reward', run_col, all_col))}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="train_qmix.py run directories (checkpoint.pt and results.json)")
    parser.add_argument("--episodes", type=int, default=40000, help="held-out episodes per policy (default 40,000)")
    parser.add_argument("--baselines", default="full",
                        help=f"comma-separated fixed baselines to score too, of {','.join(FIXED_BASELINES)} "
                             "(default full; empty for none)")
    parser.add_argument("--oracles-of", nargs="+", default=[], metavar="RUN",
                        help="also play the fixed oracle sequences of these runs (same env: other seeds)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    if args.episodes < 1:
        parser.error(f"--episodes {args.episodes}: must be at least 1")
    baselines = [b for b in args.baselines.split(",") if b]
    unknown = sorted(set(baselines) - set(FIXED_BASELINES))
    if unknown:
        parser.error(f"--baselines: unknown {unknown}; choose from {list(FIXED_BASELINES)}")
    try:
        results = [rescore(run, args.episodes, baselines, progress=not args.no_progress, oracles_of=args.oracles_of)
                   for run in args.runs]
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(json.dumps(results, indent=2) if args.json else "\n\n".join(format_report(r) for r in results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
