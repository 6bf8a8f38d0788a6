"""App settings as the Functions host sees them: ``local.settings.json`` ``Values`` under the process env.

``func start`` reads ``Values`` into the worker's environment unless a variable of the same name is
already set; devhost does the same, so code that reads ``os.environ`` sees one consistent view.
Binding properties may name a setting as ``%NAME%``; :meth:`AppSettings.resolve` expands them.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_PERCENT = re.compile(r"%([^%]+)%")


class SettingsError(ValueError):
    pass


@dataclass
class AppSettings:
    values: dict[str, str] = field(default_factory=dict)

    @classmethod
    def load(cls, root: Path, env: Mapping[str, str] | None = None) -> AppSettings:
        env = os.environ if env is None else env
        merged: dict[str, str] = {}
        path = root / "local.settings.json"
        if path.exists():
            try:
                doc = json.loads(path.read_text(encoding="utf-8"))
            except json.JSONDecodeError as exc:
                raise SettingsError(f"{path} is not valid JSON: {exc}") from exc
            values = doc.get("Values", {}) if isinstance(doc, dict) else {}
            if not isinstance(values, dict):
                raise SettingsError(f"{path}: 'Values' must be an object")
            merged.update({str(k): str(v) for k, v in values.items()})
        # On the host every environment variable is an app setting, and it wins over the file.
        merged.update(env)
        return cls(merged)

    def export_to_environ(self) -> None:
        """Make file values visible to app code reading os.environ; the process env keeps priority."""
        for key, value in self.values.items():
            os.environ.setdefault(key, value)

    def get(self, name: str, default: str | None = None) -> str | None:
        return self.values.get(name, default)

    def require(self, name: str, why: str) -> str:
        value = self.values.get(name)
        if value is None or value == "":
            raise SettingsError(f"setting {name!r} is not set ({why}); add it to local.settings.json")
        return value

    def resolve(self, value: str) -> str:
        """Expand ``%NAME%`` references the way the host does for binding properties."""

        def sub(m: re.Match[str]) -> str:
            return self.require(m.group(1), f"referenced as %{m.group(1)}%")

        return _PERCENT.sub(sub, value)


@dataclass(frozen=True)
class DurableKnobs:
    hub_name: str = "TestHubName"
    max_concurrent_activities: int = 10
    max_concurrent_orchestrators: int = 10


def _durable_section(doc: Any) -> dict[str, Any]:
    ext = doc.get("extensions", {}) if isinstance(doc, dict) else {}
    section = ext.get("durableTask", {}) if isinstance(ext, dict) else {}
    return section if isinstance(section, dict) else {}


def load_durable_knobs(root: Path, settings: AppSettings) -> DurableKnobs:
    """host.json ``extensions.durableTask``; defaults are the extension's for a 2-core machine."""
    path = root / "host.json"
    section: dict[str, Any] = {}
    if path.exists():
        try:
            section = _durable_section(json.loads(path.read_text(encoding="utf-8")))
        except json.JSONDecodeError as exc:
            raise SettingsError(f"{path} is not valid JSON: {exc}") from exc
    hub = settings.resolve(str(section.get("hubName", "TestHubName")))
    cores = os.cpu_count() or 1
    # The extension's defaults are 10 x processor count for both knobs.
    acts = int(section.get("maxConcurrentActivityFunctions", 10 * cores))
    orchs = int(section.get("maxConcurrentOrchestratorFunctions", 10 * cores))
    if acts < 1 or orchs < 1:
        raise SettingsError("host.json durableTask concurrency knobs must be >= 1")
    return DurableKnobs(hub, acts, orchs)
