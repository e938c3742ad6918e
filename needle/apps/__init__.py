"""needle.apps (work in progress)."""
