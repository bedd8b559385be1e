"""Episode traces (topo_env.engine.traces): both front-ends and both kinds of team write one schema that
holds what every call was shown and answered, the tokens add up, and bad lines are named."""
import json

import numpy as np
import pytest

import topo_env
from fake_openai_server import FakeOpenAIServer
from topo_env.engine.traces import SCHEMA, TraceError, read_traces, read_truth

SECRET = "sk-trace-secret-never-written"


def play_pz(env, seeds, rng):
    returns = []
    for seed in seeds:
        env.reset(seed=seed)
        total = 0.0
        while env.agents:
            _, rewards, _, _, infos = env.step({a: int(rng.integers(6)) for a in env.agents})
            total += rewards["agent_0"]
        returns.append((total, infos["agent_0"]))
    return returns


def test_pettingzoo_env_records_every_call_with_what_it_was_shown(tmp_path):
    path = tmp_path / "deep" / "traces.jsonl"
    env = topo_env.parallel_env(profile="humaneval", rounds=2, adversary_position="random", n_adversaries=1)
    truth_path = tmp_path / "truth.jsonl"
    env.record(path, truth=truth_path)
    rng = np.random.default_rng(0)
    played = play_pz(env, range(6), rng)
    env.record(None)
    play_pz(env, [99], rng)  # not recorded
    records = list(read_traces(path))
    assert len(records) == 6
    truth = read_truth(truth_path)  # the hidden task variables, apart: never in the traces
    assert [rec["task"]["id"] in truth for rec in records] == [True] * 6
    assert all(set(t) >= {"difficulty", "latent", "bucket", "trap"} for t in truth.values())
    for rec, (episode_return, info) in zip(records, played):
        assert rec["schema"] == SCHEMA and rec["n_agents"] == 3 and len(rec["rounds"]) == 2
        assert rec["reward"] == pytest.approx(episode_return) and rec["decision"]["accuracy"] == info["accuracy"]
        calls = [c for r in rec["rounds"] for c in r["calls"]]
        d = rec["decision"]
        assert sum(c["prompt_tokens"] + c["completion_tokens"] for c in calls) + d["prompt_tokens"] + \
            d["completion_tokens"] == rec["team_tokens"] == info["team_tokens"]
        assert len(rec["adversaries"]) == 1 and rec["task"]["metadata"]["subject"]
        assert not {"difficulty", "latent", "bucket", "trap", "answers"} & set(rec["task"]["metadata"])
        for r in rec["rounds"]:
            adj = np.array(r["adjacency"])
            for c in r["calls"]:
                senders = [m["sender"] for m in c["shown"]]
                predecessors = np.flatnonzero(adj[:, c["agent"]]).tolist()
                if c["phase"] == "draft":  # a component member drafts before its partners spoke
                    assert set(senders) <= set(predecessors)
                else:
                    assert sorted(senders) == predecessors
                assert c["verdict"] == 0 or r["verify"][c["agent"]] == 1
        assert [m["sender"] for m in d["shown"]] == [0, 1, 2]


def test_orchestrator_env_records_recalled_outputs_of_earlier_rounds(tmp_path):
    path = tmp_path / "t.jsonl"
    env = topo_env.orchestrator_env(mode="next_agent", profile="mmlu_pro", rounds=3)
    env.record(path)
    env.reset(seed=1)
    for action in (1, 0, 3):
        env.step(action)
    (rec,) = read_traces(path)
    assert len(rec["rounds"]) == 2 and rec["rounds"][1]["recall"][1][0] == 1
    second = rec["rounds"][1]["calls"][0]
    assert second["agent"] == 0 and second["shown"] == [{**second["shown"][0], "sender": 1, "round": 0}]
    assert [m["sender"] for m in rec["decision"]["shown"]] == [0, 1]  # agent 2 never ran


def test_an_llm_team_writes_the_same_schema_and_no_secret(tmp_path):
    rows = [{"id": f"q{i}", "domain": "reasoning", "prompt": f"Question {i}?", "choices": ["a", "b", "c", "d"],
             "reference": "B"} for i in range(4)]
    data = tmp_path / "tasks.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in rows))
    reply = "The second.\nAnswer: B\nConfidence: 0.7"
    with FakeOpenAIServer([("ok", reply, {"prompt_tokens": 20, "completion_tokens": 10})]) as srv:
        backend = {"kind": "llm", "model": "m", "base_url": srv.base_url, "api_key": SECRET, "backoff_s": 0.01,
                   "cache_path": None, "dataset": str(data), "train_size": 2}
        env = topo_env.parallel_env(backend=backend, domain="reasoning", rounds=2)
        env.record(tmp_path / "llm.jsonl")
        play_pz(env, [0, 1], np.random.default_rng(1))
    sim = topo_env.parallel_env(profile="mmlu_pro", rounds=2)
    sim.record(tmp_path / "sim.jsonl")
    play_pz(sim, [0], np.random.default_rng(1))
    text = (tmp_path / "llm.jsonl").read_text()
    assert SECRET not in text
    (llm_rec, _), (sim_rec,) = list(read_traces(tmp_path / "llm.jsonl")), list(read_traces(tmp_path / "sim.jsonl"))

    def shape(value):
        if isinstance(value, dict):
            return {k: shape(v) for k, v in value.items() if k != "metadata"}
        if isinstance(value, list) and value and isinstance(value[0], dict):
            return [shape(value[0])]
        return None

    assert shape(llm_rec) == shape(sim_rec)
    call = llm_rec["rounds"][0]["calls"][0]
    assert (call["answer"], call["confidence"], call["prompt_tokens"]) == ("B", 0.7, 20)


@pytest.mark.parametrize("line, message", [
    ("{not json", r"t\.jsonl:2: not JSON"),
    (json.dumps({"schema": SCHEMA}), r"t\.jsonl:2: field 'episode' lacks \['task'"),
    ("RECORD_BAD_AGENT", r"t\.jsonl:2: field 'rounds\[0\]\.calls\[0\]\.agent' is 7"),
    ("RECORD_BAD_SCHEMA", r"t\.jsonl:2: field 'schema' is 'other/9'"),
])
def test_bad_trace_lines_are_named_by_file_line_and_field(tmp_path, line, message):
    good = tmp_path / "good.jsonl"
    env = topo_env.parallel_env()
    env.record(good)
    play_pz(env, [0], np.random.default_rng(0))
    record = json.loads(good.read_text())
    if line == "RECORD_BAD_AGENT":
        record["rounds"][0]["calls"][0]["agent"] = 7
        line = json.dumps(record)
    elif line == "RECORD_BAD_SCHEMA":
        line = json.dumps({**record, "schema": "other/9"})
    bad = tmp_path / "t.jsonl"
    bad.write_text(good.read_text() + line + "\n")
    with pytest.raises(TraceError, match=message):
        list(read_traces(bad))
    with pytest.raises(TraceError, match="does not exist"):
        list(read_traces(tmp_path / "missing.jsonl"))


def test_a_recording_env_pickles_and_keeps_recording(tmp_path):
    import pickle

    env = topo_env.parallel_env()
    env.record(tmp_path / "p.jsonl")
    clone = pickle.loads(pickle.dumps(env))
    play_pz(clone, [3], np.random.default_rng(0))
    assert len(list(read_traces(tmp_path / "p.jsonl"))) == 1


def test_recording_the_truth_apart_changes_neither_the_traces_nor_the_fit(tmp_path):
    """The hidden truth a study may keep (``record(path, truth=...)``) goes to its own file: the traces are
    byte for byte those of a recording without it, and the fit of either returns the same profile."""
    from topo_env.fitting.explore import record_exploration
    from topo_env.fitting.fit import fit_profile, load_traces
    from topo_env.sim.profiles import get_profile

    paths = {}
    for name, truth in (("with", tmp_path / "truth.jsonl"), ("without", None)):
        paths[name] = tmp_path / f"{name}.jsonl"
        record_exploration(topo_env.parallel_env(profile="mmlu_pro", rounds=2), paths[name], 90, seed=3, truth=truth)
    assert paths["with"].read_bytes() == paths["without"].read_bytes()
    assert len(read_truth(tmp_path / "truth.jsonl")) == len({r["task"]["id"] for r in read_traces(paths["with"])})
    fits = [fit_profile(load_traces([paths[name]]), get_profile("mmlu_pro"))[0] for name in ("with", "without")]
    assert fits[0] == fits[1] and fits[0].trap_base != get_profile("mmlu_pro").trap_base
