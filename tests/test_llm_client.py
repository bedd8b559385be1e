"""The OpenAI-compatible client: usage tokens, cache, retries, timeouts, concurrency, secrets."""
from __future__ import annotations

import asyncio
import pickle
import socket
import threading
import time

import pytest

from agents_llm.client import LLMClient, LLMError, ServerCrashed, ServerUnreachable, unreachable_message
from agents_llm.local_server import CrashNotice
from topo_env.engine.backend_registry import BackendUnavailable
from agents_llm.config import LLMSettings
from fake_openai_server import FakeOpenAIServer

SECRET = "sk-test-secret-do-not-leak"
MESSAGES = [{"role": "system", "content": "You are a solver."}, {"role": "user", "content": "2+2?"}]


def make(server: FakeOpenAIServer, tmp_path, **kw) -> LLMClient:
    opts = dict(model="test-model", base_url=server.base_url, api_key=SECRET, backoff_s=0.01, timeout_s=2.0,
                cache_path=str(tmp_path / "cache.sqlite"))
    opts.update(kw)
    return LLMClient(LLMSettings(**opts))


def run(coro):
    return asyncio.run(coro)


def test_tokens_come_from_usage(tmp_path):
    with FakeOpenAIServer([("ok", "Answer: B", {"prompt_tokens": 11, "completion_tokens": 7})]) as srv:
        res = run(make(srv, tmp_path).complete(MESSAGES))
    assert (res.content, res.prompt_tokens, res.completion_tokens, res.estimated, res.cached) == ("Answer: B", 11, 7, False, False)
    assert srv.requests[0]["messages"] == MESSAGES and srv.requests[0]["model"] == "test-model"


def test_reasoning_tokens_and_missing_usage_is_flagged(tmp_path):
    usage = {"prompt_tokens": 5, "completion_tokens": 9, "completion_tokens_details": {"reasoning_tokens": 4}}
    with FakeOpenAIServer([("ok", "x", usage), ("ok", "a reply of some length", None)]) as srv:
        client = make(srv, tmp_path, cache_path=None)
        first = run(client.complete(MESSAGES))
        second = run(client.complete(MESSAGES, sample_index=1))
    assert first.reasoning_tokens == 4 and not first.estimated
    assert second.estimated and second.completion_tokens == 6 and second.prompt_tokens > 0


def test_cache_serves_reruns_without_calls(tmp_path):
    with FakeOpenAIServer([("ok", "one", {"prompt_tokens": 4, "completion_tokens": 2}),
                           ("ok", "two", {"prompt_tokens": 4, "completion_tokens": 3})]) as srv:
        client = make(srv, tmp_path)
        a = run(client.complete(MESSAGES))
        again = LLMClient(client.config)  # a new process would see the same file
        b = run(again.complete(MESSAGES))
        c = run(again.complete(MESSAGES, sample_index=1))
    assert len(srv.requests) == 2  # the rerun made no call; the second sample did
    assert b.cached and (b.content, b.prompt_tokens, b.completion_tokens) == (a.content, a.prompt_tokens, a.completion_tokens)
    assert c.content == "two"
    assert SECRET.encode() not in (tmp_path / "cache.sqlite").read_bytes()


def test_cache_off_calls_every_time(tmp_path):
    with FakeOpenAIServer() as srv:
        client = make(srv, tmp_path, cache_path=None)
        run(client.complete(MESSAGES))
        run(client.complete(MESSAGES))
    assert len(srv.requests) == 2


def test_each_request_carries_its_own_sampling_seed(tmp_path):
    """The seed is the request's: the same messages and sample index send the same one, another sample
    index or other messages another; it is a valid 31-bit seed for every server."""
    other = [MESSAGES[0], {"role": "user", "content": "3+3?"}]
    with FakeOpenAIServer() as srv:
        client = make(srv, tmp_path, cache_path=None)
        for messages, sample in ((MESSAGES, 0), (MESSAGES, 0), (MESSAGES, 1), (other, 0)):
            run(client.complete(messages, sample_index=sample))
    seeds = [r["seed"] for r in srv.requests]
    assert seeds[0] == seeds[1] and len({seeds[0], seeds[2], seeds[3]}) == 3
    assert all(isinstance(x, int) and 0 <= x < 2 ** 31 for x in seeds)


def test_429_then_success(tmp_path):
    with FakeOpenAIServer([("status", 429), ("ok", "fine", {"prompt_tokens": 1, "completion_tokens": 1})]) as srv:
        res = run(make(srv, tmp_path).complete(MESSAGES))
    assert res.content == "fine" and len(srv.requests) == 2


def test_5xx_past_retry_limit_gives_one_clear_error(tmp_path):
    with FakeOpenAIServer([("status", 500)]) as srv:
        with pytest.raises(LLMError, match="gave up after 3 attempt") as err:
            run(make(srv, tmp_path, max_retries=2).complete(MESSAGES))
    assert len(srv.requests) == 3
    assert SECRET not in str(err.value) and SECRET not in repr(err.value.__cause__)


def test_400_is_not_retried(tmp_path):
    with FakeOpenAIServer([("status", 400)]) as srv:
        with pytest.raises(LLMError, match="HTTP 400"):
            run(make(srv, tmp_path).complete(MESSAGES))
    assert len(srv.requests) == 1


def test_timeouts_are_retried_then_fail(tmp_path):
    with FakeOpenAIServer([("delay", 1.0, "late")]) as srv:
        start = time.perf_counter()
        with pytest.raises(LLMError, match="gave up"):
            run(make(srv, tmp_path, timeout_s=0.2, max_retries=1).complete(MESSAGES))
        assert time.perf_counter() - start < 2.0
    assert len(srv.requests) == 2


def free_port() -> int:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there
    return port


def test_unreachable_server_fails_at_once_with_the_command_that_starts_one(tmp_path):
    port = free_port()
    cfg = LLMSettings(model="m", base_url=f"http://127.0.0.1:{port}/v1", api_key=SECRET, max_retries=4,
                      backoff_s=1.0, timeout_s=1.0, cache_path=None)
    client = LLMClient(cfg)
    start = time.perf_counter()
    with pytest.raises(ServerUnreachable) as err:
        run(client.complete(MESSAGES))
    assert time.perf_counter() - start < 1.0 and client.calls_made == 1  # no retries, no backoff
    message = str(err.value)
    assert isinstance(err.value, LLMError) and isinstance(err.value, BackendUnavailable)
    assert f"http://127.0.0.1:{port}/v1" in message and f"python -m agents_llm.local_server --port {port}" in message
    assert "\n" not in message and SECRET not in message


def test_unreachable_message_for_remote_and_local_addresses():
    assert "check env.backend.base_url" in unreachable_message("https://api.example.com/v1")
    assert "local_server" not in unreachable_message("https://api.example.com/v1")
    assert "--port 8080" in unreachable_message("http://localhost/v1")
    assert "--port 9000" in unreachable_message("http://127.0.0.2:9000/v1")


def test_a_server_that_answered_then_went_away_is_retried(tmp_path):
    with FakeOpenAIServer([("ok", "hi", {"prompt_tokens": 2, "completion_tokens": 1})]) as srv:
        client = make(srv, tmp_path, cache_path=None, max_retries=1)
        run(client.complete(MESSAGES))
    with pytest.raises(LLMError, match="gave up after 2 attempt") as err:  # an outage: retried, then one error
        run(client.complete(MESSAGES, sample_index=1))
    assert not isinstance(err.value, ServerUnreachable) and "APIConnectionError" in str(err.value)


def test_a_server_that_dies_during_the_first_call_is_an_outage_not_a_wrong_address():
    """The first call is taken, then the connection closes unanswered and the port refuses (a model
    process that crashed), until its supervisor answers with the crash: the refusals after a
    dropped call are retried, and the call ends with the crash, not "no LLM server is listening"."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def take_one_call_and_die():
        conn, _ = listener.accept()
        conn.recv(65536)
        conn.close()
        listener.close()

    threading.Thread(target=take_one_call_and_die, daemon=True).start()
    notices: list[CrashNotice] = []  # the supervisor's answer, 0.4 s after the crash
    notice = threading.Timer(0.4, lambda: notices.append(CrashNotice(port, "llama.cpp's server was killed by SIGSEGV")))
    client = LLMClient(LLMSettings(model="m", base_url=f"http://127.0.0.1:{port}/v1", backoff_s=0.05, max_retries=8,
                                   timeout_s=5.0, cache_path=None))
    notice.start()
    try:
        with pytest.raises(ServerCrashed, match="killed by SIGSEGV"):
            run(client.complete(MESSAGES))
    finally:
        notice.join()
        for n in notices:
            n.close()
    assert client.calls_made >= 3  # the dropped call, at least one refusal, the crash notice


def test_empty_and_malformed_content(tmp_path):
    with FakeOpenAIServer([("ok", "", {"prompt_tokens": 2, "completion_tokens": 0})]) as srv:
        assert run(make(srv, tmp_path, cache_path=None).complete(MESSAGES)).content == ""
    with FakeOpenAIServer([("malformed",)]) as srv:
        with pytest.raises(LLMError):
            run(make(srv, tmp_path, cache_path=None, max_retries=0).complete(MESSAGES))


def test_concurrency_is_bounded(tmp_path):
    with FakeOpenAIServer([("delay", 0.5, "ok")]) as srv:
        client = make(srv, tmp_path, cache_path=None, max_concurrency=2)

        async def four():
            return await asyncio.gather(*(client.complete(MESSAGES, sample_index=i) for i in range(4)))

        start = time.perf_counter()
        run(four())
        wall = time.perf_counter() - start
    assert 0.95 < wall < 1.8  # two waves of two overlapping calls (1.0 s), not one (0.5 s) nor four (2.0 s)


def test_secrets_stay_out_of_reprs_and_pickles(tmp_path):
    with FakeOpenAIServer() as srv:
        client = make(srv, tmp_path)
        run(client.complete(MESSAGES))
        assert SECRET not in repr(client) and SECRET not in repr(client.config)
        clone = pickle.loads(pickle.dumps(client))
        assert run(clone.complete(MESSAGES)).cached


def test_bad_config_names_the_value():
    with pytest.raises(ValueError, match="timeout_s=0"):
        LLMSettings(model="m", timeout_s=0)
    with pytest.raises(ValueError, match="model=''"):
        LLMSettings(model="")


def test_replicas_share_the_calls_and_the_cache(tmp_path):
    with FakeOpenAIServer(latency=0.2) as first, FakeOpenAIServer(latency=0.2) as second:
        client = make(first, tmp_path, replica_urls=[second.base_url], max_concurrency=4)

        async def four():
            return await asyncio.gather(*(client.complete(MESSAGES, sample_index=i) for i in range(4)))

        replies = run(four())
        assert len(first.requests) == 2 and len(second.requests) == 2  # the least busy server takes each call
        assert first.max_in_flight == 2 and second.max_in_flight == 2
        # cached under base_url: a client of the first server alone serves them without a call
        alone = make(first, tmp_path)
        assert [run(alone.complete(MESSAGES, sample_index=i)).content for i in range(4)] == [r.content for r in replies]
        assert len(first.requests) == 2


def test_a_bad_replica_url_names_itself():
    with pytest.raises(ValueError, match="'localhost:8081'"):
        LLMSettings(model="m", replica_urls=["localhost:8081"])
    assert LLMSettings(model="m", replica_urls=["http://127.0.0.1:8081/v1"]).replica_urls == ("http://127.0.0.1:8081/v1",)
