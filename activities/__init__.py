"""Durable activities: where Weft does its I/O, with clients injected."""

from activities import execution as _execution  # noqa: F401  (registers on bp)
from activities import selftest as _selftest  # noqa: F401  (registers on bp)
from activities.blueprint import bp

__all__ = ["bp"]
