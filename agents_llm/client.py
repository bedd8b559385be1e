"""An OpenAI-compatible chat client for agent calls: OpenAI, vLLM, Ollama, llama.cpp's server.

Settings: :class:`agents_llm.config.LLMSettings` (the ``env.backend`` keys of an LLM team).
One :class:`LLMClient` per team backend wraps one ``openai.AsyncOpenAI`` client (created
lazily, never pickled). Each call:

* is served from the :class:`~agents_llm.cache.ResponseCache` when it holds the same request;
* otherwise waits for a slot (at most ``max_concurrency`` calls in flight), then calls the
  server with a per-call timeout, retrying 429s, 5xx, timeouts, connection errors and malformed
  bodies with
  exponential backoff and jitter, and raises one :class:`LLMError` after ``max_retries``;
* fails at once with :class:`ServerUnreachable` (one line; for a local address the command that
  starts the local server) when the very first connection is refused: a wrong address or a
  server not started, which retrying cannot fix;
* fails at once with :class:`ServerCrashed` when the server answers that its model process died
  (a 503 whose ``error.type`` is ``"server_crashed"``, as :mod:`agents_llm.local_server` answers
  after its llama.cpp process crashed): the line says how it died and which log to read;
* sends a sampling ``seed`` derived from the request (:func:`request_seed`), so a fresh cache on the same
  server samples the same replies whatever the server served before;
* counts tokens from the response's ``usage`` (prompt + completion, reasoning tokens when the
  server reports them); without usage it estimates them and marks the result ``estimated``.

API keys come from the config or ``OPENAI_API_KEY`` and never appear in reprs, errors, cache
keys or results.
"""
from __future__ import annotations

import asyncio
import math
import os
import random
import socket
from typing import Any, NamedTuple
from urllib.parse import urlsplit

import openai

from agents_llm.cache import ResponseCache, request_key
from topo_env.engine.backend_registry import BackendFailed, BackendUnavailable
from agents_llm.config import LLMSettings
from agents_llm.local_server import CRASH_ERROR_TYPE

RETRYABLE = (openai.RateLimitError, openai.InternalServerError, openai.APITimeoutError, openai.APIConnectionError)
LOCAL_HOSTS = ("localhost", "::1", "0.0.0.0")


class LLMError(BackendFailed):
    """A call that failed for good (after retries, or with a non-retryable error)."""


class ServerUnreachable(LLMError, BackendUnavailable):
    """No server answers at the configured address (connection refused or host unknown) before
    any call succeeded: retrying would only delay the same failure."""


class ServerCrashed(LLMError):
    """The server's model process died (a local llama.cpp server that crashed): retrying cannot help
    until someone restarts it. The message is the server's own line: how, the log, what to do."""


def unreachable_message(base_url: str) -> str:
    """One line naming ``base_url`` and what to do: for a local address, the command that
    starts the local server on its port."""
    parts = urlsplit(base_url)
    host = parts.hostname or ""
    if host in LOCAL_HOSTS or host.startswith("127."):
        port = parts.port or 8080
        return (f"no LLM server is listening at {base_url}: start one with `python -m agents_llm.local_server "
                f"--port {port}` (or point env.backend.base_url at a running server)")
    return (f"cannot connect to the LLM server at {base_url}: check env.backend.base_url (or OPENAI_BASE_URL) "
            "and the network")


class ChatResult(NamedTuple):
    """One completion with its token counts (this call's)."""

    content: str
    prompt_tokens: int
    completion_tokens: int
    reasoning_tokens: int
    estimated: bool  # no usage from the server: counts are an estimate
    cached: bool


def request_seed(key: str) -> int:
    """The sampling seed sent with the request whose cache key is ``key`` (its first 31 bits): the same
    request and sample index always sample with the same seed. llama.cpp, vLLM, SGLang and Ollama honour
    it; OpenAI on a best-effort basis."""
    return int(key[:8], 16) & 0x7FFF_FFFF


def estimate_tokens(text: str) -> int:
    """Rough token count when a server reports no usage: one token per 4 characters."""
    return max(1, math.ceil(len(text) / 4)) if text else 0


class LLMClient:
    """Concurrent, retried, cached chat completions against one OpenAI-compatible server (or
    several replicas of it: ``replica_urls``)."""

    def __init__(self, config: LLMSettings):
        self.config = config
        self._clients: dict[str, openai.AsyncOpenAI] = {}  # per server URL
        self._busy = {url: 0 for url in config.server_urls()}  # calls in flight per server URL
        self._slots: asyncio.Semaphore | None = None
        self._slots_loop: asyncio.AbstractEventLoop | None = None
        self._cache = ResponseCache(config.cache_path) if config.cache_path else None
        self._jitter = random.Random(0)
        self.calls_made = 0  # requests sent by this client, retries included (cache hits excluded)
        self.reached = False  # a call has succeeded: later refusals are outages to retry, not a wrong address

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_clients"], state["_slots"], state["_slots_loop"] = {}, None, None  # live resources do not pickle
        return state

    def __repr__(self) -> str:
        return f"LLMClient(model={self.config.model!r}, base_url={self.config.resolved_base_url()!r})"

    def _openai(self, url: str) -> openai.AsyncOpenAI:
        if url not in self._clients:
            key = self.config.api_key or os.environ.get("OPENAI_API_KEY") or "no-key"  # local servers need none
            self._clients[url] = openai.AsyncOpenAI(base_url=url, api_key=key, timeout=self.config.timeout_s,
                                                    max_retries=0)
        return self._clients[url]

    def _semaphore(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        if self._slots is None or self._slots_loop is not loop:
            self._slots, self._slots_loop = asyncio.Semaphore(self.config.max_concurrency), loop
        return self._slots

    async def aclose(self) -> None:
        """Close the connection pools (on the loop that used them); the next call opens new ones."""
        clients, self._clients = self._clients, {}
        for client in clients.values():
            await client.close()

    async def complete(self, messages: list[dict[str, str]], sample_index: int = 0) -> ChatResult:
        """The model's reply to ``messages`` (cached by request and ``sample_index``)."""
        cfg = self.config
        params = cfg.sampling()
        key = request_key(cfg.resolved_base_url(), cfg.model, messages, params, sample_index)
        if self._cache is not None:
            hit = self._cache.get(key)
            if hit is not None:
                return ChatResult(**hit, cached=True)
        async with self._semaphore():
            result = await self._call_with_retries(messages, {**params, "seed": request_seed(key)})
        if self._cache is not None:
            self._cache.put(key, {k: v for k, v in result._asdict().items() if k != "cached"})
        return result

    async def _call_with_retries(self, messages: list[dict[str, str]], params: dict[str, Any]) -> ChatResult:
        cfg = self.config
        last: Exception | None = None
        connected = False  # an attempt of this call reached a server (then a refusal is an outage)
        for attempt in range(cfg.max_retries + 1):
            url = min(self._busy, key=self._busy.__getitem__)  # the least busy server (base_url on a tie)
            self._busy[url] += 1
            try:
                self.calls_made += 1
                response = await asyncio.wait_for(
                    self._openai(url).chat.completions.create(model=cfg.model, messages=messages, **params),
                    timeout=cfg.timeout_s,
                )
                self.reached = True
                return _to_result(response, messages)
            except (asyncio.TimeoutError, ValueError, openai.APIResponseValidationError, *RETRYABLE) as err:
                # ValueError: a body that is not the JSON it should be (a glitching server)
                crash = _crash_line(err)
                if crash:
                    raise ServerCrashed(f"the LLM server at {url} is down: {crash}") from None
                refused = _refused(err)
                if not self.reached and not connected and refused:
                    raise ServerUnreachable(unreachable_message(url)) from None
                connected = connected or not refused
                last = err
                if attempt == cfg.max_retries:
                    break
                wait = cfg.backoff_s * (2 ** attempt) * (0.5 + self._jitter.random())
                await asyncio.sleep(wait)
            except openai.APIStatusError as err:  # 4xx other than 429: retrying will not help
                raise LLMError(f"{url} model {cfg.model!r}: HTTP {err.status_code} "
                               f"{type(err).__name__}") from None
            finally:
                self._busy[url] -= 1
        raise LLMError(f"{cfg.resolved_base_url()} model {cfg.model!r}: gave up after {cfg.max_retries + 1} "
                       f"attempt(s): {type(last).__name__}") from None


def _refused(err: BaseException) -> bool:
    """Whether ``err`` is a failed connect (refused, host unknown), not a slow or broken reply."""
    if not isinstance(err, openai.APIConnectionError) or isinstance(err, openai.APITimeoutError):
        return False
    cause: BaseException | None = err
    while cause is not None:
        if isinstance(cause, (ConnectionRefusedError, socket.gaierror)):
            return True
        cause = cause.__cause__ or cause.__context__
    return False


def _crash_line(err: BaseException) -> str:
    """The one-line message of a server that says its model process died, else ''."""
    body = getattr(err, "body", None)
    body = body if isinstance(body, dict) else {}
    if body.get("type") != CRASH_ERROR_TYPE:
        return ""
    return " ".join(str(body.get("message") or "its model process died").split())


def _to_result(response: Any, messages: list[dict[str, str]]) -> ChatResult:
    choice = response.choices[0] if response.choices else None
    content = (choice.message.content if choice is not None and choice.message is not None else None) or ""
    usage = getattr(response, "usage", None)
    if usage is not None and usage.prompt_tokens is not None and usage.completion_tokens is not None:
        details = getattr(usage, "completion_tokens_details", None)
        reasoning = int(getattr(details, "reasoning_tokens", 0) or 0) if details is not None else 0
        return ChatResult(content, int(usage.prompt_tokens), int(usage.completion_tokens), reasoning, False, False)
    prompt = sum(estimate_tokens(m.get("content", "")) for m in messages)
    return ChatResult(content, prompt, estimate_tokens(content), 0, True, False)
