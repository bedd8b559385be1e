"""The child side of :mod:`agents_llm.sandbox`: sets up isolation and limits, then starts the user program.

:func:`agents_llm.sandbox.execute` runs this file by its path, ``python -I -B sandbox_boot.py run CONFIG_JSON``
(by path, not ``-m``, so it needs no installed package: isolated mode ignores ``PYTHONPATH`` and the current
directory), as the caller's user. It imports the standard library only. Two commands:

* ``probe``: exit 0 when this process can create the sandbox's namespaces and mount a tmpfs inside them
  (:func:`agents_llm.sandbox.network_isolation_available` runs it once per interpreter);
* ``run CONFIG_JSON``: the bootstrap. With ``CONFIG["isolate"]`` it unshares new network, mount, PID, IPC and
  UTS namespaces and forks the namespace's ``init``, which mounts the scratch tmpfs, the working directory's
  tmpfs and ``/proc``, drops privileges, applies the rlimits and forks the user program, then relays its exit
  status. Without it, it applies the limits and replaces itself with the program. The sandbox module's
  docstring says what each mount and limit is for; CONFIG is built by ``agents_llm.sandbox._execute``.

Importing this module does nothing; setup errors exit with status 125 (127: the interpreter cannot start)
and a ``sandbox: ...`` line on stderr.
"""
from __future__ import annotations

import ctypes
import functools
import json
import os
import resource
import signal
import sys
from typing import Any, NoReturn

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWPID, CLONE_NEWNET = 0x20000000, 0x40000000
SANDBOX_NAMESPACES = CLONE_NEWNET | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS = 1, 38
SETUP_FAILED, CANNOT_EXEC = 125, 127


def fail(message: str, code: int = SETUP_FAILED) -> NoReturn:
    """Write ``sandbox: <message>`` to stderr and exit at once with ``code``."""
    try:
        os.write(2, ("sandbox: " + message + "\n").encode("utf-8", "replace"))
    finally:
        os._exit(code)


@functools.lru_cache(maxsize=1)
def libc() -> ctypes.CDLL:
    """The C library, with the argument types of the calls made here."""
    lib = ctypes.CDLL(None, use_errno=True)
    lib.mount.argtypes = (ctypes.c_char_p,) * 3 + (ctypes.c_ulong, ctypes.c_char_p)
    lib.unshare.argtypes = (ctypes.c_int,)
    lib.prctl.argtypes = (ctypes.c_int,) + (ctypes.c_ulong,) * 4
    return lib


def check(ret: int, what: str) -> None:
    """Raise ``OSError`` (with errno) when a C call returned non-zero."""
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def mount(src: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    def encode(text: str | None) -> bytes | None:
        return None if text is None else text.encode()

    check(libc().mount(encode(src), encode(target), encode(fstype), flags, encode(data)), "mount " + target)


def drop_privileges(cfg: dict[str, Any]) -> None:
    if cfg["uid"] is not None:
        os.setgroups([])
        os.setresgid(cfg["gid"], cfg["gid"], cfg["gid"])
        os.setresuid(cfg["uid"], cfg["uid"], cfg["uid"])
    check(libc().prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(NO_NEW_PRIVS)")


def apply_limits(cfg: dict[str, Any]) -> None:
    """Set every ``(name, soft, hard)`` rlimit, never above the hard limit already in force."""
    for name, soft, hard in cfg["rlimits"]:
        res = getattr(resource, name)
        cur_hard = resource.getrlimit(res)[1]
        if cur_hard != resource.RLIM_INFINITY:
            hard = min(hard, cur_hard)
        resource.setrlimit(res, (min(soft, hard), hard))


def exec_user(cfg: dict[str, Any]) -> NoReturn:
    try:
        os.execve(cfg["python"], cfg["argv"], os.environ)
    except BaseException as exc:
        fail(f"cannot start the interpreter: {exc!r}", CANNOT_EXEC)


def setup_mounts(cfg: dict[str, Any]) -> None:
    """Scratch tmpfs covers, interpreter directories bound back, the working directory's own tmpfs
    (holding a copy of ``main.py``) and a fresh ``/proc``."""
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    workdir = cfg["workdir"]
    with open(os.path.join(workdir, "main.py"), "rb") as fh:
        main_py = fh.read()
    fds = [os.open(k["path"], os.O_RDONLY | os.O_DIRECTORY) for k in cfg["keep"]]
    for cover in cfg["covers"]:
        mount("tmpfs", cover["path"], "tmpfs", MS_NOSUID | MS_NODEV, cover["options"])
    for keep, fd in zip(cfg["keep"], fds):
        if keep["shadowed"]:
            os.makedirs(keep["path"], mode=0o755, exist_ok=True)
            os.fchdir(fd)   # the covered original, reachable through the descriptor only
            mount(".", keep["path"], None, MS_BIND | MS_REC)
            if keep["readonly"]:
                try:
                    mount(None, keep["path"], None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
                except OSError:
                    pass   # defence in depth only: the prefix is root-owned anyway
        os.close(fd)
    # The working directory is a private, size-limited tmpfs at the same path: nothing the
    # program writes reaches the host's disk.
    os.makedirs(workdir, mode=0o755, exist_ok=True)
    mount("tmpfs", workdir, "tmpfs", MS_NOSUID | MS_NODEV, cfg["workdir_options"])
    fd = os.open(os.path.join(workdir, "main.py"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    view = memoryview(main_py)
    while view:
        view = view[os.write(fd, view):]
    if cfg["uid"] is not None:
        os.fchown(fd, cfg["uid"], cfg["gid"])
    os.close(fd)
    try:
        mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    except OSError:
        pass


def run_init(cfg: dict[str, Any], status_w: int) -> NoReturn:
    """PID 1 of the new PID namespace: set up, drop privileges, fork the program, reap; write its
    wait status to ``status_w``."""
    try:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)   # PID 1 with SIG_DFL ignores them from inside
        setup_mounts(cfg)
        os.chdir(cfg["workdir"])
        drop_privileges(cfg)
        check(libc().prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PDEATHSIG)")
        apply_limits(cfg)
        child = os.fork()
    except BaseException as exc:
        fail(f"setup failed: {exc!r}")
    if child == 0:
        os.close(status_w)
        exec_user(cfg)
    status = None
    while True:
        try:
            pid, st = os.wait()
        except ChildProcessError:
            break
        if pid == child:
            status = st
            break
    if status is not None:
        os.write(status_w, str(status).encode())
    os._exit(0)   # the kernel now kills whatever is left in the namespace


def relay(status: int) -> NoReturn:
    """Exit the way the user program did (same code, or killed by the same signal)."""
    if os.WIFEXITED(status):
        os._exit(os.WEXITSTATUS(status))
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)
    os._exit(SETUP_FAILED)


def run_isolated(cfg: dict[str, Any]) -> NoReturn:
    """Unshare the namespaces, fork their init, and exit as the user program did. A SIGTERM (the
    caller's timeout) kills the init, and with it the whole namespace."""
    state = {"child": None, "pending": False}

    def on_signal(signum, frame):
        if state["child"]:
            os.kill(state["child"], signal.SIGKILL)   # forced into the namespace's init
        else:
            state["pending"] = True

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)
    status_r, status_w = os.pipe()
    try:
        check(libc().unshare(SANDBOX_NAMESPACES), "unshare")
        child = os.fork()
    except BaseException as exc:
        fail(f"setup failed: {exc!r}")
    if child == 0:
        os.close(status_r)
        run_init(cfg, status_w)
    state["child"] = child
    os.close(status_w)
    if state["pending"]:
        os.kill(child, signal.SIGKILL)
    while True:
        try:
            os.waitpid(child, 0)
        except ChildProcessError:
            break
        except InterruptedError:
            continue
        break
    data = os.read(status_r, 64)
    if not data:   # init died before the program finished (killed on timeout, or setup failed)
        os._exit(SETUP_FAILED)
    relay(int(data))


def run(cfg: dict[str, Any]) -> NoReturn:
    """Start the user program as ``cfg`` says: in fresh namespaces, or (fallback) in place."""
    if cfg["isolate"]:
        run_isolated(cfg)
    try:
        os.chdir(cfg["workdir"])
        drop_privileges(cfg)
        apply_limits(cfg)
    except BaseException as exc:
        fail(f"setup failed: {exc!r}")
    exec_user(cfg)


def probe() -> int:
    """0 when the namespaces can be created and a tmpfs mounted in them; 1-3 says which step failed."""
    if libc().unshare(SANDBOX_NAMESPACES) != 0:
        return 1
    if libc().mount(None, b"/", None, MS_REC | MS_PRIVATE, None) != 0:
        return 2
    pid = os.fork()
    if pid == 0:   # the first child is PID 1 of the new PID namespace
        ok = libc().mount(b"tmpfs", b"/tmp", b"tmpfs", MS_NOSUID | MS_NODEV, b"size=1m") == 0
        os._exit(0 if ok else 3)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def main(argv: list[str]) -> int:
    if argv[:1] == ["probe"] and len(argv) == 1:
        return probe()
    if argv[:1] == ["run"] and len(argv) == 2:
        run(json.loads(argv[1]))
    fail(f"usage: sandbox_boot.py probe | run CONFIG_JSON (got {argv!r})", 2)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
