"""
Blobs in an S3-compatible bucket (AWS S3, MinIO, R2, GCS's S3 API), through boto3.

    blobs = S3BlobStore.from_url("s3://bucket/openruns", endpoint_url="http://minio:9000")
    blobs.check()                                   # ValueError naming what is wrong

Only plain S3 calls: PutObject (with Content-MD5, so the store verifies the body), a
multipart upload for segments over MULTIPART_BYTES (visible only once complete), GetObject
(ranged for one episode's frame), HeadObject/HeadBucket, presigned GET URLs, and for
`openruns server check` ListObjectsV2 and DeleteObject. A blob is
never visible half-written: S3 shows an object whole or not at all.

Region and credentials come from boto3's standard chain (AWS_REGION / AWS_DEFAULT_REGION,
AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, a profile, an instance role); the endpoint from
`endpoint_url`, else AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL, else AWS. With an endpoint
override, requests use path-style addressing (http://host/bucket/key), which every
S3-compatible store accepts. Checksums are sent only where S3 requires them, since several
S3-compatible stores reject the newer trailing checksums.

An unreachable or throttling store answers 503 + Retry-After naming it (errors.overloaded);
a missing key is FileNotFoundError, as for a local directory.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import io
import os
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

import boto3
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

from ..errors import insufficient_storage, overloaded
from .blobs import BlobInfo

if TYPE_CHECKING:
    from mypy_boto3_s3.client import S3Client

__all__ = ["MULTIPART_BYTES", "S3BlobStore"]

T = TypeVar("T")

MULTIPART_BYTES = 64 * 1024 * 1024
# Connections per process: more than the ingest gate admits at once (32 uploads) plus readers.
POOL_CONNECTIONS = 64
CONNECT_TIMEOUT_S = 5
READ_TIMEOUT_S = 60
_MISSING = ("NoSuchKey", "404", "NotFound")
# What S3-compatible stores answer when they are out of space (MinIO, Ceph RGW, HTTP 507).
_FULL = ("XMinioStorageFull", "InsufficientStorage", "StorageFull", "QuotaExceeded", "507")


@functools.lru_cache(maxsize=8)
def _client(endpoint: str | None) -> S3Client:
    """One boto3 client per endpoint for the process, shared by its stores (a client is
    thread-safe; building one loads and resolves S3's service model: ~0.1 s of CPU)."""
    config = Config(
        max_pool_connections=POOL_CONNECTIONS,
        connect_timeout=CONNECT_TIMEOUT_S,
        read_timeout=READ_TIMEOUT_S,
        retries={"mode": "standard", "max_attempts": 3},
        s3={"addressing_style": "path"} if endpoint else None,
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
    )
    return boto3.session.Session().client("s3", endpoint_url=endpoint, config=config)


class S3BlobStore:
    """See the module docstring. Thread-safe (one boto3 client, shared)."""

    def __init__(self, bucket: str, prefix: str = "", endpoint_url: str | None = None):
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        endpoint = (
            endpoint_url
            or os.environ.get("AWS_ENDPOINT_URL_S3")
            or os.environ.get("AWS_ENDPOINT_URL")
            or None
        )
        self.endpoint_url = endpoint
        self.client = _client(endpoint)
        self._transfer = TransferConfig(
            multipart_threshold=MULTIPART_BYTES,
            multipart_chunksize=MULTIPART_BYTES,
            max_concurrency=4,
        )

    @classmethod
    def from_url(cls, url: str, endpoint_url: str | None = None) -> S3BlobStore:
        bucket, _, prefix = url.removeprefix("s3://").partition("/")
        if not bucket:
            raise ValueError(f"{url!r} names no bucket: use s3://BUCKET or s3://BUCKET/PREFIX")
        return cls(bucket, prefix, endpoint_url)

    def describe(self) -> str:
        where = f"s3://{self.bucket}/{self.prefix}".rstrip("/")
        return f"{where} at {self.endpoint_url}" if self.endpoint_url else where

    def check(self) -> None:
        """Raise ValueError with a one-line reason unless the bucket can be reached."""
        try:
            self.client.head_bucket(Bucket=self.bucket)
        except NoCredentialsError as exc:
            raise ValueError(
                f"no credentials for {self.describe()}: set AWS_ACCESS_KEY_ID and "
                "AWS_SECRET_ACCESS_KEY (or AWS_PROFILE)"
            ) from exc
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code in ("404", "NoSuchBucket", "NotFound"):
                raise ValueError(f"the bucket of {self.describe()} does not exist") from exc
            if code in ("403", "AccessDenied", "Forbidden"):
                raise ValueError(f"access to {self.describe()} is denied ({code})") from exc
            raise ValueError(f"cannot use {self.describe()}: {exc}") from exc
        except BotoCoreError as exc:
            raise ValueError(f"cannot reach {self.describe()}: {exc}") from exc

    def put_atomic(self, key: str, data: bytes) -> None:
        name = self._name(key)
        if len(data) <= MULTIPART_BYTES:
            md5 = base64.b64encode(hashlib.md5(data, usedforsecurity=False).digest()).decode()
            self._call(
                self.client.put_object, Bucket=self.bucket, Key=name, Body=data, ContentMD5=md5
            )
        else:
            self._call(
                self.client.upload_fileobj,
                io.BytesIO(data),
                self.bucket,
                name,
                Config=self._transfer,
            )

    def get(self, key: str) -> bytes:
        response = self._call(self.client.get_object, Bucket=self.bucket, Key=self._name(key))
        return self._call(response["Body"].read)

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        if length <= 0:
            return b""
        try:
            response = self._call(
                self.client.get_object,
                Bucket=self.bucket,
                Key=self._name(key),
                Range=f"bytes={offset}-{offset + length - 1}",
            )
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "InvalidRange":
                return b""  # past the end of the blob
            raise
        return self._call(response["Body"].read)

    def exists(self, key: str) -> bool:
        try:
            self._call(self.client.head_object, Bucket=self.bucket, Key=self._name(key))
        except FileNotFoundError:
            return False
        return True

    def delete(self, key: str) -> None:
        self._call(self.client.delete_object, Bucket=self.bucket, Key=self._name(key))

    def list_blobs(self, under: str = "") -> Iterator[BlobInfo]:
        """Every object under the prefix, or under its `under` (ListObjectsV2, a page of 1,000
        at a time)."""
        prefix = f"{self.prefix}/" if self.prefix else ""
        base = len(prefix)
        prefix += under
        token: str | None = None
        while True:
            extra = {"ContinuationToken": token} if token else {}
            page = self._call(
                self.client.list_objects_v2, Bucket=self.bucket, Prefix=prefix, **extra
            )
            for item in page.get("Contents", []):
                key = item["Key"][base:]
                yield BlobInfo(key, int(item["Size"]), item["LastModified"].timestamp())
            if not page.get("IsTruncated"):
                return
            token = page["NextContinuationToken"]

    def presigned_url(self, key: str, expires: int = 3600) -> str:
        """A URL that GETs the blob without credentials for `expires` seconds."""
        return self.client.generate_presigned_url(
            "get_object",
            Params={"Bucket": self.bucket, "Key": self._name(key)},
            ExpiresIn=expires,
        )

    def _name(self, key: str) -> str:
        parts = key.split("/")
        if not key or any(p in ("", ".", "..") or p.startswith(".") for p in parts):
            raise ValueError(f"invalid blob key {key!r}")
        return f"{self.prefix}/{key}" if self.prefix else key

    def _call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """fn(...), with a missing key as FileNotFoundError and an unreachable or overloaded
        store as a 503; other client errors (a bug, a permission) are raised as they are."""
        try:
            return fn(*args, **kwargs)
        except ClientError as exc:
            error = exc.response.get("Error", {})
            code = str(error.get("Code", ""))
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
            if code in _MISSING:
                raise FileNotFoundError(f"{self.describe()}: no blob {kwargs.get('Key')}") from exc
            if code in _FULL or status == 507:
                raise insufficient_storage(f"the object store {self.describe()}") from exc
            if status >= 500 or code in ("SlowDown", "ServiceUnavailable", "RequestTimeout"):
                raise self._unavailable(f"{code} {error.get('Message', '')}".strip()) from exc
            raise
        except BotoCoreError as exc:
            raise self._unavailable(str(exc)) from exc

    def _unavailable(self, reason: str) -> Exception:
        return overloaded(
            f"the object store {self.describe()} is unavailable ({reason}); retry shortly",
            retry_after=5,
            code="blobs_unavailable",
        )
