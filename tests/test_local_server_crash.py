"""A llama.cpp process that dies is reported as a crash, in one line that names how it died and the
log to read: to the client that was calling it (not "no LLM server is listening"), by the
supervisor on stderr, and by a failed start. And the choice of weight repacking that keeps
llama.cpp's AMX kernels from running (they segfault on some Intel CPUs: llama.cpp issue 20824).

The crashes are real: the llama.cpp process (SmolLM2-135M) gets SIGSEGV, as the AMX fault sends it.
"""
from __future__ import annotations

import asyncio
import json
import os
import re
import resource
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from agents_llm.client import LLMClient, ServerCrashed, ServerUnreachable
from agents_llm.config import LLMSettings
from agents_llm.local_server import (CRASH_ERROR_TYPE, MODEL_ALIAS, CrashNotice, LocalLlamaServer,
                                     LocalServerError, build_features, free_port, repack_weights)

REPO_ROOT = Path(__file__).resolve().parents[1]
COUNT = [{"role": "user", "content": "Count from 1 to 400, one number per line."}]


@pytest.fixture(autouse=True)
def no_core_dumps():
    """The SIGSEGVs below would write the model process's core where the system keeps cores."""
    soft, hard = resource.getrlimit(resource.RLIMIT_CORE)
    resource.setrlimit(resource.RLIMIT_CORE, (0, hard))
    yield
    resource.setrlimit(resource.RLIMIT_CORE, (soft, hard))


def client_of(base_url: str, **settings) -> LLMClient:
    opts = dict(model=MODEL_ALIAS, base_url=base_url, temperature=0.0, max_tokens=8, timeout_s=60.0,
                backoff_s=0.2, cache_path=None)
    return LLMClient(LLMSettings(**{**opts, **settings}))


def assert_crash_line(line: str, port: int, log_path: Path) -> None:
    assert "\n" not in line
    assert f"port {port}" in line and "SIGSEGV" in line and "exit code -11" in line
    assert str(log_path) in line and f"--port {port}" in line  # the log to read, the command that restarts it
    assert "no LLM server is listening" not in line


def test_a_crash_during_a_call_reaches_the_client_as_one_line():
    deaths = []
    with LocalLlamaServer(n_ctx=1024, n_threads=1, on_death=deaths.append) as server:
        assert asyncio.run(client_of(server.base_url).complete(COUNT)).completion_tokens > 0  # it serves
        pid = server.process.pid

        async def crash_during_a_call():
            os.kill(pid, signal.SIGSTOP)  # frozen: the kernel still accepts the connection and takes the request
            call = asyncio.ensure_future(client_of(server.base_url).complete(COUNT))
            await asyncio.sleep(0.5)
            assert not call.done()  # the call is in flight when the model process dies
            os.kill(pid, signal.SIGSEGV)  # pending until it runs again, then fatal
            os.kill(pid, signal.SIGCONT)
            return await call

        with pytest.raises(ServerCrashed) as err:
            asyncio.run(crash_during_a_call())
        death = server.wait(timeout=10)
        assert death is not None and death.returncode == -signal.SIGSEGV and deaths == [death]
        assert_crash_line(str(err.value), server.port, server.log_path)
        assert server.log_path.is_file() and server.log_path.stat().st_size > 0

        client = client_of(server.base_url)  # a new client, first call: still told it crashed, at once
        with pytest.raises(ServerCrashed):
            asyncio.run(client.complete(COUNT))
        assert client.calls_made == 1
        log_path = server.log_path
    assert log_path.is_file()  # kept after a crash; the notice is gone with stop()
    with pytest.raises(ServerUnreachable):
        asyncio.run(client_of(f"http://127.0.0.1:{server.port}/v1").complete(COUNT))
    log_path.unlink()


def test_a_clean_stop_is_not_a_crash_and_removes_the_default_log():
    deaths = []
    with LocalLlamaServer(n_ctx=512, n_threads=1, on_death=deaths.append) as server:
        log_path = server.log_path
        assert log_path.is_file()
    assert deaths == [] and server.death is None and not log_path.exists()


def test_the_supervisor_reports_its_childs_crash_and_keeps_the_port_answering(tmp_path):
    port, log = free_port(), tmp_path / "llama.log"
    proc = subprocess.Popen([sys.executable, "-m", "agents_llm.local_server", "--port", str(port), "--threads", "1",
                             "--log", str(log)], cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        assert proc.stdout.readline().startswith(f"serving {MODEL_ALIAS} at http://127.0.0.1:{port}/v1")
        child = child_pid(proc.pid)
        os.kill(child, signal.SIGSEGV)
        line = proc.stderr.readline()
        assert line.startswith("python -m agents_llm.local_server: error: llama.cpp's server")
        assert_crash_line(line.rstrip("\n"), port, log)
        request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", method="POST",
                                         data=json.dumps({"model": MODEL_ALIAS, "messages": COUNT}).encode(),
                                         headers={"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as answer:
            urllib.request.urlopen(request, timeout=10)
        assert answer.value.code == 503
        error = json.loads(answer.value.read())["error"]
        assert error["type"] == CRASH_ERROR_TYPE and "SIGSEGV" in error["message"]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 1  # stopped after a crash: a failure status for the service manager
        assert proc.stderr.read() == ""  # one line, no traceback
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def child_pid(parent: int) -> int:
    children = Path(f"/proc/{parent}/task/{parent}/children").read_text().split()
    assert len(children) == 1, children
    return int(children[0])


def test_a_model_that_will_not_load_is_one_line_naming_the_exit_and_the_log(tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + os.urandom(4096))
    log = tmp_path / "llama.log"
    server = LocalLlamaServer(model_path=bad, n_threads=1, log_path=log, startup_timeout_s=120)
    with pytest.raises(LocalServerError) as err:
        server.start()
    message = str(err.value)
    assert "\n" not in message and "while loading the model" in message and "exited with code" in message
    assert str(log) in message and log.is_file()

    proc = subprocess.run([sys.executable, "-m", "agents_llm.local_server", "--port", str(free_port()),
                           "--model", str(bad), "--log", str(log)], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=180)
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "while loading the model" in lines[0] and str(log) in lines[0]


def test_a_missing_model_file_is_one_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "agents_llm.local_server", "--model", str(tmp_path / "none.gguf")],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "none.gguf" in proc.stderr and "give the path of a .gguf file" in proc.stderr


def test_the_crash_notice_is_raised_at_once_without_retries():
    port = free_port()
    line = f"llama.cpp's server on port {port} was killed by SIGSEGV (exit code -11) while serving"
    notice = CrashNotice(port, line)
    try:
        client = client_of(f"http://127.0.0.1:{port}/v1", max_retries=4)
        with pytest.raises(ServerCrashed) as err:
            asyncio.run(client.complete(COUNT))
    finally:
        notice.close()
    assert client.calls_made == 1 and line in str(err.value) and f"127.0.0.1:{port}" in str(err.value)


AMX_BUILD = {"SSE3": "1", "AVX2": "1", "AVX512": "1", "AVX512_VNNI": "1", "AMX_INT8": "1", "REPACK": "1"}
PLAIN_BUILD = {"SSE3": "1", "AVX2": "1", "AVX512": "1", "REPACK": "1"}


@pytest.mark.parametrize("requested, features, repack", [
    ("auto", AMX_BUILD, False),     # the AMX kernels run only on weights repacked into their buffer
    ("auto", PLAIN_BUILD, True),
    ("auto", {**AMX_BUILD, "AMX_INT8": "0"}, True),
    ("on", AMX_BUILD, True),        # asked for: the user's machine runs AMX soundly
    ("off", PLAIN_BUILD, False),
])
def test_weights_are_not_repacked_on_a_build_with_amx(requested, features, repack):
    assert repack_weights(requested, features) is repack


def test_the_installed_builds_features_are_read():
    features = build_features()
    assert features.get("SSE3") == "1" or features.get("NEON") == "1"  # every x86-64 / arm64 build says so


@pytest.mark.parametrize("repack", ["on", "off"])
def test_repacking_off_reaches_the_model_load(repack):
    """``on`` offers llama.cpp its extra CPU buffer types (the load log names CPU_REPACK, or AMX where
    the build and the CPU have it); ``off`` keeps every weight in the plain CPU buffer: no extra
    buffer type is named, and the model still answers."""
    with LocalLlamaServer(n_ctx=512, n_threads=1, repack=repack) as server:
        assert asyncio.run(client_of(server.base_url).complete(COUNT)).completion_tokens > 0
        log = server.log_path.read_text(errors="replace")
    assert f"weight repacking {repack}" in log
    named = re.findall(r"(\S+) model buffer size", log) + re.findall(r"preferred buffer type (\w+)", log)
    assert named, "llama.cpp's load log names no buffer type"
    extra_buffers = set(named) - {"CPU", "CPU_Mapped"}
    assert bool(extra_buffers) is (repack == "on"), named
