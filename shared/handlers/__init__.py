"""Task handlers: the registry, the context a handler receives and the invoker (docs/handlers.md).

Pure Python: nothing here imports ``azure.*``; clients come in through ``HandlerContext.ports``.
"""

from shared.handlers.context import HandlerContext, HandlerPorts, PortNotConfiguredError
from shared.handlers.invoke import ainvoke_handler, error_from_exception, invoke_handler, parse_params
from shared.handlers.registry import (
    REGISTRY,
    HandlerFn,
    HandlerRegistry,
    UnknownHandlerError,
    get,
    handler,
    names,
    register,
)

__all__ = [
    "REGISTRY",
    "HandlerContext",
    "HandlerFn",
    "HandlerPorts",
    "HandlerRegistry",
    "PortNotConfiguredError",
    "UnknownHandlerError",
    "ainvoke_handler",
    "error_from_exception",
    "get",
    "handler",
    "invoke_handler",
    "names",
    "parse_params",
    "register",
]
