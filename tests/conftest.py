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


@pytest.fixture(scope="module")
def small_search_cache(tmp_path_factory):
    """A reference cache of the module's own (``TOPOMARL_CACHE_DIR``) and a small search
    (``interrupted_run.SMALL_SEARCH``): the teacher's references are searched once per module, and
    runs in a child process find them too."""
    from interrupted_run import SMALL_SEARCH
    from topo_env.references import headroom

    folder = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TOPOMARL_CACHE_DIR", str(folder))
        patch.setattr(headroom, "REFERENCE_SELECTION", {**headroom.REFERENCE_SELECTION, **SMALL_SEARCH})
        yield folder
