"""A controller's own LLM: a plain ``prompt -> text`` function on the team's server.

AgentConductor's YAML writer and TacoMAS's meta-LLM prompt a model themselves. On the LLM backend
they use the team's own server and settings (the env's ``backend`` keys: model, base_url, sampling,
cache, retries) through :class:`agents_llm.client.LLMClient`, so their calls are cached, retried and
token-counted like the agents'. The tokens and calls they spend are the controller's cost, kept
apart from the team's (:attr:`ChatFunction.tokens`, :attr:`ChatFunction.calls`).
"""
from __future__ import annotations

import asyncio

from agents_llm.config import LLMSettings


class ChatFunction:
    """``chat(prompt) -> reply`` against the server of ``settings`` (one user message; synchronous:
    controllers act between env steps). Counts the tokens and calls it spent."""

    def __init__(self, settings: LLMSettings):
        from agents_llm.client import LLMClient  # openai only where a controller prompts a model

        self.client = LLMClient(settings)
        self._loop = asyncio.new_event_loop()  # one loop for the client's connection pool
        self.tokens = 0
        self.calls = 0

    def __call__(self, prompt: str) -> str:
        result = self._loop.run_until_complete(self.client.complete([{"role": "user", "content": str(prompt)}]))
        self.calls += 1
        self.tokens += result.prompt_tokens + result.completion_tokens
        return result.content

    def close(self) -> None:
        """Close the client's connections, then its loop."""
        self._loop.run_until_complete(self.client.aclose())
        self._loop.close()
