"""TensorTuple: a tuple of Tensors made by one op (fused ops, split and stack), and the ops
that make them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .graph import Op, Value

if TYPE_CHECKING:
    from .tensor import Tensor


class TensorTupleOp(Op):
    """An op whose output is a TensorTuple."""

    def __call__(self, *args: Value) -> TensorTuple:
        return TensorTuple.make_from_op(self, args)


class TensorTuple(Value):
    """A tuple of tensors produced by one op (for fused ops, split and stack)."""

    __slots__ = ()

    def __len__(self) -> int:
        return len(self._realize())

    def __getitem__(self, index: int) -> Tensor:
        return _ops.tuple_get_item(self, index)

    def tuple(self) -> tuple[Tensor, ...]:
        """The elements as a Python tuple of Tensors."""
        return tuple(self[i] for i in range(len(self)))

    def __iter__(self):
        return iter(self.tuple())

    def __repr__(self) -> str:
        return "needle.TensorTuple" + str(self.tuple())

    def __str__(self) -> str:
        return self.__repr__()

    def __add__(self, other: TensorTuple) -> TensorTuple:
        make_tuple = _ops.make_tuple

        if not isinstance(other, TensorTuple) or len(self) != len(other):
            raise ValueError("TensorTuple + needs another TensorTuple of the same length")
        return make_tuple(*[self[i] + other[i] for i in range(len(self))])

    def detach(self) -> TensorTuple:
        """A constant TensorTuple sharing the data."""
        return TensorTuple.make_const(self._realize(), device=self.device)

    def _wrap_adjoint(self, grad: tuple) -> TensorTuple:
        xp = self.device.xp
        return TensorTuple.make_const(tuple(xp.zeros_like(d) if g is None else g
                                            for d, g in zip(self._array, grad)),
                                      device=self.device)

    def _sum_adjoints(self, partials: list) -> Any:
        """The elementwise sum of this tuple's partial adjoints (the tuple ops' business)."""
        return _ops.tuple.sum_tuple_adjoints(partials, self)

    def _fit_adjoint(self, partial: Any) -> Any:
        return partial


class OneHotAdjoint(TensorTuple):
    """The TensorTuple adjoint TupleGetItem gives (ops.OneHotTuple's output): `element` at
    `index`, zeros elsewhere. Tuple adjoints are added by picking `element`."""

    __slots__ = ("index", "element")


from .. import ops as _ops  # noqa: E402  (the tuple's operators need the ops)
