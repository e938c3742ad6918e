"""The cpu device: numpy through array-api-compat."""

from __future__ import annotations

from typing import Any

import numpy as np

from .device import Device


class CPUDevice(Device):
    """Arrays in host memory, computed with numpy."""

    kind = "cpu"

    def _load(self) -> tuple[Any, Any]:
        import array_api_compat.numpy as xp

        return xp, "cpu"

    def owns(self, array: Any) -> bool:
        """numpy arrays (and numpy scalars) live here."""
        return isinstance(array, (np.ndarray, np.generic))

    def from_numpy(self, array: np.ndarray) -> np.ndarray:
        """A contiguous copy of the host array."""
        return np.array(array, copy=True, order="C")

    def to_numpy(self, array: Any) -> np.ndarray:
        """A host copy."""
        return np.array(array, copy=True)
