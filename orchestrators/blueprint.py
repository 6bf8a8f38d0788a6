"""The one blueprint of the ``orchestrators`` package; modules in this package register on it."""

from __future__ import annotations

import azure.durable_functions as df

bp = df.Blueprint()
