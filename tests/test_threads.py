"""numpy's BLAS threads: one inside ``one_blas_thread`` (and so in every reference search), a run's own
count after ``limit_blas_threads``."""
import numpy as np  # noqa: F401  (numpy's BLAS is loaded before any limit)
import pytest
from threadpoolctl import threadpool_info, threadpool_limits

from topo_env.engine.threads import limit_blas_threads, one_blas_thread
from topo_env.frontends.env_config import EnvConfig
from topo_env.references import headroom


def blas_threads() -> set[int]:
    return {pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"}


def test_one_blas_thread_limits_blas_inside_the_block_and_restores_it_after():
    with threadpool_limits(2, user_api="blas"):
        with one_blas_thread(preload=("scipy.linalg",)):
            assert blas_threads() == {1}
        assert blas_threads() == {2}


def test_limit_blas_threads_sets_the_count_for_the_rest_of_the_process():
    with threadpool_limits(2, user_api="blas"):  # restores the count after the test
        limit_blas_threads(1)
        assert blas_threads() == {1}
        limit_blas_threads(2)
        assert blas_threads() == {2}


def test_a_reference_search_runs_blas_on_one_thread(monkeypatch, tmp_path):
    """A training run searches two at once, one per core: each search must keep to one BLAS thread."""
    seen = []

    class Searched(Exception):
        pass

    def spy(*args, **kwargs):
        seen.append(blas_threads())
        raise Searched

    monkeypatch.setattr(headroom, "select_references", spy)
    monkeypatch.setattr(headroom, "select_searched_references", spy)
    with threadpool_limits(2, user_api="blas"):
        for n_agents in (3, 4):  # enumerated, searched
            with pytest.raises(Searched):
                headroom.cached_references(EnvConfig(n_agents=n_agents), progress=False, cache_dir=tmp_path)
    assert seen == [{1}, {1}]
