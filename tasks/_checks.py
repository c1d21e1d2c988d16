"""Config checks the tasks share."""
from __future__ import annotations


def positive(obj, *keys: str) -> None:
    """Each task.<key> a positive integer (a bool is not one), else the key and its value."""
    for key in keys:
        value = getattr(obj, key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"task.{key} must be a positive integer, got {value!r}")
