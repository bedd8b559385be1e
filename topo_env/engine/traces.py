"""Episode traces: what every call of a team was shown and what it answered, as JSON lines.

``env.record(path)`` (either front-end) or ``TeamEpisode.record(path)`` appends one JSON object per
finished episode to ``path``. The simulated team and real LLM teams write the same schema, so traces
of a real team can be compared with, or fitted by, the simulated one.

Schema ``topomarl.trace/1`` (one line per episode; token counts are the backend's usage figures):

.. code-block:: text

    schema        "topomarl.trace/1"
    task          {id, domain, prompt, reference, metadata}   metadata: the task's own (e.g. difficulty)
    n_agents      N;  roles: [role kind per agent];  adversaries: [agent indices]
    rounds        [round, ...]; a round is
                  {round, adjacency: N x N 0/1 (A[u][v]: u -> v), active: [0/1] * N, verify: [0/1] * N,
                   recall: N x N 0/1 or null, calls: [call, ...]}
    call          {agent, role, phase ("solo" | "draft" | "revise"), layer,
                   shown: [message, ...] (in the order shown), own_previous: message or null,
                   answer, confidence, verdict (+1 pass, -1 fail, 0 none), text,
                   prompt_tokens, completion_tokens, reasoning_tokens, tokens_estimated}
    message       {sender, round, phase, answer, confidence, verdict}
    decision      {shown: [message, ...], answer, confidence, text, prompt_tokens, completion_tokens,
                   reasoning_tokens, tokens_estimated, accuracy, mode}
                  mode: how the team decided (``env.decision``: "llm" the decision node's call, "vote",
                  "agent:K": no call, zero tokens; :mod:`topo_env.engine.decision`); absent: "llm"
    team_tokens   the episode's tokens, the decision node's included
    reward        Eq. 12's return of the episode

No API key or other setting of the backend is written, nor a task's ``hidden`` part (what only a
simulator knows: difficulty, latent, bucket, trap; a real team's traces never hold it). Where a study
needs that truth, ``record(path, truth=TRUTH)`` writes it apart, one line per episode
(:func:`truth_record`, schema ``topomarl.truth/1``: ``{schema, task_id, hidden}``), read back by
:func:`read_truth`. :func:`read_traces` reads a trace file back and names the file, line and field of
anything malformed.
"""
from __future__ import annotations

import json
import numbers
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from topo_env.engine.config_checks import ConfigError
from topo_env.engine.decision import DecisionMode, parse_decision
from topo_env.engine.team_backend import AgentReply, Message
from topo_env.engine.user_files import json_lines

SCHEMA = "topomarl.trace/1"
TRUTH_SCHEMA = "topomarl.truth/1"
EPISODE_KEYS = ("schema", "task", "n_agents", "roles", "adversaries", "rounds", "decision", "team_tokens", "reward")
ROUND_KEYS = ("round", "adjacency", "active", "verify", "recall", "calls")
CALL_KEYS = ("agent", "role", "phase", "layer", "shown", "own_previous", "answer", "confidence", "verdict", "text",
             "prompt_tokens", "completion_tokens", "reasoning_tokens", "tokens_estimated")
MESSAGE_KEYS = ("sender", "round", "phase", "answer", "confidence", "verdict")


class TraceError(ValueError):
    """A malformed trace line; the message names the file, the line and the field."""


def message_record(m: Message) -> dict[str, Any]:
    return {"sender": m.sender, "round": m.round, "phase": m.phase, "answer": m.answer,
            "confidence": m.confidence, "verdict": int(m.verdict)}


def reply_record(reply: AgentReply) -> dict[str, Any]:
    """The reply fields of a call or decision record (schema above)."""
    return {"answer": reply.answer, "confidence": reply.confidence, "text": reply.text,
            "prompt_tokens": reply.prompt_tokens, "completion_tokens": reply.completion_tokens,
            "reasoning_tokens": reply.reasoning_tokens, "tokens_estimated": bool(reply.tokens_estimated)}


def plain_data(value: Any) -> Any:
    """Task metadata as JSON data (numpy scalars and arrays become numbers and lists)."""
    if isinstance(value, dict):
        return {str(k): plain_data(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain_data(v) for v in value]
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


def episode_record(episode: Any) -> dict[str, Any]:
    """The trace of a finished :class:`~topo_env.engine.episode.TeamEpisode` (one JSON object)."""
    if not episode.ended or episode.decision is None:
        raise RuntimeError("episode_record() needs a finished episode (after decide())")
    task = episode.task
    rounds = []
    for res in episode.history:
        spec = res.spec
        calls = [{"agent": c.agent, "role": episode.roles[c.agent], "phase": c.phase, "layer": c.layer,
                  "shown": [message_record(m) for m in c.shown],
                  "own_previous": None if c.own_previous is None else message_record(c.own_previous),
                  "verdict": int(c.verdict), **reply_record(c.reply)}
                 for c in res.calls]
        rounds.append({"round": res.round, "adjacency": spec.adjacency.astype(int).tolist(),
                       "active": spec.active.astype(int).tolist(), "verify": spec.verify.astype(int).tolist(),
                       "recall": None if spec.recall is None else spec.recall.astype(int).tolist(), "calls": calls})
    decision = {"shown": [message_record(m) for m in episode.decision_shown], **reply_record(episode.decision.reply),
                "accuracy": float(episode.decision.accuracy), "mode": str(getattr(episode.backend, "decision", "llm"))}
    return {"schema": SCHEMA,
            "task": {"id": task.id, "domain": task.domain, "prompt": task.prompt, "reference": task.reference,
                     "metadata": plain_data(task.metadata)},
            "n_agents": episode.n_agents, "roles": list(episode.roles), "adversaries": list(episode.adversaries),
            "rounds": rounds, "decision": decision, "team_tokens": int(episode.team_tokens),
            "reward": float(episode.episode_reward)}


def truth_record(task: Any) -> dict[str, Any]:
    """The hidden truth of ``task`` (a :class:`~topo_env.engine.tasks.Task`) as one JSON object."""
    return {"schema": TRUTH_SCHEMA, "task_id": task.id, "hidden": plain_data(task.hidden)}


def read_truth(path: str | Path) -> dict[str, dict[str, Any]]:
    """Task id -> its hidden truth, from a file of :func:`truth_record` lines; a :class:`TraceError`
    names the file and line of a malformed one."""
    if not Path(path).is_file():
        raise TraceError(f"truth file {str(path)!r} does not exist (record(path, truth=FILE) writes one)")
    truth: dict[str, dict[str, Any]] = {}
    for number, record in json_lines(path, TraceError):
        if not isinstance(record, dict) or record.get("schema") != TRUTH_SCHEMA:
            raise TraceError(f"{path}:{number}: not a truth record (schema {TRUTH_SCHEMA!r})")
        truth[str(record["task_id"])] = record["hidden"]
    return truth


def append_trace(path: str | Path, record: dict[str, Any]) -> None:
    """Append one episode's record as a JSON line (the folder is created; the file opened per
    episode, so a recording env still pickles and a crash loses at most the episode in flight)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(record, separators=(",", ":")) + "\n")


def read_traces(path: str | Path) -> Iterator[dict[str, Any]]:
    """The episode records of a trace file, each checked against the schema; a
    :class:`TraceError` names the file, line and field of the first problem."""
    path = Path(path)
    if not path.is_file():
        raise TraceError(f"trace file {str(path)!r} does not exist")
    for number, record in json_lines(path, TraceError):
        check_record(record, f"{path}:{number}")
        yield record


def check_record(record: Any, where: str = "trace") -> None:
    """Raise :class:`TraceError` naming ``where`` and the field if ``record`` breaks the schema."""
    _keys(record, EPISODE_KEYS, where, "episode")
    if record["schema"] != SCHEMA:
        raise TraceError(f"{where}: field 'schema' is {record['schema']!r}, expected {SCHEMA!r}")
    n = record["n_agents"]
    _int(n, where, "n_agents", 1)
    for t, rnd in enumerate(record["rounds"]):
        field = f"rounds[{t}]"
        _keys(rnd, ROUND_KEYS, where, field)
        for k, call in enumerate(rnd["calls"]):
            cfield = f"{field}.calls[{k}]"
            _keys(call, CALL_KEYS, where, cfield)
            _int(call["agent"], where, f"{cfield}.agent", 0, n - 1)
            for key in ("prompt_tokens", "completion_tokens", "reasoning_tokens"):
                _int(call[key], where, f"{cfield}.{key}", 0)
            for j, m in enumerate(call["shown"]):
                _keys(m, MESSAGE_KEYS, where, f"{cfield}.shown[{j}]")
    _keys(record["decision"], ("shown", "answer", "confidence", "accuracy", "prompt_tokens", "completion_tokens"),
          where, "decision")
    try:
        decision_mode(record, n)
    except ConfigError as err:
        raise TraceError(f"{where}: field 'decision.mode': {err}") from None
    _int(record["team_tokens"], where, "team_tokens", 0)


def decision_mode(record: dict[str, Any], n_agents: int | None = None) -> DecisionMode:
    """How an episode record's team decided (its ``decision.mode``; "llm" in traces written before it)."""
    return parse_decision(record["decision"].get("mode", "llm"), n_agents, "decision.mode")


def _keys(value: Any, keys: tuple[str, ...], where: str, field: str) -> None:
    if not isinstance(value, dict):
        raise TraceError(f"{where}: field '{field}' must be an object, got {type(value).__name__}")
    missing = [k for k in keys if k not in value]
    if missing:
        raise TraceError(f"{where}: field '{field}' lacks {missing}")


def _int(value: Any, where: str, field: str, low: int, high: int | None = None) -> None:
    ok = isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= low
    if not ok or (high is not None and value > high):
        bound = f">= {low}" if high is None else f"in {low}..{high}"
        raise TraceError(f"{where}: field '{field}' is {value!r}: must be an integer {bound}")
