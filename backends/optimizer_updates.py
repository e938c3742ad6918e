"""Adam and SGD updates in place: chunked numpy on cpu, one cupy kernel per parameter group on
cuda (fast versions of needle.optim.adam.ADAM and needle.optim.sgd.SGD_STEP).

Each takes and returns what its portable rule (optim/adam.py, optim/sgd.py) does, and makes
every product and sum in that rule's order, so the numbers are the same to the bit. It
updates the parameter and state arrays it is given in place and returns them; state given as
None starts as zeros; an array it cannot update in place (not C-contiguous, read-only) is
copied first, and the copy returned.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import device_of

#: elements per chunk: the chunk's slices of the parameter, gradient, state and two
#: temporaries (float32: 6 x 256 KB) stay in cache between the passes. Measured on 4M float32
#: Adam parameters (2-core EPYC, 1 MB L2): 16K elements 20.7 ms (numpy's per-call cost
#: dominates), 64K-256K 12 ms, 1M 15.6 ms, one whole-array chunk 23 ms; PyTorch 13-16 ms
CHUNK = 1 << 16


def _own(a: np.ndarray) -> np.ndarray:
    """`a` where it can be updated in place through a flat view, else a C-ordered copy."""
    if a.__class__ is np.ndarray and a.flags.c_contiguous and a.flags.writeable:
        return a
    return np.array(a, order="C")


def _state(a: np.ndarray | None, param: np.ndarray) -> np.ndarray:
    return np.zeros_like(param) if a is None else _own(a)


def _chunks(n: int):
    for start in range(0, n, CHUNK):
        yield slice(start, min(n, start + CHUNK))


def adam_cpu(param: Any, grad: Any, m: Any, v: Any, *, lr_t: float, beta1: float,
             beta2: float, eps_t: float, weight_decay: float) -> tuple[Any, Any, Any]:
    """Adam in place, in L2-sized chunks (numpy's out=): m, v = moving averages of g = grad +
    wd param and g^2, then param -= lr_t m / (sqrt(v) + eps_t); returns (param, m, v)."""
    param = _own(param)
    m, v = _state(m, param), _state(v, param)
    p, g, mf, vf = (a.reshape(-1) for a in (param, grad, m, v))
    tmp = np.empty(min(p.size, CHUNK), dtype=p.dtype)
    tmp2 = np.empty_like(tmp)
    for s in _chunks(p.size):
        k = s.stop - s.start
        t, u, pc, mc, vc = tmp[:k], tmp2[:k], p[s], mf[s], vf[s]
        if weight_decay:
            np.multiply(pc, weight_decay, out=t)  # g = param * wd + grad
            t += g[s]
            gc = t
        else:
            gc = g[s]
        np.multiply(gc, 1 - beta1, out=u)  # m = g (1 - b1) + m b1
        mc *= beta1
        np.add(u, mc, out=mc)
        np.multiply(gc, gc, out=u)  # v = g g (1 - b2) + v b2
        u *= 1 - beta2
        vc *= beta2
        np.add(u, vc, out=vc)
        np.sqrt(vc, out=u)  # denominator sqrt(v) + eps_t
        u += eps_t
        np.multiply(mc, lr_t, out=t)  # update = m lr_t / denominator
        t /= u
        pc -= t
    return param, m, v


def sgd_cpu(param: Any, grad: Any, u: Any, *, lr: float, momentum: float,
            weight_decay: float) -> tuple[Any, Any]:
    """SGD in place, in L2-sized chunks: g = grad + wd param; u = momentum u + (1 - momentum)
    g (no u without momentum); param -= lr u (or lr g); returns (param, u)."""
    param = _own(param)
    u = _state(u, param) if momentum else None
    p, g = param.reshape(-1), grad.reshape(-1)
    uf = None if u is None else u.reshape(-1)
    tmp = np.empty(min(p.size, CHUNK), dtype=p.dtype)
    tmp2 = np.empty_like(tmp)
    for s in _chunks(p.size):
        k = s.stop - s.start
        t, w, pc = tmp[:k], tmp2[:k], p[s]
        if weight_decay:
            np.multiply(pc, weight_decay, out=t)  # g = grad + wd param
            np.add(g[s], t, out=t)
            gc = t
        else:
            gc = g[s]
        if uf is not None:
            uc = uf[s]
            uc *= momentum  # u = momentum u + (1 - momentum) g
            np.multiply(gc, 1 - momentum, out=w)
            uc += w
            gc = uc
        np.multiply(gc, lr, out=w)  # param -= lr u
        pc -= w
    return param, u


# ----- cuda: CUDA C for cupy's ElementwiseKernel ---------------------------------------------
# The same products and sums, in the same order, as the portable rules and the numpy kernels
# above; compiled with --fmad=false so no multiply-add is contracted into one rounding, which
# keeps them equal to the bit.
ADAM_CUDA = """
T g = grad;
if (wd != 0) { g = param * wd; g = g + grad; }
T mm = g * omb1;
mm = mm + m * b1;
T sq = g * g;
sq = sq * omb2;
sq = sq + v * b2;
T denom = sqrt(sq) + eps_t;
T update = mm * lr_t;
update = update / denom;
param = param - update;
m = mm;
v = sq;
"""
SGD_CUDA = """
T g = grad;
if (wd != 0) { T d = param * wd; g = grad + d; }
param = param - g * lr;
"""
SGD_MOMENTUM_CUDA = """
T g = grad;
if (wd != 0) { T d = param * wd; g = grad + d; }
T uu = u * momentum;
uu = uu + g * omm;
u = uu;
param = param - uu * lr;
"""


#: name -> (in params, out params, CUDA C) of cupy's ElementwiseKernel
_CUDA_KERNELS = {
    "adam": ("T grad, T lr_t, T b1, T omb1, T b2, T omb2, T eps_t, T wd", "T param, T m, T v",
             ADAM_CUDA),
    "sgd": ("T grad, T lr, T wd", "T param", SGD_CUDA),
    "sgd_momentum": ("T grad, T lr, T momentum, T omm, T wd", "T param, T u",
                     SGD_MOMENTUM_CUDA),
}


def _cuda_kernel(gpu: Any, name: str) -> Any:
    return gpu.elementwise_kernel(name, *_CUDA_KERNELS[name], exact=True)


def _contiguous(cp: Any, a: Any) -> Any:
    return a if a.flags.c_contiguous else cp.ascontiguousarray(a)


def adam_cuda(param: Any, grad: Any, m: Any, v: Any, *, lr_t: float, beta1: float,
              beta2: float, eps_t: float, weight_decay: float) -> tuple[Any, Any, Any]:
    """Adam's update of `param`, `m` and `v` in place, in one kernel; returns them."""
    gpu = device_of(param)
    cp = gpu.cupy
    with gpu.current:
        param, grad = _contiguous(cp, param), _contiguous(cp, grad)
        m = cp.zeros_like(param) if m is None else _contiguous(cp, m)
        v = cp.zeros_like(param) if v is None else _contiguous(cp, v)
        t = param.dtype.type
        _cuda_kernel(gpu, "adam")(grad, t(lr_t), t(beta1), t(1 - beta1), t(beta2),
                                  t(1 - beta2), t(eps_t), t(weight_decay), param, m, v)
    return param, m, v


def sgd_cuda(param: Any, grad: Any, u: Any, *, lr: float, momentum: float,
             weight_decay: float) -> tuple[Any, Any]:
    """SGD's update of `param` (and momentum `u`) in place, in one kernel; returns them."""
    gpu = device_of(param)
    cp = gpu.cupy
    with gpu.current:
        param, grad = _contiguous(cp, param), _contiguous(cp, grad)
        t = param.dtype.type
        if not momentum:
            _cuda_kernel(gpu, "sgd")(grad, t(lr), t(weight_decay), param)
            return param, None
        u = cp.zeros_like(param) if u is None else _contiguous(cp, u)
        _cuda_kernel(gpu, "sgd_momentum")(grad, t(lr), t(momentum), t(1 - momentum),
                                          t(weight_decay), param, u)
    return param, u
