"""A scriptable OpenAI-compatible chat server on 127.0.0.1 for tests (no network beyond loopback).

Each request to ``/v1/chat/completions`` takes the next step of ``script`` (the last step
repeats): ``("ok", content, usage_or_None)``, ``("status", code)``, ``("delay", seconds, content)``,
``("malformed",)``. Requests are recorded in ``requests`` (parsed JSON bodies).

A model of a batching server's speed (the episodes-in-flight benchmark and tests): every request
holds one of ``capacity`` slots (None: unlimited; requests beyond it queue, first come first
served) for ``latency`` seconds before its step is answered; ``latency`` may be a function of the
request body (a different latency per episode). ``max_in_flight`` records the most requests held
at once.
"""
from __future__ import annotations

import json
import threading
from collections.abc import Callable
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class FakeOpenAIServer:
    def __init__(self, script: list[tuple] | None = None, latency: float | Callable[[dict], float] = 0.0,
                 capacity: int | None = None):
        self.script = list(script or [("ok", "Answer: B", {"prompt_tokens": 11, "completion_tokens": 7})])
        self.requests: list[dict] = []
        self._lock = threading.Lock()
        self.latency = latency
        self._slots = threading.BoundedSemaphore(capacity) if capacity else None
        self._held = 0
        self.max_in_flight = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output clean
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                if server.latency or server._slots is not None:
                    server._hold(body)
                with server._lock:
                    server.requests.append(body)
                    step = server.script[min(len(server.requests) - 1, len(server.script) - 1)]
                kind = step[0]
                if kind == "status":
                    self._send(step[1], {"error": {"message": f"scripted {step[1]}", "type": "server_error"}})
                    return
                if kind == "malformed":
                    self._raw(200, b"{not json")
                    return
                if kind == "delay":
                    time.sleep(step[1])
                    content, usage = step[2], {"prompt_tokens": 3, "completion_tokens": 2}
                else:
                    content, usage = step[1], step[2]
                payload = {
                    "id": "cmpl-test", "object": "chat.completion", "created": 0, "model": body.get("model", "m"),
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
                }
                if usage is not None:
                    payload["usage"] = {**usage, "total_tokens": usage["prompt_tokens"] + usage["completion_tokens"]}
                self._send(200, payload)

            def _send(self, code: int, payload: dict) -> None:
                self._raw(code, json.dumps(payload).encode())

            def _raw(self, code: int, data: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                try:
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (a timeout test)
                    pass

        class Server(ThreadingHTTPServer):
            request_queue_size = 1024  # many clients connecting at once (episodes in flight)

        self.httpd = Server(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def _hold(self, body: dict) -> None:
        """Take a slot (waiting while ``capacity`` requests hold one), keep it ``latency`` seconds."""
        latency = self.latency(body) if callable(self.latency) else self.latency
        if self._slots is not None:
            self._slots.acquire()
        try:
            with self._lock:
                self._held += 1
                self.max_in_flight = max(self.max_in_flight, self._held)
            time.sleep(latency)
            with self._lock:
                self._held -= 1
        finally:
            if self._slots is not None:
                self._slots.release()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> "FakeOpenAIServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
