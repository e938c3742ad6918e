"""needle.data (work in progress)."""
