"""Blob triggers by polling a container (Azurite locally), with receipts as the host keeps them.

``path`` is ``<container>/<pattern>``; ``{param}`` tokens bind path parameters (the last one may
span ``/``, as ``{name}`` does on the host). Each blob version (ETag) fires once: after a successful
invocation devhost writes the host's receipt blob
``azure-webjobs-hosts/blobreceipts/<hostId>/<function>/<etag>/<container>/<blob>``, so a restart,
or a second devhost on the same storage, does not fire it again. A blob whose function fails
``poisonBlobThreshold`` times (host.json ``extensions.blobs``, default 5) is given up on: the host
moves it to ``webjobs-blobtrigger-poison``; devhost records a poison receipt and logs an error.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

from azure.core.exceptions import ResourceExistsError, ResourceNotFoundError
from azure.functions.blob import InputStream
from azure.storage.blob import BlobServiceClient, ContainerClient

from devhost.indexing import FunctionSpec
from devhost.invoker import Invoker

log = logging.getLogger("devhost.blob")

RECEIPTS_CONTAINER = "azure-webjobs-hosts"
MAX_DEQUEUE = 5
_TOKEN = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass(frozen=True)
class BlobPath:
    container: str
    prefix: str
    regex: re.Pattern[str]

    @classmethod
    def parse(cls, path: str) -> BlobPath:
        container, sep, pattern = path.strip("/").partition("/")
        if not sep or not container or "{" in container:
            raise ValueError(f"blob path {path!r} must be '<container>/<pattern>' with a literal container")
        tokens = list(_TOKEN.finditer(pattern))
        regex = ""
        pos = 0
        for i, m in enumerate(tokens):
            regex += re.escape(pattern[pos : m.start()])
            last = i == len(tokens) - 1
            regex += f"(?P<{m.group(1)}>.+)" if last else f"(?P<{m.group(1)}>[^/]+?)"
            pos = m.end()
        regex += re.escape(pattern[pos:])
        prefix = pattern[: tokens[0].start()] if tokens else pattern
        return cls(container, prefix, re.compile("^" + regex + "$"))

    def match(self, blob_name: str) -> dict[str, str] | None:
        m = self.regex.match(blob_name)
        return m.groupdict() if m else None


def connection_string(settings_get: Callable[[str], str | None], connection: str | None) -> str:
    name = connection or "AzureWebJobsStorage"
    for candidate in (name, f"AzureWebJobs{name}"):
        value = settings_get(candidate)
        if value:
            return value
    raise ValueError(
        f"blob connection setting {name!r} is not set (devhost needs a connection string, e.g. for Azurite)"
    )


class BlobTrigger:
    def __init__(
        self,
        spec: FunctionSpec,
        conn_str: str,
        invoker: Invoker,
        executor: Executor,
        *,
        host_id: str = "devhost",
        poll_seconds: float = 1.0,
        max_dequeue: int = MAX_DEQUEUE,
    ) -> None:
        self.spec = spec
        self.path = BlobPath.parse(str(spec.trigger["path"]))
        # Few, short retries: a poll that fails is simply repeated on the next tick.
        self.service = BlobServiceClient.from_connection_string(
            conn_str, retry_total=2, connection_timeout=5, read_timeout=30
        )
        self.invoker = invoker
        self.executor = executor
        self.host_id = host_id
        self.poll_seconds = poll_seconds
        self.max_dequeue = max(1, max_dequeue)
        self._done: set[tuple[str, str]] = set()
        self.fired = 0

    def _receipt_name(self, etag: str, blob: str) -> str:
        return (
            f"blobreceipts/{self.host_id}/Host.Functions.{self.spec.name}/{etag.strip(chr(34))}/"
            f"{self.path.container}/{blob}"
        )

    def _receipts(self) -> ContainerClient:
        return self.service.get_container_client(RECEIPTS_CONTAINER)

    def _ensure_receipts(self) -> None:
        with contextlib.suppress(ResourceExistsError):
            self._receipts().create_container()

    def _receipt(self, etag: str, blob: str) -> dict[str, str] | None:
        try:
            props = self._receipts().get_blob_client(self._receipt_name(etag, blob)).get_blob_properties()
        except ResourceNotFoundError:
            return None
        return dict(props.metadata or {})

    def _write_receipt(self, etag: str, blob: str, metadata: dict[str, str]) -> None:
        self._receipts().get_blob_client(self._receipt_name(etag, blob)).upload_blob(
            b"", overwrite=True, metadata=metadata
        )

    def _scan(self) -> list[tuple[str, str, dict[str, str]]]:
        """Blobs whose current version has no completed receipt: (name, etag, path params)."""
        container = self.service.get_container_client(self.path.container)
        todo: list[tuple[str, str, dict[str, str]]] = []
        try:
            blobs = list(container.list_blobs(name_starts_with=self.path.prefix or None))
        except ResourceNotFoundError:
            return todo
        for b in blobs:
            params = self.path.match(b.name)
            etag = str(b.etag)
            if params is None or (b.name, etag) in self._done:
                continue
            receipt = self._receipt(etag, b.name)
            if receipt and receipt.get("completed") == "true":
                self._done.add((b.name, etag))
                continue
            todo.append((b.name, etag, params))
        return todo

    def _download(self, blob: str) -> tuple[bytes, str, int]:
        client = self.service.get_blob_client(self.path.container, blob)
        data = client.download_blob().readall()
        return data, client.url, len(data)

    async def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.executor, lambda: fn(*args))

    async def _process(self, blob: str, etag: str, params: dict[str, str]) -> None:
        try:
            data, uri, length = await self._call(self._download, blob)
        except ResourceNotFoundError:
            return  # deleted since the scan
        # As the host's trigger metadata "Properties" (the SDK's BlobProperties, PascalCase).
        props = {"ETag": etag, "ContentLength": length}
        stream = InputStream(
            data=data, name=f"{self.path.container}/{blob}", uri=uri, length=length, blob_properties=props
        )
        log.debug(
            json.dumps({"evt": "blob.trigger", "function": self.spec.name, "blob": blob, "params": params})
        )
        try:
            await self.invoker.invoke(self.spec, {str(self.spec.trigger["name"]): stream})
        except Exception as exc:
            receipt = await self._call(self._receipt, etag, blob) or {}
            failures = int(receipt.get("failures", "0")) + 1
            poison = failures >= self.max_dequeue
            meta = {"failures": str(failures), "completed": "true" if poison else "false"}
            if poison:
                meta["poison"] = "true"
                log.error(
                    json.dumps(
                        {
                            "evt": "blob.poison",
                            "function": self.spec.name,
                            "blob": f"{self.path.container}/{blob}",
                            "etag": etag,
                            "error": f"{type(exc).__name__}: {exc}",
                        }
                    )
                )
            await self._call(self._write_receipt, etag, blob, meta)
            if poison:
                self._done.add((blob, etag))
            return
        await self._call(self._write_receipt, etag, blob, {"completed": "true"})
        self._done.add((blob, etag))
        self.fired += 1

    async def poll_once(self) -> int:
        todo = await self._call(self._scan)
        for blob, etag, params in todo:
            await self._process(blob, etag, params)
        return len(todo)

    async def run(self, stop: asyncio.Event) -> None:
        await self._call(self._ensure_receipts)
        while not stop.is_set():
            try:
                await self.poll_once()
            except Exception:
                log.exception("blob trigger %s: poll failed; retrying", self.spec.name)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=self.poll_seconds)
