"""Convolution on the jax device: XLA's own (`lax.conv_general_dilated`; cuDNN on a GPU), fast
versions of needle.ops.conv's CONV, CONV_INPUT_GRAD and CONV_WEIGHT_GRAD.

XLA reads needle's layouts as they are (NHWC or NCHW input, HWIO weights, out in the input's
layout). The two adjoints
are the convolution's transpose in one argument (`jax.linear_transpose`), compiled once per
shape, stride and padding. float32 runs at "highest" precision unless the user chose a matmul
precision for jax (as the jax device's matmul does: on a GPU jax's default is TF32-like).
Mixed dtypes and integer arrays are left to the reference (`NotImplemented`).
"""

from __future__ import annotations

import functools
from typing import Any

from .jax_device import full_precision_default, import_jax


def _dims(layout: str) -> tuple[str, str, str]:
    """lax's dimension numbers: input, weights (needle's (K, K, C_in, C_out)) and output."""
    return (layout, "HWIO", layout)


@functools.cache
def _compiled() -> tuple[Any, Any, Any]:
    """(forward, input adjoint, weight adjoint), jitted (made at the first call)."""
    jax = import_jax()
    lax = jax.lax

    def conv(a, b, stride, padding, highest, layout):
        return lax.conv_general_dilated(
            a, b, (stride, stride), [(padding, padding)] * 2, dimension_numbers=_dims(layout),
            precision=lax.Precision.HIGHEST if highest else None)

    @functools.partial(jax.jit, static_argnums=(3, 4, 5, 6))
    def forward(a, b, bias, stride, padding, highest, layout):
        out = conv(a, b, stride, padding, highest, layout)
        if bias is None:
            return out
        return out + (bias if layout == "NHWC" else bias.reshape(-1, 1, 1))

    @functools.partial(jax.jit, static_argnums=(2, 3, 4, 5, 6))
    def input_grad(g, b, shape, stride, padding, highest, layout):
        like = jax.ShapeDtypeStruct(shape, g.dtype)
        return jax.linear_transpose(lambda x: conv(x, b, stride, padding, highest, layout),
                                    like)(g)[0]

    @functools.partial(jax.jit, static_argnums=(2, 3, 4, 5, 6))
    def weight_grad(a, g, shape, stride, padding, highest, layout):
        like = jax.ShapeDtypeStruct(shape, g.dtype)
        return jax.linear_transpose(lambda w: conv(a, w, stride, padding, highest, layout),
                                    like)(g)[0]

    return forward, input_grad, weight_grad


def _floating(*arrays: Any) -> bool:
    """True when every array given (None skipped) has the first one's floating dtype."""
    import jax.numpy as jnp

    dtype = arrays[0].dtype
    return jnp.issubdtype(dtype, jnp.floating) and all(a is None or a.dtype == dtype
                                                       for a in arrays)


def _highest() -> bool:
    return full_precision_default(import_jax())


def conv_jax(a: Any, b: Any, bias: Any, stride: int, padding: int,
             layout: str = "NHWC") -> Any:
    """(out, None): one XLA convolution, no windows gathered."""
    if not _floating(a, b, bias):
        return NotImplemented
    return _compiled()[0](a, b, bias, stride, padding, _highest(), layout), None


def conv_input_grad_jax(g: Any, b: Any, shape: tuple, stride: int, padding: int,
                        layout: str = "NHWC") -> Any:
    """The convolution's transpose in its input, for an input of `shape`."""
    if not _floating(g, b):
        return NotImplemented
    return _compiled()[1](g, b, tuple(shape), stride, padding, _highest(), layout)


def conv_weight_grad_jax(a: Any, g: Any, kernel: tuple[int, int], stride: int, padding: int,
                         cols: Any = None, layout: str = "NHWC") -> Any:
    """The convolution's transpose in its weights; `cols` is the reference's, never given
    here (conv_jax gathers no windows)."""
    if not _floating(a, g):
        return NotImplemented
    channels = 3 if layout == "NHWC" else 1
    shape = (kernel[0], kernel[1], a.shape[channels], g.shape[channels])
    return _compiled()[2](a, g, shape, stride, padding, _highest(), layout)
