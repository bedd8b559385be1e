"""The fixed oracle sequences that finished train_qmix.py runs' own searches picked (from their results.json)."""
from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from learners.config import ExperimentConfig, load_experiment
from learners.evaluation import config_overrides
from topo_env.config import ConfigError, EnvConfig, env_difference


def run_oracle(run: str | Path) -> tuple[ExperimentConfig, list[list[str]]]:
    """A finished train_qmix.py run's config and its fixed oracle's sequence (action names,
    round by round), from its results.json."""
    run = Path(run)
    results_file = run / "results.json"
    if not results_file.is_file():
        raise ConfigError(f"{str(run)!r} has no results.json: give a finished train_qmix.py run directory")
    results = json.loads(results_file.read_text())
    oracle = results["eval"].get("oracle_fixed")
    if oracle is None:
        raise ConfigError(f"{str(results_file)!r} has no eval.oracle_fixed (the oracle runs for the "
                          f"simulated team with N = 3, T <= 2 and a fixed adversary placement)")
    return load_experiment(None, config_overrides(results["config"])), oracle["sequence"]


def oracle_sequences(runs: Sequence[str | Path], env: EnvConfig, env_of: str) -> dict[str, list[list[str]]]:
    """The distinct fixed oracle sequences that the searches of the finished runs ``runs``
    picked, as ``{"oracle_fixed of RUN": sequence}``; a sequence picked by several runs is named
    after the first. Every run must have trained ``env`` (that of ``env_of``, named in the
    error): a ConfigError says where they differ."""
    sequences: dict[str, list[list[str]]] = {}
    for run in runs:
        cfg, sequence = run_oracle(run)
        difference = env_difference(env, cfg.env)
        if difference:
            raise ConfigError(f"run {str(run)!r} trained another env than {env_of!r} ({difference})")
        if sequence not in sequences.values():
            sequences[f"oracle_fixed of {run}"] = sequence
    return sequences
