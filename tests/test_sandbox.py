"""Tests of the sandboxed code executor (agents_llm.sandbox).

Hostile programs (infinite loop, fork bomb, memory hog, file-size hog, output flood, escapes)
run with small timeouts; after each, the host must still work and nothing of the sandbox may be
left: no processes of its uid, no files outside, no temporary directory.

Tests of what full isolation guarantees (unique uid, private /tmp and /proc, no network) start with
:func:`require_isolation`: where :func:`network_isolation_available` is False (not root, or namespaces
refused) they fail with the reason, never pass vacuously. CI runs as root on a machine that has
isolation (``.ci/run`` checks before the tests). The fallback mode is tested on every machine by
forcing it (``isolate=False``).
"""
from __future__ import annotations

import concurrent.futures
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from agents_llm import sandbox, sandbox_boot
from agents_llm.sandbox import ExecutionResult, execute, network_isolation_available

IS_ROOT = os.geteuid() == 0
ISOLATED = network_isolation_available()
PROJECT_ROOT = Path(__file__).resolve().parents[1]
MISSING_ISOLATION = (
    "this test checks the sandbox's full isolation, which is unavailable here: network_isolation_available() "
    "is False ({why}). It needs root and a kernel that lets root create network, mount and PID namespaces "
    "(`unshare -n true` works). CI runs as root on such a machine (.ci/run); run the tests as root, or in a "
    "container with CAP_SYS_ADMIN."
)


def require_isolation() -> None:
    """First step of a test of full isolation: fail, with the reason, where it is unavailable."""
    if not ISOLATED:
        pytest.fail(MISSING_ISOLATION.format(why="not root" if not IS_ROOT else "namespaces refused"), pytrace=False)


def run(code: str, **kwargs) -> ExecutionResult:
    kwargs.setdefault("timeout_s", 10)
    return execute(textwrap.dedent(code), **kwargs)


def processes_of_uid(uid: int) -> list[int]:
    """Pids of live (or zombie) processes whose real/effective/saved uid is ``uid``."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                status = Path(f"/proc/{entry}/status").read_text()
            except OSError:
                continue
            uids = next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1:4]
            if str(uid) in uids:
                pids.append(int(entry))
    return pids


def assert_host_fine() -> None:
    assert subprocess.run(["true"], timeout=10).returncode == 0
    assert execute("print(6 * 7)", timeout_s=10).stdout == "42\n"


def sandbox_uid_from(result: ExecutionResult) -> int:
    return int(result.stdout.split()[0])


def assert_uid_gone(uid: int) -> None:
    assert uid != os.getuid(), "the sandbox ran as the caller: nothing uid-specific to check"
    assert processes_of_uid(uid) == []


# ---------------------------------------------------------------- ordinary programs

def test_ok_program_prints_and_exits_zero():
    r = run("print('hello'); print('sandbox')")
    assert r.ok and not r.timed_out and r.returncode == 0
    assert r.stdout == "hello\nsandbox\n"
    assert r.stderr == ""
    assert r.wall_time_s > 0
    assert r.network_isolated is ISOLATED


def test_nonzero_exit_gives_returncode():
    r = run("import sys; print('partial'); sys.exit(3)")
    assert not r.ok and not r.timed_out
    assert r.returncode == 3
    assert r.stdout == "partial\n"


def test_exception_traceback_in_stderr():
    r = run("""
        def f():
            raise KeyError('missing-thing')
        f()
    """)
    assert not r.ok and r.returncode == 1
    assert "Traceback (most recent call last)" in r.stderr
    assert "KeyError: 'missing-thing'" in r.stderr
    assert "main.py" in r.stderr


def test_syntax_error_is_reported_not_raised():
    r = run("def broken(:\n")
    assert not r.ok and r.returncode == 1
    assert "SyntaxError" in r.stderr


def test_stdin_is_passed():
    r = run("import sys; data = sys.stdin.read(); print(len(data), data.split()[-1])",
            stdin="a b c\n" * 50_000 + "last\n")
    assert r.ok, r.stderr
    assert r.stdout == f"{6 * 50_000 + 5} last\n"


def test_program_may_ignore_stdin():
    r = run("print('no read')", stdin="x" * 1_000_000)
    assert r.ok and r.stdout == "no read\n"


def test_killed_by_signal_gives_negative_returncode():
    r = run("import os, signal; os.kill(os.getpid(), signal.SIGTERM)")
    assert not r.ok and not r.timed_out
    assert r.returncode == -15


def test_environment_is_clean_and_deterministic(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-test")
    monkeypatch.setenv("PYTHONPATH", "/nonexistent-leak")
    r = run("""
        import os, sys
        print(repr(os.environ.get('OPENAI_API_KEY')))
        print(sorted(os.environ))
        print(os.environ['HOME'] == os.getcwd(), os.environ['PYTHONHASHSEED'])
        print(any('nonexistent-leak' in p for p in sys.path))
        print(open('/proc/self/environ', 'rb').read().count(b'sk-secret'))
    """)
    assert r.ok, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "None"
    assert eval(lines[1]) == ["HOME", "LANG", "PATH", "PYTHONDONTWRITEBYTECODE", "PYTHONHASHSEED", "TMPDIR"]
    assert lines[2] == "True 0"
    assert lines[3] == "False"
    assert lines[4] == "0"
    assert "sk-secret-test" not in r.stdout + r.stderr
    # PYTHONHASHSEED=0 is honoured: string hashes are the same in every run
    code = "print(hash('topology'))"
    assert run(code).stdout == run(code).stdout


def test_runs_as_unprivileged_unique_uid():
    require_isolation()
    code = "import os; print(os.getuid(), os.geteuid(), os.getgid(), os.getgroups())"
    a, b = run(code), run(code)
    assert a.ok and b.ok, a.stderr + b.stderr
    uid, euid, gid, groups = a.stdout.split(maxsplit=3)
    assert sandbox.SANDBOX_UID_MIN <= int(uid) < sandbox.SANDBOX_UID_MAX
    assert uid == euid == gid and groups.strip() == "[]"
    assert sandbox_uid_from(a) != sandbox_uid_from(b)   # per-run uid (1 in 1e8 to collide)


def test_workdir_is_fresh_and_removed_afterwards():
    r = run("""
        import os
        print(os.getcwd())
        print(sorted(os.listdir('.')))
        open('scratch.txt', 'w').write('data')
        os.makedirs('sub/dir'); open('sub/dir/f', 'w').write('x')
        os.chmod('sub', 0)   # even a locked subdirectory must not survive
    """)
    assert r.ok, r.stderr
    workdir, listing = r.stdout.splitlines()
    assert listing == "['main.py']"
    assert os.path.basename(workdir).startswith("agents_llm_sandbox_")
    assert not os.path.exists(workdir)


def test_concurrent_runs():
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda i: execute(f"print({i} * 2)", timeout_s=20), range(6)))
    assert [r.stdout for r in results] == [f"{i * 2}\n" for i in range(6)]
    assert all(r.ok for r in results)


# ---------------------------------------------------------------- hostile programs

def test_infinite_loop_is_stopped():
    t0 = time.monotonic()
    r = run("while True: pass", timeout_s=2)
    elapsed = time.monotonic() - t0
    assert r.timed_out and not r.ok
    assert r.returncode is None
    assert 2.0 <= r.wall_time_s < 3.5
    assert elapsed < 4.0
    assert_host_fine()


def test_timeout_keeps_flushed_output():
    r = run("import time; print('started', flush=True); time.sleep(60)", timeout_s=1.5)
    assert r.timed_out and r.returncode is None
    assert r.stdout == "started\n"
    assert r.wall_time_s < 3.0


def test_cpu_time_limit():
    r = run("while True: pass", timeout_s=15, cpu_time_s=1)
    assert not r.ok and not r.timed_out
    assert r.returncode in (-signal.SIGXCPU, -signal.SIGKILL)


def test_fork_bomb_is_stopped_and_host_is_fine():
    require_isolation()
    r = run("""
        import os
        print(os.getuid(), flush=True)
        while True:
            try:
                os.fork()
            except OSError:
                pass
    """, timeout_s=3, max_processes=32)
    assert r.timed_out and not r.ok and r.returncode is None
    assert r.wall_time_s < 6.0
    assert_uid_gone(sandbox_uid_from(r))
    assert_host_fine()


def test_process_limit_applies_and_children_do_not_outlive_the_program():
    require_isolation()
    r = run("""
        import os, time
        n = 0
        try:
            while True:
                if os.fork() == 0:
                    time.sleep(60)
                    os._exit(0)
                n += 1
        except OSError as exc:
            print(os.getuid(), n, exc.errno)
    """, timeout_s=10, max_processes=16)
    assert r.ok, r.stderr
    uid, n, err = (int(v) for v in r.stdout.split())
    assert err == 11   # EAGAIN
    assert n < 16      # counted per uid (root would ignore RLIMIT_NPROC: the sandbox drops root)
    assert r.wall_time_s < 5.0   # the sleeping children were killed, not waited for
    assert_uid_gone(uid)


def test_daemonized_process_does_not_survive():
    require_isolation()
    r = run("""
        import os, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                time.sleep(60)
            os._exit(0)
        print(os.getuid(), flush=True)
    """, timeout_s=10)
    assert r.ok, r.stderr
    assert r.wall_time_s < 5.0
    assert_uid_gone(sandbox_uid_from(r))


def test_memory_limit():
    r = run("x = bytearray(10 * 1024**3)\nprint('allocated')", timeout_s=5, memory_mb=512)
    assert not r.ok and r.returncode != 0
    assert "MemoryError" in r.stderr
    assert "allocated" not in r.stdout
    assert_host_fine()


def test_file_size_limit():
    r = run("""
        with open('big.bin', 'wb') as fh:
            for _ in range(8):
                fh.write(b'x' * (1024 * 1024))
    """, timeout_s=5, max_file_mb=2)
    assert not r.ok and r.returncode != 0
    assert "File too large" in r.stderr


def test_writes_outside_workdir_do_not_reach_host():
    require_isolation()
    tag = uuid.uuid4().hex
    escape = Path(f"/tmp/escape_{tag}.txt")
    project_file = PROJECT_ROOT / f"escape_{tag}.txt"
    passwd_before = Path("/etc/passwd").read_bytes()
    r = run(f"""
        results = []
        for path, mode in [({str(escape)!r}, 'w'), ('/etc/passwd', 'a'), ({str(project_file)!r}, 'w')]:
            try:
                with open(path, mode) as fh:
                    fh.write('pwned:x:0:0::/root:/bin/sh\\n')
                results.append('written')
            except OSError as exc:
                results.append(type(exc).__name__)
        print(' '.join(results))
    """, timeout_s=5)
    assert r.ok, r.stderr
    tmp_outcome, passwd_outcome, project_outcome = r.stdout.split()
    assert not escape.exists()
    assert not project_file.exists()
    assert Path("/etc/passwd").read_bytes() == passwd_before
    assert passwd_outcome == "PermissionError"
    # a checkout under /tmp is hidden by the sandbox's private /tmp: the path is not there at all
    expected = ("FileNotFoundError",) if str(PROJECT_ROOT).startswith("/tmp/") else ("PermissionError",)
    assert project_outcome in expected
    assert tmp_outcome == "written"   # into the sandbox's private /tmp, gone with it


def test_host_processes_cannot_be_signalled():
    require_isolation()
    victim = subprocess.Popen(["sleep", "30"])
    code = f"""
        import os, signal
        print(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))
        for pid in ({victim.pid}, {os.getpid()}, os.getppid(), 1):
            try:
                os.kill(pid, signal.SIGKILL)
                print('killed', pid)
            except OSError as exc:
                print(type(exc).__name__, pid)
    """
    try:
        r = run(code, timeout_s=5)
        assert r.ok, r.stderr
        assert eval(r.stdout.splitlines()[0]) == [1, 2]   # its own /proc: init and itself
        # the host's processes do not exist for it (its own init, pid 1, ignores the signal)
        assert r.stdout.splitlines()[1:3] == [f"ProcessLookupError {victim.pid}", f"ProcessLookupError {os.getpid()}"]
        assert victim.poll() is None   # the host process is still alive
    finally:
        victim.kill()
        victim.wait()
    assert_host_fine()


def test_total_size_of_written_files_is_bounded():
    require_isolation()
    r = run("""
        import os
        written = 0
        try:
            for i in range(100):
                with open(f'f{i}.bin', 'wb') as fh:
                    fh.write(b'x' * (1024 * 1024))
                written += 1
        except OSError as exc:
            print(written, exc.errno)
        else:
            print(written, 0)
    """, timeout_s=10, max_file_mb=1)
    assert r.ok, r.stderr
    written, err = (int(v) for v in r.stdout.split())
    assert err == 28 and written < 64   # the working directory is a 64 MiB tmpfs: ENOSPC, nothing on the host's disk


def test_network_is_unreachable():
    require_isolation()
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.setblocking(False)
        port = server.getsockname()[1]
        r = run(f"""
            import socket
            try:
                socket.create_connection(('127.0.0.1', {port}), timeout=2).close()
                print('connected')
            except OSError as exc:
                print('connect-failed', type(exc).__name__)
            try:
                socket.getaddrinfo('example.com', 80)
                print('resolved')
            except OSError as exc:
                print('dns-failed', type(exc).__name__)
        """, timeout_s=10)
        assert r.ok, r.stderr
        assert r.network_isolated is True
        connect, dns = r.stdout.splitlines()
        assert connect.startswith("connect-failed")
        assert dns.startswith("dns-failed")
        with pytest.raises(BlockingIOError):
            server.accept()   # nothing ever reached the host


def test_network_isolation_available_as_root_here():
    """Where the tests run (CI: root, namespaces allowed), the kernel grants what the sandbox
    asks for, and network_isolation_available() says so."""
    require_isolation()
    assert IS_ROOT
    assert subprocess.run(["unshare", "-n", "-m", "-p", "-f", "true"], capture_output=True).returncode == 0
    assert network_isolation_available() is True


def test_no_isolation_without_root(monkeypatch):
    """Isolation needs root: for anyone else network_isolation_available() is False (and the
    sandbox falls back), whatever the kernel allows."""
    monkeypatch.setattr(sandbox.os, "geteuid", lambda: 1000)
    assert network_isolation_available() is False


def test_bootstrap_is_a_module_run_by_its_path():
    """The child side is agents_llm/sandbox_boot.py, started by its path in isolated mode (no installed
    package needed): its probe agrees with network_isolation_available(), a bad command gets a usage line."""
    boot = Path(sandbox_boot.__file__).resolve()
    assert Path(sandbox._BOOT_SCRIPT).resolve() == boot
    env = {"PATH": "/usr/bin:/bin"}
    probe = subprocess.run([sys.executable, "-I", "-B", str(boot), "probe"], capture_output=True, env=env,
                           cwd="/", timeout=30)
    assert (probe.returncode == 0) is ISOLATED, probe.stderr
    bad = subprocess.run([sys.executable, "-I", "-B", str(boot), "start"], capture_output=True, text=True,
                         env=env, cwd="/", timeout=30)
    assert bad.returncode == 2 and bad.stderr.startswith("sandbox: usage: sandbox_boot.py probe | run")


def test_output_flood_is_truncated():
    r = run("""
        import sys
        sys.stdout.write('x' * (50 * 1024 * 1024))
        sys.stderr.write('e' * (5 * 1024 * 1024))
    """, timeout_s=10)
    assert r.ok and not r.timed_out, r.stderr[-300:]
    assert sandbox.MAX_STREAM_BYTES <= len(r.stdout) < sandbox.MAX_STREAM_BYTES + 200
    assert r.stdout.startswith("x" * 1000)
    assert "output truncated" in r.stdout and str(50 * 1024 * 1024 - sandbox.MAX_STREAM_BYTES) in r.stdout
    assert "output truncated" in r.stderr
    assert r.wall_time_s < 8.0


def test_endless_output_flood_times_out_with_bounded_capture():
    r = run("while True: print('y' * 1000)", timeout_s=2)
    assert r.timed_out and r.returncode is None
    assert len(r.stdout) < sandbox.MAX_STREAM_BYTES + 200
    assert "output truncated" in r.stdout


def test_fallback_mode_without_namespaces_still_limits():
    rlimits = [("RLIMIT_AS", 512 << 20, 512 << 20), ("RLIMIT_CPU", 3, 4),
               ("RLIMIT_FSIZE", 1 << 20, 1 << 20), ("RLIMIT_NPROC", 64, 64), ("RLIMIT_CORE", 0, 0)]
    ok = sandbox._execute("import os; print('fallback', os.getcwd())", timeout_s=10, rlimits=rlimits,
                          max_file_mb=1, stdin="", isolate=False)
    assert ok.ok and ok.network_isolated is False, ok.stderr
    assert ok.stdout.startswith("fallback ")
    assert not os.path.exists(ok.stdout.split()[1])
    with socket.create_server(("127.0.0.1", 0)) as server:   # documented: the fallback has the network
        reach = sandbox._execute(f"import socket; socket.create_connection(('127.0.0.1', {server.getsockname()[1]}), "
                                 "timeout=2).close(); print('connected')", timeout_s=10, rlimits=rlimits,
                                 max_file_mb=1, stdin="", isolate=False)
        assert reach.stdout == "connected\n", reach.stderr
        server.accept()[0].close()
    loop = sandbox._execute("while True: pass", timeout_s=1.5, rlimits=rlimits, max_file_mb=1, stdin="",
                            isolate=False)
    assert loop.timed_out and loop.returncode is None and loop.wall_time_s < 3.0
    mem = sandbox._execute("bytearray(2 * 1024**3)", timeout_s=5, rlimits=rlimits, max_file_mb=1, stdin="",
                           isolate=False)
    assert not mem.ok and "MemoryError" in mem.stderr


# ---------------------------------------------------------------- arguments

@pytest.mark.parametrize("kwargs, needle", [
    ({"code": b"print(1)"}, "b'print(1)'"),
    ({"code": None}, "None"),
    ({"timeout_s": 0}, "0"),
    ({"timeout_s": -1.5}, "-1.5"),
    ({"timeout_s": float("nan")}, "nan"),
    ({"timeout_s": float("inf")}, "inf"),
    ({"timeout_s": True}, "True"),
    ({"timeout_s": "5"}, "'5'"),
    ({"memory_mb": 0}, "memory_mb"),
    ({"max_file_mb": 1.5}, "max_file_mb"),
    ({"max_processes": -3}, "max_processes"),
    ({"cpu_time_s": 0}, "cpu_time_s"),
    ({"stdin": b"x"}, "stdin"),
])
def test_bad_arguments_raise_value_error(kwargs, needle):
    args = {"code": "print(1)", "timeout_s": 5, **kwargs}
    code = args.pop("code")
    with pytest.raises(ValueError) as info:
        execute(code, **args)
    assert needle in str(info.value)
