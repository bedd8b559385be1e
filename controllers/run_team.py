"""A team under a controller on a user's own tasks: the controller in use, outside any evaluation.

    python -m controllers.run_team --config configs/local_llm.yaml --controller star \\
        --task "Which of these is a prime?" --choices 4 6 7 --reference C
    python -m controllers.run_team --config configs/local_llm.yaml --controller qmix --run runs/r \\
        --tasks my_tasks.jsonl --out answers.jsonl
    python -m controllers.run_team --config configs/default.yaml --controller full --task-index 0 1 2

:func:`run_team` plays each task once (reset seed ``seed + k`` for the k-th) with the controller
on the orchestrator env of the team ``env_config`` describes, and returns one :class:`TeamAnswer`
per task: the decision node's answer, whether it is correct (None where the task has no
reference), every round's graph, the transcript, tokens and calls. Nothing is trained.

Tasks: :class:`~topo_env.engine.tasks.Task` objects, indices of the team's own tasks (of
``env.split``), plain prompt strings (in ``env.domain``, no reference: answered, not scored) or
dicts in the task-file schema of :mod:`agents_llm.tasks`, whose ``reference`` (``tests`` for code)
may be left out. An LLM team (``backend: llm``) plays any of them. The simulated team plays only
its own tasks (by index, or their Task objects): it simulates a task's hidden subject, difficulty
and trap answer, which a user's text does not have.

Controllers: a name of :mod:`controllers.registry` or a :class:`~controllers.base.Controller`. A
method that must be trained first plays a trained run: QMIX the folder of a ``train_qmix.py`` run
(``run_dir``: :meth:`~controllers.qmix.QMIXController.load_run`, which refuses a network that does
not fit the team); AgentConductor and Puppeteer keep no run on disk, so train one in Python and
pass the Controller. Every refusal is one :class:`~topo_env.engine.config_checks.ConfigError` line.
"""
from __future__ import annotations

import dataclasses
import json
import numbers
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from controllers.base import Controller, play_episode
from controllers.registry import ALL_NAMES, LEARNED, controller_env, make_controller
from topo_env.engine.backend_registry import NAMED_PROFILE, backend_offers
from topo_env.engine.cli import OneLineParser, closing_note, run_main
from topo_env.engine.config_checks import ConfigError, read_text_file
from topo_env.engine.tasks import Task
from topo_env.engine.user_files import output_dir
from topo_env.frontends.env_config import EnvConfig
from topo_env.frontends.orchestrator_env import OrchestratorEnv

PROG = "python -m controllers.run_team"
SIMULATED_TEXT = ("the simulated team plays only its own tasks (it simulates a task's hidden subject, difficulty "
                  "and trap answer, which free text lacks): give task indices (--task-index K) or a config whose "
                  "env has backend: llm")
TASK_FILE = "give a JSONL file of tasks, one JSON object a line (schema: agents_llm/tasks.py)"


@dataclass(frozen=True)
class TeamRound:
    """One round. ``edges``: (u, v) pairs, u -> v: v is shown u's output of this round before it
    answers; ``recalls``: (u, v), v is also shown u's latest output of an earlier round; ``ran``:
    the agents called; ``verified``: those whose output went through the domain's verifier;
    ``tokens``: per agent, this round's."""

    edges: tuple[tuple[int, int], ...]
    recalls: tuple[tuple[int, int], ...]
    ran: tuple[int, ...]
    verified: tuple[int, ...]
    tokens: tuple[int, ...]

    def picture(self) -> str:
        """The round in one line: ``0->2, 1->2 (ran 0,1,2; verified 1)``."""
        edges = ", ".join(f"{u}->{v}" for u, v in self.edges) or "no edges"
        recalls = ", recalls " + ", ".join(f"{u}->{v}" for u, v in self.recalls) if self.recalls else ""
        verified = "; verified " + ",".join(map(str, self.verified)) if self.verified else ""
        return f"{edges}{recalls} (ran {','.join(map(str, self.ran)) or 'nobody'}{verified})"


@dataclass(frozen=True)
class TeamTokens:
    """Tokens (prompt + completion, as the server reported them; ``estimated`` where some call got
    no usage): ``team`` every call of the team (the agents' and the decision node's), ``agents``
    per agent, ``decision`` the decision node's, ``controller`` the controller's own LLM's
    (LLM-written controllers; beyond the team's)."""

    team: int
    agents: tuple[int, ...]
    decision: int
    controller: int
    estimated: bool


@dataclass(frozen=True)
class TeamAnswer:
    """One task played: the decision node's ``answer`` (the label it parsed: an option letter, a
    number, code; None where it stated none) and its reply ``answer_text``; ``correct`` (None:
    the task has no reference to score against); ``rounds``; ``transcript`` (every call with what
    it was shown); ``tokens``; ``calls`` (the agents', the decision node's and the controller's
    own LLM's)."""

    task_id: str
    prompt: str
    controller: str
    answer: str | None
    answer_text: str
    correct: bool | None
    rounds: tuple[TeamRound, ...]
    transcript: str
    tokens: TeamTokens
    calls: int

    def to_dict(self, transcript: bool = True) -> dict[str, Any]:
        """A dict of JSON types (tuples as lists; ``transcript=False`` leaves the transcript out);
        :meth:`from_dict` reads it back."""
        data = json.loads(json.dumps(dataclasses.asdict(self)))
        if not transcript:
            del data["transcript"]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "TeamAnswer":
        """The answer :meth:`to_dict` wrote (without its transcript: an empty one)."""
        def tuples(value: Any) -> Any:
            return tuple(tuples(v) for v in value) if isinstance(value, (list, tuple)) else value

        fields = {k: tuples(v) for k, v in data.items()}
        fields["rounds"] = tuple(TeamRound(**{k: tuples(v) for k, v in r.items()}) for r in data["rounds"])
        fields["tokens"] = TeamTokens(**{k: tuples(v) for k, v in data["tokens"].items()})
        return cls(**{"transcript": "", **fields})


def run_team(env_config: EnvConfig | Mapping[str, Any], controller: str | Controller, tasks: Any, *,
             run_dir: str | Path | None = None, seed: int = 0) -> list[TeamAnswer]:
    """Every task of ``tasks`` (one task, or a sequence) played by the team under ``controller``
    (the module docstring); ``run_dir``: the training run a learned controller plays."""
    return list(iter_team(env_config, controller, tasks, run_dir=run_dir, seed=seed))


def iter_team(env_config: EnvConfig | Mapping[str, Any], controller: str | Controller, tasks: Any, *,
              run_dir: str | Path | None = None, seed: int = 0) -> Iterator[TeamAnswer]:
    """:func:`run_team`, one answer at a time as each task ends. Every input is checked (one
    ConfigError line) before the first call."""
    config = env_config if isinstance(env_config, EnvConfig) else EnvConfig.from_dict(dict(env_config))
    items = team_tasks(config, tasks)
    player, config, chat = build_player(controller, config, run_dir, seed)
    env = OrchestratorEnv(config, mode=player.mode)
    try:
        for k, task in enumerate(items):
            spent = (chat.tokens, chat.calls) if chat is not None else (0, 0)
            record = play_episode(env, player, int(seed) + k, {"task": task})
            own = (chat.tokens - spent[0], chat.calls - spent[1]) if chat is not None else (0, 0)
            yield team_answer(env, player.name, record.calls + own[1], own[0])
    finally:
        env.close()
        if chat is not None:
            chat.close()


def team_tasks(config: EnvConfig, tasks: Any) -> list[Task | int]:
    """``tasks`` as the env's reset takes them (Task objects and task indices; prompts and dicts
    made Tasks of ``config``'s domain); a one-line ConfigError for anything the team cannot play."""
    one = isinstance(tasks, (str, Mapping, Task, numbers.Integral))
    items = [tasks] if one else list(tasks)
    if not items:
        raise ConfigError("no tasks: give at least one task")
    domain = config.resolved_domain
    played: list[Task | int] = []
    for k, item in enumerate(items, start=1):
        if isinstance(item, numbers.Integral) and not isinstance(item, bool):
            played.append(int(item))
            continue
        if isinstance(item, str):
            item = {"id": f"task-{k}", "prompt": item}
        if isinstance(item, Mapping) and backend_offers(config.backend, NAMED_PROFILE):
            raise ConfigError(SIMULATED_TEXT)
        if isinstance(item, Mapping):
            from agents_llm.tasks import parse_task  # the task-file schema

            try:
                item = parse_task({"domain": domain, **item}, need_answer=False)
            except ValueError as err:
                raise ConfigError(f"task {k}: {err}") from None
        if not isinstance(item, Task):
            raise ConfigError(f"task {k} is a {type(item).__name__}: give a prompt, a task-file record, a Task or "
                              "a task index")
        if item.domain != domain:
            raise ConfigError(f"task {item.id!r} is a {item.domain} task; this team solves {domain} tasks")
        played.append(item)
    return played


def read_tasks(path: str | Path, config: EnvConfig) -> list[Task]:
    """The tasks of a JSONL task file (:mod:`agents_llm.tasks`' schema, references optional) in
    ``config``'s domain; a missing, empty or bad file is a one-line ConfigError."""
    from agents_llm.tasks import load_jsonl

    if backend_offers(config.backend, NAMED_PROFILE):
        raise ConfigError(SIMULATED_TEXT)
    read_text_file(path, "the tasks file", TASK_FILE)
    try:
        return load_jsonl(path, config.resolved_domain, need_answers=False)
    except ValueError as err:
        raise ConfigError(f"{err}; {TASK_FILE}") from None


def build_player(controller: str | Controller, config: EnvConfig, run_dir: str | Path | None,
                 seed: int) -> tuple[Controller, EnvConfig, Any]:
    """The controller, the env config it plays (its rounds and keys) and its own LLM (or None),
    with ``run_dir``'s network loaded; a one-line ConfigError where it needs a run it cannot get."""
    if isinstance(controller, Controller):
        if run_dir is not None:
            if not hasattr(controller, "load_run"):
                raise ConfigError(f"controller {controller.name!r} loads no run: leave run_dir out")
            controller.load_run(run_dir)
        module = type(controller).__module__
        if module in LEARNED.values():  # a learned method's rounds and env keys, as the registry builds it
            config = controller_env(sys.modules[module], config)
        return controller, config, None
    if not isinstance(controller, str):
        raise ConfigError(f"controller {controller!r}: give a name of {list(ALL_NAMES)} or a Controller")
    built = make_controller(controller, config, seed, Path(run_dir or "."))  # the folder it would train in: unused
    player, loads = built.controller, hasattr(built.controller, "load_run")
    if loads and run_dir is None:
        raise ConfigError(f"controller {controller!r} plays a trained network: give its run (--run DIR, a "
                          "train_qmix.py --out folder); an untrained one acts at random")
    if not loads and built.train_episodes > 0:
        raise ConfigError(f"controller {controller!r} keeps no trained run on disk to load: train it in Python "
                          "(controller.train(env, episodes, seed)) and pass the Controller to run_team")
    if not loads and run_dir is not None:
        raise ConfigError(f"controller {controller!r} learns nothing before it plays: leave --run out")
    if loads:
        player.load_run(run_dir)
    return player, built.env_config, built.orchestrator_llm


def team_answer(env: OrchestratorEnv, controller: str, calls: int, controller_tokens: int) -> TeamAnswer:
    """The :class:`TeamAnswer` of the episode ``env`` just ended."""
    episode = env.episode
    task, reply = episode.task, episode.decision.reply
    rounds = tuple(TeamRound(edges=_pairs(r.spec.adjacency), recalls=_pairs(r.spec.recall),
                             ran=tuple(i for i, c in enumerate(r.agent_calls) if c),
                             verified=tuple(sorted(r.spec.verified)), tokens=tuple(int(t) for t in r.agent_tokens))
                   for r in episode.history)
    tokens = TeamTokens(team=int(episode.team_tokens), agents=tuple(int(t) for t in episode.agent_tokens),
                        decision=int(reply.total_tokens), controller=int(controller_tokens),
                        estimated=bool(episode.tokens_estimated))
    correct = bool(episode.accuracy == 1.0) if episode.decision.scored else None
    return TeamAnswer(task_id=task.id, prompt=task.prompt, controller=controller, answer=reply.answer,
                      answer_text=reply.text, correct=correct, rounds=rounds, transcript=env.transcript(),
                      tokens=tokens, calls=int(calls))


def _pairs(matrix: np.ndarray | None) -> tuple[tuple[int, int], ...]:
    return () if matrix is None else tuple((int(u), int(v)) for u, v in zip(*np.nonzero(matrix)))


# -- the command ---------------------------------------------------------------------------------
def build_parser() -> OneLineParser:
    parser = OneLineParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True, help="experiment YAML whose env: is the team")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override")
    parser.add_argument("--controller", required=True, help=f"one of {list(ALL_NAMES)}")
    parser.add_argument("--run", default=None, metavar="DIR", help="the run it plays (qmix: a train_qmix.py --out)")
    given = parser.add_mutually_exclusive_group(required=True)
    given.add_argument("--task", metavar="TEXT", help="one task's prompt (in env.domain)")
    given.add_argument("--tasks", metavar="FILE", help="a JSONL task file (agents_llm/tasks.py; reference optional)")
    given.add_argument("--task-index", type=int, nargs="+", metavar="K", help="the team's own tasks K of env.split")
    parser.add_argument("--choices", nargs="+", metavar="OPTION", help="--task's options (lettered A, B, ...)")
    parser.add_argument("--reference", default=None, help="--task's answer (an option letter or text): scored")
    parser.add_argument("--seed", type=int, default=0, help="task k plays reset seed SEED + k (default 0)")
    parser.add_argument("--out", default=None, metavar="FILE", help="write one JSON object per task (JSONL)")
    parser.add_argument("--no-transcript", action="store_true", help="neither print nor write the transcripts")
    return parser


def print_answer(answer: TeamAnswer, transcript: bool) -> None:
    """A task's answer, each round's graph and its tokens (and its transcript)."""
    first = answer.prompt.strip().splitlines()[0] if answer.prompt.strip() else ""
    print(f"{answer.task_id}: {first[:100]}{'...' if len(first) > 100 else ''}")
    for k, r in enumerate(answer.rounds, start=1):
        print(f"  round {k}: {r.picture()}")
    verdict = {True: "correct", False: "wrong", None: "not scored: no reference"}[answer.correct]
    said = answer.answer if answer.answer is not None else f"none stated; the decision node said {answer.answer_text!r}"
    print(f"  answer: {said} ({verdict})" if "\n" not in said else f"  answer ({verdict}):\n    "
          + said.replace("\n", "\n    "))
    t = answer.tokens
    own = f"; controller's LLM {t.controller}" if t.controller else ""
    print(f"  tokens: {t.team} (agents {', '.join(map(str, t.agents))}; decision {t.decision}{own})"
          f"{' estimated' if t.estimated else ''}, {answer.calls} calls")
    if transcript:
        print("  transcript:\n    " + answer.transcript.replace("\n", "\n    "))


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if (args.choices or args.reference is not None) and args.task is None:
        parser.error("--choices and --reference describe --task; a tasks file gives them per line")
    from learners.config import load_experiment  # the experiment config's sections

    config = load_experiment(args.config, args.set).env
    if args.task is not None:
        tasks: Any = [{"id": "task-1", "prompt": args.task, "choices": args.choices, "reference": args.reference}]
    else:
        tasks = read_tasks(args.tasks, config) if args.tasks else args.task_index
    out = Path(args.out) if args.out else None
    if out is not None:
        output_dir(out.parent, "--out")
    answered, correct, scored, sink = 0, 0, 0, None
    try:
        for answer in iter_team(config, args.controller, tasks, run_dir=args.run, seed=args.seed):
            print_answer(answer, not args.no_transcript)
            if out is not None:  # as each task ends: a run stopped midway keeps what it answered
                sink = sink or out.open("w", encoding="utf-8")
                sink.write(json.dumps(answer.to_dict(transcript=not args.no_transcript)) + "\n")
                sink.flush()
            answered += 1
            scored += answer.correct is not None
            correct += bool(answer.correct)
    finally:
        if sink is not None:
            sink.close()
    notes = [f"correct: {correct} of the {scored} tasks with a reference" if scored else
             "correct: nothing scored (no task had a reference)",
             "tokens: prompt + completion of every call (an LLM team's: the server's usage); round k: u->v means "
             "v was shown u's output of that round."]
    written = [("answers, one JSON object per task (TeamAnswer.to_dict)", out)] if out is not None else \
        [("nothing", "--out FILE writes the answers as JSONL")]
    print(closing_note(f"{answered} task(s) with {args.controller} on {config.team_label}", notes, written))
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main, PROG))
