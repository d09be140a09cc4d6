"""The S3 blob store against an S3-compatible endpoint on loopback (moto's server): whole
blobs, ranged reads, multipart uploads, presigned URLs, and the errors a server answers."""

from __future__ import annotations

import httpx
import pytest

from openruns.server.errors import ApiError
from openruns.server.store import open_blobs
from openruns.server.store import s3 as s3_module
from openruns.server.store.s3 import S3BlobStore

from ..services import free_port


@pytest.fixture
def bucket(stores_factory):
    s3 = stores_factory.s3()
    return S3BlobStore.from_url(s3.new_bucket(), s3.url), s3


def test_put_get_range_exists(bucket):
    blobs, s3 = bucket
    blobs.put_atomic("runs/1/episodes/a.ndjson.zst", b"0123456789")
    assert blobs.get("runs/1/episodes/a.ndjson.zst") == b"0123456789"
    assert blobs.get_range("runs/1/episodes/a.ndjson.zst", 3, 4) == b"3456"
    assert blobs.get_range("runs/1/episodes/a.ndjson.zst", 8, 100) == b"89"
    assert blobs.get_range("runs/1/episodes/a.ndjson.zst", 50, 10) == b""
    assert blobs.exists("runs/1/episodes/a.ndjson.zst")
    assert not blobs.exists("runs/1/episodes/b.ndjson.zst")
    with pytest.raises(FileNotFoundError):
        blobs.get("runs/1/episodes/b.ndjson.zst")
    # The prefix is where the objects are; nothing else is written.
    listed = s3.client.list_objects_v2(Bucket=blobs.bucket)["Contents"]
    assert [o["Key"] for o in listed] == ["blobs/runs/1/episodes/a.ndjson.zst"]
    for bad in ("", "../x", "a//b", "a/./b", "/abs", ".hidden"):
        with pytest.raises(ValueError):
            blobs.put_atomic(bad, b"")


def test_large_blobs_go_up_in_parts_and_appear_whole(bucket, monkeypatch):
    blobs, s3 = bucket
    monkeypatch.setattr(s3_module, "MULTIPART_BYTES", 5 * 1024 * 1024)  # S3's smallest part
    part_size = 5 * 1024 * 1024
    data = bytes(range(256)) * (11 * 1024 * 1024 // 256)
    store = S3BlobStore(blobs.bucket, blobs.prefix, s3.url)  # built after the patch
    assert store._transfer.multipart_threshold == part_size
    store.put_atomic("big", data)
    head = s3.client.head_object(Bucket=blobs.bucket, Key="blobs/big")
    assert head["ContentLength"] == len(data)
    assert head["ETag"].strip('"').endswith("-3")  # a multipart upload of three parts
    assert store.get_range("big", 6 * 1024 * 1024, 16) == data[6 * 1024 * 1024 :][:16]


def test_presigned_urls_need_no_credentials(bucket):
    blobs, _ = bucket
    blobs.put_atomic("seg", b"segment bytes")
    response = httpx.get(blobs.presigned_url("seg", expires=60), timeout=10)
    assert response.status_code == 200 and response.content == b"segment bytes"


def test_an_unreachable_store_is_a_503_naming_it(bucket):
    blobs, _ = bucket
    gone = S3BlobStore(blobs.bucket, "", f"http://127.0.0.1:{free_port()}")
    for call in (lambda: gone.get_range("k", 0, 1), lambda: gone.put_atomic("k", b"x")):
        with pytest.raises(ApiError) as err:
            call()
        assert err.value.status_code == 503 and err.value.code == "blobs_unavailable"
        assert err.value.headers["Retry-After"] == "5"
        assert f"s3://{blobs.bucket}" in err.value.message
    with pytest.raises(ValueError, match="cannot reach"):
        gone.check()


def test_open_blobs_picks_the_backend(bucket, tmp_path):
    blobs, s3 = bucket
    assert isinstance(open_blobs(f"s3://{blobs.bucket}/p", s3.url), S3BlobStore)
    assert open_blobs(str(tmp_path / "dir")).describe() == str(tmp_path / "dir")
    with pytest.raises(ValueError, match="names no bucket"):
        open_blobs("s3://", s3.url)


def test_stores_of_one_endpoint_share_its_client_and_keep_their_buckets(bucket):
    blobs, s3 = bucket
    other = S3BlobStore.from_url(s3.new_bucket(), s3.url)
    assert other.client is blobs.client  # built once a process (~0.1 s of CPU each)
    elsewhere = S3BlobStore(blobs.bucket, "", f"http://127.0.0.1:{free_port()}")
    assert elsewhere.client is not blobs.client
    blobs.put_atomic("k", b"mine")
    other.put_atomic("k", b"theirs")
    assert (blobs.get("k"), other.get("k")) == (b"mine", b"theirs")
