"""needle.optim (work in progress)."""
