"""Mixed dtypes: the array API's type promotion table, the same on every device.

Tensor operands of one op (add, multiply, divide, power, matmul, linear, conv, stack...)
that differ in dtype are promoted by that table: both floating (float16 < float32 <
float64), both signed or both unsigned integers (the wider), a signed and an unsigned integer
(the smallest signed dtype holding both; none for uint64), floating with complex. A bool
tensor takes the other operand's dtype (a mask: `x * init.randb(...)` as course code writes
it, which numpy, torch and jax allow; strict needs the cast). The lower operand is cast by an
AsType node, whose gradient casts the adjoint back, so every gradient keeps its tensor's
dtype (as PyTorch's engine does). Floating with integer tensors and uint64 with a signed
integer are a TypeError naming both dtypes: the libraries disagree there (numpy: float32 *
int64 is float64, torch: float32, strict: an error). A Python scalar takes the tensor's
dtype where it can (an int: any numeric tensor, a float: floating tensors) and is a
TypeError otherwise; so is true division of integers and a floating-point function (exp,
log, tanh, sigmoid) of an integer tensor. Arithmetic on bool tensors is a TypeError but
b + b and b * b (logical or and and, as numpy and PyTorch take them); a bool sum counts in
the default integer dtype and a bool max is a bool.
"""

from __future__ import annotations

from typing import Any

from ..autograd.graph import Value, array_of
from ..autograd.tensor import Tensor, TensorOp
from ..backends import device_of, namespace
from ..grad_mode import no_grad

_FLOATS = {"float16": 0, "float32": 1, "float64": 2}
_COMPLEX = {"complex64": 1, "complex128": 2}
_SIGNED = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}
_UNSIGNED = {"uint8": 8, "uint16": 16, "uint32": 32, "uint64": 64}
_promoted: dict[tuple[str, str], str | None] = {}  # a cache of promoted_name
# (dtype class, native dtype) -> whether it is real floating (keyed by the class too: strict's
# dtypes hash as numpy's, and warn when compared with them)
_real_floating: dict[tuple[type, Any], bool] = {}
_bool: dict[tuple[type, Any], bool] = {}  # the same for bool


def kind_name(name: str) -> str:
    """The array API's name for the kind of dtype `name` ("floating", "signed integer"...)."""
    if name == "bool":
        return "bool"
    if name in _FLOATS:
        return "floating"
    if name in _COMPLEX:
        return "complex"
    if name in _SIGNED:
        return "signed integer"
    return "unsigned integer" if name in _UNSIGNED else name


def _table(a: str, b: str) -> str | None:
    if a == b:
        return a
    if a == "bool" or b == "bool":  # a mask takes the other dtype
        return b if a == "bool" else a
    for group in (_SIGNED, _UNSIGNED, _FLOATS, _COMPLEX):
        if a in group and b in group:
            return a if group[a] >= group[b] else b
    if a in _UNSIGNED and b in _SIGNED:
        a, b = b, a
    if a in _SIGNED and b in _UNSIGNED:  # the smallest signed integer holding both
        width = max(_SIGNED[a], 2 * _UNSIGNED[b])
        return f"int{width}" if width <= 64 else None
    if a in _COMPLEX and b in _FLOATS:
        a, b = b, a
    if a in _FLOATS and b in _COMPLEX:  # complex, with the wider float's precision
        return "complex128" if max(_FLOATS[a], _COMPLEX[b]) == 2 else "complex64"
    return None


def promoted_name(a: str, b: str) -> str | None:
    """The dtype name that dtypes `a` and `b` promote to, None where they do not mix."""
    key = (a, b)
    try:
        return _promoted[key]
    except KeyError:
        result = _promoted[key] = _table(a, b)
        return result


def mixing_error(op: str, a: str, b: str) -> TypeError:
    """The TypeError for tensors of dtypes `a` and `b` that do not promote."""
    why = (f"{kind_name(a)} and {kind_name(b)} dtypes" if kind_name(a) != kind_name(b)
           else f"{a} and {b}")
    return TypeError(
        f"{op}: tensors of dtypes {a} and {b} do not combine: needle follows the array API's "
        f"type promotion, which does not mix {why}; convert one first, e.g. with "
        f"ndl.ops.astype(x, \"{b if kind_name(b) == 'floating' else a}\")"
    )


def promote(op: str, tensors: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
    """`tensors` (of one device), those of a lower dtype cast to the promoted dtype; as
    they are when their dtypes agree (or when they are on several devices, or are raw
    arrays, a gradient rule's: the op itself then reports a problem)."""
    first = tensors[0]
    if not isinstance(first, Value):
        return tensors
    dtype = first._array.dtype
    for t in tensors[1:]:  # the common case, kept cheap: one dtype
        if not isinstance(t, Value):
            return tensors
        d = t._array
        if d.dtype is not dtype:
            if t.device is not first.device and t.device != first.device:
                return tensors  # (strict warns when its dtypes meet numpy's)
            if d.dtype != dtype:
                return _promote_mixed(op, tensors)
    return tensors


def _promote_mixed(op: str, tensors: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
    device = tensors[0].device
    if any(t.device != device for t in tensors):
        return tensors
    names = [device.public_dtype(t._array.dtype).name for t in tensors]
    result = names[0]
    for name in names[1:]:
        promoted = promoted_name(result, name)
        if promoted is None:
            raise mixing_error(op, result, name)
        result = promoted
    return tuple(t if name == result else AsType(result)(t) for t, name in zip(tensors, names))


class PromotingOp(TensorOp):
    """A TensorOp whose tensor inputs share one dtype: mixed dtypes are promoted first."""

    #: the op's name in error messages
    op_name = "op"

    def __call__(self, *args: Tensor) -> Tensor:
        return Tensor.make_from_op(self, promote(self.op_name, args))


class AsType(TensorOp):
    """The tensor converted to `dtype` (a name or the device's dtype); the gradient converts
    the adjoint back to the input's dtype."""

    def __init__(self, dtype: Any):
        if dtype is None:  # (numpy read it as float64, torch kept the dtype, strict failed)
            raise TypeError("astype: dtype must be given (a name like \"float32\" or a dtype)")
        self.dtype = dtype

    def compute(self, a):
        return namespace(a).astype(a, self._native(a, self.dtype))

    @staticmethod
    def _native(a: Any, dtype: Any) -> Any:
        return device_of(a).dtype(dtype)

    def gradient(self, out_grad, node):
        return AsType(array_of(node.inputs[0]).dtype)(out_grad)


def astype(a: Tensor, dtype: Any) -> Tensor:
    """`a` converted to `dtype` (differentiable between floating dtypes: the gradient is
    converted back; to an integer or bool dtype no gradient flows, as in PyTorch)."""
    op = AsType(dtype)  # (checks that a dtype is given)
    device = a.device if isinstance(a, Value) else device_of(a)  # (a raw array too)
    if not device.xp.isdtype(device.dtype(dtype), ("real floating", "complex floating")):
        with no_grad():
            return op(a)
    return op(a)


def check_scalar_result(op: str, a: Any, scalar: Any, out: Any) -> None:
    """TypeError unless `out` (an op of array `a` and a Python scalar) kept `a`'s dtype."""
    if out is not None and (out.dtype is a.dtype or out.dtype == a.dtype):
        return
    raise scalar_error(op, a, scalar)


def scalar_error(op: str, a: Any, scalar: Any) -> TypeError:
    """The TypeError for a Python scalar that cannot take the tensor's dtype."""
    name = device_of(a).public_dtype(a.dtype).name
    if name == "bool":
        why = "bool tensors take no part in arithmetic but b + b and b * b"
    elif op == "divide" and (name in _SIGNED or name in _UNSIGNED):
        why = "true division needs a floating tensor"
    else:
        why = (f"a Python {type(scalar).__name__} takes the tensor's dtype only where it can "
               "(an int: any numeric tensor, a float: floating tensors)")
    return TypeError(f"{op}: the scalar {scalar!r} with a tensor of dtype {name}: {why} (needle "
                     "follows the array API's type promotion); convert the tensor first, "
                     "e.g. with ndl.ops.astype(x, \"float32\")")


def floating_only(op: str, fn: Any, a: Any) -> Any:
    """`fn(a)` for a floating-point function `op`; TypeError naming the dtype for integer or
    bool input (strict refuses it itself, other libraries would change the dtype)."""
    try:
        out = fn(a)
    except (TypeError, NotImplementedError, RuntimeError):  # strict, torch's bool kernels
        check_floating(op, a)  # raises needle's TypeError for integer or bool input
        raise
    if out.dtype is not a.dtype:
        check_floating_result(op, a, out)
    return out


def is_bool(a: Any) -> bool:
    """Whether array `a` holds bools (cached per dtype)."""
    dtype = a.dtype
    key = (dtype.__class__, dtype)
    found = _bool.get(key)
    if found is None:
        found = _bool[key] = namespace(a).isdtype(dtype, "bool")
    return found


def check_not_bool(op: str, *arrays: Any) -> None:
    """TypeError naming `op` where one of `arrays` holds bools: bool tensors take no part in
    arithmetic but b + b and b * b (logical or and and, as in numpy and PyTorch)."""
    if any(is_bool(a) for a in arrays):
        raise TypeError(f"{op}: got a tensor of dtype bool: bool tensors take no part in "
                        "arithmetic but b + b and b * b (logical or, and); convert it first, "
                        "e.g. with ndl.ops.astype(x, \"int64\")")


def default_int(a: Any) -> Any:
    """The default integer dtype of array `a`'s namespace (int64; int32 on jax without x64)."""
    return namespace(a).__array_namespace_info__().default_dtypes()["integral"]


def check_floating(op: str, a: Any) -> None:
    """TypeError naming the dtype unless array `a` is real floating: for an op whose results
    are fractions (integer input would get a float dtype of the library's choosing)."""
    dtype = a.dtype
    key = (dtype.__class__, dtype)
    floating = _real_floating.get(key)
    if floating is None:
        floating = _real_floating[key] = namespace(a).isdtype(dtype, "real floating")
    if not floating:
        check_floating_result(op, a, None)


def check_floating_result(op: str, a: Any, out: Any) -> None:
    """TypeError unless the floating-point function `op` of array `a` kept its dtype."""
    if out is not None and (out.dtype is a.dtype or out.dtype == a.dtype):
        return
    name = device_of(a).public_dtype(a.dtype).name
    raise TypeError(f"{op}: needs a floating tensor, got {name} (needle follows the array "
                    "API, whose floating-point functions take no integer or bool input); "
                    "convert it first, e.g. with ndl.ops.astype(x, \"float32\")")
