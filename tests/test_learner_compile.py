"""``runtime.compile: true``: the torch.compile'd update learns what the eager update learns
(up to rounding), follows target syncs, and traces once however the graphs in a batch change."""
from __future__ import annotations

import numpy as np
import torch
import torch._dynamo
import torch._inductor.config
from torch._dynamo.utils import counters

from learners.config import QMIXConfig
from learners.learner import QMIXLearner
from topo_env.frontends.comm_actions import N_ACTIONS

torch.set_num_threads(1)

N, T, D, S, B = 3, 3, 6, 5, 4
CFG = dict(hidden_dim=16, mixer_embed_dim=8, hypernet_dim=8, batch_size=B, target_update_interval=2)


def random_batch(rng: np.random.Generator) -> dict:
    """B episodes of T rounds with random graphs (none before round 1), terminal at the end."""
    adjacency = (rng.random((B, T, N, N)) < 0.5) * (1 - np.eye(N))
    adjacency[:, 0] = 0
    terminated = np.zeros((B, T), bool)
    terminated[:, -1] = True
    mask = rng.random((B, T, N, N_ACTIONS)) < 0.8
    mask[..., 0] = True
    return {
        "obs": rng.normal(size=(B, T, N, D)).astype(np.float32),
        "state": rng.normal(size=(B, T, S)).astype(np.float32),
        "adjacency": adjacency.astype(np.float32),
        "mask": mask,
        "actions": rng.integers(N_ACTIONS, size=(B, T, N)).astype(np.int64),
        "reward": rng.normal(size=(B, T)).astype(np.float32),
        "terminated": terminated,
    }


def learner(compile_: bool, **overrides) -> QMIXLearner:
    torch.manual_seed(0)
    return QMIXLearner(D, S, N, N_ACTIONS, QMIXConfig(**{**CFG, **overrides}), torch.device("cpu"), compile=compile_)


def test_compiled_updates_follow_eager_updates_through_target_syncs():
    eager, compiled = learner(False), learner(True)
    rng = np.random.default_rng(0)
    batches = [random_batch(rng) for _ in range(5)]  # 5 updates: target syncs after updates 2 and 4
    torch._dynamo.reset()
    counters.clear()
    # error_on_recompile: batches with other graphs must not re-trace. fx_graph_cache off: with
    # test_interop's libraries loaded under pytest, the cache's key pickling reaches supersuit's
    # module __getattr__, which raises ImportError where pickle expects AttributeError
    with torch._dynamo.config.patch(error_on_recompile=True), torch._inductor.config.patch(fx_graph_cache=False):
        for batch in batches:
            got, want = compiled.update(batch), eager.update(batch)
            for key in ("loss", "q_tot", "target", "q_taken"):
                assert abs(got[key] - want[key]) <= 1e-4 * (1 + abs(want[key])), key
    assert compiled.updates == eager.updates == 5
    assert counters["stats"]["unique_graphs"] >= 1  # the compiled learner really ran a traced graph
    for net in ("agent", "mixer", "target_agent", "target_mixer"):
        for (name, p), q in zip(getattr(compiled, net).named_parameters(), getattr(eager, net).parameters()):
            torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5, msg=f"{net}.{name}")
    # the updates moved the weights, and the target networks were synced (so updates 3 to 5, whose
    # losses matched above, bootstrapped from the synced copy in both learners)
    initial = learner(False)
    assert not torch.equal(compiled.agent.encode.weight, initial.agent.encode.weight)
    assert not torch.equal(compiled.target_agent.encode.weight, initial.target_agent.encode.weight)
