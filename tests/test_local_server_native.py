"""The native engine of the local server: llama.cpp's own ``llama-server`` (parallel slots, continuous
batching), and the build that makes it (``agents_llm.llama_build``).

CI does not build llama-server (minutes): the supervision is checked against a stand-in program that
answers like llama-server and records the command line and environment it was given; the one-line
errors (a missing binary, a bad --parallel, a missing compiler) need no binary; the build's cmake
command and its idempotence are checked without running cmake. Where a built llama-server exists
(``python -m agents_llm.llama_build``), it answers a real request.
"""
from __future__ import annotations

import asyncio
import json
import os
import resource
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from agents_llm import llama_build
from agents_llm.client import LLMClient, ServerCrashed
from agents_llm.config import LLMSettings
from agents_llm.local_server import (MODEL_ALIAS, LocalLlamaServer, LocalServerError, check_parallel,
                                     find_native_binary, free_port, smollm2_model_path)

REPO_ROOT = Path(__file__).resolve().parents[1]
PROG = "python -m agents_llm.local_server"
ASK = [{"role": "user", "content": "What is 2 + 3?"}]

STAND_IN = '''#!{python}
"""Answers like llama-server: /v1/models once 'loaded', chat completions; records argv and env."""
import json, os, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

argv = sys.argv[1:]
Path(__file__).with_name("record.json").write_text(json.dumps({{"argv": argv, "env": dict(os.environ)}}))
port, alias = int(argv[argv.index("--port") + 1]), argv[argv.index("--alias") + 1]

class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass
    def _send(self, payload):
        body = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def do_GET(self):
        self._send({{"object": "list", "data": [{{"id": alias, "object": "model"}}]}})
    def do_POST(self):
        request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        self._send({{"id": "x", "object": "chat.completion", "created": 0, "model": request["model"],
                    "choices": [{{"index": 0, "finish_reason": "stop",
                                 "message": {{"role": "assistant", "content": "5"}}}}],
                    "usage": {{"prompt_tokens": 9, "completion_tokens": 1, "total_tokens": 10}}}})

print("stand-in llama-server listening", flush=True)
ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
'''


@pytest.fixture()
def stand_in(tmp_path) -> Path:
    """An executable that behaves like llama-server on the wire (not our build: no build.json)."""
    path = tmp_path / "bin" / "llama-server"
    path.parent.mkdir()
    path.write_text(STAND_IN.format(python=sys.executable))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture()
def no_amx(monkeypatch):
    monkeypatch.setattr(llama_build, "cpu_has_amx", lambda: False)


def option(cmd: list[str], flag: str) -> str:
    return cmd[cmd.index(flag) + 1]


def test_the_native_command_line(stand_in, no_amx):
    server = LocalLlamaServer(engine="native", server_binary=stand_in, parallel=4, n_ctx=1024, n_threads=2, port=8123)
    cmd = server.command()
    assert cmd[0] == str(stand_in)
    assert option(cmd, "--model") == str(smollm2_model_path()) and option(cmd, "--alias") == MODEL_ALIAS
    assert option(cmd, "--host") == "127.0.0.1" and option(cmd, "--port") == "8123"
    assert option(cmd, "--parallel") == "4" and option(cmd, "--ctx-size") == "4096"  # 1024 tokens for every slot
    assert option(cmd, "--threads") == "2" and option(cmd, "--threads-batch") == "2"
    assert "--cont-batching" in cmd and "--cache-reuse" not in cmd
    assert "--no-repack" not in cmd and server.repack is True  # no AMX on this CPU: repacking stays on

    cmd = LocalLlamaServer(engine="native", server_binary=stand_in, parallel=1, cont_batching=False,
                           cache_reuse=256).command()
    assert "--no-cont-batching" in cmd and option(cmd, "--cache-reuse") == "256" and option(cmd, "--parallel") == "1"


@pytest.mark.parametrize("cpu_amx, requested, no_repack", [
    (True, "auto", True),    # AMX CPU, a binary that may run AMX kernels (llama.cpp issue 20824)
    (False, "auto", False),
    (True, "on", False),     # asked for
    (False, "off", True),
])
def test_no_repack_on_a_cpu_with_amx(stand_in, monkeypatch, cpu_amx, requested, no_repack):
    monkeypatch.setattr(llama_build, "cpu_has_amx", lambda: cpu_amx)
    server = LocalLlamaServer(engine="native", server_binary=stand_in, repack=requested)
    assert ("--no-repack" in server.command()) is no_repack
    assert server.repack is not no_repack


def test_our_build_without_an_amx_variant_keeps_repacking_on_an_amx_cpu(tmp_path, monkeypatch):
    binary = tmp_path / "0.0.1" / "build" / "bin" / "llama-server"
    binary.parent.mkdir(parents=True)
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    (tmp_path / "0.0.1" / "build.json").write_text(json.dumps({"binary": str(binary), "amx": False}))
    assert llama_build.build_has_amx(binary) is False
    monkeypatch.setattr(llama_build, "cpu_has_amx", lambda: True)
    assert "--no-repack" not in LocalLlamaServer(engine="native", server_binary=binary).command()
    (tmp_path / "0.0.1" / "build.json").write_text(json.dumps({"binary": str(binary), "amx": True}))
    assert "--no-repack" in LocalLlamaServer(engine="native", server_binary=binary).command()


def test_the_native_server_is_supervised_like_the_python_one(stand_in, no_amx, monkeypatch, tmp_path):
    soft, hard = resource.getrlimit(resource.RLIMIT_CORE)  # the SIGSEGV below would write a core file
    resource.setrlimit(resource.RLIMIT_CORE, (0, hard))
    try:
        _supervised(stand_in, monkeypatch, tmp_path)
    finally:
        resource.setrlimit(resource.RLIMIT_CORE, (soft, hard))


def _supervised(stand_in, monkeypatch, tmp_path):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    monkeypatch.setenv("LLAMA_ARG_N_PARALLEL", "64")  # would override --parallel inside llama-server
    monkeypatch.setenv("LLAMA_API_KEY", "k")          # would make the server demand a key
    deaths = []
    log = tmp_path / "native.log"
    with LocalLlamaServer(engine="native", server_binary=stand_in, parallel=3, n_threads=1, log_path=log,
                          on_death=deaths.append) as server:
        client = LLMClient(LLMSettings(model=MODEL_ALIAS, base_url=server.base_url, cache_path=None, backoff_s=0.1))
        assert asyncio.run(client.complete(ASK)).content == "5"
        record = json.loads((stand_in.parent / "record.json").read_text())
        assert option(record["argv"], "--parallel") == "3"
        assert not {"OPENAI_API_KEY", "LLAMA_ARG_N_PARALLEL", "LLAMA_API_KEY"} & set(record["env"])
        assert os.getpgid(server.process.pid) == server.process.pid  # its own process group
        os.kill(server.process.pid, signal.SIGSEGV)
        death = server.wait(timeout=10)
        assert death is not None and death.returncode == -signal.SIGSEGV and deaths == [death]
        with pytest.raises(ServerCrashed) as err:
            asyncio.run(LLMClient(LLMSettings(model=MODEL_ALIAS, base_url=server.base_url, cache_path=None))
                        .complete(ASK))
        line = str(err.value)
        assert "\n" not in line and "SIGSEGV" in line and str(log) in line
        assert f"--port {server.port} --engine native --threads 1 --parallel 3 --server-binary {stand_in}" in line
    assert "stand-in llama-server listening" in log.read_text()  # its output went to the log, kept after a crash


def run_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agents_llm.local_server", *args], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=120, env=env)


def one_line(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"{PROG}: error: ")
    return lines[0]


def test_the_cli_serves_the_native_engine_until_sigterm(stand_in, tmp_path):
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "agents_llm.local_server", "--engine", "native", "--server-binary",
                             str(stand_in), "--parallel", "2", "--port", str(port), "--repack", "on"],
                            cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith(f"serving {MODEL_ALIAS} at http://127.0.0.1:{port}/v1 (llama-server, 2 parallel slots)")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0 and proc.stderr.read() == ""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_missing_binary_is_one_line(tmp_path):
    missing = tmp_path / "nowhere" / "llama-server"
    line = one_line(run_cli("--engine", "native", "--server-binary", str(missing), "--port", str(free_port())))
    assert str(missing) in line and "agents_llm.llama_build" in line
    with pytest.raises(LocalServerError) as err:
        LocalLlamaServer(engine="native", server_binary=missing).start()
    assert str(missing) in str(err.value) and "\n" not in str(err.value)


def test_no_built_binary_says_how_to_build_it(tmp_path, monkeypatch):
    monkeypatch.setenv(llama_build.ROOT_ENV, str(tmp_path))
    with pytest.raises(LocalServerError) as err:
        find_native_binary()
    message = str(err.value)
    assert str(tmp_path) in message and "python -m agents_llm.llama_build" in message and "--server-binary" in message
    line = one_line(run_cli("--engine", "native", "--port", str(free_port()),
                            env={**os.environ, llama_build.ROOT_ENV: str(tmp_path)}))
    assert "python -m agents_llm.llama_build" in line


def test_a_binary_that_is_not_executable_is_one_line(tmp_path):
    binary = tmp_path / "llama-server"
    binary.write_text("not a program")
    binary.chmod(0o644)
    with pytest.raises(LocalServerError, match="not executable"):
        find_native_binary(binary)


@pytest.mark.parametrize("args, names", [
    (["--engine", "native", "--parallel", "0"], "parallel=0"),
    (["--engine", "native", "--parallel", "-2"], "parallel=-2"),
    (["--engine", "native", "--parallel", "four"], "'four'"),
    (["--parallel", "4"], "--engine native"),       # the python engine has one slot
    (["--engine", "rust"], "'rust'"),
    (["--cache-reuse", "256"], "--engine native"),
])
def test_bad_arguments_are_one_line_naming_the_value(args, names):
    line = one_line(run_cli(*args, "--port", str(free_port())))
    assert names in line


@pytest.mark.parametrize("parallel, engine, names", [
    (0, "native", "parallel=0"), (2.5, "native", "parallel=2.5"), (True, "native", "parallel=True"),
    (None, "native", "parallel=None"), (2, "python", "native engine"), (1, "vllm", "engine='vllm'")])
def test_check_parallel_refuses(parallel, engine, names):
    with pytest.raises(ValueError) as err:
        check_parallel(parallel, engine)
    assert names in str(err.value) and "\n" not in str(err.value)


def test_check_parallel_accepts():
    assert check_parallel(8, "native") == 8 and check_parallel(1, "python") == 1


# --- the build ------------------------------------------------------------------------------------

def test_the_build_is_portable_and_small(tmp_path):
    args = llama_build.cmake_configure_args(tmp_path / "src", tmp_path / "build", all_variants=True, generator="Ninja")
    assert "-DGGML_NATIVE=OFF" in args and not any("march=native" in a for a in args)
    assert {"-DGGML_BACKEND_DL=ON", "-DGGML_CPU_ALL_VARIANTS=ON", "-DBUILD_SHARED_LIBS=ON"} <= set(args)
    assert {"-DLLAMA_CURL=OFF", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF",
            "-DLLAMA_USE_PREBUILT_UI=OFF"} <= set(args)  # nothing downloaded, nothing extra built
    baseline = llama_build.cmake_configure_args(tmp_path / "src", tmp_path / "build", all_variants=False,
                                                generator=None)
    assert "-DGGML_CPU_ALL_VARIANTS=ON" not in baseline and "-DGGML_AVX2=OFF" in baseline


def test_all_variants_are_used_where_the_source_has_them(tmp_path):
    (tmp_path / "ggml").mkdir()
    (tmp_path / "ggml" / "CMakeLists.txt").write_text('option(GGML_BACKEND_DL "" OFF)\n'
                                                      'option(GGML_CPU_ALL_VARIANTS "" OFF)\n')
    assert llama_build.supports_all_variants(tmp_path)
    (tmp_path / "ggml" / "CMakeLists.txt").write_text('option(GGML_NATIVE "" ON)\n')
    assert not llama_build.supports_all_variants(tmp_path)


def fake_build(root: Path, version: str) -> Path:
    binary = llama_build.binary_path(version, root)
    binary.parent.mkdir(parents=True)
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    (root / version / llama_build.MANIFEST).write_text(json.dumps({"binary": str(binary), "amx": True}))
    return binary


def test_a_second_build_returns_the_built_binary_at_once(tmp_path, monkeypatch):
    binary = fake_build(tmp_path, "9.9.9")

    def no_cmake(*args, **kwargs):
        raise AssertionError("cmake ran again")

    monkeypatch.setattr(llama_build.subprocess, "Popen", no_cmake)
    monkeypatch.setattr(llama_build.subprocess, "run", no_cmake)
    assert llama_build.build("9.9.9", tmp_path) == binary
    assert llama_build.built_server("9.9.9", tmp_path) == binary
    assert llama_build.main(["--version", "9.9.9", "--root", str(tmp_path)]) == 0


def test_an_unfinished_build_is_not_taken_for_a_built_one(tmp_path):
    binary = fake_build(tmp_path, "9.9.9")
    (tmp_path / "9.9.9" / llama_build.MANIFEST).unlink()  # interrupted before it finished
    assert binary.is_file() and llama_build.built_server("9.9.9", tmp_path) is None


@pytest.mark.parametrize("missing, says", [("cmake", "cmake is missing"), ("compiler", "compiler is missing")])
def test_missing_build_tools_are_one_line(tmp_path, monkeypatch, capsys, missing, says):
    real_which = llama_build.shutil.which
    gone = {"cmake"} if missing == "cmake" else {"cc", "gcc", "clang", "c++", "g++", "clang++"}
    monkeypatch.setattr(llama_build.shutil, "which", lambda name: None if name in gone else real_which(name))
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.delenv("CXX", raising=False)
    with pytest.raises(llama_build.BuildError, match=says):
        llama_build.build("9.9.9", tmp_path)
    assert llama_build.main(["--version", "9.9.9", "--root", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0] and "install" in err[0]


def test_print_says_whether_a_build_exists(tmp_path, capsys):
    assert llama_build.main(["--print", "--version", "9.9.9", "--root", str(tmp_path)]) == 1
    binary = fake_build(tmp_path, "9.9.9")
    capsys.readouterr()
    assert llama_build.main(["--print", "--version", "9.9.9", "--root", str(tmp_path)]) == 0
    assert capsys.readouterr().out.strip() == str(binary)


# --- a real llama-server, where one was built -----------------------------------------------------

def _built() -> Path | None:
    try:
        return llama_build.built_server()
    except llama_build.BuildError:
        return None


@pytest.mark.skipif(_built() is None, reason="no llama-server built (python -m agents_llm.llama_build)")
def test_the_built_llama_server_answers_requests_in_parallel():
    with LocalLlamaServer(engine="native", parallel=2, n_ctx=1024, n_threads=1) as server:
        client = LLMClient(LLMSettings(model=MODEL_ALIAS, base_url=server.base_url, temperature=0.0, max_tokens=16,
                                       timeout_s=120, cache_path=None, max_concurrency=2))

        async def two_at_once():
            try:
                return await asyncio.gather(client.complete(ASK), client.complete(
                    [{"role": "user", "content": "Name a colour."}]))
            finally:
                await client.aclose()

        results = asyncio.run(two_at_once())
        log = server.log_path.read_text(errors="replace")
    assert all(r.completion_tokens > 0 and r.content.strip() and not r.estimated for r in results)
    assert "n_parallel" in log or "slot" in log  # llama-server's own log, with its slots
