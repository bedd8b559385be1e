"""The task record shared by every backend (simulated team and real LLM teams), and how a task
source draws the index of an episode's task (:func:`draw_task_index`)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

DOMAINS: tuple[str, ...] = ("math", "code", "reasoning")
DIFFICULTY_BUCKETS: tuple[str, ...] = ("easy", "medium", "hard")
TASK_INDICES = 2**31 - 1
"""A drawn task index lies in 0 .. TASK_INDICES - 1 (a finite split takes it modulo its size)."""


@dataclass(frozen=True)
class Task:
    """One problem for the team.

    Attributes:
        id: stable identifier, unique within its source.
        domain: one of :data:`DOMAINS`.
        prompt: the problem statement the agents see.
        reference: the reference answer (math / multiple choice) or ``None`` for code.
        tests: test code for code tasks (hidden tests), else ``None``.
        metadata: what the dataset publishes besides the prompt, e.g. ``subject``, ``choices``, a
            ``difficulty`` level; written to traces, read by the fit.
        hidden: what a simulator draws for the task and no dataset publishes (the simulated team's
            ``difficulty``, ``latent``, ``bucket``, ``trap``, its ``answers`` by label): read by the
            simulated team and by studies that score against the truth; never written to traces.
    """

    id: str
    domain: str
    prompt: str
    reference: str | None = None
    tests: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    hidden: dict[str, Any] = field(default_factory=dict, repr=False)


def task_bucket(task: Task) -> Any:
    """The task's difficulty bucket: the dataset's own (``metadata["bucket"]``) where it publishes one,
    else the simulator's (``hidden["bucket"]``); None where neither knows it."""
    return task.metadata.get("bucket", task.hidden.get("bucket"))


def difficulty_bucket(difficulty: float) -> int:
    """Bucket index (0 easy, 1 medium, 2 hard) of a difficulty in [0, 1]: thirds."""
    return min(int(difficulty * 3.0), 2)


DEFAULT_ROUNDS: dict[str, int] = {"math": 3, "code": 2, "reasoning": 2}
"""Communication rounds per domain used in the paper (Appendix D)."""


def draw_task_index(rng: np.random.Generator, split: str, train_tasks: int | None = None) -> int:
    """The index of an episode's task in ``split``, drawn with one ``rng.integers`` call (what every
    task source's ``sample`` draws): uniform over 0 .. :data:`TASK_INDICES` - 1, or, on the train
    split with ``train_tasks`` K (the env's ``train_tasks``), over 0 .. K - 1: training meets K
    distinct tasks at most. Other splits ignore K."""
    if train_tasks is not None and split == "train":
        return int(rng.integers(int(train_tasks)))
    return int(rng.integers(TASK_INDICES))
