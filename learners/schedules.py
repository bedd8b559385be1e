"""Per-episode schedules of a training run: exploration rate and learning rate."""
from __future__ import annotations

from learners.config import ExperimentConfig


def epsilon_at(episode: int, cfg: ExperimentConfig) -> float:
    """Linear from eps_start to eps_end over eps_anneal_episodes (default: the whole run)."""
    span = cfg.learner.eps_anneal_episodes or cfg.train.episodes
    frac = min(episode / max(span, 1), 1.0)
    return cfg.learner.eps_start + frac * (cfg.learner.eps_end - cfg.learner.eps_start)


def lr_at(episode: int, cfg: ExperimentConfig) -> float:
    """learner.lr, or linear from lr to lr_end over lr_anneal_episodes when lr_end is set."""
    if cfg.learner.lr_end is None:
        return cfg.learner.lr
    span = cfg.learner.lr_anneal_episodes or cfg.train.episodes
    frac = min(episode / max(span, 1), 1.0)
    return cfg.learner.lr + frac * (cfg.learner.lr_end - cfg.learner.lr)
