"""
The `info` column of a training-samples Parquet object, decoded within the bounds of an upload.

A Parquet file is a compressed body like any other, and a small one can decode to a great deal:
a dictionary-encoded column stores one long string once and refers to it from every row, so
664 KiB became 929 MiB of Python strings at confirm (issue 25). `info_texts` therefore reads
the column a batch of rows at a time with its dictionary kept (`read_dictionary`), measures
what each batch decodes to from the string lengths (Arrow compute, no Python objects) before
making a single Python string of it, and refuses with 413 naming the bound as soon as the rows,
one row's bytes or the total pass `DecodeLimits` (the settings every upload body is held to).
Only the `info` column is read; the others are never decoded.
"""

from __future__ import annotations

import io
from typing import Any

from ..body import DecodeLimits
from ..errors import ApiError, bad_request, too_large

__all__ = ["info_texts"]

INFO = "info"
# Rows decoded at once: with the byte bound checked per batch before decoding, a batch costs
# at most the bound, and in the usual case (rows of a few KiB) a few MiB.
BATCH_ROWS = 1024


def info_texts(data: bytes, limits: DecodeLimits) -> tuple[int, list[str | None]]:
    """(rows, each row's `info` text, None where it is null or not text); 400 for a file that
    is not Parquet, 413 past a bound. Without an `info` column: (rows, [])."""
    import pyarrow as pa

    try:
        return _read(data, limits)
    except (pa.ArrowException, OSError) as exc:
        raise bad_request("invalid_parquet", f"the object is not a Parquet file: {exc}") from exc


def _read(data: bytes, limits: DecodeLimits) -> tuple[int, list[str | None]]:
    import pyarrow.parquet as pq

    parquet = pq.ParquetFile(io.BytesIO(data), read_dictionary=[INFO])
    rows = parquet.metadata.num_rows
    if rows > limits.max_lines:
        raise too_large(
            "too_many_rows",
            f"the Parquet object has {rows} rows, more than the limit of {limits.max_lines}; "
            "send smaller files",
        )
    if INFO not in parquet.schema_arrow.names:
        return rows, []
    texts: list[str | None] = []
    decoded = 0
    for batch in parquet.iter_batches(batch_size=BATCH_ROWS, columns=[INFO]):
        column = batch.column(0)
        measured = _measure(column)
        if measured is None:  # not text: nothing in it is an episode, nothing is decoded
            texts.extend([None] * len(column))
            continue
        size, longest = measured
        if longest > limits.max_line_bytes:
            raise too_large(
                "line_too_large",
                f"an `info` value of the Parquet object is {longest} bytes, over the limit of "
                f"{limits.max_line_bytes} bytes for one record",
            )
        decoded += size
        if decoded > limits.max_bytes:
            raise _decoded_too_large(limits.max_bytes)
        texts.extend(column.to_pylist())
    return rows, texts


def _measure(column: Any) -> tuple[int, int] | None:
    """(total bytes, longest value) of the text a column of strings decodes to; None for a
    column of anything else."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if pa.types.is_dictionary(column.type):
        if not _is_text(column.type.value_type):
            return None
        lengths = pc.take(pc.binary_length(column.dictionary), column.indices)
    elif _is_text(column.type):
        lengths = pc.binary_length(column)
    else:
        return None
    return int(pc.sum(lengths).as_py() or 0), int(pc.max(lengths).as_py() or 0)


def _is_text(kind: Any) -> bool:
    import pyarrow as pa

    return bool(pa.types.is_string(kind) or pa.types.is_large_string(kind))


def _decoded_too_large(cap: int) -> ApiError:
    return too_large(
        "decompressed_body_too_large",
        f"the Parquet object's `info` column decodes to more than the limit of {cap} bytes; "
        "send smaller files",
    )
