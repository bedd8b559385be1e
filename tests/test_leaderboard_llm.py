"""Every controller for one episode on a real model (SmolLM2-135M on llama.cpp's server).

The leaderboard's own command with ``backend: llm`` in --config: the fixed baselines, QMIX,
DyTopo (its agents asked for NEED/OFFER lines), the learned AgentConductor, Puppeteer, TacoMAS,
and the two methods whose orchestrator is the team's LLM (AgentConductor's YAML writer, TacoMAS's
meta-LLM). A 135M model scores near zero and rarely writes valid YAML or JSON: this checks that
every method runs end to end on a real server, that what it cannot parse is handled without a
crash, and that the orchestrator LLM's calls are counted as the method's cost.
"""
from __future__ import annotations

import json

import yaml

from agents_llm.local_server import MODEL_ALIAS
from controllers.registry import ALL_NAMES, LEARNED
from studies.leaderboard import main as leaderboard_main


def test_every_controller_plays_an_episode_on_the_real_model(smollm2_server, tmp_path, capsys):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("\n".join(json.dumps({"id": f"r{i}", "domain": "reasoning", "prompt": f"Which is largest? ({i})",
                                           "choices": ["1", "7", "3", "2"], "reference": "B"}) for i in range(3)))
    config = tmp_path / "llm.yaml"
    config.write_text(yaml.safe_dump({"env": {
        "domain": "reasoning", "rounds": 1, "n_agents": 2, "embed_dim": 128,  # a few calls per method
        "backend": {"kind": "llm", "model": MODEL_ALIAS, "base_url": smollm2_server.base_url, "dataset": str(tasks),
                    "train_size": 1, "max_tokens": 24, "temperature": 0.7, "timeout_s": 120,
                    "cache_path": str(tmp_path / "cache.sqlite")}}}))
    out = tmp_path / "board"
    untrained = [f"{name}=0" for name in LEARNED]
    assert leaderboard_main(["--profile", "mmlu_pro", "--config", str(config), "--seeds", "0", "--episodes", "1",
                             "--out", str(out), "--no-progress", "--train-episodes", *untrained]) == 0
    result = json.loads((out / "leaderboard.json").read_text())
    assert set(result["methods"]) == set(ALL_NAMES)  # with backend: llm the LLM-written methods join by default
    assert result["env"]["backend"]["kind"] == "llm" and "api_key" not in json.dumps(result["env"]["backend"])
    for name, figures in result["methods"].items():
        assert figures["calls_per_task"]["mean"] >= 1, name  # at least the decision node answered
        assert figures["tokens_per_task"]["mean"] > 0, name
    # the orchestrator LLM's calls are the method's cost: at least one per turn beside the team's
    assert result["methods"]["agentconductor_llm"]["calls_per_task"]["mean"] >= 2
    assert "simulated team" not in capsys.readouterr().out
