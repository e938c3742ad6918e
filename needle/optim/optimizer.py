"""The Optimizer base class: a parameter list, per-parameter state and its state_dict."""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from ..autograd import Tensor


def check_range(owner: str, name: str, value: Any, low: float, high: float | None = None,
                high_inclusive: bool = False) -> float:
    """`value` as a float, or a ValueError naming it when it is outside [low, high)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{owner}: {name} must be a number, found {type(value).__name__}")
    value = float(value)
    ok = value >= low
    if high is not None:
        ok = ok and (value <= high if high_inclusive else value < high)
    if not ok:
        interval = f">= {low}" if high is None else (
            f"in [{low}, {high}]" if high_inclusive else f"in [{low}, {high})")
        raise ValueError(f"{owner}: {name} must be {interval}, found {value}")
    return value


class Optimizer:
    """Updates `params` from their `.grad` on each step().

    `state[i]` holds the raw device arrays of parameter i (momentum, moments). Updates are
    computed on raw arrays and assigned to each parameter's data, so no graph is recorded,
    the parameter object and dtype stay the same, and `.grad` is never modified.
    """

    #: names of the hyperparameters (constructor arguments), saved in state_dict
    hyperparameters: tuple[str, ...] = ()
    #: names of the per-parameter state arrays
    state_names: tuple[str, ...] = ()

    def __init__(self, params: Iterable[Tensor]):
        self.params = list(params)
        for i, p in enumerate(self.params):
            if not isinstance(p, Tensor):
                raise TypeError(f"{type(self).__name__}: parameter {i} must be a Tensor, "
                                f"found {type(p).__name__}")
        self.state: dict[int, dict[str, Any]] = {}
        self.t = 0  # number of step() calls

    def _check(self, name: str, value: Any) -> float:
        """Validate one hyperparameter (subclasses define the ranges)."""
        return check_range(type(self).__name__, name, value, 0.0)

    def step(self) -> None:
        """Update every parameter that has a gradient (those whose grad is None are skipped)."""
        self.t += 1
        for i, p in enumerate(self.params):
            grad = p.grad
            if grad is None:
                continue
            param = p.realize_cached_data()
            g = grad.realize_cached_data()
            if g.dtype != param.dtype:  # e.g. a float64 gradient of a float32 parameter
                g = p.device.xp.astype(g, param.dtype)
            p.cached_data = self._update(i, param, g)

    def _update(self, i: int, param: Any, grad: Any) -> Any:
        """The new raw array of parameter `i` from its raw array and gradient."""
        raise NotImplementedError

    def reset_grad(self) -> None:
        """Set every parameter's grad to None."""
        for p in self.params:
            p.grad = None

    zero_grad = reset_grad

    # ----- state -------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """{"state": {index: {name: Tensor}}, "hyperparameters": {...}, "t": steps}."""
        device_of = {i: p.device for i, p in enumerate(self.params)}
        return {
            "state": {
                i: {k: Tensor.make_const(a, device=device_of[i]) for k, a in s.items()}
                for i, s in self.state.items()
            },
            "hyperparameters": {k: getattr(self, k) for k in self.hyperparameters},
            "t": self.t,
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
        t = state_dict["t"]
        if isinstance(t, bool) or not isinstance(t, int) or t < 0:
            problems.append(f"t must be an int >= 0, found {t!r}")
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
                    raw = value.realize_cached_data() if isinstance(value, Tensor) else value
                    arrays[name] = p.device.asarray(raw, dtype=p.dtype)
            new_state[i] = arrays
        if problems:
            raise ValueError(f"{type(self).__name__}.load_state_dict: " + "; ".join(problems))
        for name in self.hyperparameters:
            setattr(self, name, hyper[name])
        self.t = t
        self.state = new_state

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={getattr(self, k)!r}" for k in self.hyperparameters)
        return f"{type(self).__name__}({args})"
