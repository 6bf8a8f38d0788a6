"""Reading request bodies and query strings into models; every mistake becomes a 400 with paths."""

from __future__ import annotations

import json
import re
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from shared.api.types import ApiRequest
from shared.errors import Problem, ValidationFailedError
from shared.validation import json_path

M = TypeVar("M", bound=BaseModel)

MAX_LIMIT = 100
#: Store tokens are short base64url keysets. Kept well under what fits in a URL (8 KB on most
#: front ends) even percent-encoded, so an oversized token gets our 400, not the server's.
MAX_TOKEN = 512
TOKEN_PATTERN = r"^[A-Za-z0-9_=-]*$"  # noqa: S105  (a regex, not a secret)
DEFAULT_LIMIT = 50
#: Deeper JSON is never real data, and the stores' serialisers refuse it (a 500 otherwise).
#: A definition's params may be 64 deep, plus the levels of the document around them.
MAX_DEPTH = 100


def _no_constants(name: str) -> Any:
    # NaN and Infinity are not JSON; accepting them would fail later, far from the client's mistake.
    raise ValueError(f"{name} is not valid JSON")


def depth(value: Any) -> int:
    """Nesting depth of a JSON value (a scalar is 0), without recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            stack.extend((v, level + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, level + 1) for v in item)
        else:
            continue
        deepest = max(deepest, level + 1)
    return deepest


def parse_json(body: bytes) -> Any:
    doc = _loads(body)
    if depth(doc) > MAX_DEPTH:
        raise ValidationFailedError(
            [Problem(path="$", message=f"the body is nested more than {MAX_DEPTH} levels deep")],
            "the body is nested too deeply",
        )
    try:
        # What parses is not always storable: 1e400 reads as infinity, "\ud800" as a lone
        # surrogate; neither can be written back as JSON (UTF-8) later.
        json.dumps(doc, ensure_ascii=False, allow_nan=False).encode("utf-8")
    except (ValueError, UnicodeEncodeError) as exc:
        raise ValidationFailedError(
            [Problem(path="$", message=f"the body has a value JSON cannot carry: {exc}")],
            "the body has a number out of range or an unpaired surrogate",
        ) from None
    return doc


def _loads(body: bytes) -> Any:
    try:
        return json.loads(body.decode("utf-8"), parse_constant=_no_constants)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValidationFailedError(
            [Problem(path="$", message=f"the body is not valid JSON: {exc}")], "the body is not valid JSON"
        ) from None
    except RecursionError:
        raise ValidationFailedError(
            [Problem(path="$", message="the body is nested too deeply")], "the body is nested too deeply"
        ) from None


def problems_of(exc: ValidationError, root: tuple[str | int, ...] = ()) -> list[Problem]:
    out = []
    for err in exc.errors(include_url=False):
        loc = (*root, *err["loc"])
        message = err["msg"]
        if err["type"] == "extra_forbidden":
            message = f"unknown field '{loc[-1]}'"
        out.append(Problem(path=json_path(loc), message=message))
    return out


def read_body(request: ApiRequest, model: type[M], *, required: bool = False) -> M:
    """The body as ``model``; an empty body is ``model()`` unless ``required``."""
    if not request.body:
        if required:
            raise ValidationFailedError([Problem(path="$", message="a JSON body is required")])
        return model()
    return validate(model, parse_json(request.body))


def validate(model: type[M], doc: Any) -> M:
    try:
        # Strict: JSON true is not the integer 1, "2" is not 2; what the schema says is what passes.
        return model.model_validate(doc, strict=True, by_alias=True, by_name=False)
    except ValidationError as exc:
        raise ValidationFailedError(problems_of(exc)) from None


def query_limit(request: ApiRequest) -> int:
    raw = request.query.get("limit")
    if raw is None or raw == "":
        return DEFAULT_LIMIT
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if not 1 <= value <= MAX_LIMIT:
        raise ValidationFailedError(
            [Problem(path="$.query.limit", message=f"an integer from 1 to {MAX_LIMIT}; got {raw!r}")]
        )
    return value


def query_token(request: ApiRequest) -> str | None:
    token = request.query.get("continuationToken")
    if token is None or token == "":
        return None
    if len(token) > MAX_TOKEN or not re.fullmatch(TOKEN_PATTERN, token):
        raise bad_token()
    return token


def path_int(request: ApiRequest, name: str) -> int:
    raw = request.param(name)
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if not 1 <= value <= 2**31:
        raise ValidationFailedError(
            [Problem(path=f"$.path.{name}", message=f"a positive integer; got {raw!r}")]
        )
    return value


def bad_token() -> ValidationFailedError:
    return ValidationFailedError(
        [Problem(path="$.query.continuationToken", message="not a token this listing returned")],
        "invalid continuationToken",
    )
