"""
W&B media (issue 19): where the images a run logs are, and what a record says about them.
Pure: no I/O.

The SDK writes an image as a file and puts a reference to it where the value was:

    history row    {"pic": {"_type": "image-file", "path": "media/images/pic_3_<sha256:20>.png",
                    "format": "png", "width": 8, "height": 8, "sha256": ..., "size": ...}}
                   a list: {"_type": "images/separated", "filenames": ["media/images/...", ...],
                    "count": 2, "captions"?: [...]}; the file is a run file (uploaded as such)
    table cell     {"_type": "image-file", "path": "media/images/<md5:20>.png", ...}, or a list
                   of them (TRL's "image" column), in the table of the run's `run_table`
                   artifact; the path is relative to the artifact and the file is an entry of it.
                   The run-file copy of a table (media/table/...) holds the string "Image".

Both kinds of path are `media/...`, and both name their content (a digest in the file name),
so one namespace per run holds them all: the run's media, addressed by that path (a table's
file too: `media/table/<key>_<step>_<sha256:20>.table.json`). What the wire (server/wandb)
stores and serves, and the dashboard reads:

    GET /api/v1/runs/{id}/media          {"items": [media_item(...), ...]}: every media value of
                                         the run's history (images, tables), by step then key
    GET /api/v1/runs/{id}/media/{path}   the file's bytes, as content_type(path) (servable: a
                                         table as valid JSON); a table's file is its artifact
                                         copy (table_source: its image cells name media
                                         paths), else the run file

A file is stored at `blob_key(run_seq, path)`: a run file under `media/` as uploaded, and each
entry under `media/` of a `run_table` artifact at its entry path. A history row's media values
(`is_media`) are not metrics: each becomes a `media_item`. A record holds an image as
an OpenAI-style content part whose URL is the media path (`image_part`); the dashboard reads it
from the run's media route (`media_url`).

    item = media_item("val/pic", 3, value)   # what the media listing says of it
    refs = media_refs(value)              # [MediaRef(path, kind, caption, width, height)]
    part = image_part(ref)                # {"type": "image_url", "image_url": {"url": path}}
    key = blob_key(run["seq"], ref.path)  # runs/<seq>/wandb/media/images/...
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

__all__ = [
    "MEDIA_ROUTE",
    "MediaRef",
    "blob_key",
    "check_media_path",
    "content_type",
    "image_part",
    "is_media",
    "media_item",
    "media_refs",
    "media_url",
    "servable",
    "table_source",
]

# The route the run's media are read from; `path` is check_media_path's.
MEDIA_ROUTE = "/api/v1/runs/{run_id}/media/{path}"
# W&B's media types whose values are files (data_types/*.py `_log_type`); the others of
# `_type` (tables, histograms, plots) are not images.
IMAGE_TYPES = frozenset({"image-file", "images/separated"})
TABLE_TYPES = frozenset({"table-file", "incremental-table-file", "table"})
MEDIA_TYPES = (
    IMAGE_TYPES
    | TABLE_TYPES
    | frozenset({"audio-file", "video-file", "html-file", "object3D-file"})
)
# A path as the SDK writes one: media/<kind>/<name>.<ext>, names of letters, digits, _ - .
_SEGMENT = r"[A-Za-z0-9_][A-Za-z0-9_.\-]*"
_PATH = re.compile(rf"(media|artifacts)(/{_SEGMENT})+")
# A logged table's `artifact_path`: its copy in the run_table artifact the SDK saved with it.
_CLIENT_ARTIFACT = re.compile(rf"wandb-client-artifact://({_SEGMENT})/({_SEGMENT})")
_MAX_PATH = 512
_TYPES = {
    "json": "application/json",
    "png": "image/png",
    "jpg": "image/jpeg",
    "jpeg": "image/jpeg",
    "gif": "image/gif",
    "webp": "image/webp",
    "bmp": "image/bmp",
}


@dataclass(frozen=True)
class MediaRef:
    """One media file a value refers to: its path under the run's media, as the SDK wrote it."""

    path: str
    kind: str  # the W&B `_type`: image-file, images/separated, ...
    caption: str | None = None
    width: int | None = None
    height: int | None = None


def is_media(value: Any) -> bool:
    """Whether a logged value is a media reference (its `_type` is one of W&B's file media)."""
    return isinstance(value, Mapping) and value.get("_type") in MEDIA_TYPES


def media_item(key: str, step: int | None, value: Mapping[str, Any]) -> dict[str, Any] | None:
    """What the run's media listing says of one media value logged at `step`: its `type`, the
    media `paths` it refers to (a table: its file), and what the value says of them (captions,
    size; a table's rows and columns). None when it names no file it may. The wire adds
    `"episodes": n` to a table's item when tables.episodes_from_table read n rollouts in it."""
    kind = value.get("_type")
    if kind in TABLE_TYPES:
        path = table_source(value)
        if path is None:
            return None
        item: dict[str, Any] = {"key": key, "step": step, "type": kind, "paths": [path]}
        for field in ("nrows", "ncols", "log_mode", "increment_num"):
            if value.get(field) is not None:
                item[field] = value[field]
        return item
    refs = media_refs(value)
    if not refs:
        return None
    item = {"key": key, "step": step, "type": kind, "paths": [r.path for r in refs]}
    if any(r.caption for r in refs):
        item["captions"] = [r.caption for r in refs]
    if refs[0].width is not None and refs[0].height is not None:
        item["width"], item["height"] = refs[0].width, refs[0].height
    return item


def media_refs(value: Any) -> list[MediaRef]:
    """The media files a history value or table cell refers to, in order: an `image-file`,
    `images/separated` (several files), or a list of image references (TRL's image column).
    Paths that check_media_path refuses are left out; [] for anything else (tables too)."""
    if isinstance(value, list):
        return [ref for item in value for ref in media_refs(item) if not isinstance(item, list)]
    if not is_media(value) or value["_type"] in TABLE_TYPES:
        return []
    kind = str(value["_type"])
    width, height = _int(value.get("width")), _int(value.get("height"))
    if kind == "images/separated":
        names = value.get("filenames")
        captions = value.get("captions")
        out = []
        for i, name in enumerate(names if isinstance(names, list) else []):
            caption = captions[i] if isinstance(captions, list) and i < len(captions) else None
            path = check_media_path(name)
            if path is not None:
                out.append(MediaRef(path, kind, _text(caption), width, height))
        return out
    path = check_media_path(value.get("path"))
    if path is None:
        return []
    return [MediaRef(path, kind, _text(value.get("caption")), width, height)]


def table_source(value: Mapping[str, Any]) -> str | None:
    """The file a logged table is read from: its copy in the run_table artifact
    (`artifacts/<client id>/<entry>`, as the wire stores an artifact's entries) when the value
    names one, since only that copy has its images (the run file's copy holds "Image"), else
    the run file (`path`); None when neither is a path check_media_path accepts."""
    artifact = value.get("artifact_path")
    match = _CLIENT_ARTIFACT.fullmatch(artifact) if isinstance(artifact, str) else None
    if match:
        copy = check_media_path(f"artifacts/{match.group(1)}/{match.group(2)}")
        if copy is not None:
            return copy
    return check_media_path(value.get("path"))


def servable(path: str, data: bytes) -> bytes:
    """A media file as the media route answers it: a JSON file (a table) as valid JSON, its
    NaN and infinities (json.dump's, which the SDK uses) as null; anything else as stored."""
    if content_type(path) != "application/json":
        return data
    try:
        return orjson.dumps(json.loads(data))
    except ValueError:
        return data


def check_media_path(path: Any) -> str | None:
    """`path` when it is a media path as the SDK writes one (`media/...`, or an artifact's entry
    as the wire stores it: `artifacts/<client id>/...`; relative, segments of letters, digits,
    `_`, `-` and `.`, none of them `.` or `..`), else None: a path that came off the wire is never
    trusted to name a blob."""
    if not isinstance(path, str) or len(path) > _MAX_PATH or not _PATH.fullmatch(path):
        return None
    if any(part in (".", "..") for part in path.split("/")):
        return None
    return path


def blob_key(run_seq: int, path: str) -> str:
    """The blob key of a run's media file (`path` as check_media_path returned it)."""
    return f"runs/{run_seq}/wandb/{path}"


def media_url(run_id: str, path: str) -> str:
    """Where the dashboard and API clients read a run's media file."""
    return MEDIA_ROUTE.format(run_id=run_id, path=path)


def content_type(path: str) -> str:
    """The Content-Type a media file is served with (by its extension); anything that is not
    a known raster image (SVG included: it can hold scripts) is served as bytes."""
    ext = path.rsplit(".", 1)[-1].lower() if "." in path else ""
    return _TYPES.get(ext, "application/octet-stream")


def image_part(ref: MediaRef) -> dict[str, Any]:
    """A record's content part for an image, as OpenAI chat content carries one; the URL is
    the media path, relative to the run's media (the dashboard reads it from MEDIA_ROUTE)."""
    part: dict[str, Any] = {"type": "image_url", "image_url": {"url": ref.path}}
    if ref.caption:
        part["caption"] = ref.caption
    return part


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None
