"""PayloadStore adapters: the local filesystem, or Azure Blob Storage (Azurite locally).

References are ``<prefix>/<uuid>`` blob names in both, so a reference never contains a host name
or a path outside the store's root.
"""

from __future__ import annotations

import contextlib
import os
import re
import uuid
from pathlib import Path
from typing import Any

from azure.core.exceptions import ResourceExistsError, ResourceNotFoundError
from azure.identity import DefaultAzureCredential
from azure.storage.blob import BlobServiceClient, ContainerClient, ContentSettings

from shared.errors import NotFoundError

_REF = re.compile(r"^(?:[A-Za-z0-9_.-]+/)?[0-9a-f]{32}$")
_PREFIX = re.compile(r"^[A-Za-z0-9_.-]*$")


def _new_reference(prefix: str) -> str:
    if not _PREFIX.fullmatch(prefix) or prefix in {".", ".."}:
        raise ValueError(f"invalid payload prefix {prefix!r}")
    name = uuid.uuid4().hex
    return f"{prefix}/{name}" if prefix else name


def _check_reference(reference: str) -> str:
    # References come back from messages and documents: never let one name a path outside the store.
    if not _REF.fullmatch(reference) or reference.startswith(("./", "../")):
        raise NotFoundError("unknown payload reference", details={"ref": reference[:200]})
    return reference


class FileSystemPayloadStore:
    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    def put(self, data: bytes, *, content_type: str = "application/octet-stream", prefix: str = "") -> str:
        ref = _new_reference(prefix)
        path = self.root / ref
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(data)
        # Atomic rename: a reader never sees a half-written payload.
        tmp.replace(path)
        return ref

    def get(self, reference: str) -> bytes:
        path = self.root / _check_reference(reference)
        try:
            return path.read_bytes()
        except FileNotFoundError as exc:
            raise NotFoundError("payload not found", details={"ref": reference}) from exc

    def delete(self, reference: str) -> None:
        (self.root / _check_reference(reference)).unlink(missing_ok=True)


class BlobPayloadStore:
    """Blobs in one container (``payloads``); created on first use."""

    def __init__(self, container: ContainerClient) -> None:
        self._container = container
        self._ready = False

    @classmethod
    def from_connection_string(cls, connection_string: str, container: str = "payloads") -> BlobPayloadStore:
        service = BlobServiceClient.from_connection_string(connection_string)
        return cls(service.get_container_client(container))

    @classmethod
    def from_account_url(
        cls, account_url: str, container: str = "payloads", credential: Any = None
    ) -> BlobPayloadStore:
        if credential is None:
            credential = DefaultAzureCredential()
        service = BlobServiceClient(account_url=account_url, credential=credential)
        return cls(service.get_container_client(container))

    def _ensure(self) -> None:
        if self._ready:
            return
        with contextlib.suppress(ResourceExistsError):
            self._container.create_container()
        self._ready = True

    def put(self, data: bytes, *, content_type: str = "application/octet-stream", prefix: str = "") -> str:
        self._ensure()
        ref = _new_reference(prefix)
        self._container.upload_blob(
            ref, data, overwrite=False, content_settings=ContentSettings(content_type=content_type)
        )
        return ref

    def get(self, reference: str) -> bytes:
        try:
            return self._container.download_blob(_check_reference(reference)).readall()
        except ResourceNotFoundError as exc:
            raise NotFoundError("payload not found", details={"ref": reference}) from exc

    def delete(self, reference: str) -> None:
        with contextlib.suppress(ResourceNotFoundError):
            self._container.delete_blob(_check_reference(reference))

    def close(self) -> None:
        self._container.close()
