"""Durable entity functions."""

from entities.blueprint import bp

__all__ = ["bp"]
