"""An optimizer's small parameters as flat arrays: one concatenation kernel, and the flat
arrays a group keeps from one step to the next."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..autograd import Tensor
from ..backends import namespace
from ..kernels import Kernel


def flat_concat_portable(arrays: list) -> Any:
    """The arrays' elements (each in C order) one after another, as one 1-d array."""
    xp = namespace(arrays[0])
    return xp.concat([a if a.ndim == 1 else xp.reshape(a, (-1,)) for a in arrays])


#: a flat group's gradients as one array: on cuda one kernel taking the arrays' pointers as
#: arguments, where cupy's concatenate copies tables of them from the host
FLAT_CONCAT = Kernel("flat_concat", flat_concat_portable,
                     fast={"cuda": "needle.backends.flat_concat:flat_concat_cuda"})


@dataclass
class _FlatGroup:
    """A group's flat arrays after a step, reused by the next step while nothing replaced
    them: every parameter (and state entry) of the group still holds the view it was given.

    Saves the concatenation of parameters and state into flat arrays on every step.
    """

    indices: tuple[int, ...]
    params: Any  # the flat parameter array
    param_views: dict[int, Any]  # parameter index -> its slice of `params`, reshaped
    state: dict[str, Any]  # state name -> flat array ({} for a stateless rule)
    state_entries: dict[int, dict[str, Any]]  # parameter index -> its state dict of views

    def flat_params(self, indices: tuple[int, ...], params: list[Tensor]) -> Any | None:
        """The flat parameters of `indices`, or None when they must be rebuilt."""
        if self.indices == indices and all(p._array is self.param_views[i]
                                           for i, p in zip(indices, params)):
            return self.params
        return None

    def flat_state(self, indices: tuple[int, ...], state: dict[int, dict]) -> dict | None:
        """The flat state of `indices`, or None when it must be rebuilt."""
        if self.indices == indices and self.state and all(
                state.get(i) is self.state_entries[i] for i in indices):
            return self.state
        return None
