"""Per-episode schedules of a training run: exploration rate and learning rate."""
from __future__ import annotations

from learners.config import ExperimentConfig


def epsilon_at(episode: int, cfg: ExperimentConfig) -> float:
    """Linear from eps_start to eps_end over eps_anneal_episodes (default: the whole run)."""
    span = cfg.exploration.eps_anneal_episodes or cfg.train.episodes
    frac = min(episode / max(span, 1), 1.0)
    return cfg.exploration.eps_start + frac * (cfg.exploration.eps_end - cfg.exploration.eps_start)


def lr_at(episode: int, cfg: ExperimentConfig) -> float:
    """qmix.lr, or linear from lr to lr_end over lr_anneal_episodes when lr_end is set."""
    if cfg.qmix.lr_end is None:
        return cfg.qmix.lr
    span = cfg.qmix.lr_anneal_episodes or cfg.train.episodes
    frac = min(episode / max(span, 1), 1.0)
    return cfg.qmix.lr + frac * (cfg.qmix.lr_end - cfg.qmix.lr)
