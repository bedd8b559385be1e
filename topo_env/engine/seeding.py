"""Every random stream of the project, derived in one place from a run's seed.

A run has one integer seed (``train.seed``, ``--seed``). Everything random derives from it here, so
streams never collide and a reader sees at a glance which episodes a figure was measured on:

================  ==================================  ================================================
stream            what draws from it                   derived as
================  ==================================  ================================================
training          env of training episode e            env seed ``seed * 10_000_019 + e``
exploration       epsilon-greedy of training ep. e     ``default_rng([seed, 1, e])`` (a batch: its first e)
replay            minibatches after training ep. e     ``default_rng([seed, 2, e])``
noise samples     noise samples of a training batch    ``default_rng([seed, 3, e])``, e its first episode
teacher           env of teacher demonstration k       env seed ``seed * 10_000_019 + 5_000_000 + k`` (train split)
validation        env of validation episode k          env seed ``seed + 1_000_000_000 + k`` (train split)
selection         runs compared on common episodes     env seed ``1_000_500_000 + k`` (train split, any run)
evaluation        env of held-out episode k            env seed ``1_000_000 + seed * 1_000_000 + k`` (eval split)
policy            a stochastic policy's draws          ``default_rng([episode seed, POLICY_STREAMS[name]])``
oracle samples    the oracle's tasks and noise         ``default_rng([seed, ORACLE_STREAMS[split]])``
================  ==================================  ================================================

The env seeds index the PettingZoo / Gymnasium ``reset(seed=...)``; with the simulated team a seed
fixes the task and all of the episode's noise.
"""
from __future__ import annotations

import numpy as np

TRAINING_SEED_STRIDE = 10_000_019
"""Training episode e of a run with seed s uses env seed ``s * TRAINING_SEED_STRIDE + e``: runs of
different seeds share no training episode below 10 million episodes (runs at simulator scale play
10^5-10^6), and seeds below 99 stay below the validation seeds."""
EVAL_SEED_OFFSET = 1_000_000
EVAL_SEED_STRIDE = 1_000_000
"""Held-out episode k of a run with seed s uses env seed ``EVAL_SEED_OFFSET + s * EVAL_SEED_STRIDE
+ k`` (eval split, :func:`held_out_seed`): the seeds of a study are scored on disjoint held-out
episodes (up to 1,000,000 each), so a standard error over seeds carries the held-out episodes'
noise as well as training's. Seed 0's are those of every release before 0.2.0."""
VALIDATION_SEED_OFFSET = 1_000_000_000
"""Validation episode k of a run with seed s uses env seed ``s + VALIDATION_SEED_OFFSET + k``
(train split; far from the training episodes' seeds)."""
EXPLORATION_STREAM, REPLAY_STREAM, NOISE_SAMPLE_STREAM = 1, 2, 3
POLICY_STREAMS: dict[str, int] = {"random": 0x5EED, "qmix": 0xE7A1}
"""Mixed into a stochastic policy's episode seed, so its draws are not the env's draws for that seed."""
ORACLE_STREAMS: dict[str, int] = {"train": 0, "eval": 1, "rerank": 2, "values": 3}
"""The oracle's sample sets: selection ("train"), reporting ("eval"), re-ranking ("rerank") and the
teacher's value table (``"values"``: :mod:`topo_env.references.reading`)."""


TEACHER_SEED_OFFSET = 5_000_000
"""Teacher demonstration k of a run with seed s uses env seed ``training_env_seed(s, TEACHER_SEED_OFFSET + k)``:
after the training episodes of any run shorter than 5 million episodes."""


def held_out_seed(seed: int) -> int:
    """The env seed of held-out episode 0 of a run with seed ``seed``; episode k adds k."""
    return EVAL_SEED_OFFSET + int(seed) * EVAL_SEED_STRIDE


def teacher_env_seed(seed: int, demonstration: int) -> int:
    """The env seed of teacher demonstration ``demonstration`` (train split)."""
    return training_env_seed(seed, TEACHER_SEED_OFFSET + int(demonstration))


def training_env_seed(seed: int, episode: int) -> int:
    """The env seed of training episode ``episode``."""
    return int(seed) * TRAINING_SEED_STRIDE + int(episode)


def episode_rng(seed: int, stream: int, episode: int) -> np.random.Generator:
    """The generator of one training episode's ``stream`` (:data:`EXPLORATION_STREAM`,
    :data:`REPLAY_STREAM`, :data:`NOISE_SAMPLE_STREAM`), or of a batch of training episodes that starts
    at ``episode``: independent of the env's draws and of every other episode."""
    return np.random.default_rng([int(seed), int(stream), int(episode)])


def policy_rng(policy: str, episode_seed: int | None) -> np.random.Generator:
    """A stochastic policy's generator for one episode (None: fresh entropy)."""
    if episode_seed is None:
        return np.random.default_rng()
    return np.random.default_rng([int(episode_seed), POLICY_STREAMS[policy]])


def oracle_rng(seed: int, split: str) -> np.random.Generator:
    """The generator of the oracle's ``split`` sample set."""
    if split not in ORACLE_STREAMS:
        raise ValueError(f"split={split!r}: must be one of {sorted(ORACLE_STREAMS)}")
    return np.random.default_rng([int(seed), ORACLE_STREAMS[split]])
