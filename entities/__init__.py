"""Durable entity functions."""

from entities import tenant_gate as _tenant_gate  # noqa: F401  (registers on bp)
from entities.blueprint import bp

__all__ = ["bp"]
