"""Durable orchestrators. Deterministic: they import no adapters and do no I/O."""

from orchestrators import execution as _execution  # noqa: F401  (registers on bp)
from orchestrators import selftest as _selftest  # noqa: F401  (registers on bp)
from orchestrators.blueprint import bp

__all__ = ["bp"]
