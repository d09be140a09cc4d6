"""
Blob storage for episode segments: written once, never edited.

`BlobStore` is the interface a backend implements: a local directory (here) or an
S3-compatible bucket (s3.py, where put_atomic is one PUT, or a multipart upload that becomes
visible whole when it completes). `open_blobs("s3://bucket/prefix")` or `open_blobs("/dir")`
picks one. `LocalBlobStore.put_atomic` writes a temporary file, fsyncs it, renames it into
place and fsyncs the directory, so once it returns the blob is durable, and a crash at any
point leaves either no blob or the whole blob under its key, never a torn one. All methods
block; call them off the event loop.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ...rundir import fsync_dir
from ..errors import insufficient_storage, is_disk_full

__all__ = ["BlobInfo", "BlobStore", "LocalBlobStore", "open_blobs"]


@dataclass(frozen=True)
class BlobInfo:
    """A stored blob as a listing shows it (for `openruns server check`)."""

    key: str
    size: int
    modified: float  # epoch seconds


class BlobStore(Protocol):
    def put_atomic(self, key: str, data: bytes) -> None:
        """Store `data` under `key`; durable when this returns."""
        ...

    def get(self, key: str) -> bytes:
        """The whole blob; FileNotFoundError when there is none."""
        ...

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        """`length` bytes from `offset` (fewer at the end of the blob)."""
        ...

    def exists(self, key: str) -> bool: ...

    def delete(self, key: str) -> None:
        """Remove a blob (nothing when there is none)."""
        ...

    def list_blobs(self, under: str = "") -> Iterator[BlobInfo]:
        """Every blob (whose key starts with `under`, a folder like `runs/12/`), in no
        particular order."""
        ...

    def describe(self) -> str:
        """Where the blobs are, for messages."""
        ...


def open_blobs(location: str, endpoint_url: str | None = None) -> BlobStore:
    """The blob store at `location`: `s3://bucket[/prefix]` or a directory (created if new).
    Raises ValueError with a one-line reason when it cannot be used."""
    if location.startswith("s3://"):
        from .s3 import S3BlobStore

        store = S3BlobStore.from_url(location, endpoint_url)
        store.check()
        return store
    if "://" in location:
        raise ValueError(f"unsupported blob store {location!r}: use a directory or s3://BUCKET")
    return LocalBlobStore(Path(location))


class LocalBlobStore:
    """Blobs as files under `root`; keys are relative paths of safe segments."""

    def __init__(self, root: Path):
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def put_atomic(self, key: str, data: bytes) -> None:
        """A full disk is a 507 (errors.insufficient_storage), leaving no temporary file."""
        try:
            self._put_atomic(key, data)
        except OSError as exc:
            if is_disk_full(exc):
                raise insufficient_storage(f"the blob store {self.root}") from exc
            raise

    def _put_atomic(self, key: str, data: bytes) -> None:
        path = self._path(key)
        _makedirs_durable(path.parent)
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            tmp.unlink(missing_ok=True)
            raise
        os.close(fd)
        try:
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        fsync_dir(path.parent)

    def get(self, key: str) -> bytes:
        return self._path(key).read_bytes()

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        with self._path(key).open("rb") as fh:
            fh.seek(offset)
            return fh.read(length)

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def delete(self, key: str) -> None:
        self._path(key).unlink(missing_ok=True)

    def list_blobs(self, under: str = "") -> Iterator[BlobInfo]:
        """Every blob file (under the folder `under`, e.g. `runs/12/`); temporary files of
        writes in progress (dot files) are not blobs."""
        top = self._path(under.rstrip("/")) if under.strip("/") else self.root
        for directory, dirs, files in os.walk(top):
            dirs[:] = [d for d in dirs if not d.startswith(".")]
            for name in files:
                if name.startswith("."):
                    continue
                path = Path(directory, name)
                try:
                    stat = path.stat()
                except FileNotFoundError:
                    continue
                key = path.relative_to(self.root).as_posix()
                yield BlobInfo(key, stat.st_size, stat.st_mtime)

    def describe(self) -> str:
        return str(self.root)

    def _path(self, key: str) -> Path:
        parts = key.split("/")
        if not key or any(p in ("", ".", "..") or p.startswith(".") for p in parts):
            raise ValueError(f"invalid blob key {key!r}")
        return self.root.joinpath(*parts)


def _makedirs_durable(path: Path) -> None:
    """mkdir -p, fsyncing the parent of every directory created (its entry must survive too)."""
    if path.is_dir():
        return
    _makedirs_durable(path.parent)
    try:
        path.mkdir()
    except FileExistsError:
        return
    fsync_dir(path.parent)
