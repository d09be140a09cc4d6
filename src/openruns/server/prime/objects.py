"""
Presigned uploads on this server: what stands in for the platform's S3 presigned URLs.

`presigned_url` signs (blob key, expiry) with an HMAC under a key derived from the server
secret, so any replica can check it and nothing is stored per URL. The PUT it points at takes
the body without any other credential (prime-runs sends none: its storage client is bare), and
only for that key, only before the expiry, and only a Parquet file; it writes the object
through the BlobStore (put_atomic), so a local directory and S3 behave the same. The object is
not part of the run until `/rft/samples/confirm` names it.
"""

from __future__ import annotations

import hmac
import time
from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Query, Request
from starlette.concurrency import run_in_threadpool

from ..admission import ingest_owner
from ..auth import url_signature
from ..body import read_body
from ..errors import ApiError, bad_request
from ..handlers import JSON
from ..routes.deps import State
from ..state import ServerState
from .samples import is_train_samples_key

__all__ = ["PRESIGN_SECONDS", "presigned_url", "router"]

router = APIRouter(tags=["prime: presigned uploads"])

# As the platform's presign answers (`expiresIn: 900`).
PRESIGN_SECONDS = 900
UPLOAD_PATH = "/prime/objects/"
_PARQUET_MAGIC = b"PAR1"


def presigned_url(request: Request, state: ServerState, blob_key: str) -> str:
    expires = int(time.time()) + PRESIGN_SECONDS
    signature = _signature(state.store.secret, blob_key, expires)
    base = (state.settings.public_url or str(request.base_url)).rstrip("/")
    path = f"/api/v1{UPLOAD_PATH}{quote(blob_key)}"
    return f"{base}{path}?expires={expires}&signature={signature}"


def _signature(secret: bytes, blob_key: str, expires: int) -> str:
    return url_signature(secret, b"openruns prime presign v1", f"PUT\n{blob_key}\n{expires}")


@router.put(
    UPLOAD_PATH + "{blob_key:path}",
    responses={403: {"description": "the signature is not valid or has expired"}},
)
async def put_object(
    blob_key: str,
    request: Request,
    state: State,
    expires: Annotated[int, Query(ge=0, le=2**62)],
    signature: Annotated[str, Query(max_length=128)],
) -> JSON:
    """The body of a presigned upload: one training-samples Parquet object, no credentials."""
    expected = _signature(state.store.secret, blob_key, expires)
    if not hmac.compare_digest(signature.encode(), expected.encode()):
        raise ApiError(403, "invalid_signature", "the upload URL's signature is not valid")
    if time.time() > expires:
        raise ApiError(403, "expired", "the upload URL has expired; presign again")
    if not is_train_samples_key(blob_key):  # signed by us, so this is a server bug if it fails
        raise bad_request("invalid_key", f"{blob_key!r} is not an upload key")
    async with state.gate.admit(ingest_owner(request)) as ticket:
        body = await read_body(request, state.settings.max_body_bytes, ticket)
        if len(body) < 8 or body[:4] != _PARQUET_MAGIC or body[-4:] != _PARQUET_MAGIC:
            raise bad_request("invalid_parquet", "the body is not a Parquet file")
        await run_in_threadpool(state.blobs.put_atomic, blob_key, body)
    return JSON({"key": blob_key, "bytes": len(body)})
