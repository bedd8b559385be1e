"""Every random stream derives from a run's seed in topo_env.seeding, and the streams stay what
runs recorded before the module existed (results stay reproducible)."""
import numpy as np
import pytest

from topo_env import seeding


def test_train_split_episode_seeds_do_not_overlap():
    """On the train split, training episodes (seeds 0..99, up to a million episodes each) and
    validation episodes (up to 400,000) use disjoint env seeds. (Held-out episodes are on the eval
    split, whose tasks are disjoint from the train split's.)"""
    top_seed, episodes = 99, 1_000_000
    training = (0, top_seed * seeding.TRAINING_SEED_STRIDE + episodes)
    validation = (seeding.VALIDATION_SEED_OFFSET, seeding.VALIDATION_SEED_OFFSET + top_seed + 400_000)
    assert training[1] < validation[0]


def test_streams_are_the_formulas_runs_recorded():
    assert seeding.training_env_seed(3, 17) == 3 * 100_003 + 17
    np.testing.assert_array_equal(seeding.episode_rng(2, seeding.REPLAY_STREAM, 5).random(4),
                                  np.random.default_rng([2, 2, 5]).random(4))
    np.testing.assert_array_equal(seeding.policy_rng("random", 9).random(4),
                                  np.random.default_rng([9, 0x5EED]).random(4))
    np.testing.assert_array_equal(seeding.policy_rng("qmix", 9).random(4), np.random.default_rng([9, 0xE7A1]).random(4))
    np.testing.assert_array_equal(seeding.oracle_rng(4, "rerank").random(4), np.random.default_rng([4, 2]).random(4))


def test_streams_differ_and_bad_split_is_named():
    draws = {name: seeding.policy_rng(name, 1).random() for name in seeding.POLICY_STREAMS}
    assert len(set(draws.values())) == len(draws)
    assert seeding.episode_rng(0, seeding.EXPLORATION_STREAM, 0).random() != seeding.episode_rng(
        0, seeding.REPLAY_STREAM, 0).random()
    with pytest.raises(ValueError, match="split='test'"):
        seeding.oracle_rng(0, "test")
