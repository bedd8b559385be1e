"""The teacher of training at simulator scale: what a reader of the task text infers
(topo_env.sim.tasks.TextReader), the adaptive reference searched on it (headroom's readable
context) and played on the reader's posterior (topo_env.references.reading), its demonstrations
and their distillation into the agent network (learners.teacher), and the teacher stage of
train_qmix.py."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import train_qmix
from learners.agent_network import AgentQNetwork
from learners.teacher import Demonstrations, distill, teacher_demonstrations
from topo_env.references import headroom
from topo_env.references.reading import cached_posterior_policy
from topo_env.frontends.env_config import EnvConfig
from topo_env.sim.batch import TaskArrays
from topo_env.sim.profiles import get_profile
from topo_env.sim.tasks import CUE_VOCAB, SUBJECT_VOCAB, SimTaskSource, TextReader
from topo_env.frontends.vector_env import SimVectorEnv

torch.set_num_threads(1)
SMALL_SEARCH = {"samples": 300, "rerank_samples": 600}


@pytest.fixture()
def small_search(tmp_path, monkeypatch):
    monkeypatch.setenv("TOPOMARL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(headroom, "REFERENCE_SELECTION", {**headroom.REFERENCE_SELECTION, **SMALL_SEARCH})


def test_the_reader_reads_the_words_the_generator_wrote():
    profile = get_profile("mmlu_pro")
    source, reader = SimTaskSource(profile), TextReader(profile)
    task = source.task("train", 3)
    topic, cues = reader.cue_words(task.prompt)
    assert len(topic) == profile.subject_cue_words and len(cues) == profile.difficulty_cue_words
    assert all(any(w in v for v in SUBJECT_VOCAB.values()) for w in topic)
    assert all(any(w in v for v in CUE_VOCAB) for w in cues)
    # three words of one subject's vocabulary name it, whatever the prior
    text = "[x] Problem: a question about plaintiff, statute, tort. It calls for basic and routine and direct and simple work."
    subjects, buckets = reader.read([text])
    assert profile.subject_names[subjects[0]] == "law" and buckets[0] == 0


def test_reading_drawn_words_is_reading_texts():
    """For task features without text, drawing the cue words as the generator does gives the reader
    the same accuracy as the texts themselves (40,000 tasks; the SE of a difference is ~0.003)."""
    profile = get_profile("mmlu_pro")
    source, reader = SimTaskSource(profile), TextReader(profile)
    tasks = [source.task("eval", i) for i in range(20000)]
    subjects, buckets = reader.read([t.prompt for t in tasks])
    arrays = TaskArrays.from_tasks(tasks)
    drawn_subjects, drawn_buckets = reader.read_drawn(arrays.subject, arrays.bucket, np.random.default_rng(0))
    for read, drawn, true in ((subjects, drawn_subjects, arrays.subject), (buckets, drawn_buckets, arrays.bucket)):
        assert abs(np.mean(read == true) - np.mean(drawn == true)) < 0.015
    assert 0.85 < np.mean(subjects == arrays.subject) < 0.91  # the cue words' fidelity: about 88%


def test_demonstrations_play_the_teacher_on_what_the_text_tells(small_search):
    config = EnvConfig()
    references, cached = headroom.cached_references(config, progress=False, context="readable")
    assert not cached and headroom.cached_references(config, progress=False, context="readable")[1]
    assert (references.contexts[:, 1:] == 0).all()  # only the subject read from the text
    teacher, _ = cached_posterior_policy(config, progress=False)
    venv = SimVectorEnv(config)
    seeds = list(range(300))
    episodes, tasks = venv.sample_episodes(seeds, "train")
    reader = TextReader(venv.profile)
    subjects, _ = reader.read([t.prompt for t in tasks])
    map_policy = references.policies("adaptive", headroom.readable_rows(subjects), venv.sim)
    posterior_policy = teacher.policies(*reader.posteriors([t.prompt for t in tasks]))
    for reading, policy in (("map", map_policy), ("posterior", posterior_policy)):
        demos = teacher_demonstrations(venv, teacher, seeds, chunk=128, reading=reading)
        assert demos.obs.shape == (300, 2, 3, venv.obs_builder.dim) and demos.actions.shape == (300, 2, 3)
        np.testing.assert_array_equal(demos.actions[:, 0], policy[:, 0, 0])
        # round 2: the joint action of round 1's agreement class, as the env plays the teacher's round 1
        venv.reset(seeds, "train")
        venv.step(demos.actions[:, 0])
        classes = headroom.agreement_class(venv.last_outputs.label)
        np.testing.assert_array_equal(demos.actions[:, 1], policy[np.arange(300), 1, classes])
    with pytest.raises(ValueError, match="reading='best'"):
        teacher_demonstrations(venv, teacher, seeds, reading="best")


def test_distillation_teaches_the_teachers_choices(small_search):
    config = EnvConfig(embed_dim=64)
    teacher, _ = cached_posterior_policy(config, progress=False)
    venv = SimVectorEnv(config)
    demos = teacher_demonstrations(venv, teacher, list(range(2000)))
    torch.manual_seed(0)
    agent = AgentQNetwork(venv.obs_builder.dim, 6, hidden_dim=32, gnn_layers=1, dueling=True)

    def agreement() -> float:
        with torch.no_grad():
            q = agent.unroll(torch.as_tensor(demos.obs), torch.as_tensor(demos.adjacency))
        return float((q.argmax(dim=-1).numpy() == demos.actions).mean())

    before = agreement()
    losses = distill(agent, demos, epochs=6, batch_size=256, lr=3e-3, temperature=0.05, seed=0)
    assert losses[-1] < 0.5 * losses[0] and agreement() > max(0.7, before + 0.4)
    with torch.no_grad():  # Q / temperature are the logits: the Q-values stay on the reward's scale
        q = agent.unroll(torch.as_tensor(demos.obs[:50]), torch.as_tensor(demos.adjacency[:50]))
    spread = (q.max(dim=-1).values - q.min(dim=-1).values).mean().item()
    assert spread < 2.0


def test_a_one_cycle_distillation_climbs_to_its_rate_then_anneals(monkeypatch):
    rates = []

    class Recorded(torch.optim.lr_scheduler.OneCycleLR):
        def step(self, *args, **kwargs):
            super().step(*args, **kwargs)
            rates.append(self.get_last_lr()[0])

    monkeypatch.setattr(torch.optim.lr_scheduler, "OneCycleLR", Recorded)
    rng = np.random.default_rng(0)
    demos = Demonstrations(rng.normal(size=(300, 2, 3, 8)).astype(np.float32), np.zeros((300, 2, 3, 3), np.float32),
                           rng.integers(0, 6, (300, 2, 3)))
    torch.manual_seed(0)
    agent = AgentQNetwork(8, 6, hidden_dim=16, gnn_layers=1, dueling=True)
    losses = distill(agent, demos, epochs=3, batch_size=128, lr=0.01, temperature=0.05, seed=0, lr_schedule="one_cycle")
    # 300 rows in batches of 128: 3 steps an epoch, 9 in all; rates[k] is the rate of step k (rates[0]: the
    # scheduler's own first step; the last entry comes after the last step)
    assert len(losses) == 3 and len(rates) == 1 + 9
    used = rates[:9]
    assert max(used) == pytest.approx(0.01, rel=1e-3) and used == sorted(used, reverse=True)  # a tenth of 9: no climb
    assert used[-1] == pytest.approx(0.01 / 25 / 1e4)
    with pytest.raises(ValueError, match="lr_schedule='cosine'"):
        distill(agent, demos, epochs=1, batch_size=128, lr=0.01, temperature=0.05, seed=0, lr_schedule="cosine")


def test_train_qmix_distils_the_teacher_first(small_search, tmp_path):
    out = tmp_path / "run"
    assert train_qmix.main(["--out", str(out), "--episodes", "64", "--no-progress", "--no-pictures",
                            "--set", "runtime.torch_threads=1",
                            "--set", "sim_scale.teacher_episodes=512", "--set", "sim_scale.teacher_epochs=2",
                            "--set", "env.embed_dim=32", "--set", "qmix.hidden_dim=16",
                            "--set", "sim_scale.batch=32", "--set", "sim_scale.noise_samples=2",
                            "--set", "qmix.batch_size=16", "--set", "qmix.episodes_per_update=8",
                            "--set", "train.validate_every=32", "--set", "train.validate_episodes=50",
                            "--set", "train.eval_episodes=100", "--set", "train.curve_every=0",
                            "--set", "train.references=false"]) == 0
    result = json.loads((out / "results.json").read_text())
    teacher = result["train"]["teacher"]
    assert teacher["demonstrations"] == 512 and len(teacher["losses"]) == 2 and not teacher["search_cached"]
    assert teacher["search_episodes"] == sum(SMALL_SEARCH.values()) and teacher["value_episodes"] == 1200
    assert teacher["reading"] == "posterior"
    assert [h["episode"] for h in result["validation"]["history"]] == [0, 32, 64]  # the student is a candidate
    # demonstrations, search, value table, noise samples
    assert result["train"]["simulator_episodes"] == 512 + 900 + 1200 + 64 * 2 * 2
