"""Device kernels shared by numpy and cupy, and the numpy references of cupy's own kernels:
the window gather of a convolution (im2col), scatter-add, in-place optimizer updates, the
cross-entropy, and the counter-based uniform generator of the cuda device."""

from __future__ import annotations

from typing import Any, Callable


def strided_im2col(zeros: Callable[..., Any], as_strided: Callable[..., Any], a: Any,
                   kernel: tuple[int, int], stride: int, padding: int) -> Any:
    """NHWC `a` zero-padded, its windows as one strided view copied once into columns.

    `zeros` and `as_strided` are the array library's (numpy's or cupy's: both count strides
    in bytes). Returns (N, Ho, Wo, kh*kw*C) ordered (i, j, c), as the portable gather does.
    """
    n, h, w, c = a.shape
    p = padding
    if p:  # zeros and one slice copy: numpy's pad costs several times more on small inputs
        padded = zeros((n, h + 2 * p, w + 2 * p, c), dtype=a.dtype)
        padded[:, p:p + h, p:p + w, :] = a
        a = padded
    (kh, kw), s = kernel, stride
    ho, wo = (h + 2 * p - kh) // s + 1, (w + 2 * p - kw) // s + 1
    sn, sh, sw, sc = a.strides
    view = as_strided(a, (n, ho, wo, kh, kw, c), (sn, sh * s, sw * s, sh, sw, sc))
    return view.reshape(n, ho, wo, kh * kw * c)


def scatter_add_rows(zeros: Callable[..., Any], scatter_add: Callable[..., Any], indices: Any,
                     values: Any, n: int) -> Any:
    """Rows of (m, ...) `values` added into zeros of shape (n, ...) at the (m,) `indices`;
    repeated indices accumulate.

    `zeros` is the array library's, `scatter_add(out, indices, values)` an unbuffered
    in-place add (cupy.add.at, or numpy's np.add.at: the same signature).
    """
    out = zeros((n,) + tuple(values.shape[1:]), dtype=values.dtype)
    scatter_add(out, indices, values)
    return out


# ----- optimizer updates in place, in cache-sized chunks (numpy's `out=`) ----------------
#: elements per chunk: the chunk's slices of the parameter, gradient, state and two
#: temporaries (float32: 6 x 256 KB) stay in cache between the passes. Measured on 4M float32
#: Adam parameters (2-core EPYC, 1 MB L2): 16K elements 20.7 ms (numpy's per-call cost
#: dominates), 64K-256K 12 ms, 1M 15.6 ms, one whole-array chunk 23 ms; PyTorch 13-16 ms
CHUNK = 1 << 16


def _updatable(*arrays: Any) -> bool:
    """Whether every array can be updated in place through a flat view."""
    return all(a is None or (a.flags.c_contiguous and a.flags.writeable) for a in arrays)


def _chunks(n: int):
    for start in range(0, n, CHUNK):
        yield slice(start, min(n, start + CHUNK))


def adam_in_place(np: Any, param: Any, grad: Any, m: Any, v: Any, *, lr_t: float, beta1: float,
                  beta2: float, eps_t: float, weight_decay: float) -> bool:
    """Adam on numpy arrays in place: m, v = moving averages of g = grad + wd param and g^2,
    then param -= lr_t m / (sqrt(v) + eps_t); every product and sum in the order of the
    portable rule (optim/adam.py), so the numbers are the same to the bit. False (nothing
    changed) when an array cannot be updated in place."""
    if not _updatable(param, m, v) or not grad.flags.c_contiguous:
        return False
    p, g, m, v = (a.reshape(-1) for a in (param, grad, m, v))
    tmp = np.empty(min(p.size, CHUNK), dtype=p.dtype)
    tmp2 = np.empty_like(tmp)
    for s in _chunks(p.size):
        k = s.stop - s.start
        t, u, pc, mc, vc = tmp[:k], tmp2[:k], p[s], m[s], v[s]
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
    return True


def sgd_in_place(np: Any, param: Any, grad: Any, u: Any, *, lr: float, momentum: float,
                 weight_decay: float) -> bool:
    """SGD on numpy arrays in place: g = grad + wd param; u = momentum u + (1 - momentum) g
    (u None: no momentum); param -= lr u (or lr g); in the portable rule's order
    (optim/sgd.py). False (nothing changed) when an array cannot be updated in place."""
    if not _updatable(param, u) or not grad.flags.c_contiguous:
        return False
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
    return True


def softmax_xent(np: Any, logits: Any, labels: Any) -> tuple[Any, Any, Any] | None:
    """The mean cross-entropy of (n, k) `logits` against int `labels`, the portable op's
    sums in its order but with one fresh (n, k) array instead of two: (loss, exp(logits -
    max), row sums). None for arrays it cannot take (the op's portable code then runs)."""
    if logits.ndim != 2 or logits.dtype.kind != "f" or logits.shape[1] == 0:
        return None  # (no classes: no row max to shift by)
    n = logits.shape[0]
    m = np.maximum.reduce(logits, axis=1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0)  # an all -inf row is shifted by 0 (-inf, not NaN)
    e = np.subtract(logits, m)  # the one fresh (n, k) array
    picked = np.take_along_axis(e, labels.reshape(n, 1), axis=1)  # before exp, in place
    np.exp(e, out=e)
    sums = np.add.reduce(e, axis=1, keepdims=True)
    # the mean over no rows is NaN, as PyTorch's
    return np.add.reduce(np.log(sums) - picked, axis=None) * (1.0 / n if n else np.nan), e, sums


def softmax_xent_grad_in_place(np: Any, e: Any, sums: Any, labels: Any, g: Any) -> Any:
    """g (softmax - onehot(labels)) / n from `e` = exp(logits - max) (the forward's, kept on
    the node and only read) and its row `sums`, in one fresh array written in place: the
    portable rule's arithmetic."""
    n = e.shape[0]
    scale = g * (1.0 / n if n else np.nan)
    out = np.multiply(e, scale / sums)
    out[np.arange(n), labels] -= scale
    return out


# ----- counter-based uniform numbers (the cuda device's training generator) ---------------
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


# ----- CUDA C of the in-place updates for cupy's ElementwiseKernel ------------------------
# The same products and sums, in the same order, as the portable rules (optim/adam.py,
# optim/sgd.py) and adam_in_place / sgd_in_place above; compiled with --fmad=false so no
# multiply-add is contracted into one rounding, which keeps them equal to the bit.
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
