"""What both front-ends (the PettingZoo env and the orchestrator env) do the same way.

``reset(seed, options)`` semantics: ``options["task"]`` (a :class:`~topo_env.engine.tasks.Task` or an
index into the split), ``options["split"]`` (``train`` / ``eval``, default the config's) and
``options["adversaries"]`` (forced adversary indices; ``[]`` for none). With the simulator, seed
and options determine the episode completely.
"""
from __future__ import annotations

import numbers
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np

from topo_env.engine.team_backend import TeamBackend
from topo_env.engine.roles import check_adversaries
from topo_env.frontends.env_config import EnvConfig
from topo_env.engine.episode import TeamEpisode
from topo_env.frontends.observation import ObservationBuilder
from topo_env.engine.tasks import Task, task_bucket

RESET_OPTIONS: tuple[str, ...] = ("adversaries", "split", "task")


class EngineFrontEnd:
    """What both envs offer on top of their :class:`~topo_env.engine.episode.TeamEpisode` (``self.episode``)."""

    episode: TeamEpisode

    def record(self, path: str | Path | None, truth: str | Path | None = None) -> None:
        """Append every episode that ends from now on, as one JSON line, to ``path`` (the schema of
        :mod:`topo_env.engine.traces`: per call what it was shown and answered, tokens, the task's
        published metadata), and with ``truth`` the task's hidden truth (a simulated task's difficulty,
        latent, trap) to that separate file; None stops recording."""
        self.episode.record(path, truth)

    def close(self) -> None:
        self.episode.close()

    def episode_summary(self) -> dict[str, Any]:
        """What the episode that just ended was, for scoring and analysis once every decision is
        made: ``task_id``, ``subject`` and ``bucket`` (the task's metadata; None where it has none)
        and ``adversaries`` (sorted indices). RuntimeError before the episode's end: a policy
        must tell an adversary from its behaviour, never from here."""
        if not self._ended or self.episode.task is None:
            raise RuntimeError("episode_summary() is given once an episode has ended")
        task = self.episode.task
        return {"task_id": task.id, "subject": task.metadata.get("subject"), "bucket": task_bucket(task),
                "adversaries": tuple(self.episode.adversaries)}


def choose_task(backend: TeamBackend, config: EnvConfig, rng: np.random.Generator, options: dict) -> Task:
    """The episode's task from the reset options (drawn from ``rng`` unless one is named)."""
    unknown = sorted(set(options) - set(RESET_OPTIONS))
    if unknown:  # PettingZoo's API test passes arbitrary options: warn, do not fail
        gymnasium.logger.warn(f"reset() ignores unknown option(s) {unknown}; known: {list(RESET_OPTIONS)}")
    split = options.get("split", config.split)
    task = options.get("task")
    if task is None:
        return backend.sample_task(rng, split)
    if isinstance(task, numbers.Integral) and not isinstance(task, bool):
        return backend.task_at(split, int(task))
    if isinstance(task, Task):
        return task
    raise ValueError(f"options['task'] must be a Task or a task index, got {task!r}")


def forced_adversaries(options: dict, n_agents: int) -> tuple[int, ...] | None:
    """``options["adversaries"]`` validated and sorted, or None when the option is absent."""
    forced = options.get("adversaries")
    if forced is None:
        return None
    return tuple(sorted(check_adversaries(forced, n_agents, "options['adversaries']")))


def begin_episode(episode: TeamEpisode, config: EnvConfig, encoder: Any, obs_builder: ObservationBuilder,
                  rng: np.random.Generator, options: dict | None) -> np.ndarray:
    """``reset()`` of either front-end: choose the task, start the engine on it (the adversaries
    forced by the options, or drawn per the config after the backend's draws) and return the
    episode's (N, D) observation template. One that raises leaves ``rng`` and the engine as they
    were."""
    saved = rng.bit_generator.state
    options = dict(options or {})
    try:
        forced = forced_adversaries(options, config.n_agents)
        task = choose_task(episode.backend, config, rng, options)
        template = obs_builder.episode_template(
            encoder.encode(task.prompt), int(task.metadata.get("prompt_tokens", len(task.prompt.split())))
        )
        episode.start(task, rng, config.draw_adversaries if forced is None else forced)
    except BaseException:
        rng.bit_generator.state = saved
        raise
    return template


def render_picture(mode: str, graph: np.ndarray, episode: TeamEpisode, roles: tuple[str, ...], started: bool,
                   filename: str) -> np.ndarray | None:
    """``render()`` for the picture modes: the last round's topology (``graph``: its edges) drawn
    by :func:`topo_env.frontends.plots.round_picture`; ``rgb_array`` returns the (H, W, 3) uint8 array,
    ``human`` shows it in a window, or saves it as ``filename`` where no display exists."""
    from topo_env.frontends.plots import round_picture, show_picture  # matplotlib only when pictures are asked for

    history = episode.history if started else []
    spec = history[-1].spec if history else None
    rgb = round_picture(
        graph, roles, active=None if spec is None else spec.active, verify=None if spec is None else spec.verify,
        adversaries=episode.adversaries if started else (),
        title=f"round {len(history)}/{episode.max_rounds}" if history else "before round 1",
    )
    if mode == "rgb_array":
        return rgb
    show_picture(rgb, filename)
    return None
