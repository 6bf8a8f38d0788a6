"""A static, read-only model of infra/terraform/*.tf, parsed with python-hcl2.

No Terraform binary or provider schema is reachable here, so the checks in this folder read the
configuration itself: literal values, and references such as ``azurerm_storage_account.this``.
python-hcl2 keeps string literals quoted (``'"python"'``) and expressions as ``'${...}'``;
:func:`unquote` and :func:`references` turn those into something comparable.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import hcl2

ROOT = Path(__file__).resolve().parents[2]
TF_DIR = ROOT / "infra" / "terraform"

IDENTITY = "azurerm_user_assigned_identity.this"
_REF = re.compile(r"\b((?:azurerm|azapi)_[a-z0-9_]+\.[a-z0-9_]+)\b")
_LOCAL_REF = re.compile(r"\$\{local\.([A-Za-z0-9_]+)\}")


def unquote(value: object) -> str:
    """The HCL text of a scalar, without the quotes python-hcl2 keeps around literals."""
    text = str(value)
    if len(text) >= 2 and text.startswith('"') and text.endswith('"'):
        return text[1:-1]
    return text


def is_literal(value: object) -> bool:
    return "${" not in str(value)


def references(value: object) -> set[str]:
    """Resource addresses (``type.name``) an expression refers to."""
    return set(_REF.findall(str(value)))


def parse_file(path: Path) -> dict[str, Any]:
    with path.open(encoding="utf-8") as fh:
        return dict(hcl2.load(fh))


def _blocks(mapping: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """Labelled children of a block, labels unquoted, python-hcl2's ``__x__`` markers dropped."""
    return [(unquote(k), v) for k, v in mapping.items() if not k.startswith("__")]


@dataclass
class TerraformModel:
    files: dict[str, dict[str, Any]]
    resources: dict[str, dict[str, Any]] = field(default_factory=dict)
    locals: dict[str, Any] = field(default_factory=dict)
    variables: dict[str, dict[str, Any]] = field(default_factory=dict)
    outputs: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for doc in self.files.values():
            for block in doc.get("resource", []):
                for rtype, named in _blocks(block):
                    for name, body in _blocks(named):
                        self.resources[f"{rtype}.{name}"] = body
            for block in doc.get("locals", []):
                self.locals.update({k: v for k, v in block.items() if not k.startswith("__")})
            for block in doc.get("variable", []):
                self.variables.update(_blocks(block))
            for block in doc.get("output", []):
                self.outputs.update(_blocks(block))

    def resource(self, address: str) -> dict[str, Any]:
        return self.resources[address]

    def resolve(self, value: object, depth: int = 0) -> str:
        """Inline ``${local.x}`` references that point at scalar locals (for reading values)."""
        text = unquote(value)
        if depth > 5:
            return text

        def repl(match: re.Match[str]) -> str:
            target = self.locals.get(match.group(1))
            if isinstance(target, (str, int, float)):
                return self.resolve(target, depth + 1)
            return match.group(0)

        return _LOCAL_REF.sub(repl, text)

    def settings_maps(self) -> dict[str, Mapping[str, Any]]:
        """The locals whose names end in ``app_settings``: the base list and conditional extras."""
        return {k: v for k, v in self.locals.items() if k.endswith("app_settings") and isinstance(v, dict)}

    def all_app_settings(self) -> dict[str, str]:
        """Every setting the Function App can carry, values resolved through locals."""
        merged: dict[str, str] = {}
        for mapping in self.settings_maps().values():
            for key, value in mapping.items():
                merged[key] = self.resolve(value)
        return merged

    def base_app_settings(self) -> dict[str, str]:
        return {k: self.resolve(v) for k, v in self.locals["app_settings"].items()}

    def role_grants(self) -> Iterator[tuple[str, str, str]]:
        """(scope resource, role name, principal resource) for every role assignment declared."""
        for address, body in self.resources.items():
            if not address.startswith("azurerm_role_assignment."):
                continue
            principal = references(body.get("principal_id", ""))
            principal_ref = next(iter(principal), unquote(body.get("principal_id", "")))
            for_each = str(body.get("for_each", ""))
            local_name = re.fullmatch(r"\$\{local\.([A-Za-z0-9_]+)\}", for_each)
            grants = self.locals.get(local_name.group(1)) if local_name else None
            is_grant_map = isinstance(grants, dict) and all(
                isinstance(g, dict) and "scope" in g for g in grants.values()
            )
            if isinstance(grants, dict) and is_grant_map:
                for grant in grants.values():
                    for scope in references(grant["scope"]):
                        yield scope, unquote(grant["role"]), principal_ref
            else:
                for scope in references(body.get("scope", "")):
                    yield scope, unquote(body.get("role_definition_name", "")), principal_ref

    def identity_grants(self) -> set[tuple[str, str]]:
        return {(scope, role) for scope, role, principal in self.role_grants() if principal == IDENTITY}


@lru_cache(maxsize=1)
def load() -> TerraformModel:
    files = {p.name: parse_file(p) for p in sorted(TF_DIR.glob("*.tf"))}
    return TerraformModel(files=files)
