"""Counter-based random numbers for per-sample transform parameters.

Every sample of an epoch gets a 64-bit key derived from ``(seed, epoch, position
in the epoch)``; each random draw is a hash of ``(key, draw number)``. Draws are
therefore independent of batch boundaries, worker assignment and the order in
which workers finish, which is what makes batches bitwise reproducible across
``num_workers`` settings and after a mid-epoch resume.
"""
from __future__ import annotations

import numpy as np

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def _splitmix64(x: np.ndarray) -> np.ndarray:
    # numpy uint64 arithmetic wraps modulo 2**64, which is what the hash needs.
    with np.errstate(over="ignore"):
        z = x + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
        return z ^ (z >> np.uint64(31))


def sample_keys(seed: int, epoch: int, positions: np.ndarray) -> np.ndarray:
    """Keys for the samples at ``positions`` (int array) of ``epoch``."""
    base = _splitmix64(np.array([seed & 0xFFFFFFFFFFFFFFFF], dtype=np.uint64))
    base = _splitmix64(base ^ np.uint64(epoch & 0xFFFFFFFFFFFFFFFF))
    pos = np.asarray(positions, dtype=np.int64).astype(np.uint64)
    return _splitmix64(base ^ _splitmix64(pos))


def uniform(keys: np.ndarray, stream: int, count: int) -> np.ndarray:
    """``[len(keys), count]`` float64 uniforms in [0, 1) for draw stream ``stream``."""
    keys = np.asarray(keys, dtype=np.uint64)
    with np.errstate(over="ignore"):
        counters = np.uint64(stream) * np.uint64(1 << 20) + np.arange(count, dtype=np.uint64)
        z = _splitmix64(keys[:, None] ^ _splitmix64(counters)[None, :])
    return (z >> np.uint64(11)).astype(np.float64) * (1.0 / 9007199254740992.0)


# Batch keys live apart from sample keys: a batch's draws never repeat a sample's.
_BATCH_DOMAIN = np.uint64(0x6A09E667F3BCC908)


def batch_key(seed: int, epoch: int, batch: int) -> int:
    """Key of one batch of ``epoch`` for batch-level draws (MixUp, CutMix, the seed of a
    ``collate_fn``); ``batch`` identifies the batch within the epoch."""
    base = _splitmix64(np.array([seed & 0xFFFFFFFFFFFFFFFF], dtype=np.uint64))
    base = _splitmix64(base ^ np.uint64(epoch & 0xFFFFFFFFFFFFFFFF) ^ _BATCH_DOMAIN)
    return int(_splitmix64(base ^ _splitmix64(np.array([batch & 0xFFFFFFFFFFFFFFFF], dtype=np.uint64)))[0])


# The shuffle's seeds live apart from sample and batch keys: an epoch's order never repeats their draws.
_ORDER_DOMAIN = np.uint64(0xBB67AE8584CAA73B)


def order_seed(seed: int, epoch: int) -> int:
    """Seed of the generator that shuffles ``epoch`` (``torch.Generator().manual_seed``).

    32 bits: torch's CPU generator (mt19937) starts from the low 32 bits of its seed, so
    more would only look like more orders."""
    base = _splitmix64(np.array([seed & 0xFFFFFFFFFFFFFFFF], dtype=np.uint64) ^ _ORDER_DOMAIN)
    z = int(_splitmix64(base ^ np.uint64(epoch & 0xFFFFFFFFFFFFFFFF))[0])
    return (z ^ (z >> 32)) & 0xFFFFFFFF


class Stream:
    """Uniforms from one key, drawn in sequence: each call continues where the last stopped.

    For draws whose count is not known in advance (rejection sampling), where the
    fixed-size ``uniform`` does not fit; the sequence depends on the key only.
    """

    def __init__(self, key: int) -> None:
        self.key = np.uint64(key & 0xFFFFFFFFFFFFFFFF)
        self.count = 0

    def uniform(self, count: int) -> np.ndarray:
        """``count`` float64 uniforms in [0, 1)."""
        counters = np.arange(self.count, self.count + count, dtype=np.uint64)
        self.count += count
        z = _splitmix64(self.key ^ _splitmix64(counters))
        return (z >> np.uint64(11)).astype(np.float64) * (1.0 / 9007199254740992.0)
