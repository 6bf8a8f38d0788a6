"""The base model every wire and storage shape derives from.

Frozen and ``extra="forbid"`` so a typo in a payload is an error, not a silently dropped field;
camelCase on the wire, snake_case in Python.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class WeftModel(BaseModel):
    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        alias_generator=to_camel,
        populate_by_name=True,
        serialize_by_alias=True,
    )

    def to_json_dict(self) -> dict[str, object]:
        """Plain JSON-compatible dict, camelCase keys: what goes on the wire or into a store."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)
