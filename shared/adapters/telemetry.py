"""Wire OpenTelemetry to Azure Monitor, once, on first use, and only when a target is configured.

Nothing here runs at import time: importing ``azure.monitor.opentelemetry`` pulls in a dozen
instrumentations and reads the environment, which must not happen while the Functions host
indexes the app. Call :func:`configure_telemetry` from a function body (the first trigger or
activity that runs); later calls are cheap no-ops.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Mapping
from typing import Any

from shared.telemetry import INSTRUMENTATION_SCOPE

CONNECTION_STRING_SETTING = "APPLICATIONINSIGHTS_CONNECTION_STRING"

_log = logging.getLogger(__name__)
_lock = threading.Lock()
_configured: bool | None = None  # None: not decided yet; False: no target; True: exporting


def _default_configure(**kwargs: Any) -> None:
    from azure.monitor.opentelemetry import configure_azure_monitor  # noqa: PLC0415  (lazy by design)

    configure_azure_monitor(**kwargs)


def configure_telemetry(
    environ: Mapping[str, str] | None = None,
    configure: Callable[..., None] | None = None,
) -> bool:
    """Install the Azure Monitor exporters if ``APPLICATIONINSIGHTS_CONNECTION_STRING`` is set.

    Returns True when telemetry is exported. Without the setting (devhost, tests) the OTel API's
    no-op providers stay in place and every ``shared.telemetry`` call costs almost nothing.
    ``environ`` and ``configure`` exist so tests can drive this without Azure.
    """
    global _configured  # noqa: PLW0603  (a process-wide, once-only switch)
    if _configured is not None:
        return _configured
    with _lock:
        if _configured is not None:
            return _configured
        env = os.environ if environ is None else environ
        connection_string = env.get(CONNECTION_STRING_SETTING, "").strip()
        if not connection_string:
            _configured = False
            return False
        (configure or _default_configure)(
            connection_string=connection_string,
            # Weft's own logger names are routed too, so events built with
            # shared.telemetry.event_attributes reach customEvents.
            logger_name=INSTRUMENTATION_SCOPE,
            # The Functions host already records each invocation as a request; the worker's
            # HTTP-framework instrumentations would only duplicate it.
            instrumentation_options={
                "azure_sdk": {"enabled": True},
                "django": {"enabled": False},
                "fastapi": {"enabled": False},
                "flask": {"enabled": False},
                "psycopg2": {"enabled": False},
            },
        )
        _configured = True
        # The connection string is not logged: it identifies the resource.
        _log.info("telemetry: exporting to Azure Monitor")
        return True


def reset_for_tests() -> None:
    global _configured  # noqa: PLW0603
    with _lock:
        _configured = None
