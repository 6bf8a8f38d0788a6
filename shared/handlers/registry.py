"""The handler registry: task ``handler`` names in a workflow definition resolve here.

Register a handler with the :func:`handler` decorator. Weft's built-ins live in
``shared.handlers.builtin``; your own go in ``shared.handlers.custom`` (the one documented place,
imported on first lookup) or in modules listed in the ``WEFT_HANDLER_MODULES`` setting
(comma-separated import paths), see ``docs/handlers.md``. Modules are imported lazily, on the first
:func:`get` or :func:`names`, so an import error in user code never hides the function app from
the host; it surfaces as a clear error when a handler is first needed.
"""

from __future__ import annotations

import importlib
import re
import threading
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar, Union

from shared.errors import WeftError
from shared.settings import get_settings

if TYPE_CHECKING:
    from shared.handlers.context import HandlerContext

#: ``def h(params: dict, ctx: HandlerContext) -> Any`` or the same as ``async def``.
HandlerFn = Callable[[dict[str, Any], "HandlerContext"], Union[Any, Awaitable[Any]]]  # noqa: UP007
F = TypeVar("F", bound=Callable[..., Any])

# Lower-case dotted words: "noop", "servicebus.publish", "acme.billing.charge-card".
NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_-]*(\.[a-z][a-z0-9_-]*)*$")
NAME_MAX_LENGTH = 200

BUILTIN_MODULE = "shared.handlers.builtin"
CUSTOM_MODULE = "shared.handlers.custom"


class UnknownHandlerError(WeftError):
    default_type = "weft.UnknownHandler"
    default_non_retryable = True


class HandlerRegistry:
    """Name -> handler function. Thread-safe; a name can be registered once."""

    def __init__(self, modules: Callable[[], Iterable[str]] | None = None) -> None:
        self._handlers: dict[str, HandlerFn] = {}
        self._lock = threading.RLock()
        self._modules = modules
        self._loaded = False

    def register(self, name: str, fn: HandlerFn) -> None:
        if not isinstance(name, str) or len(name) > NAME_MAX_LENGTH or not NAME_PATTERN.match(name):
            raise ValueError(
                f"invalid handler name {name!r}: lower-case dotted words such as 'acme.charge-card'"
            )
        if not callable(fn):
            raise TypeError(f"handler {name!r} is not callable")
        with self._lock:
            existing = self._handlers.get(name)
            if existing is not None and existing is not fn and _qualname(existing) != _qualname(fn):
                raise ValueError(
                    f"handler {name!r} is already registered by {_qualname(existing)}; "
                    f"{_qualname(fn)} cannot take the name"
                )
            # Same function again (a module imported twice, e.g. under reload): keep the newest.
            self._handlers[name] = fn

    def unregister(self, name: str) -> None:
        """For tests that register throw-away handlers."""
        with self._lock:
            self._handlers.pop(name, None)

    def get(self, name: str) -> HandlerFn:
        self.load()
        fn = self._handlers.get(name)
        if fn is None:
            raise UnknownHandlerError(f"no handler named {name!r} is registered", details={"handler": name})
        return fn

    def names(self) -> list[str]:
        self.load()
        return sorted(self._handlers)

    def __contains__(self, name: object) -> bool:
        self.load()
        return name in self._handlers

    def load(self) -> None:
        """Import the handler modules once. A failed import is retried on the next call."""
        if self._loaded or self._modules is None:
            return
        with self._lock:
            if self._loaded:
                return
            for module in self._modules():
                importlib.import_module(module)
            self._loaded = True


def _qualname(fn: Callable[..., Any]) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


def handler_modules() -> list[str]:
    """Built-ins, ``shared.handlers.custom``, then the modules named in ``WEFT_HANDLER_MODULES``."""
    extra = [m.strip() for m in get_settings().handler_modules.split(",") if m.strip()]
    return [BUILTIN_MODULE, CUSTOM_MODULE, *extra]


REGISTRY = HandlerRegistry(handler_modules)


def handler(name: str, *, registry: HandlerRegistry | None = None) -> Callable[[F], F]:
    """Register the decorated function under ``name`` (in the default registry unless given)."""

    def decorate(fn: F) -> F:
        (registry or REGISTRY).register(name, fn)
        return fn

    return decorate


def get(name: str) -> HandlerFn:
    return REGISTRY.get(name)


def names() -> list[str]:
    return REGISTRY.names()


def register(name: str, fn: HandlerFn) -> None:
    REGISTRY.register(name, fn)
