"""Every random stream derives from a run's seed in topo_env.engine.seeding, and the streams stay what
runs recorded before the module existed (results stay reproducible)."""
import numpy as np
import pytest

from topo_env.engine import seeding
from run_checks import ONE_EPISODE_CONFIG


@pytest.fixture(scope="module")
def seeds_of_a_run(tmp_path_factory) -> dict[str, list]:
    """What a tiny train_qmix.py run with seed 7 plays (3 training episodes, 2 validation episodes
    after each, 1 held-out episode per policy): ``training``, the env seeds its training episodes
    reset to; ``evaluations``, ``(seed, episodes, split)`` of every evaluate() call of training's
    validation and learning curve (episode k of a call plays env seed ``seed + k``)."""
    import train_qmix
    from learners import training
    from topo_env.frontends.parallel_env import TopologyParallelEnv

    played = {"training": [], "evaluations": []}
    reset, evaluate = TopologyParallelEnv.reset, training.evaluate_policy

    def recording_reset(env, seed=None, options=None):
        if (options or {}).get("split", env.config.split) == "train" and seed < seeding.VALIDATION_SEED_OFFSET:
            played["training"].append(seed)
        return reset(env, seed=seed, options=options)

    def recording_evaluate(env, policy, episodes, seed, split="eval", **kwargs):
        played["evaluations"].append((seed, episodes, split))
        return evaluate(env, policy, episodes, seed, split, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(TopologyParallelEnv, "reset", recording_reset)
        patch.setattr(training, "evaluate_policy", recording_evaluate)
        assert train_qmix.main([  # the one-episode loop: its episodes go through TopologyParallelEnv.reset
            "--config", ONE_EPISODE_CONFIG, "--episodes", "3", "--seed", "7", "--no-progress", "--no-pictures", "--out",
            str(tmp_path_factory.mktemp("run")), "--set", "train.validate_every=1", "--set", "train.validate_episodes=2",
            "--set", "train.eval_episodes=1", "--set", "train.references=false", "--set", "train.warmup_episodes=1", "--set", "qmix.batch_size=1",
            "--set", "qmix.hidden_dim=8",
        ]) == 0
    return played


def test_a_run_draws_its_episodes_from_the_documented_streams(seeds_of_a_run):
    """Training episode e: env seed ``training_env_seed(7, e)``; validation: episodes ``7 +
    VALIDATION_SEED_OFFSET + k`` of the train split, the same at every check; held-out episodes:
    ``held_out_seed(7) + k`` = ``EVAL_SEED_OFFSET + 7 * EVAL_SEED_STRIDE + k`` of the eval split."""
    assert seeds_of_a_run["training"] == [seeding.training_env_seed(7, e) for e in range(3)]
    evaluations = set(seeds_of_a_run["evaluations"])
    held_out = seeding.EVAL_SEED_OFFSET + 7 * seeding.EVAL_SEED_STRIDE
    assert seeding.held_out_seed(7) == held_out
    assert evaluations == {(7 + seeding.VALIDATION_SEED_OFFSET, 2, "train"), (held_out, 1, "eval")}
    assert seeds_of_a_run["evaluations"].count((7 + seeding.VALIDATION_SEED_OFFSET, 2, "train")) >= 3


def test_train_split_episode_seeds_do_not_overlap(seeds_of_a_run):
    """On the train split, training episodes (seeds 0..99, up to a million episodes each) and
    validation episodes (up to 400,000) use disjoint env seeds. (Held-out episodes are on the eval
    split, whose tasks are disjoint from the train split's.)"""
    top_seed, episodes = 99, 1_000_000
    grid = np.array([[seeding.training_env_seed(s, e) for e in (0, 1, episodes // 2, episodes - 1)]
                     for s in range(top_seed + 1)])
    assert (np.diff(grid, axis=1) > 0).all() and (np.diff(grid, axis=0) > 0).all()  # increasing in both
    last_training = seeding.training_env_seed(top_seed, episodes - 1)
    validation_start = next(s for s, _, split in seeds_of_a_run["evaluations"] if split == "train")
    first_validation = validation_start - 7  # seed 0's first validation episode (the run above has seed 7)
    assert last_training < first_validation
    assert first_validation + top_seed + 400_000 < 2**32  # still a valid env seed at the far end


def test_streams_are_the_formulas_runs_recorded():
    assert seeding.training_env_seed(3, 17) == 3 * 10_000_019 + 17
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
