"""Fast kernels: one registry keyed by (kernel name, device kind).

A `Kernel` is declared next to the op or optimizer that calls it, with its portable version
(array-API calls only) as the reference and, per device kind, a faster version named by its
import path ("needle.backends.im2col:im2col_cpu"): those need numpy, cupy or torch, so they
live in backends/. A kind without a fast version runs the reference: that is the one way of
saying "none here". A fast version is imported the first time its kind calls the kernel
(nothing happens at import time); the kernel then remembers, per array type, which function
runs, so a call costs one dict lookup.

The calling convention is the reference's, and the first argument is an array of the device
the kernel runs on (or a list of them: a multi-tensor kernel). A fast version takes every
call its reference takes (or returns NotImplemented for one it leaves to the reference: a
layout or dtype it has no kernel for) and returns the same numbers (to the bit where it
computes in the same order: tests/test_kernels.py checks every registered pair). A kernel
that updates arrays returns them: a fast version may return the very arrays it was given,
updated in place, so a caller uses the result either way and hands over only arrays nobody
else holds.
"""

from __future__ import annotations

import importlib
import operator
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Mapping

from .backends import device_of, namespace

#: every kernel declared so far, by name (the tests check each against its reference)
REGISTRY: dict[str, Kernel] = {}


class Kernel:
    """A function with a portable reference and, per device kind, a faster version."""

    def __init__(self, name: str, reference: Callable[..., Any],
                 fast: Mapping[str, str] | None = None):
        if name in REGISTRY:
            raise ValueError(f"a kernel named {name!r} is already declared")
        self.name = name
        self.reference = reference
        #: device kind -> "module:function" of its fast version
        self.fast: dict[str, str] = dict(fast or {})
        self._by_kind: dict[str, Callable[..., Any]] = {}  # kind -> the function it runs
        self._by_type: dict[type, Callable[..., Any]] = {}  # array type -> the same
        self._reference_only = False
        REGISTRY[name] = self

    def __repr__(self) -> str:
        return f"Kernel({self.name!r}, fast for {sorted(self.fast)})"

    def __call__(self, a: Any, *args: Any, **kwargs: Any) -> Any:
        run = self._by_type.get(a.__class__ if a.__class__ is not list else a[0].__class__)
        if run is None:
            run = self.on(a)
        out = run(a, *args, **kwargs)
        if out is NotImplemented:  # a call the fast version leaves to the reference
            return self.reference(a, *args, **kwargs)
        return out

    def on(self, a: Any) -> Callable[..., Any]:
        """The function this kernel runs for arrays like `a` (to bind once in a loop; for a
        kernel whose fast versions take every call, never returning NotImplemented); a list
        of arrays dispatches on its first."""
        if a.__class__ is list:
            a = a[0]
        run = self._by_type.get(a.__class__)
        if run is None:
            run = self._by_type[a.__class__] = self.implementation(device_of(a).kind)
        return run

    def implementation(self, kind: str) -> Callable[..., Any]:
        """The function that runs on device kind `kind`: its fast version (imported the first
        time it is asked for) or, where there is none, the reference."""
        run = self._by_kind.get(kind)
        if run is None:
            path = self.fast.get(kind)
            if path is None or self._reference_only:
                run = self.reference
            else:
                module, _, name = path.partition(":")
                run = getattr(importlib.import_module(module), name)
            self._by_kind[kind] = run
        return run


@contextmanager
def reference_only(*kernels: Kernel) -> Iterator[None]:
    """Run the given kernels (all registered ones when none is given) as their portable
    reference on every device inside the block: for tests and benchmarks."""
    chosen = kernels or tuple(REGISTRY.values())
    saved = [(k, k._by_kind, k._by_type) for k in chosen]
    for k in chosen:
        k._by_kind, k._by_type, k._reference_only = {}, {}, True
    try:
        yield
    finally:
        for k, by_kind, by_type in saved:
            k._by_kind, k._by_type, k._reference_only = by_kind, by_type, False


#: `out + b` where `out` is a fresh array nobody else holds (a matmul's or a product's
#: result, a running sum of adjoints): the cpu adds in place where the result fits `out`.
#: Declared here, not beside one op: Affine, ScaleShift, Conv and the backward engine use it.
ADD_TO_FRESH = Kernel("add_to_fresh", operator.add,
                      fast={"cpu": "needle.backends.add_to_fresh:add_to_fresh_cpu",
                            "cuda": "needle.backends.add_to_fresh:add_to_fresh_cuda"})


def sum_portable(a: Any, axes: tuple[int, ...] | None, keepdims: bool = False) -> Any:
    """The sum of `a` over the non-negative `axes` (None: all), xp's."""
    return namespace(a).sum(a, axis=axes, keepdims=keepdims)


#: sums of arrays (Summation, SumToShape: the bias gradients, the softmaxes): on cuda one
#: plain kernel for the leading or trailing axes, where a cupy reduction costs 30-70 us of
#: host time to launch. Declared here, not beside one op: several use it.
SUM = Kernel("sum", sum_portable, fast={"cuda": "needle.backends.sums:sum_cuda"})
