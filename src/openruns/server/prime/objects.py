"""
Presigned uploads on this server: what stands in for the platform's S3 presigned URLs.

`presigned_url` signs (blob key, expiry) with an HMAC under a key derived from the server
secret, so any replica can check it and nothing is stored per URL. The PUT it points at takes
the body without any other credential (prime-runs sends none: its storage client is bare), and
only for that key, only before the expiry, and only a Parquet file; it writes the object
through the BlobStore (put_atomic), so a local directory and S3 behave the same. The object is
not part of the run until `/rft/samples/confirm` names it.

A signed URL writes once (issue 25): the first PUT claims the key for the SHA-256 of its body
(store/prime.claim_object, one receipt row), and the blob is written only under a claim for
the same bytes. A replay of those bytes within the URL's lifetime is answered as the first
PUT was (the client's retry); other bytes are 409 `object_exists`, so nobody holding the URL
can replace an object, confirmed or not.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Query, Request
from starlette.concurrency import run_in_threadpool

from ..admission import ingest_owner
from ..auth import url_signature
from ..body import read_body
from ..errors import ApiError, bad_request, conflict
from ..handlers import JSON
from ..routes.deps import State
from ..state import ServerState
from ..store import prime as prime_store
from .samples import is_train_samples_key, train_samples_run

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
        digest = await run_in_threadpool(_sha256, body)
        claim = await state.store.write(
            prime_store.claim_object,
            train_samples_run(blob_key),
            blob_key,
            digest,
            len(body),
            time.time(),
        )
        if claim["sha256"] != digest:
            raise conflict(
                "object_exists",
                f"an object of {claim['bytes']} bytes was uploaded to this URL already, and an "
                "uploaded object is never replaced; presign a new URL for other bytes",
            )
        # The same bytes again: written only if the first PUT did not get that far.
        if not await run_in_threadpool(state.blobs.exists, blob_key):
            await run_in_threadpool(state.blobs.put_atomic, blob_key, body)
    return JSON({"key": blob_key, "bytes": len(body)})


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
