"""The server's storage: metadata (Store, over SQLAlchemy Core) and blobs (BlobStore)."""

from __future__ import annotations

from .blobs import BlobStore, LocalBlobStore, open_blobs
from .store import Store

__all__ = ["BlobStore", "LocalBlobStore", "Store", "open_blobs"]
