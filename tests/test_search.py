"""The best open-loop sequence without enumerating (topo_env/references/search.py): it finds the exhaustive
optimum where both run, it runs for teams the exhaustive oracle cannot search, and its command line."""
from __future__ import annotations

import json

import numpy as np
import pytest

from topo_env.frontends.comm_batch import CommBatchSimulator
from topo_env.references import oracle, search
from topo_env.sim.profiles import get_profile


@pytest.mark.parametrize("profile", ["mmlu_pro", "humaneval"])
def test_it_finds_the_exhaustive_optimum_for_one_round(profile):
    """N = 3, T = 1 (216 sequences): the climbs end on a sequence whose reward on the oracle's eval episodes
    is within one paired standard error of the exhaustive search's choice, having scored fewer sequences."""
    sim = CommBatchSimulator(get_profile(profile), 3, 1)
    found = search.best_fixed_sequence(sim, seed=1, samples=1000, progress=False)
    check = search.check_against_exhaustive(sim, profile, found, seed=1, samples=1000, progress=False)
    assert check["difference"] >= -max(check["se"], 1e-12)
    assert found["evaluated"] < check["exhaustive"]["sequences"]


def test_a_team_of_five_over_three_rounds_gets_a_sequence_no_baseline_beats():
    """N = 5, T = 3 (4.7e11 sequences): the chosen sequence is at least every fixed baseline's reward on the
    re-ranking episodes (the baselines compete there), and is a valid (T, N) sequence of action names."""
    sim = CommBatchSimulator(get_profile("mmlu_pro"), 5, 3)
    found = search.best_fixed_sequence(sim, seed=0, samples=300, starts=1, progress=False)
    fixed = found["fixed"]
    assert all(fixed["reward_selection"] >= row["reward_selection"] for row in found["baselines"].values())
    assert np.array(oracle.actions_from_names(fixed["sequence"])).shape == (3, 5)
    assert found["climbs"] and found["evaluated"] >= 6


def test_the_same_seed_gives_the_same_sequence():
    sim = CommBatchSimulator(get_profile("aime25"), 4, 2)
    a, b = (search.best_fixed_sequence(sim, seed=3, samples=200, starts=1, progress=False) for _ in range(2))
    assert a["fixed"] == b["fixed"]


def test_command_line(capsys):
    assert search.main(["--profile", "mmlu_pro", "--n-agents", "4", "--rounds", "2", "--samples", "200",
                        "--starts", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["fixed"]["sequence"]) == 2 and len(out["fixed"]["sequence"][0]) == 4
    with pytest.raises(SystemExit) as exit_info:
        search.main(["--profile", "nope"])
    assert exit_info.value.code == 2
    assert "nope" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        search.main(["--n-agents", "5", "--check"])
    assert "n_agents=5" in capsys.readouterr().err


def test_headroom_references_are_searched_for_a_team_of_four_over_three_rounds():
    """N = 4, T = 3: the three references come from the coordinate-ascent search, as (T, K, N) policies per
    context, ordered on the re-ranking episodes they were chosen on (adaptive >= context only >= best fixed),
    and played on held-out episodes by the same code as the enumerated ones."""
    from topo_env.references import headroom

    sim = CommBatchSimulator(get_profile("humaneval"), 4, 3)
    assert not headroom.exhaustive_feasible(sim)
    refs, selection = headroom.select_searched_references(sim, seed=0, samples=300, rerank_samples=600,
                                                          progress=False, max_sweeps=1, context_starts=2,
                                                          adaptive_starts=2)
    n_class = len(headroom.outcome_names(4))
    assert refs.fixed.shape == (3, 4) and refs.adaptive.shape == (len(refs.contexts), 3, n_class, 4)
    sel = selection["selection"]
    assert sel["adaptive"] >= sel["context_only"] - 1e-12 >= sel["best_fixed"] - 2e-12
    assert headroom.References.from_dict(json.loads(json.dumps(refs.to_dict()))).to_dict() == refs.to_dict()
    played = headroom.play_references(sim, refs, *oracle.sample_episodes(sim, 200, 0, "eval"))
    assert set(played) == {"best_fixed", "context_only", "adaptive"}


def test_context_shortlist_keeps_each_contexts_best_distinct_policies():
    """The candidates a searched reference is re-ranked among: per context the ``size`` best distinct policies
    offered (a policy offered twice counts once), best first; a context offered fewer fills with its own
    fallback policy."""
    from topo_env.references.headroom import ContextShortlist

    shortlist = ContextShortlist(n_context=2, size=2)
    policy = lambda a: np.full((2, 3, 3), a, dtype=np.int64)  # noqa: E731
    for a, score in [(0, 1.0), (1, 3.0), (1, 3.0), (2, 2.0), (3, 0.5), (4, 2.5), (5, -1.0)]:
        shortlist.offer(0, policy(a), score)
    shortlist.offer(1, policy(7), 0.0)
    fallback = np.stack([policy(9), policy(8)])
    stacked = shortlist.stacked(fallback)
    assert stacked.shape == (2, 2, 2, 3, 3)
    assert [int(stacked[0, k, 0, 0, 0]) for k in range(2)] == [1, 4]
    assert [int(stacked[1, k, 0, 0, 0]) for k in range(2)] == [7, 8]


def test_references_searched_in_a_second_process_are_the_ones_searched_here(tmp_path, monkeypatch):
    """Training searches the held-out references beside itself (``search_in_background``, a spawned
    process): the child uses this process's selection sizes (read when it starts), caches exactly the
    references a search here finds, and a cached team starts no process."""
    from topo_env.frontends.env_config import EnvConfig
    from topo_env.references import headroom

    monkeypatch.setenv("TOPOMARL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(headroom, "REFERENCE_SELECTION",
                        {**headroom.REFERENCE_SELECTION, "samples": 300, "rerank_samples": 600})
    config = EnvConfig.from_dict({"rounds": 1})
    process = headroom.search_in_background(config)
    assert process is not None
    process.join(timeout=300)
    assert process.exitcode == 0
    from_child, cached = headroom.cached_references(config, progress=False)
    assert cached
    here, cached_here = headroom.cached_references(config, progress=False, cache_dir=tmp_path / "fresh")
    assert not cached_here and here.to_dict() == from_child.to_dict()
    assert headroom.search_in_background(config) is None


def _all_solo_start(profile: str, n_agents: int, rounds: int, samples: int):
    """A team's "train" episodes, each one's hidden-context id, and every context's all-zeros (T, K, N) policy."""
    from topo_env.references import headroom

    sim = CommBatchSimulator(get_profile(profile), n_agents, rounds)
    train = oracle.sample_episodes(sim, samples, 0, "train")
    known, episode_context = np.unique(headroom.hidden_context(train[0], train[2]), axis=0, return_inverse=True)
    n_class = len(headroom.outcome_names(n_agents))
    start = np.broadcast_to(headroom.open_loop_policy(np.zeros((rounds, n_agents), np.int64), n_class),
                            (len(known), rounds, n_class, n_agents)).copy()
    return sim, train, episode_context.reshape(-1), start


def _per_context_reward(sim, policies, train, episode_context):
    """(C,) each context's policy played on its own "train" episodes, rewards summed."""
    from topo_env.references import headroom

    reward = headroom.play_policies(sim, policies[episode_context], *train).reward
    return np.bincount(episode_context, weights=reward, minlength=len(policies))


def test_a_round_with_its_own_replies_never_lowers_a_contexts_train_reward():
    """The adaptive search's paired move (round t's joint action with round t + 1 chosen anew per outcome
    class): each context takes a pair only where it beats its policy on its own "train" episodes, and on
    those episodes the result plays as valued."""
    from topo_env.references import headroom

    sim, train, episode_context, start = _all_solo_start("humaneval", 2, 2, 200)  # two agents: 36 first rounds
    moved = headroom._round_with_own_replies(sim, start, 0, train, episode_context, len(start))
    before, after = (_per_context_reward(sim, p, train, episode_context) for p in (start, moved))
    assert (after >= before - 1e-9).all() and (after > before + 1e-9).any()


def test_a_climb_that_replays_only_what_a_move_changes_scores_as_a_full_replay():
    """The adaptive climb replays a candidate from the state before its round and only on the episodes
    that meet its outcome class; what it scored a context's final policy at is, to the last bit, what
    playing that policy on all of the context's episodes gives."""
    from topo_env.references import headroom

    sim, train, episode_context, start = _all_solo_start("humaneval", 2, 3, 400)
    n_context, n_class = start.shape[0], start.shape[2]
    coordinates = [(t, k, i) for t in (2, 1) for k in range(n_class) for i in (None, 0, 1)] + [
        (0, None, i) for i in (None, 0, 1)]  # later rounds first: a move must renew the states after it
    shortlist = headroom.ContextShortlist(n_context, 4)
    climbed = headroom._climb_per_context(sim, start, coordinates, train, episode_context, n_context, 3, False,
                                          "test", shortlist)
    replayed = _per_context_reward(sim, climbed, train, episode_context)
    scored = [shortlist.entries[c][climbed[c].tobytes()][0] for c in range(n_context)]
    assert (climbed[:, 1:] != climbed[:, 1:, :1]).any()  # some context answers one class unlike another
    assert scored == replayed.tolist()


def test_trials_played_together_score_as_each_played_alone():
    """The climbs score their candidates with ``play_trials``, which stacks the trials' copies of the episodes
    into a few large batches (here 2 trials a batch, the last one short): each trial's rewards are, to the last
    bit, those of playing it alone from the same state."""
    from topo_env.frontends.comm_actions import N_ACTIONS
    from topo_env.references import headroom

    sim, train, episode_context, start = _all_solo_start("mmlu_pro", 3, 3, 150)
    tasks, noise, adversaries = train
    trials = np.random.default_rng(0).integers(0, N_ACTIONS, (7, *start.shape))
    state = sim.run_round(sim.initial_state(len(episode_context), adversaries), start[episode_context, 0, 0], tasks,
                          noise)
    outcome = headroom.agreement_class(state.previous.label)
    together = headroom.play_trials(sim, state, trials, episode_context, outcome, 1, tasks, noise, chunk_rows=400)
    alone = [headroom.play_rounds(sim, state, trial, episode_context, outcome, 1, tasks, noise).reward
             for trial in trials]
    np.testing.assert_array_equal(together, np.stack(alone))
    assert len(np.unique(together.sum(axis=1))) > 1  # the trials play differently


SMALL_SEARCH = dict(seed=0, samples=200, rerank_samples=400, progress=False, context_starts=3, adaptive_starts=2)


@pytest.fixture(scope="module")
def search_that_never_stopped():
    """A small searched selection (N = 2, T = 3: 3 open-loop climbs, then 2 adaptive ones), run through."""
    from topo_env.references import headroom

    sim = CommBatchSimulator(get_profile("humaneval"), 2, 3)
    return sim, *headroom.select_searched_references(sim, **SMALL_SEARCH)


@pytest.mark.parametrize("stop_at_climb", [2, 5])
def test_a_search_stopped_midway_resumes_after_its_last_finished_climb_to_the_same_references(
        tmp_path, monkeypatch, search_that_never_stopped, stop_at_climb):
    """A searched selection keeps a checkpoint after each climb; stopped during climb 2 (open loop) or climb 5
    (adaptive) and started again on the same file, it climbs only what was left and ends with the references and
    selection figures of a search that never stopped, to the last bit."""
    from topo_env.references import headroom

    sim, whole_refs, whole_selection = search_that_never_stopped
    kwargs = SMALL_SEARCH
    climb, climbs, stopping = headroom._climb_per_context, [], True

    class Stopped(Exception):
        """The search's process stopped (a kill, a closed session)."""

    def stopping_climb(*args, **kw):
        climbs.append(args)
        if len(climbs) == stop_at_climb and stopping:
            raise Stopped
        return climb(*args, **kw)

    checkpoint = tmp_path / "search.partial.json"
    monkeypatch.setattr(headroom, "_climb_per_context", stopping_climb)
    with pytest.raises(Stopped):
        headroom.select_searched_references(sim, checkpoint=checkpoint, **kwargs)
    assert checkpoint.is_file()
    climbs.clear()
    stopping = False
    refs, selection = headroom.select_searched_references(sim, checkpoint=checkpoint, **kwargs)
    assert len(climbs) == 5 - (stop_at_climb - 1)  # the finished climbs are not climbed again
    assert refs.to_dict() == whole_refs.to_dict() and selection == whole_selection
