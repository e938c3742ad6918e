"""The strict reference device: array-api-strict, which rejects anything outside the standard."""

from __future__ import annotations

from typing import Any

import numpy as np

from .device import Device

# array-api-strict's devices, by index: mixing two of them raises, a free device-mixing test
STRICT_DEVICES = ("CPU_DEVICE", "device1", "device2")


class StrictDevice(Device):
    """Arrays of the array API's reference implementation: proves no numpy-only call leaked in."""

    kind = "strict"

    def _probe(self) -> str:
        """Why strict cannot be used here, or an empty string when it can."""
        try:
            import array_api_strict  # noqa: F401
        except ImportError:
            return "strict() is unavailable: install array-api-strict (`pip install needle[test]`)"
        if self.index >= len(STRICT_DEVICES):
            return f"strict({self.index}) does not exist: array-api-strict has {STRICT_DEVICES}"
        return ""

    def _load(self) -> tuple[Any, Any]:
        import array_api_strict as xp

        return xp, xp.Device(STRICT_DEVICES[self.index])

    def _build_dtype_table(self, xp: Any) -> None:
        super()._build_dtype_table(xp)
        self._public = {
            native: np.dtype(key[1]) for key, native in self._dtypes.items() if key[0] is str
        }

    def public_dtype(self, native: Any) -> np.dtype:
        """strict dtypes do not compare equal to strings: report the numpy dtype of that name."""
        return self._public[native]

    def _from_dlpack(self, obj: Any) -> Any:
        """array-api-strict's from_dlpack, onto this strict device (all are host memory)."""
        return self.xp.from_dlpack(obj, device=self.native)

    def owns(self, array: Any) -> bool:
        """array-api-strict arrays on this strict device live here."""
        return type(array).__module__.startswith("array_api_strict") and (
            array.device == self.native
        )

    def from_numpy(self, array: np.ndarray) -> Any:
        """A strict array holding a copy of the host data."""
        return self.xp.asarray(np.array(array, copy=True, order="C"), device=self.native)

    def to_numpy(self, array: Any) -> np.ndarray:
        """A host copy, through DLPack."""
        if self._pending:
            self.check_pending()
        return np.array(np.from_dlpack(array), copy=True)
