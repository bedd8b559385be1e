"""Pick the best of several train_qmix.py runs of one env (seeds, say) on common fresh validation episodes.

    python -m experiments.select_run runs/s0 runs/s1 runs/s2 runs/s3 --episodes 20000

A run's own validation (``train.validate_every``) scores its checkpoints on episodes that
depend on its seed, so two seeds' validation rewards are not paired, and the gaps between good
runs (0.001-0.005 reward) are below what 4,000 unpaired episodes resolve. This script plays each
run's greedy policy (the network validation kept, else the last one, as ``robustness.py`` loads
it) on the same ``--episodes`` train-split episodes: episode k uses env seed ``SELECTION_SEED +
k``, which no training episode and no run's validation uses (for run seeds below 10,000 and
fewer than 500,000 validation episodes). It prints each run's reward, its paired difference
with the best run, and the pick. Held-out episodes are never played, so the pick can then be
scored on them with ``python -m experiments.rescore_run``.

``--oracles`` also plays the fixed oracle sequences that the runs' own searches picked (from
their results.json) on the same episodes, and names the best of them: the oracle's sequence
picked the way the run is, on episodes that neither will be scored on. Then

    python -m experiments.rescore_run PICKED_RUN --oracles-of ORACLE_RUN --episodes 80000

compares the two on held-out episodes without the winner's curse of taking the best of several
sequences on the very episodes that score it.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from experiments.run_oracles import oracle_sequences
from learners.evaluation import QMIXPolicy, agent_from_checkpoint, evaluate, load_checkpoint, paired_difference
from topo_env.baselines import SequencePolicy
from topo_env.cli import format_table
from topo_env.config import ConfigError, env_difference
from topo_env.env import TopologyParallelEnv
from topo_env.oracle import actions_from_names
from topo_env.seeding import SELECTION_SEED



def select_run(runs: Sequence[str | Path], episodes: int, progress: bool = True,
               oracles: bool = False) -> dict[str, Any]:
    """Score every run's greedy policy on the same ``episodes`` selection episodes.

    Returns ``{"episodes", "selected": run with the highest mean reward, "reward": {run: mean},
    "minus_selected": {run: {"mean", "se"}}}`` (each other run's paired difference with the pick).
    With ``oracles`` it also has ``"oracles"``: ``{"sequences": {name: sequence}, "reward":
    {name: mean}, "minus_selected": {name: {"mean", "se"}}, "best": name}`` for the distinct
    fixed oracle sequences of the runs' searches (``"oracle_fixed of RUN"``), played on the same
    episodes; the pick stays among the runs. Raises ConfigError when a run is given twice, has
    no checkpoint (or, with ``oracles``, no results.json), or trained another env.
    """
    names = [str(run) for run in runs]
    if not names:
        raise ConfigError("give at least one run directory")
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise ConfigError(f"run {twice[0]!r} is given more than once")
    loaded = [(name, *load_checkpoint(name)) for name in names]
    first, first_cfg, _ = loaded[0]
    for name, cfg, _ in loaded[1:]:
        difference = env_difference(first_cfg.env, cfg.env)
        if difference:
            raise ConfigError(f"runs {first!r} and {name!r} trained different envs ({difference}); "
                              f"select among runs of one env")
    torch.set_num_threads(first_cfg.learner.torch_threads)
    env = TopologyParallelEnv(dataclasses.replace(first_cfg.env, split="train"))
    sequences = oracle_sequences(names, first_cfg.env, first) if oracles else {}
    policies = [(name, QMIXPolicy(agent_from_checkpoint(checkpoint, cfg, env.obs_builder.dim)))
                for name, cfg, checkpoint in loaded]
    policies += [(name, SequencePolicy(name, {"all": actions_from_names(sequence)}))
                 for name, sequence in sequences.items()]
    rewards = {}
    for name, policy in policies:
        _, traces = evaluate(env, policy, episodes, seed=SELECTION_SEED, split="train", progress=progress)
        rewards[name] = [t.reward for t in traces]
    means = {name: float(np.mean(r)) for name, r in rewards.items()}
    selected = max(names, key=means.__getitem__)  # ties: the first given
    minus_selected = {name: paired_difference(r, rewards[selected]) for name, r in rewards.items() if name != selected}
    result = {"episodes": episodes, "selected": selected, "reward": {name: means[name] for name in names},
              "minus_selected": {name: minus_selected[name] for name in names if name != selected}}
    if oracles:
        result["oracles"] = {"sequences": sequences, "reward": {name: means[name] for name in sequences},
                             "minus_selected": {name: minus_selected[name] for name in sequences},
                             "best": max(sequences, key=means.__getitem__)}
    return result


def format_report(result: dict[str, Any]) -> str:
    """A table of a :func:`select_run` result, best first (runs and, with ``oracles``, the
    oracle sequences), the pick and the best oracle sequence."""
    column = "policy - selected (SE)"
    oracles = result.get("oracles", {"reward": {}, "minus_selected": {}, "sequences": {}})
    reward = {**result["reward"], **oracles["reward"]}
    minus_selected = {**result["minus_selected"], **oracles["minus_selected"]}
    rows = []
    for name in sorted(reward, key=reward.__getitem__, reverse=True):
        row = {"policy": name, "reward": reward[name]}
        if name in minus_selected:
            d = minus_selected[name]
            row[column] = f"{d['mean']:+.4f} ({d['se']:.4f})"
        rows.append(row)
    lines = [f"{result['episodes']} common train-split episodes (env seeds from {SELECTION_SEED})",
             format_table(rows, ("policy", "reward", column)), f"selected: {result['selected']}"]
    if "oracles" in result:
        best = oracles["best"]
        lines.append(f"best oracle sequence: {best}: {' / '.join(','.join(row) for row in oracles['sequences'][best])}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="train_qmix.py run directories (with checkpoint.pt) of one env")
    parser.add_argument("--episodes", type=int, default=20000, help="selection episodes per run (default 20,000)")
    parser.add_argument("--oracles", action="store_true",
                        help="also play the runs' fixed oracle sequences (results.json) on the same episodes")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    if args.episodes < 1:
        parser.error(f"--episodes {args.episodes}: must be at least 1")
    try:
        result = select_run(args.runs, args.episodes, progress=not args.no_progress, oracles=args.oracles)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=2) if args.json else format_report(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
