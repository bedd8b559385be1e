"""An LLM team's config: ``env.backend: {kind: llm, ...}`` (:class:`LLMBackendConfig`), and the
server settings every OpenAI-compatible client here takes (:class:`LLMSettings`)."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from topo_env.engine.backend_registry import LLM_SERVER, TASK_LIST
from topo_env.engine.config_checks import ConfigError, as_tuple, check_int, check_number
from topo_env.engine.tasks import DOMAINS

if TYPE_CHECKING:
    from topo_env.engine.team_backend import TeamSettings


@dataclass(frozen=True, kw_only=True)
class LLMSettings:
    """Where and how to call an OpenAI-compatible chat server (OpenAI, vLLM, Ollama, llama.cpp).

    ``base_url`` / ``api_key`` default to ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY``; the key is
    best left to the variable and is never written out (:meth:`public_dict`). Sampling:
    ``temperature``, ``top_p``, ``max_tokens`` (completion), ``seed`` (sent when not None).
    Robustness: ``timeout_s`` per call, ``max_retries``, ``backoff_s`` (first wait, doubled each
    retry, with jitter), ``max_concurrency`` (calls in flight). ``replica_urls``: more servers of
    the same model (a llama.cpp server answers one request at a time; two of them on one thread each
    answer twice as many on two cores); each call goes to the least busy of ``base_url`` and these,
    and is cached under ``base_url``. ``cache_path``: sqlite response cache, None to turn caching off.
    """

    model: str
    base_url: str | None = None
    api_key: str | None = field(default=None, repr=False)
    temperature: float = 0.7
    top_p: float = 1.0
    max_tokens: int = 512
    seed: int | None = None
    timeout_s: float = 60.0
    max_retries: int = 4
    backoff_s: float = 0.5
    max_concurrency: int = 8
    replica_urls: tuple[str, ...] = ()
    cache_path: str | None = ".cache/llm_responses.sqlite"

    def __post_init__(self) -> None:
        if not isinstance(self.model, str) or not self.model:
            raise ConfigError(f"backend.model={self.model!r}: must be a non-empty model name")
        for key in ("base_url", "api_key", "cache_path"):
            value = getattr(self, key)
            if value is not None and (not isinstance(value, str) or not value):
                shown = "***" if key == "api_key" else repr(value)
                raise ConfigError(f"backend.{key}={shown}: must be a non-empty string or null")
        for key, low in (("temperature", 0.0), ("top_p", 0.0)):
            check_number(self, key, low, prefix="backend")
        for key in ("timeout_s", "backoff_s"):
            check_number(self, key, 0.0, open_low=True, prefix="backend")
        for key, low in (("max_tokens", 1), ("max_concurrency", 1), ("max_retries", 0)):
            check_int(self, key, low, prefix="backend")
        if self.seed is not None:
            check_int(self, "seed", 0, prefix="backend")
        replicas = as_tuple("backend.replica_urls", self.replica_urls)
        for url in replicas:
            if not isinstance(url, str) or not url.startswith(("http://", "https://")):
                raise ConfigError(f"backend.replica_urls holds {url!r}: give each server's base URL, like "
                                  "http://127.0.0.1:8081/v1")
        object.__setattr__(self, "replica_urls", replicas)

    def resolved_base_url(self) -> str:
        return self.base_url or os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"

    def server_urls(self) -> tuple[str, ...]:
        """Every server a call may go to: :meth:`resolved_base_url`, then ``replica_urls``."""
        return (self.resolved_base_url(), *self.replica_urls)

    def sampling(self) -> dict[str, Any]:
        params = {"temperature": self.temperature, "top_p": self.top_p, "max_tokens": self.max_tokens}
        if self.seed is not None:
            params["seed"] = self.seed
        return params


@dataclass(frozen=True, kw_only=True)
class LLMBackendConfig(LLMSettings):
    """``backend: {kind: llm, ...}``: real LLM agents (:class:`agents_llm.team.LLMTeamBackend`).

    The :class:`LLMSettings` keys, plus ``dataset`` (a built-in task set, ``"humaneval"`` or ``"small_math"``, or the path of a JSONL task
    file, schema in :mod:`agents_llm.tasks`) and ``train_size`` (tasks of the train split; the
    rest are held out). Needs ``env.domain``.
    """

    kind: str = "llm"
    dataset: str
    train_size: int = 15
    capabilities: ClassVar[frozenset[str]] = frozenset({LLM_SERVER, TASK_LIST})

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.dataset, str) or not self.dataset:
            raise ConfigError(f"backend.dataset={self.dataset!r}: must be a built-in task set ('humaneval', 'small_math') or the path of "
                              "a JSONL task file")
        check_int(self, "train_size", 0, prefix="backend")

    def check(self, env: TeamSettings) -> None:
        """An LLM team solves one domain: ``env.domain`` must be given."""
        if env.domain is None:
            raise ConfigError(f"backend kind 'llm' needs env.domain: one of {list(DOMAINS)}")
