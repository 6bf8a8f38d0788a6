"""Who may call what: the admin key, tenant API keys, or nobody.

* Tenant endpoints: ``Authorization: Bearer <tenant API key>``. The key is looked up by its SHA-256
  (``shared.records.hash_api_key``; only hashes are stored). Missing, malformed, unknown or revoked
  -> 401; a valid key of another tenant -> 403. The admin key is accepted on tenant endpoints too
  (operators recover dead letters of any tenant).
* Admin endpoints: the ``WEFT_ADMIN_KEY`` setting, compared in constant time. Not configured -> every
  admin call is 401. A valid tenant key -> 403.

Failures carry ``WWW-Authenticate: Bearer``. Nothing here logs a key.
"""

from __future__ import annotations

import hmac

from shared.api import problems
from shared.api.types import ApiDeps, ApiRequest, ApiResponse, AuthKind, Principal
from shared.records import hash_api_key

CHALLENGE = {"WWW-Authenticate": 'Bearer realm="weft"'}
#: Longer "keys" are not keys; refusing them early keeps hashing cheap under junk traffic.
MAX_KEY_LENGTH = 512


class AuthFailure(Exception):
    def __init__(self, response: ApiResponse) -> None:
        super().__init__(response.status)
        self.response = response


def _unauthenticated(detail: str) -> AuthFailure:
    return AuthFailure(problems.problem(401, detail, code="weft.Unauthenticated", headers=CHALLENGE))


def _forbidden(detail: str) -> AuthFailure:
    return AuthFailure(problems.problem(403, detail, code="weft.Forbidden"))


def bearer_token(request: ApiRequest) -> str | None:
    value = request.header("authorization")
    if not value:
        return None
    scheme, _, token = value.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or len(token) > MAX_KEY_LENGTH:
        return None
    return token


def is_admin_key(deps: ApiDeps, token: str) -> bool:
    if not deps.admin_key:
        return False
    return hmac.compare_digest(token.encode("utf-8"), deps.admin_key.encode("utf-8"))


def authenticate(request: ApiRequest, deps: ApiDeps, kind: AuthKind) -> Principal | None:
    """The caller of an endpoint with ``kind`` auth, or :class:`AuthFailure` with the 401/403."""
    if kind is AuthKind.NONE:
        return None
    token = bearer_token(request)
    if token is None:
        raise _unauthenticated("an 'Authorization: Bearer <key>' header is required")
    if is_admin_key(deps, token):
        return Principal(admin=True)
    record = deps.stores.tenants.resolve_api_key(hash_api_key(token))
    if record is None or record.revoked_at is not None:
        raise _unauthenticated("the API key is not valid")
    if kind is AuthKind.ADMIN:
        raise _forbidden("this endpoint needs the admin key")
    tenant = request.route_params.get("tenant")
    if tenant is not None and tenant != record.tenant_id:
        raise _forbidden("the API key does not belong to this tenant")
    return Principal(admin=False, tenant_id=record.tenant_id, key_id=record.key_id)
