"""Blob trigger on ``incoming/{tenant}/{workflow}/{name}``: one execution per blob content."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from datetime import UTC, datetime

import azure.durable_functions as df
import azure.functions as func

from shared.adapters.factory import get_payload_store, get_stores
from shared.adapters.telemetry import configure_telemetry
from shared.errors import WeftError
from shared.intake import BlobInfo, split_blob_path, submit_blob_patiently
from shared.names import TriggerName
from shared.settings import get_settings
from shared.submission import SubmissionDeps, SubmitResult
from triggers.blueprint import bp
from triggers.starter import ClientStarter

log = logging.getLogger(__name__)


def blob_info(stream: func.InputStream) -> BlobInfo:
    data = stream.read()
    container, name = split_blob_path(stream.name or "")
    # The host fills it from the trigger metadata "Properties"; the abstract type does not declare it.
    props = getattr(stream, "blob_properties", None) or {}
    etag = str(props.get("ETag") or props.get("Etag") or props.get("etag") or "")
    return BlobInfo(
        container=container,
        name=name,
        size=stream.length if stream.length is not None else len(data),
        etag=etag.strip('"'),
        url=stream.uri or "",
        sha256=hashlib.sha256(data).hexdigest(),
    )


def submit(starter: ClientStarter, info: BlobInfo) -> SubmitResult | None:
    deps = SubmissionDeps.from_settings(get_stores(), get_payload_store(), starter, get_settings())
    try:
        return submit_blob_patiently(deps, info, lambda: datetime.now(UTC), time.sleep)
    except WeftError as exc:
        if not exc.non_retryable:
            raise  # e.g. over the tenant's limits: the host retries the blob
        # Unknown tenant or workflow, too large: another try cannot help.
        log.error("blob %s/%s not submitted: %s (%s)", info.container, info.name, exc.message, exc.type)
        return None


@bp.function_name(TriggerName.BLOB_SUBMIT)
@bp.blob_trigger(
    arg_name="blob", path="incoming/{tenant}/{workflow}/{name}", connection="BlobTriggerConnection"
)
@bp.durable_client_input(client_name="client")
async def blob_submit(blob: func.InputStream, client: df.DurableOrchestrationClient) -> None:
    configure_telemetry()
    loop = asyncio.get_running_loop()
    info = blob_info(blob)
    res = await loop.run_in_executor(None, submit, ClientStarter(client, loop), info)
    if res is not None:
        log.info(
            "blob %s/%s -> execution %s (new=%s)", info.container, info.name, res.execution.id, res.created
        )
