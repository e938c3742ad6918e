"""needle.nn (work in progress)."""
