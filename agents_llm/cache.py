"""A persistent cache of LLM responses (sqlite), shared safely by several processes.

The key is a SHA-256 of the request that determines the answer: base URL, model, messages,
sampling parameters and a sample index (so that several samples of the same prompt stay
distinct). API keys are never part of a key or a value. Re-running an episode with the same
seed then makes no new calls and returns identical text and token counts.
"""
from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from pathlib import Path
from typing import Any

from topo_env.engine.config_checks import ConfigError


def request_key(base_url: str, model: str, messages: list[dict], params: dict[str, Any], sample_index: int) -> str:
    """Stable hex key of one request (JSON with sorted keys, hashed)."""
    payload = json.dumps({"base_url": base_url, "model": model, "messages": messages, "params": params,
                          "sample": int(sample_index)}, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(payload.encode()).hexdigest()


class ResponseCache:
    """``get(key) -> dict | None``, ``put(key, value)``; values are JSON objects.

    One sqlite file in WAL mode; every operation opens its own short transaction, so
    processes and threads can share a cache file. The connection is opened lazily and not
    pickled.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._conn: sqlite3.Connection | None = None

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, timeout=30.0, isolation_level=None, check_same_thread=False)
            try:
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, value TEXT NOT NULL, created REAL)")
            except BaseException:
                conn.close()
                raise
            self._conn = conn
        return self._conn

    def _execute(self, sql: str, params: tuple = ()) -> sqlite3.Cursor:
        """``sql`` on the cache file; a file that is not an sqlite database, or a damaged one, is a
        one-line ConfigError naming it and what to do (a locked or full disk stays an OperationalError)."""
        try:
            return self._connection().execute(sql, params)
        except sqlite3.OperationalError:
            raise
        except sqlite3.DatabaseError as err:
            raise ConfigError(f"{self.path}: the LLM response cache is not a readable sqlite database (truncated or "
                              f"damaged: {err}); delete it (it only saves repeated calls) or set "
                              "env.backend.cache_path to another file") from None

    def get(self, key: str) -> dict | None:
        row = self._execute("SELECT value FROM responses WHERE key = ?", (key,)).fetchone()
        return None if row is None else json.loads(row[0])

    def put(self, key: str, value: dict) -> None:
        self._execute("INSERT OR REPLACE INTO responses (key, value, created) VALUES (?, ?, ?)",
                      (key, json.dumps(value, ensure_ascii=False), time.time()))

    def __len__(self) -> int:
        return self._execute("SELECT COUNT(*) FROM responses").fetchone()[0]

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __getstate__(self) -> dict:
        return {"path": self.path, "_conn": None}
