"""HTTP, timer, blob and Service Bus triggers. Thin: decode, call a plain function, encode."""

from triggers import api as _api  # noqa: F401
from triggers import blob as _blob  # noqa: F401
from triggers import outbox as _outbox  # noqa: F401
from triggers import schedules as _schedules  # noqa: F401
from triggers import selftest as _selftest  # noqa: F401  (registers on bp)
from triggers import servicebus as _servicebus  # noqa: F401
from triggers.blueprint import bp

__all__ = ["bp"]
