"""HTTP, timer, blob and Service Bus triggers. Thin: decode, call a plain function, encode."""

from triggers import selftest as _selftest  # noqa: F401  (registers on bp)
from triggers.blueprint import bp

__all__ = ["bp"]
