"""Fixtures shared across test files."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def smollm2_server():
    """One llama.cpp server with SmolLM2-135M for every real-model test of a session (pytest-xdist:
    one per worker that runs such a test). One thread: the suite keeps every core busy, and there
    llama.cpp's OpenMP threads spin waiting for each other at every step (on 2 loaded cores a call
    took 1-3 s with 2 threads, 0.1-0.5 s with 1)."""
    from agents_llm.local_server import LocalLlamaServer

    with LocalLlamaServer(n_ctx=2048, n_threads=1) as server:
        yield server
