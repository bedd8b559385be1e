"""Run untrusted Python code in a subprocess with resource limits and, where possible, no network.

:func:`execute` writes ``code`` to ``main.py`` in a fresh temporary directory, runs it with the
current interpreter in a child process, captures stdout and stderr (at most
:data:`MAX_STREAM_BYTES` of each; the rest is drained and dropped, with a note at the end of the
text) and returns an :class:`ExecutionResult`. The directory is deleted afterwards. User code is
never executed in the calling process, and nothing the child does raises in the caller: crashes,
tracebacks, limits hit and timeouts all come back in the result. Only bad arguments raise
(``ValueError``).

What the child gets
-------------------
* **Environment** built from scratch, never copied from ``os.environ`` (so ``OPENAI_API_KEY`` and
  friends never reach it): ``PATH=/usr/bin:/bin``, ``LANG=C.UTF-8``, ``HOME`` and ``TMPDIR`` = the
  temporary directory, ``PYTHONDONTWRITEBYTECODE=1``, ``PYTHONHASHSEED=0``. The user program is
  started as ``python -s -B main.py``: ``-s`` keeps the user site-packages out; ``-I``/``-E`` are
  deliberately *not* used for it because they would make Python ignore ``PYTHONHASHSEED=0``
  (string hashing would be random again), and the environment is ours anyway, so no
  ``PYTHONPATH`` or similar can leak in. Packages installed in the interpreter's own
  site-packages are importable. stdout is block-buffered as usual: output printed before a
  timeout is lost unless the program flushes.
* **Limits** (``setrlimit``, applied just before the user program starts): ``RLIMIT_AS`` =
  ``memory_mb``, ``RLIMIT_CPU`` = ``cpu_time_s`` (default ``ceil(timeout_s) + 1``; SIGKILL one
  second later), ``RLIMIT_FSIZE`` = ``max_file_mb`` (writes beyond it fail with ``EFBIG``),
  ``RLIMIT_NPROC`` = ``max_processes`` (threads count too), ``RLIMIT_CORE`` = 0. A limit is never
  raised above the hard limit the caller already has. The wall-clock ``timeout_s`` is enforced by
  the caller: the whole child tree is killed with SIGKILL and reaped, and the result says
  ``timed_out=True, returncode=None``.

Isolation modes
---------------
**Full isolation** (``network_isolation_available()`` is True: running as root, and the kernel
lets us create namespaces; checked once per interpreter with a tiny probe process and cached).
A small bootstrap (:mod:`agents_llm.sandbox_boot`, run by its path with ``python -I``, as root)
calls ``unshare(2)`` for new network, mount, PID, IPC and UTS namespaces (the same system call
``unshare -n`` makes) and forks an ``init`` that is PID 1 of the new PID namespace. Still as root,
``init``

* mounts a fresh, size-limited tmpfs (``max_file_mb``) over ``/tmp``, ``/var/tmp``, ``/dev/shm``
  and ``/run/lock`` (the world-writable places), so anything written there lands in a throwaway
  in-memory filesystem that disappears with the namespace, never on the host;
* mounts a private tmpfs of ``max(64, 4 * max_file_mb)`` MiB (owned by the sandbox uid, mode
  0700) at the working directory's own path and copies ``main.py`` into it, so the program's
  files never touch the host's disk and their total size is bounded (``ENOSPC`` beyond);
* makes the interpreter reachable for an unprivileged user: if a directory above it is not
  world-traversable (e.g. ``/root`` with pyenv, mode 0700), an empty tmpfs is mounted over that
  directory and only the interpreter's prefix is bind-mounted back, read-only. The rest of such
  directories is thus hidden;
* mounts a new ``/proc`` (the program sees only its own processes);
* drops privileges to a **per-run unique uid/gid** (random in ``[SANDBOX_UID_MIN,
  SANDBOX_UID_MAX)``, no supplementary groups, ``PR_SET_NO_NEW_PRIVS``), applies the limits, and
  forks the user program, then only reaps children until it exits.

The network namespace has no interfaces up, not even loopback: connections (to the host's
``127.0.0.1`` too) and DNS lookups fail, and the result says ``network_isolated=True``. Because
``RLIMIT_NPROC`` counts processes per real uid, a unique uid makes ``max_processes`` an exact,
per-run cap (root ignores ``RLIMIT_NPROC``, which is why privileges are dropped; a shared uid such
as 65534 would let concurrent runs starve each other). When the user program exits, or on
timeout, ``init`` dies and the kernel kills everything left in the PID namespace, including
processes that called ``setsid()`` or daemonized; nothing survives the call. The uid has write
access only to the working directory (and the private tmpfs mounts); the rest of the
filesystem is visible read-only with the permissions of an unprivileged user.

**Fallback** (not root, or namespaces refused, e.g. an unprivileged container): the bootstrap
applies the same limits and replaces itself with the program (``execve``), in a new session,
and the result says ``network_isolated=False`` -- **the program can use the network**. In
detail:

* root without namespaces: privileges are still dropped to a unique uid when the interpreter
  and the working directory are reachable by other users (so ``RLIMIT_NPROC`` still stops fork
  bombs, and a sweep by uid kills stragglers afterwards); otherwise the program runs **as
  root** with only the rlimits, the timeout and process-group killing as protection (it could
  then do anything root can, including signalling the calling process);
* not root: the program runs as the current user. The rlimits still apply, but
  ``RLIMIT_NPROC`` counts *all* processes of that user, so a user who already has more than
  ``max_processes`` processes cannot fork at all from the sandbox; processes that leave the
  process group (``setsid``) can survive the timeout;
* in both cases writes to ``/tmp`` and other writable places land on the host (the working
  directory is still deleted), and ``/proc`` shows the host's processes.

Not limited: in fallback mode, the total size of files written to the working directory (each
file is still capped at ``max_file_mb``); in either mode, the number of open files and reading
world-readable files (keep hidden test data out of world-readable places).
"""
from __future__ import annotations

import functools
import json
import math
import os
import random
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

__all__ = ["ExecutionResult", "execute", "network_isolation_available", "MAX_STREAM_BYTES",
           "SANDBOX_UID_MIN", "SANDBOX_UID_MAX"]

#: At most this many bytes of each of stdout and stderr are kept; the rest is read and dropped.
MAX_STREAM_BYTES = 1 << 20
#: Per-run uids (and gids) are drawn from ``[SANDBOX_UID_MIN, SANDBOX_UID_MAX)`` when running
#: as root: far above login users, systemd's dynamic users and the usual subuid ranges.
SANDBOX_UID_MIN = 1_600_000_000
SANDBOX_UID_MAX = 1_700_000_000
_NOBODY = 65534

_SCRATCH_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")
_WORKDIR_MIN_QUOTA_MB = 64   # isolated mode: the working directory's tmpfs holds max(64, 4 x max_file_mb)
_GRACE_AFTER_EXIT_S = 0.5   # drain time once the child has exited but a straggler holds a pipe
_TERM_GRACE_S = 2.0         # time the bootstrap gets to tear its namespace down on timeout
_PROBE_TIMEOUT_S = 10.0
# The child side (agents_llm/sandbox_boot.py), run by its path: isolated mode (-I) ignores PYTHONPATH and the
# current directory, so ``-m`` would need an installed package; the file needs the standard library only.
_BOOT_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sandbox_boot.py")


@dataclass(frozen=True)
class ExecutionResult:
    """The outcome of one :func:`execute` call."""

    ok: bool            # exited 0 within the time limit
    timed_out: bool
    returncode: int | None   # None if killed for time; -N if killed by signal N
    stdout: str
    stderr: str
    wall_time_s: float
    network_isolated: bool   # True when it ran in a fresh network namespace


@functools.lru_cache(maxsize=None)
def _namespaces_work(executable: str) -> bool:
    """Whether ``executable`` (run as the current user) can create the sandbox namespaces."""
    try:
        proc = subprocess.run([executable, "-I", "-B", _BOOT_SCRIPT, "probe"], stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
                              timeout=_PROBE_TIMEOUT_S, start_new_session=True)
    except (OSError, subprocess.SubprocessError):
        return False
    return proc.returncode == 0


def network_isolation_available() -> bool:
    """True when :func:`execute` runs code in fresh namespaces (no network), i.e. as root with
    namespace support. The probe runs once per interpreter path and is cached."""
    if sys.platform != "linux" or not sys.executable or os.geteuid() != 0:
        return False
    return _namespaces_work(sys.executable)


# --------------------------------------------------------------------------------------------
# Host side
# --------------------------------------------------------------------------------------------
def _is_real_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _validate(code, timeout_s, memory_mb, cpu_time_s, max_file_mb, max_processes, stdin) -> None:
    if not isinstance(code, str):
        raise ValueError(f"code must be a str, got {type(code).__name__}: {code!r:.80}")
    if not _is_real_number(timeout_s) or not math.isfinite(timeout_s) or timeout_s <= 0:
        raise ValueError(f"timeout_s must be a finite number > 0, got {timeout_s!r}")
    if cpu_time_s is not None and (not _is_real_number(cpu_time_s) or not math.isfinite(cpu_time_s)
                                   or cpu_time_s <= 0):
        raise ValueError(f"cpu_time_s must be None or a finite number > 0, got {cpu_time_s!r}")
    for name, value in (("memory_mb", memory_mb), ("max_file_mb", max_file_mb),
                        ("max_processes", max_processes)):
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ValueError(f"{name} must be an int > 0, got {value!r}")
    if not isinstance(stdin, str):
        raise ValueError(f"stdin must be a str, got {type(stdin).__name__}: {stdin!r:.80}")


def _id_map_contains(path: str, value: int) -> bool:
    try:
        with open(path) as fh:
            for line in fh:
                inside, _outside, count = (int(v) for v in line.split())
                if inside <= value < inside + count:
                    return True
    except (OSError, ValueError):
        return False
    return False


def _uid_processes(uid: int) -> list[int]:
    """Pids of live processes whose real, effective or saved uid is ``uid``."""
    pids = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return pids
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as fh:
                for line in fh:
                    if line.startswith("Uid:"):
                        if uid in (int(v) for v in line.split()[1:4]):
                            pids.append(int(entry))
                        break
        except (OSError, ValueError):
            continue
    return pids


def _pick_sandbox_id() -> int | None:
    """A uid (used as gid too) that no process uses, mapped in our user namespace."""
    rng = random.SystemRandom()
    for _ in range(8):
        uid = rng.randrange(SANDBOX_UID_MIN, SANDBOX_UID_MAX)
        if (_id_map_contains("/proc/self/uid_map", uid) and _id_map_contains("/proc/self/gid_map", uid)
                and not _uid_processes(uid)):
            return uid
    if _id_map_contains("/proc/self/uid_map", _NOBODY) and _id_map_contains("/proc/self/gid_map", _NOBODY):
        return _NOBODY
    return None


def _ancestors(path: str) -> list[str]:
    """'/a/b/c' -> ['/a', '/a/b'] (proper ancestors, without '/')."""
    parts = path.strip("/").split("/")
    return ["/" + "/".join(parts[:i]) for i in range(1, len(parts))]


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _first_blocking_ancestor(path: str) -> str | None:
    """The topmost proper ancestor of ``path`` that other users cannot traverse."""
    for anc in _ancestors(path):
        try:
            if not os.stat(anc).st_mode & 0o001:
                return anc
        except OSError:
            return None
    return None


def _interpreter_dirs() -> list[str]:
    """Directories the interpreter needs: its bin dir and prefixes, as given and resolved."""
    candidates = {os.path.dirname(os.path.abspath(sys.executable)), sys.prefix, sys.exec_prefix,
                  sys.base_prefix, sys.base_exec_prefix}
    out = set()
    for c in candidates:
        if c:
            out.add(os.path.normpath(os.path.abspath(c)))
            out.add(os.path.realpath(c))
    return sorted(d for d in out if os.path.isdir(d))


def _tmpfs_options(size_mb: int, inodes: int, mode: str, owner: int | None = None) -> str:
    opts = f"size={size_mb}m,nr_inodes={inodes},mode={mode}"
    return opts if owner is None else f"{opts},uid={owner},gid={owner}"


def _mount_plan(workdir: str, max_file_mb: int) -> tuple[list[dict], list[dict]]:
    """(covers, keep): tmpfs mounts to make, and interpreter directories to bind back (read-only)
    where covered. The working directory gets its own tmpfs (made reachable, not bound back)."""
    covers: dict[str, str] = {}
    for d in _SCRATCH_DIRS:
        if os.path.isdir(d) and not os.path.islink(d):
            covers[os.path.realpath(d)] = _tmpfs_options(max_file_mb, 4096, "1777")
    keep_specs = [(d, True) for d in _interpreter_dirs()]
    for path in [workdir] + [d for d, _ in keep_specs]:
        blocker = _first_blocking_ancestor(path)
        if blocker is not None and not any(_under(blocker, c) for c in covers):
            covers[blocker] = _tmpfs_options(1, 1024, "0755")
    # A cover inside another cover would have no mountpoint any more: keep the outer one only.
    cover_list = [c for c in sorted(covers) if not any(o != c and _under(c, o) for o in covers)]
    keep: list[dict] = []
    for path, readonly in sorted(keep_specs, key=lambda kv: (len(kv[0]), kv[0])):
        if any(_under(path, k["path"]) and k["readonly"] == readonly for k in keep):
            continue
        keep.append({"path": path, "readonly": readonly,
                     "shadowed": any(_under(path, c) for c in cover_list)})
    return [{"path": c, "options": covers[c]} for c in cover_list], keep


def _reachable_by_others(paths: list[str]) -> bool:
    return all(_first_blocking_ancestor(p) is None for p in paths)


def _exited(pid: int) -> bool:
    """Whether the child has terminated, without reaping it (so its pid stays reserved)."""
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return info is not None and info.si_pid == pid


class _Capture:
    """A byte sink that keeps the first ``limit`` bytes and counts the rest."""

    def __init__(self, limit: int):
        self.limit = limit
        self.chunks: list[bytes] = []
        self.kept = 0
        self.dropped = 0

    def add(self, data: bytes) -> None:
        room = self.limit - self.kept
        if room > 0:
            self.chunks.append(data[:room])
            self.kept += min(room, len(data))
        self.dropped += max(0, len(data) - max(room, 0))

    def text(self) -> str:
        text = b"".join(self.chunks).decode("utf-8", errors="replace")
        if self.dropped:
            text += f"\n[sandbox: output truncated: {self.dropped} more bytes not shown]\n"
        return text


class _Pump:
    """Feeds stdin and drains stdout/stderr of a running process without blocking."""

    def __init__(self, proc: subprocess.Popen, stdin_data: bytes):
        self.proc = proc
        self.sel = selectors.DefaultSelector()
        self.captures = {proc.stdout.fileno(): _Capture(MAX_STREAM_BYTES),
                         proc.stderr.fileno(): _Capture(MAX_STREAM_BYTES)}
        self.out = self.captures[proc.stdout.fileno()]
        self.err = self.captures[proc.stderr.fileno()]
        for stream in (proc.stdout, proc.stderr):
            os.set_blocking(stream.fileno(), False)
            self.sel.register(stream.fileno(), selectors.EVENT_READ)
        self.stdin_view = memoryview(stdin_data)
        if stdin_data:
            os.set_blocking(proc.stdin.fileno(), False)
            self.sel.register(proc.stdin.fileno(), selectors.EVENT_WRITE)
        else:
            self._close_stdin()

    def _close_stdin(self) -> None:
        fd = None if self.proc.stdin.closed else self.proc.stdin.fileno()
        if fd is not None and fd in self.sel.get_map():
            self.sel.unregister(fd)
        try:
            self.proc.stdin.close()
        except OSError:
            pass

    @property
    def reading(self) -> bool:
        return any(fd in self.captures for fd in self.sel.get_map())

    def step(self, timeout: float) -> None:
        if not self.sel.get_map():
            time.sleep(min(timeout, 0.005))
            return
        for key, _events in self.sel.select(timeout):
            fd = key.fd
            if fd in self.captures:
                try:
                    data = os.read(fd, 1 << 16)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if data:
                    self.captures[fd].add(data)
                else:
                    self.sel.unregister(fd)
            else:
                try:
                    n = os.write(fd, self.stdin_view[:1 << 16])
                except BlockingIOError:
                    continue
                except OSError:   # BrokenPipe: the program stopped reading
                    n = len(self.stdin_view)
                self.stdin_view = self.stdin_view[n:]
                if not self.stdin_view:
                    self._close_stdin()

    def run(self, deadline: float) -> bool:
        """Pump until the process has exited and its pipes are closed; True on timeout."""
        exited_at = None
        while True:
            now = time.monotonic()
            if exited_at is None and _exited(self.proc.pid):
                exited_at = now
            if exited_at is not None and (not self.reading or now - exited_at > _GRACE_AFTER_EXIT_S):
                return False
            if now >= deadline:
                return True
            self.step(min(deadline - now, 0.05))

    def drain(self, seconds: float) -> None:
        """Collect what is still buffered in the pipes after the process was killed."""
        if not self.proc.stdin.closed:
            self._close_stdin()
        end = time.monotonic() + seconds
        while self.reading and time.monotonic() < end:
            self.step(max(0.0, min(end - time.monotonic(), 0.05)))

    def close(self) -> None:
        self.sel.close()
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            try:
                stream.close()
            except OSError:
                pass


def _wait_exited(pid: int, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if _exited(pid):
            return True
        time.sleep(0.005)
    return _exited(pid)


def _stop(proc: subprocess.Popen, isolated: bool) -> None:
    """Kill the child tree and reap the child. Safe to call when it has exited already."""
    if isolated and not _exited(proc.pid):
        # The bootstrap (root, unreachable for the program) SIGKILLs the namespace's init and
        # reaps it, so the whole PID namespace goes away without orphans.
        try:
            os.kill(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        _wait_exited(proc.pid, _TERM_GRACE_S)
    try:   # the pid is not reaped yet, so the process group id cannot have been reused
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def _sweep_uid(uid: int, seconds: float = 2.0) -> None:
    """SIGKILL every process still running as ``uid`` (stragglers that left the group)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pids = _uid_processes(uid)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.01)


def _rmtree(path: str) -> None:
    def onerror(func, p, exc_info):
        # A program may have removed permissions from its own directories (matters when not root).
        try:
            os.chmod(os.path.dirname(p), 0o700)
            os.chmod(p, 0o700)
        except OSError:
            pass
        try:
            if os.path.isdir(p) and not os.path.islink(p):
                shutil.rmtree(p, ignore_errors=True)
            else:
                os.unlink(p)
        except OSError:
            pass

    shutil.rmtree(path, onerror=onerror)


def _chown_tree(path: str, uid: int, gid: int) -> None:
    os.chown(path, uid, gid)
    for entry in os.listdir(path):
        os.chown(os.path.join(path, entry), uid, gid, follow_symlinks=False)


def execute(code: str, *, timeout_s: float, memory_mb: int = 1024, cpu_time_s: float | None = None,
            max_file_mb: int = 16, max_processes: int = 64, stdin: str = "") -> ExecutionResult:
    """Run ``code`` (Python source) in a sandboxed child process; see the module docstring.

    ``ok`` is True when the program exited with status 0 within ``timeout_s`` seconds of wall
    time. Never raises for anything the program does; raises ``ValueError`` for bad arguments.
    """
    _validate(code, timeout_s, memory_mb, cpu_time_s, max_file_mb, max_processes, stdin)
    if not sys.executable:
        raise RuntimeError("sys.executable is unknown: cannot start a Python child process")
    cpu = math.ceil(cpu_time_s if cpu_time_s is not None else timeout_s + 1)
    rlimits = [("RLIMIT_AS", memory_mb << 20, memory_mb << 20),
               ("RLIMIT_CPU", cpu, cpu + 1),
               ("RLIMIT_FSIZE", max_file_mb << 20, max_file_mb << 20),
               ("RLIMIT_NPROC", max_processes, max_processes),
               ("RLIMIT_CORE", 0, 0)]
    isolate = network_isolation_available()
    return _execute(code, timeout_s=float(timeout_s), rlimits=rlimits, max_file_mb=max_file_mb,
                    stdin=stdin, isolate=isolate)


def _execute(code: str, *, timeout_s: float, rlimits: list, max_file_mb: int, stdin: str,
             isolate: bool) -> ExecutionResult:
    workdir = os.path.realpath(tempfile.mkdtemp(prefix="agents_llm_sandbox_"))
    proc = None
    pump = None
    uid = None
    try:
        with open(os.path.join(workdir, "main.py"), "w", encoding="utf-8") as fh:
            fh.write(code)
        covers, keep = _mount_plan(workdir, max_file_mb) if isolate else ([], [])
        if os.geteuid() == 0 and (isolate or _reachable_by_others(_interpreter_dirs() + [workdir])):
            uid = _pick_sandbox_id()
        if uid is not None:
            _chown_tree(workdir, uid, uid)
        os.chmod(workdir, 0o700)
        env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": workdir, "TMPDIR": workdir,
               "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0"}
        python = os.path.abspath(sys.executable)
        config = {"isolate": isolate, "workdir": workdir, "uid": uid, "gid": uid, "rlimits": rlimits,
                  "python": python, "argv": [python, "-s", "-B", "main.py"],
                  "covers": covers, "keep": keep, "workdir_options": _tmpfs_options(
                      max(_WORKDIR_MIN_QUOTA_MB, 4 * max_file_mb), 16384, "0700", uid)}
        start = time.monotonic()
        proc = subprocess.Popen([python, "-I", "-B", _BOOT_SCRIPT, "run", json.dumps(config)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                cwd=workdir, env=env, start_new_session=True, close_fds=True)
        pump = _Pump(proc, stdin.encode("utf-8"))
        timed_out = pump.run(start + timeout_s)
        _stop(proc, isolate)
        if timed_out:
            pump.drain(0.2)
        wall = time.monotonic() - start
        returncode = None if timed_out else proc.returncode
        return ExecutionResult(ok=(not timed_out and returncode == 0), timed_out=timed_out,
                               returncode=returncode, stdout=pump.out.text(), stderr=pump.err.text(),
                               wall_time_s=wall, network_isolated=isolate)
    finally:
        if proc is not None and proc.returncode is None:
            _stop(proc, isolate)   # only on an unexpected error or interrupt in this function
        if pump is not None:
            pump.close()
        if uid is not None and uid != _NOBODY:
            _sweep_uid(uid)
        _rmtree(workdir)
