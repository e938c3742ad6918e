"""The Optimizer base class: a parameter list, per-parameter state and its state_dict."""

from __future__ import annotations

import math
from typing import Any, Callable, Iterable, Mapping

from ..arguments import check_range
from ..autograd import Tensor, graph, mark_modified
from ..autograd.graph import replayed
from ..backends import device_of
from ..grad_mode import enable_grad
from .flat import FLAT_CONCAT, _FlatGroup
from .params import _count, _half, _narrowed, _parameter_list, _widened


class Optimizer:
    """Updates `params` from their `.grad` on each step().

    `state[i]` holds the raw device arrays of parameter i (momentum, moments). Updates are
    computed on raw arrays and assigned to each parameter's data, so no graph is recorded,
    the parameter object and dtype stay the same, and `.grad` is never modified. A parameter
    that `Module.to()` moved takes its state along (an exact copy) at the next step.
    """

    #: names of the hyperparameters (constructor arguments), saved in state_dict
    hyperparameters: tuple[str, ...] = ()
    #: names of the per-parameter state arrays
    state_names: tuple[str, ...] = ()
    #: parameters with more elements than this are not batched into the flat update
    flat_max_size: int = 1 << 15
    #: whether the rule needs each parameter's own count of updates (Adam's bias correction)
    counts_steps: bool = False

    def __init__(self, params: Iterable[Tensor]):
        self.params = _parameter_list(type(self).__name__, params)
        self.state: dict[int, dict[str, Any]] = {}
        self.t = 0  # number of step() calls
        #: parameter index -> the steps that updated it (a parameter without a gradient in
        #: some steps has fewer than t), where the rule counts them; the count of the group
        #: being updated is `_step_count`
        self._counts: list[int] | None = [0] * len(self.params) if self.counts_steps else None
        self._step_count = 0
        self._flat: dict[tuple, _FlatGroup] = {}  # (device, dtype) -> last step's flat arrays
        self._owned: dict[int, Any] = {}  # big parameter index -> the array it updates in place

    def __setattr__(self, name: str, value: Any) -> None:
        if name in self.hyperparameters:
            # checked at every assignment (a schedule's too), as a float (numpy's scalars
            # from a schedule's np.cos as well), before ndl.compile records it for replay
            value = self._check(name, value)
            if graph._TRACER is not None:
                graph._TRACER.setting(self, name, value)
        object.__setattr__(self, name, value)

    def __getattr__(self, name: str) -> Any:
        """The course's per-parameter state dicts, `opt.u` (SGD) and `opt.m`, `opt.v`
        (Adam): {parameter: Tensor} for the parameters that have the entry (SGD keeps no
        `u` at momentum 0, as PyTorch), a snapshot whose Tensors share the state's arrays."""
        if name in type(self).state_names and "state" in self.__dict__:
            return {self.params[i]: Tensor.make_const(entry[name], device=device_of(entry[name]))
                    for i, entry in sorted(self.state.items()) if name in entry}
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def _check(self, name: str, value: Any) -> float:
        """Validate one hyperparameter (subclasses define the ranges)."""
        return check_range(type(self).__name__, name, value, 0.0)

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Update every parameter that has a gradient (those whose grad is None are skipped).
        With `closure` (PyTorch's form: it clears the grads, computes the loss, calls
        backward and returns the loss), call it first, with grad mode on, and return its
        loss; else return None. See `_replayed_step` for how the update runs."""
        loss = None
        if closure is not None:
            with enable_grad():
                loss = closure()
        self._replayed_step()
        return loss

    @replayed  # ndl.compile runs the whole step again at replay (settings read then)
    def _replayed_step(self) -> None:
        """The update of every parameter that has a gradient.

        Small parameters sharing a device and dtype are updated together: their gradients are
        concatenated into one flat array, the update rule runs once on it (a few whole-array
        passes instead of a few per parameter), and each parameter gets its slice back.
        Parameters above `flat_max_size` elements keep their own arrays (a copy into a flat
        buffer would cost more than the per-call overhead saved), as do all of them where the
        device's `multi_tensor_updates` is set; those sharing a device and dtype are handed
        to the rule together (`_update_many`: on torch, foreach ops, one launch per pass for
        all of them on a GPU). Updates run
        on arrays the optimizer owns (a parameter's array is copied once, when the optimizer
        first meets it): where the device has in-place kernels (cpu, cuda), in place, with
        the same numbers as the portable rule.
        """
        self.t += 1
        groups: dict[tuple, list[int]] = {}
        big: dict[tuple, list[int]] = {}
        counts = self._counts
        for i, p in enumerate(self.params):
            if p.grad is not None:
                data = p._realize()
                # big: its own arrays (updated with the other big ones of its device and
                # dtype); so is one laid out in another order (torch's conv weights), whose
                # flat copy would be a copy and whose flat view would lose that layout, and
                # every one where the device's multi-tensor updates beat a flat array
                by_size = (big if math.prod(data.shape) > self.flat_max_size
                           or p.device.multi_tensor_updates
                           or not p.device.c_contiguous(data) else groups)
                key = (p.device, data.dtype)
                if counts is not None:  # a parameter updated fewer times: a group of its
                    counts[i] += 1  # count (as PyTorch's per-
                    n = counts[i]
                    if n != self.t:  # parameter step), keyed by how far it lags (the same
                        key += (self.t - n,)  # from step to step: its flat arrays are kept)
                by_size.setdefault(key, []).append(i)
        # every parameter about to change gets a new version: backward() through a graph
        # built before this step raises instead of differentiating with the new values
        mark_modified(*(self.params[i] for by_size in (big, groups)
                        for indices in by_size.values() for i in indices))
        for key, indices in big.items():
            self._step_count = self.t - (key[2] if len(key) > 2 else 0)
            self._step_big(indices)
        for key, indices in groups.items():
            self._step_count = self.t - (key[2] if len(key) > 2 else 0)
            self._step_group(indices, key)
        for key in [k for k in self._flat if k not in groups]:
            del self._flat[key]  # a group that had no gradients: its copies are freed

    def _grads(self, params: list[Tensor]) -> list[Any]:
        """The parameters' gradient arrays, each in its parameter's dtype."""
        xp = params[0].device.xp
        grads = []
        for p in params:
            g = p.grad._realize()
            if g.dtype != p._array.dtype:  # e.g. a float64 gradient of a float32 param
                g = xp.astype(g, p._array.dtype)
            grads.append(g)
        return grads

    def _step_big(self, indices: list[int]) -> None:
        """Update the big parameters `indices` (one device and dtype), each on its own arrays,
        in one `_update_many` call."""
        params = [self.params[i] for i in indices]
        xp = params[0].device.xp
        grads = self._grads(params)
        datas = []
        for i, p in zip(indices, params):
            # the update may be made in place (a device's kernel): on an array of the
            # optimizer's own, a copy the first time (or after the parameter's data was
            # replaced), so no array anyone else holds changes
            data = p._array
            if self._owned.get(i) is not data:
                data = xp.asarray(data, copy=True)
                self._follow(i)  # new data: perhaps moved to another device (Module.to)
                self._check_state(i)
            datas.append(data)
        states = [self.state.get(i, {}) for i in indices]
        if _half(xp, datas[0]):  # computed in float32, stored in float16 (as PyTorch's)
            wide = [_widened(xp, d, g, st) for d, g, st in zip(datas, grads, states)]
            updated = [_narrowed(xp, d, st) for d, st in self._update_many(
                [w[0] for w in wide], [w[1] for w in wide], [w[2] for w in wide])]
        else:
            updated = self._update_many(datas, grads, states)
        for i, p, (data, state) in zip(indices, params, updated):
            p._array = self._owned[i] = data  # the result (or the array, updated in place)
            if state:
                self.state[i] = state

    def _step_group(self, indices: list[int], key: tuple | None = None) -> None:
        """Update the small parameters `indices` as one flat array (group `key`; a group of
        one on its own arrays)."""
        params = [self.params[i] for i in indices]
        xp = params[0].device.xp
        if len(params) == 1:
            self._flat.pop(key, None)  # a group of one has no flat arrays to keep
            return self._step_big(indices)
        grads = self._grads(params)
        shapes = [p._array.shape for p in params]
        cache = self._flat.get(key)
        flat_p = self._flat_params(indices, params, xp, cache)  # cached, or a fresh concat
        flat_g = FLAT_CONCAT(grads)
        flat_state = self._flat_state(indices, params, xp, cache)
        if _half(xp, flat_p):  # computed in float32, stored in float16 (as PyTorch's)
            new_p, new_state = _narrowed(xp, *self._update(*_widened(xp, flat_p, flat_g,
                                                                       flat_state)))
        else:
            new_p, new_state = self._update(flat_p, flat_g, flat_state)
        if (cache is not None and new_p is cache.params and new_state.keys() ==
                cache.state.keys() and all(new_state[k] is a for k, a in cache.state.items())):
            return  # updated in place: every parameter and state entry already views them
        # hand every parameter (and its state) a view of its slice of the new flat arrays
        start = 0
        param_views, state_entries = {}, {}
        for i, p, shape in zip(indices, params, shapes):
            end = start + math.prod(shape)
            p._array = param_views[i] = xp.reshape(new_p[start:end], shape)
            if new_state:
                self.state[i] = state_entries[i] = {
                    name: xp.reshape(a[start:end], shape) for name, a in new_state.items()
                }
            start = end
        self._flat[key] = _FlatGroup(tuple(indices), new_p, param_views, new_state,
                                    state_entries)

    def _flat_params(self, indices: list[int], params: list[Tensor], xp: Any,
                     cache: _FlatGroup | None) -> Any:
        """The group's parameters as one flat array: last step's, while nothing replaced them."""
        flat = cache.flat_params(tuple(indices), params) if cache is not None else None
        if flat is not None:
            return flat
        for i in indices:
            self._check_state(i)
        return xp.concat([xp.reshape(p._array, (-1,)) for p in params])

    def _flat_state(self, indices: list[int], params: list[Tensor], xp: Any,
                    cache: _FlatGroup | None) -> dict:
        """The group's state as flat arrays (zeros where a parameter has none yet)."""
        if not any(i in self.state for i in indices):
            return {}
        flat = cache.flat_state(tuple(indices), self.state) if cache is not None else None
        if flat is not None:
            return flat  # every per-parameter entry is still last step's view
        for i in indices:
            self._follow(i)
        return {
            name: xp.concat([
                xp.reshape(self.state.get(i, {}).get(name, xp.zeros_like(p._array)), (-1,))
                for i, p in zip(indices, params)
            ])
            for name in self.state_names
        }

    def _check_state(self, i: int) -> None:
        """ValueError where parameter i's state has another shape than the parameter (its
        data was replaced by another shape's since its last update)."""
        p = self.params[i]
        for name, a in self.state.get(i, {}).items():
            if tuple(a.shape) != p.shape:
                raise ValueError(f"{type(self).__name__}: parameter {i} has shape {p.shape}, "
                                 f"but its state {name!r} has shape {tuple(a.shape)}: its data "
                                 "was replaced by another shape's after an update; make a new "
                                 "optimizer for it (or load a state for the new shape)")

    def _follow(self, i: int) -> None:
        """Move parameter i's state to the parameter's device where `Module.to()` moved the
        parameter since the state was made: an exact copy (cast to the parameter's dtype)."""
        state = self.state.get(i)
        p = self.params[i]
        if not state or all(p.device.owns(a) for a in state.values()):
            return
        self.state[i] = {name: a if p.device.owns(a) else p.device.asarray(a, dtype=p.dtype)
                         for name, a in state.items()}
        for key in [k for k, group in self._flat.items() if i in group.indices]:
            del self._flat[key]  # its flat arrays are on the old device

    def _update(self, param: Any, grad: Any, state: dict) -> tuple[Any, dict]:
        """The new parameter array and state from the old ones (any shape, elementwise).

        `param` and the state's arrays are the optimizer's own: the update may write over
        them and return them (a device's in-place kernel) or return new arrays.
        """
        raise NotImplementedError

    def _update_many(self, params: list[Any], grads: list[Any],
                     states: list[dict]) -> list[tuple[Any, dict]]:
        """`_update` of each parameter (the same arrays); a rule with a multi-tensor kernel
        makes all of them in one call."""
        return [self._update(p, g, s) for p, g, s in zip(params, grads, states)]

    @replayed
    def reset_grad(self, set_to_none: bool = True) -> None:
        """Set every parameter's grad to None (or, with set_to_none=False, to zeros)."""
        for p in self.params:
            p.grad = None if set_to_none else Tensor.make_const(
                p.device.zeros(p.shape, dtype=p._realize().dtype), device=p.device)

    zero_grad = reset_grad

    # ----- state -------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """{"state": {index: {name: Tensor}}, "hyperparameters": {...}, "t": steps, "shapes":
        [each parameter's shape]}, and "steps": {index: its updates} where the rule counts
        them (Adam)."""
        for i in list(self.state):
            self._follow(i)
        device_of = {i: p.device for i, p in enumerate(self.params)}
        return {
            "state": {
                i: {k: Tensor.make_const(a, device=device_of[i]) for k, a in s.items()}
                for i, s in self.state.items()
            },
            "hyperparameters": {k: getattr(self, k) for k in self.hyperparameters},
            "t": self.t,
            "shapes": [p.shape for p in self.params],  # (checked by load_state_dict)
            **({} if self._counts is None else
               {"steps": {i: n for i, n in enumerate(self._counts) if n}}),
        }

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore what state_dict() returned; one ValueError lists every problem, and
        nothing changes when it is raised."""
        problems: list[str] = []
        missing = [k for k in ("state", "hyperparameters", "t") if k not in state_dict]
        if missing:
            raise ValueError(f"{type(self).__name__}.load_state_dict: missing keys {missing}")
        hyper = dict(state_dict["hyperparameters"])
        for name in self.hyperparameters:
            if name not in hyper:
                problems.append(f"missing hyperparameter {name!r}")
            else:
                try:
                    hyper[name] = self._check(name, hyper[name])
                except (TypeError, ValueError) as e:
                    problems.append(str(e))
        unknown = [k for k in hyper if k not in self.hyperparameters]
        if unknown:
            problems.append(f"unexpected hyperparameters {unknown}")
        shapes = state_dict.get("shapes")  # (older checkpoints have none)
        if shapes is not None:
            mine = [p.shape for p in self.params]
            try:
                theirs = [tuple(int(n) for n in shape) for shape in shapes]
            except (TypeError, ValueError):
                theirs = None
            if theirs is None:
                problems.append(f"shapes must be a list of shapes, found {shapes!r}")
            elif len(theirs) != len(mine):
                problems.append(f"the state is of {len(theirs)} parameters, this optimizer "
                                f"has {len(mine)}")
            else:
                problems += [f"parameter {i} has shape {m}, the state's {t_}"
                             for i, (m, t_) in enumerate(zip(mine, theirs)) if m != t_]
        t = _count(state_dict["t"])
        if t is None:
            problems.append(f"t must be an int >= 0, found {state_dict['t']!r}")
        # an older checkpoint has no "steps": each parameter with state was updated t times
        steps = state_dict.get("steps", {i: t for i in state_dict["state"]})
        if self._counts is not None:  # a parameter with moments has a count of its updates
            absent = [k for k in state_dict["state"] if k not in steps and str(k) not in
                      map(str, steps)]
            if absent:
                problems.append(f"no steps for parameters {absent}, which have state")
        counts = {}
        for key, n in dict(steps).items():
            i = key if isinstance(key, int) else int(key) if str(key).isdigit() else -1
            count = _count(n)
            if not 0 <= i < len(self.params) or count is None or count > (t or 0):
                problems.append(f"steps of parameter {key!r} must be an int in [0, t], "
                                f"found {n!r}")
            else:
                counts[i] = count
        new_state: dict[int, dict[str, Any]] = {}
        for key, entry in state_dict["state"].items():
            i = key if isinstance(key, int) else int(key) if str(key).isdigit() else -1
            if not 0 <= i < len(self.params):
                problems.append(f"state for parameter {key!r}, but there are "
                                f"{len(self.params)} parameters")
                continue
            p = self.params[i]
            if not isinstance(entry, Mapping):
                problems.append(f"state of parameter {i} must be a mapping, found "
                                f"{type(entry).__name__}")
                continue
            absent = [name for name in self.state_names if name not in entry]
            if absent:
                problems.append(f"parameter {i}: missing state {absent}")
            arrays = {}
            for name, value in entry.items():
                shape = getattr(value, "shape", None)
                if name not in self.state_names:
                    problems.append(f"parameter {i}: unexpected state {name!r} (expected "
                                    f"{list(self.state_names)})")
                elif shape is None or tuple(shape) != p.shape:
                    problems.append(f"parameter {i}: state {name!r} has shape "
                                    f"{None if shape is None else tuple(shape)}, expected "
                                    f"{p.shape}")
                else:
                    raw = value._realize() if isinstance(value, Tensor) else value
                    arrays[name] = p.device.asarray(raw, dtype=p.dtype)
            new_state[i] = arrays
        if problems:
            raise ValueError(f"{type(self).__name__}.load_state_dict: " + "; ".join(problems))
        for name in self.hyperparameters:
            setattr(self, name, hyper[name])
        self.t = t
        if self._counts is not None:
            self._counts = [counts.get(i, 0) for i in range(len(self.params))]
        self.state = new_state
        self._flat.clear()  # the cached flat state is the replaced state's

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={getattr(self, k)!r}" for k in self.hyperparameters)
        return f"{type(self).__name__}({args})"
