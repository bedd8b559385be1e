"""The teacher's reading of a task text (topo_env.references.reading): the reader's posteriors, the
choice of the policy of highest expected reward under them, the value table and its cache."""
from __future__ import annotations

import json

import numpy as np
import pytest

from topo_env.engine.seeding import oracle_rng
from topo_env.frontends.comm_batch import CommBatchSimulator
from topo_env.frontends.env_config import EnvConfig
from topo_env.references import headroom, reading
from topo_env.references.reading import PosteriorPolicy, cached_posterior_policy, reading_candidates, value_table
from topo_env.sim.profiles import get_profile
from topo_env.sim.tasks import SimTaskSource, TextReader

def test_the_posteriors_are_distributions_whose_modes_are_the_readings():
    profile = get_profile("mmlu_pro")
    source, reader = SimTaskSource(profile), TextReader(profile)
    texts = [source.task("eval", i).prompt for i in range(500)]
    subjects, buckets = reader.read(texts)
    subject_posterior, bucket_posterior = reader.posteriors(texts)
    assert subject_posterior.shape == (500, len(profile.subjects)) and bucket_posterior.shape == (500, 3)
    np.testing.assert_allclose(subject_posterior.sum(axis=1), 1.0)
    np.testing.assert_allclose(bucket_posterior.sum(axis=1), 1.0)
    np.testing.assert_array_equal(subject_posterior.argmax(axis=1), subjects)
    np.testing.assert_array_equal(bucket_posterior.argmax(axis=1), buckets)
    # three law words leave little doubt; words of three subjects leave much more
    law = "[x] Problem: a question about plaintiff, statute, tort. It calls for basic and routine and direct and simple work."
    mixed = "[x] Problem: a question about plaintiff, enzyme, velocity. It calls for basic and routine and direct and simple work."
    sure, unsure = reader.posteriors([law, mixed])[0]
    assert sure.max() > 0.99 and unsure.max() < 0.9
    # calibrated: of the texts read with 60-90% confidence, about that share is read right
    tasks_subject = np.array([source.task("eval", i).metadata["subject"] for i in range(500)])
    names = np.array(profile.subject_names)
    confidence = subject_posterior.max(axis=1)
    middling = (confidence > 0.6) & (confidence < 0.9)
    right = names[subjects[middling]] == tasks_subject[middling]
    assert abs(right.mean() - confidence[middling].mean()) < 0.15


def test_the_posterior_reading_hedges_where_the_words_are_ambiguous():
    # candidate 0 is best for subject 0 and poor for subject 1; candidate 1 is good enough for both
    values = np.array([[[1.0, 0.8]], [[0.2, 0.7]]])  # (S=2, Q=1, C=2)
    candidates = np.arange(2 * 2 * 1 * 3).reshape(2, 2, 1, 3)
    policy = PosteriorPolicy(candidates, values, subject_candidate=np.array([0, 1]))
    bucket = np.ones((3, 1))
    posterior = np.array([[0.99, 0.01], [0.6, 0.4], [0.2, 0.8]])
    np.testing.assert_array_equal(policy.choose(posterior, bucket), [0, 1, 1])
    np.testing.assert_array_equal(policy.choose(posterior, bucket, reading="map"), [0, 0, 1])
    np.testing.assert_array_equal(policy.policies(posterior, bucket), candidates[[0, 1, 1]])
    with pytest.raises(ValueError, match="reading='mode'"):
        policy.choose(posterior, bucket, reading="mode")
    again = PosteriorPolicy.from_dict(json.loads(json.dumps(policy.to_dict())))
    np.testing.assert_array_equal(again.values, values)
    with pytest.raises(ValueError, match="inconsistent shapes"):
        PosteriorPolicy.from_dict({**policy.to_dict(), "subject_candidate": [0, 1, 1]})


def test_the_value_table_is_each_candidates_mean_reward_per_subject_and_bucket(small_search_cache, monkeypatch):
    config = EnvConfig()
    sim = CommBatchSimulator.from_config(config)
    references, _ = headroom.cached_references(config, progress=False, context="readable")
    candidates, subject_candidate = reading_candidates(references, sim)
    per_subject = references.policies("adaptive", headroom.readable_rows(np.arange(len(sim.profile.subjects))), sim)
    np.testing.assert_array_equal(candidates[subject_candidate], per_subject)
    assert len(candidates) == len(np.unique(candidates.reshape(len(candidates), -1), axis=0))  # distinct
    monkeypatch.setattr(reading, "VALUE_CHUNK", 1000)
    table = value_table(sim, candidates, seed=0, episodes=1500)  # two chunks
    assert table.shape == (len(sim.profile.subjects), 3, len(candidates))
    # the same episodes drawn at once, each candidate played on them directly
    rng = oracle_rng(0, "values")  # drawn as value_table draws its chunks
    rewards, cells = [], []
    for size in (1000, 500):
        tasks, noise = sim.sample(rng, size)
        adversaries = sim.sample_adversaries(rng, size)
        cells.append(tasks.subject * 3 + tasks.bucket)
        rewards.append(np.stack([headroom.play_policies(sim, np.broadcast_to(p, (size, *p.shape)), tasks, noise,
                                                        adversaries).reward for p in candidates]))
    cell, reward = np.concatenate(cells), np.concatenate(rewards, axis=1)
    for s, q in {(int(c) // 3, int(c) % 3) for c in np.unique(cell)}:
        np.testing.assert_allclose(table[s, q], reward[:, cell == s * 3 + q].mean(axis=1))
    empty = [(s, q) for s in range(table.shape[0]) for q in range(3) if not (cell == s * 3 + q).any()]
    for s, q in empty:  # a cell without episodes: the subject's mean over its buckets
        mine = cell // 3 == s
        expected = reward[:, mine].mean(axis=1) if mine.any() else reward.mean(axis=1)
        np.testing.assert_allclose(table[s, q], expected)


def test_the_teacher_is_cached_beside_its_references(small_search_cache):
    config = EnvConfig()
    policy, cached = cached_posterior_policy(config, progress=False)
    assert not cached
    again, cached = cached_posterior_policy(config, progress=False)
    assert cached and np.array_equal(again.values, policy.values) and np.array_equal(again.candidates, policy.candidates)
    files = sorted(p.name.split("-")[0] for p in small_search_cache.iterdir())
    assert files == ["references", "teacher"]  # the readable references it was built from, and the teacher
    next(small_search_cache.glob("teacher-*.json")).write_text("{not json")
    recomputed, cached = cached_posterior_policy(config, progress=False)
    assert not cached and np.array_equal(recomputed.values, policy.values)


def test_the_default_config_reads_the_posterior_and_older_runs_read_as_map():
    from learners.config import DEFAULT_CONFIG, load_experiment
    from learners.seeds import as_current
    from topo_env.engine.config_checks import ConfigError

    config = load_experiment(DEFAULT_CONFIG, [])
    assert config.sim_scale.teacher_reading == "posterior"
    saved = config.to_dict()
    del saved["sim_scale"]["teacher_reading"]  # a run saved before the key: its teacher read the MAP subject
    assert as_current(saved)["sim_scale"]["teacher_reading"] == "map"
    with pytest.raises(ConfigError, match="teacher_reading"):
        load_experiment(None, ["sim_scale.teacher_reading=mode"])
