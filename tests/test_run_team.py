"""A team under a controller on a user's own tasks (controllers/run_team.py): the library call and
the command, on a fake OpenAI-compatible server and on the simulated team."""
from __future__ import annotations

import json

import pytest
import yaml

from controllers.run_team import PROG, SIMULATED_TEXT, TeamAnswer, build_player, main, run_team, team_tasks
from fake_openai_server import FakeOpenAIServer
from run_checks import train_tiny_run
from topo_env.engine.cli import run_main
from topo_env.engine.config_checks import ConfigError
from topo_env.frontends.env_config import EnvConfig

SECRET = "sk-run-team-secret"
REPLY = "The second option fits.\nAnswer: B\nConfidence: 0.8"
# every request its own usage, so a wrong sum or a call counted twice shows
SCRIPT = [("ok", REPLY, {"prompt_tokens": 20 + i, "completion_tokens": 1 + i % 5}) for i in range(60)]
STAR = ((0, 2), (1, 2))  # star, N = 3: the analyzer (agent 2) is shown both others' outputs, every round
CHOICES = ["four", "six", "seven", "nine"]


def served(first: int, last: int) -> int:
    """The tokens the fake server reported for requests first .. last - 1."""
    return sum(u["prompt_tokens"] + u["completion_tokens"] for _, _, u in SCRIPT[first:last])


def llm_env(server, tmp_path, **keys) -> dict:
    dataset = tmp_path / "pool.jsonl"
    dataset.write_text("\n".join(json.dumps({"id": f"p{i}", "domain": "reasoning", "prompt": f"Pool question {i}?",
                                             "choices": CHOICES, "reference": "C"}) for i in range(4)))
    backend = {"kind": "llm", "model": "team-model", "base_url": server.base_url, "backoff_s": 0.01,
               "timeout_s": 5.0, "cache_path": str(tmp_path / "cache.sqlite"), "dataset": str(dataset),
               "train_size": 2}
    return {"domain": "reasoning", "rounds": 2, "embed_dim": 128, "backend": backend, **keys}


def config_file(tmp_path, env: dict) -> str:
    path = tmp_path / "team.yaml"
    path.write_text(yaml.safe_dump({"env": env}))
    return str(path)


def tasks_file(tmp_path) -> str:
    rows = [{"id": "right", "prompt": "Which of these is a prime?", "choices": CHOICES, "reference": "B"},
            {"id": "wrong", "prompt": "Which of these is the largest?", "choices": CHOICES, "reference": "nine"}]
    path = tmp_path / "tasks.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return str(path)


@pytest.fixture(scope="module")
def qmix_run(tmp_path_factory):
    """A QMIX run of the one-episode test config (mmlu_pro, reasoning, N = 3, T = 2, embed_dim 128), 4 episodes."""
    return train_tiny_run(tmp_path_factory.mktemp("qmix") / "run")


@pytest.fixture(autouse=True)
def api_key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)


def test_star_answers_free_text_with_its_graph_transcript_and_the_servers_tokens(tmp_path):
    prompt = "Which planet is largest? Say the letter.\nA. Mars\nB. Jupiter"
    with FakeOpenAIServer(SCRIPT) as srv:
        (answer,) = run_team(llm_env(srv, tmp_path), "star", prompt, seed=3)
        requests = len(srv.requests)
    assert requests == answer.calls == 7  # 2 rounds of 3 agents + the decision node
    assert answer.prompt == prompt and answer.task_id == "task-1" and answer.controller == "star"
    assert answer.answer == "B" and "Answer: B" in answer.answer_text
    assert answer.correct is None  # no reference: answered, not scored
    assert [r.edges for r in answer.rounds] == [STAR, STAR]
    assert all(r.ran == (0, 1, 2) and r.verified == () and r.recalls == () for r in answer.rounds)
    t = answer.tokens
    assert t.team == served(0, 7) and t.decision == served(6, 7)  # the decision is the episode's last call
    assert sum(t.agents) + t.decision == t.team and min(t.agents) > 0 and not t.estimated
    assert [sum(r.tokens) for r in answer.rounds] == [served(0, 3), served(3, 6)]
    assert prompt.splitlines()[0] in answer.transcript
    assert all(f"agent_{i}" in answer.transcript for i in range(3)) and "decision" in answer.transcript
    assert "not scored (no reference)" in answer.transcript and "accuracy=" not in answer.transcript


def test_the_command_on_a_task_file_scores_writes_and_round_trips(tmp_path, capsys):
    with FakeOpenAIServer(SCRIPT) as srv:
        env = llm_env(srv, tmp_path)
        out = tmp_path / "answers" / "out.jsonl"
        assert main(["--config", config_file(tmp_path, env), "--controller", "star", "--tasks", tasks_file(tmp_path),
                     "--out", str(out)]) == 0
        assert len(srv.requests) == 14
        printed = capsys.readouterr().out
        records = [json.loads(line) for line in open(tasks_file(tmp_path))]
        again = run_team(env, "star", records)  # the file's lines as dicts, through the library call
        assert len(srv.requests) == 14  # the same episodes: replayed from the cache
    lines = out.read_text().splitlines()
    answers = [TeamAnswer.from_dict(json.loads(line)) for line in lines]
    assert answers == again  # every field, the transcript and the tokens included
    assert [a.to_dict() for a in answers] == [json.loads(line) for line in lines]
    assert [(a.task_id, a.answer, a.correct) for a in answers] == [("right", "B", True), ("wrong", "B", False)]
    assert [a.tokens.team for a in answers] == [served(0, 7), served(7, 14)]
    assert printed.count("round 1: 0->2, 1->2 (ran 0,1,2)") == 2 and printed.count("round 2: 0->2, 1->2") == 2
    assert "answer: B (correct)" in printed and "answer: B (wrong)" in printed
    assert f"tokens: {served(0, 7)} (agents " in printed and "7 calls" in printed
    assert "correct: 1 of the 2 tasks with a reference" in printed and str(out) in printed
    assert "transcript:" in printed and "agent_2" in printed
    assert SECRET not in printed and SECRET not in out.read_text()


def test_no_transcript_leaves_it_out_of_the_screen_and_the_file(tmp_path, capsys):
    with FakeOpenAIServer(SCRIPT) as srv:
        out = tmp_path / "out.jsonl"
        assert main(["--config", config_file(tmp_path, llm_env(srv, tmp_path)), "--controller", "solo",
                     "--task", "Which is a prime?", "--choices", *CHOICES, "--reference", "seven",
                     "--out", str(out), "--no-transcript"]) == 0
    printed = capsys.readouterr().out
    (record,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert "transcript" not in record and "transcript:" not in printed and "saw [" not in printed
    assert record["correct"] is False and record["answer"] == "B"  # seven is C
    assert "A. four" in record["prompt"] and "round 1: no edges (ran 0,1,2)" in printed


def test_qmix_plays_the_network_of_its_run_on_the_llm_team(tmp_path, qmix_run):
    from controllers.base import play_episode
    from topo_env.frontends.orchestrator_env import OrchestratorEnv

    with FakeOpenAIServer(SCRIPT) as srv:
        env = llm_env(srv, tmp_path)
        player, config, _ = build_player("qmix", EnvConfig.from_dict(env), qmix_run, 0)
        assert player.loaded_run == qmix_run
        (answer,) = run_team(env, "qmix", "Which is a prime?", run_dir=qmix_run, seed=5)
        assert answer.tokens.team == served(0, answer.calls) and answer.calls == len(srv.requests)
        (task,) = team_tasks(config, "Which is a prime?")
        team = OrchestratorEnv(config, mode="graph")  # the same episode played by hand: the same rounds
        play_episode(team, player, 5, {"task": task})
        team.close()
        assert len(srv.requests) == answer.calls  # replayed from the cache: the same calls
    assert [r.spec.edges() for r in team.episode.history] == [list(r.edges) for r in answer.rounds]
    assert len(answer.rounds) == 2 and answer.correct is None and answer.controller == "qmix"


def test_bad_inputs_are_one_line(tmp_path, qmix_run, capsys):
    with FakeOpenAIServer(SCRIPT) as srv:
        env = llm_env(srv, tmp_path)
        config = config_file(tmp_path, env)
        base = ["--config", config, "--task", "Which is a prime?"]
        cases = {
            "plays a trained network: give its run": [*base, "--controller", "qmix"],
            "does not fit this env: env.embed_dim is 128 there and 64 here":
                [*base, "--controller", "qmix", "--run", str(qmix_run), "--set", "env.embed_dim=64"],
            "no such controller": [*base, "--controller", "hub"],
            "learns nothing before it plays": [*base, "--controller", "star", "--run", str(qmix_run)],
            "keeps no trained run on disk": [*base, "--controller", "puppeteer"],
        }
        empty, garbled = tmp_path / "empty.jsonl", tmp_path / "garbled.jsonl"
        empty.write_text("\n\n")
        garbled.write_text('{"id": "a", "prompt": "fine"}\n{"id": "b", "prompt": \n')
        cases["the tasks file is empty"] = ["--config", config, "--controller", "star", "--tasks", str(empty)]
        cases["garbled.jsonl:2: not JSON"] = ["--config", config, "--controller", "star", "--tasks", str(garbled)]
        cases["the tasks file does not exist"] = ["--config", config, "--controller", "star", "--tasks",
                                                  str(tmp_path / "none.jsonl")]
        for expected, argv in cases.items():
            with pytest.raises(SystemExit) as stop:
                run_main(lambda: main(argv), PROG)
            err = capsys.readouterr().err
            assert stop.value.code == 2 and err.startswith(f"{PROG}: error: ") and err.count("\n") == 1, argv
            assert expected in err, (expected, err)
        with pytest.raises(SystemExit):  # --choices belongs to --task
            main(["--config", config, "--controller", "star", "--tasks", str(garbled), "--choices", "a", "b"])
        assert "--choices and --reference describe --task" in capsys.readouterr().err
        with pytest.raises(ConfigError, match="is a math task; this team solves reasoning tasks"):
            run_team(env, "star", [{"id": "m", "domain": "math", "prompt": "1 + 1?"}])
        with pytest.raises(ConfigError, match="no tasks"):
            run_team(env, "star", [])
        assert srv.requests == []  # every refusal came before the first call


def test_the_simulated_team_plays_its_own_tasks_by_index_not_free_text(tmp_path, capsys):
    sim = {"profile": "mmlu_pro", "embed_dim": 128}
    answers = run_team(sim, "star", [0, 1], seed=0)
    assert [a.task_id for a in answers] == ["mmlu_pro-train-0", "mmlu_pro-train-1"]
    assert all(a.correct in (True, False) and [r.edges for r in a.rounds] == [STAR, STAR] for a in answers)
    assert all(a.tokens.team == sum(a.tokens.agents) + a.tokens.decision > 0 and a.calls == 7 for a in answers)
    from controllers.puppeteer import build  # a learned controller handed in as trained in Python

    (steps,) = run_team(sim, build(3, 4, seed=0), [0])
    assert len(steps.rounds) > 2  # its own 4 steps (ENV_ROUNDS), not the config's 2 rounds
    assert all(len(r.ran) == 1 and r.edges == () for r in steps.rounds) and steps.rounds[-1].recalls
    with pytest.raises(ConfigError) as err:
        run_team(sim, "star", "What is 2 + 2?")
    assert str(err.value) == SIMULATED_TEXT
    config = config_file(tmp_path, sim)
    assert main(["--config", config, "--controller", "chain", "--task-index", "3", "--set", "env.split=eval"]) == 0
    printed = capsys.readouterr().out
    assert "mmlu_pro-eval-3:" in printed and "round 1: 0->1, 1->2 (ran 0,1,2; verified 0,1)" in printed
    with pytest.raises(ConfigError, match="simulated team plays only its own tasks"):
        main(["--config", config, "--controller", "star", "--tasks", tasks_file(tmp_path)])
