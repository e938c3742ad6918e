"""The counter-based uniform generator of the cuda device (Device.random): splitmix64 of
(seed, offset + i), as CUDA C for cupy and as its numpy reference."""

from __future__ import annotations

from typing import Any

#: splitmix64's constants: draw i of a generator (seed, offset) is the hash of
#: seed + (offset + i) * GOLDEN, so any draw is computed independently of the others and the
#: whole state is two integers (a checkpoint holds it exactly)
GOLDEN, MIX1, MIX2 = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
#: the same hash as CUDA C for cupy's ElementwiseKernel (in: seed, offset; out: float32 u)
SPLITMIX_UNIFORM_CUDA = """
unsigned long long z = seed + (offset + (unsigned long long)i) * 0x9E3779B97F4A7C15ULL;
z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
z ^= z >> 31;
u = (float)(z >> 40) * 5.9604644775390625e-08f;
"""
#: the same draws inside a CUDA graph: (seed, offset) read from `state` on the GPU (set before
#: each replay), `rel` the draws the captured step made before this one
SPLITMIX_UNIFORM_AT_CUDA = """
const unsigned long long seed = state[0], offset = state[1] + rel;
""" + SPLITMIX_UNIFORM_CUDA
#: writes a generator's (seed, offset) into the 2-entry `state` of a graph
SET_STATE_CUDA = "s = i == 0 ? seed : offset;"


def splitmix_uniform(np: Any, seed: int, offset: int, shape: tuple[int, ...]) -> Any:
    """float32 uniform [0, 1) numbers (multiples of 2^-24) of the generator (seed, offset):
    the numpy reference of SPLITMIX_UNIFORM_CUDA, bit for bit (uint64 arithmetic wraps)."""
    n = 1
    for k in shape:
        n *= k
    u64 = np.uint64
    z = u64(seed) + (u64(offset) + np.arange(n, dtype=u64)) * u64(GOLDEN)
    z = (z ^ (z >> u64(30))) * u64(MIX1)
    z = (z ^ (z >> u64(27))) * u64(MIX2)
    z ^= z >> u64(31)
    return ((z >> u64(40)).astype(np.float32) * np.float32(2.0**-24)).reshape(shape)
