"""`python -m agents_llm.local_server` never leaves its llama.cpp server behind: not when it is
stopped with SIGTERM or SIGHUP (as systemd, Docker and CI stop services), nor when it is killed."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agents_llm.local_server import free_port

REPO_ROOT = Path(__file__).resolve().parents[1]


def llama_server_pids(port: int) -> list[int]:
    """Processes running llama.cpp's server on ``port`` (read from /proc)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"agents_llm.llama_child" in argv and str(port).encode() in argv:
            pids.append(int(entry.name))
    return pids


def start_wrapper(port: int) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "agents_llm.local_server", "--port", str(port)], cwd=REPO_ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    line = proc.stdout.readline()  # printed once the server answers
    assert line.startswith("serving smollm2 at"), line
    assert len(llama_server_pids(port)) == 1
    return proc


def gone_within(port: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not llama_server_pids(port):
            return True
        time.sleep(0.2)
    return False


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGHUP])
def test_a_stop_signal_stops_the_llama_server_too(stop):
    port = free_port()
    proc = start_wrapper(port)
    proc.send_signal(stop)
    assert proc.wait(timeout=30) == 0
    assert gone_within(port, 15), f"llama.cpp server still running on port {port} after {stop.name}"


def test_a_killed_wrapper_takes_the_llama_server_with_it():
    port = free_port()
    proc = start_wrapper(port)
    server_pid = llama_server_pids(port)[0]
    proc.kill()  # SIGKILL: no handler runs; the kernel tells the child (PR_SET_PDEATHSIG)
    proc.wait(timeout=10)
    try:
        assert gone_within(port, 15), f"llama.cpp server {server_pid} outlived its killed parent"
    finally:
        for pid in llama_server_pids(port):
            os.kill(pid, signal.SIGKILL)
