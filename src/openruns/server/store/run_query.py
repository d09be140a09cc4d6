"""
Run filters, sorts and columns (queries/language.py trees) compiled to SQLAlchemy Core, the
same on SQLite (json_type / json_extract) and PostgreSQL (jsonpath over the jsonb of the column).

Semantics, the same on both databases:
- `config.<path>` reads the run's parsed config (runs.config_values), `summary.<path>` its
  summary, `metric:<key>` the latest value of that metric (the point at the highest step, else
  the latest time-keyed point).
- A comparison takes the types as they are: a number matches numbers, a string strings, true
  and false booleans. A missing key, or a value of another type, makes the comparison unknown,
  and unknown never matches, not even under `not` (SQL's three-valued logic). `= null` asks
  for a missing (or JSON null) value, `!= null` for a present one.
- `tag = x` means the run has the tag x; `tag contains x` a tag containing x; `name contains x`
  (and any text) is case-insensitive.
- A sort orders numbers (config, summary, metrics) or the column's own values; runs with no
  value (or a value that is not a number) come last either way, ties newest first. The keyset
  cursor is (value, seq), so pages stay exact while other runs are written.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson
from sqlalchemy import (
    Connection,
    Float,
    Select,
    String,
    and_,
    case,
    cast,
    false,
    func,
    literal,
    not_,
    or_,
    select,
    text,
    true,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, JSONPATH
from sqlalchemy.sql.elements import ColumnElement

from ..errors import bad_request
from ..queries.language import COLUMNS, And, Compare, Field, Node, Not, Or, Value
from .schema import BLOCK_SIZES, metric_blocks, metric_keys, metric_time_points, run_tags, runs

__all__ = ["Cursor", "RunQuery", "page_statement", "query_page"]

Cursor = tuple[Value, int]  # (the sort value of the last run of a page, its seq)
_COLUMN_OF = {"group": "group_name", "created": "created_at", "finished": "finished_at"}


@dataclass(frozen=True)
class RunQuery:
    """What a runs listing asks beyond its plain filters: a filter tree, a sort (field,
    descending), the fields to answer per run, and the cursor of the page before."""

    where: Node | None = None
    sort: tuple[Field, bool] | None = None
    columns: tuple[Field, ...] = ()
    after: Cursor | None = None


def query_page(
    conn: Connection, base: Select[Any], query: RunQuery, limit: int
) -> list[tuple[dict[str, Any], Value, dict[str, Any]]]:
    """
    Up to `limit` rows of `base` (a select of runs with its plain filters) that match
    `query`, in its order: (run row, its sort value, {column text: value}).
    """
    if conn.dialect.name == "postgresql":
        # These plans cost millions (a function per run): PostgreSQL's JIT would compile them
        # for hundreds of milliseconds on every call and save less (benchmarks/runs_query.py).
        conn.execute(text("SET LOCAL jit = off"))
    out = []
    for row in conn.execute(page_statement(conn, base, query, limit)).mappings():
        run = {k: v for k, v in row.items() if k != "sort_value" and not _is_extra(k)}
        values = {
            field.text: _decoded(field, row[f"c{i}"]) for i, field in enumerate(query.columns)
        }
        out.append((run, row["sort_value"], values))
    return out


def page_statement(conn: Connection, base: Select[Any], query: RunQuery, limit: int) -> Any:
    """The SELECT of one page (query_page runs it; benchmarks/runs_query.py EXPLAINs it)."""
    sql = _Sql(conn.dialect.name)
    if query.where is not None:
        base = base.where(sql.node(query.where))
    sort_value = sql.sort_value(query.sort[0]) if query.sort else literal(None)
    extra = [sql.output(field).label(f"c{i}") for i, field in enumerate(query.columns)]
    inner_select = base.add_columns(sort_value.label("sort_value"), *extra)
    if query.sort:
        # OFFSET 0 keeps the subquery whole: flattened, the databases would compute the sort
        # value again for each test of the keyset below (three per run after the first page).
        # Not without a sort: newest first must stay a walk down seq that stops at a page.
        inner_select = inner_select.offset(0)
    inner = inner_select.subquery()
    page = select(inner)
    order: list[Any] = []
    if query.sort:
        key = inner.c.sort_value
        descending = query.sort[1]
        order.append((key.desc() if descending else key.asc()).nulls_last())
        if query.after is not None:
            page = page.where(_after(key, inner.c.seq, query.after, descending))
    elif query.after is not None:
        page = page.where(inner.c.seq < query.after[1])
    order.append(inner.c.seq.desc())
    return page.order_by(*order).limit(limit)


def _is_extra(name: str) -> bool:
    return name[:1] == "c" and name[1:].isdigit()


def _decoded(field: Field, value: Any) -> Any:
    if field.source in ("config", "summary"):
        return None if value is None else orjson.loads(value)
    return value


def _after(key: Any, seq: Any, after: Cursor, descending: bool) -> ColumnElement[bool]:
    value, last_seq = after
    if value is None:  # the page ended among the runs with no value: they come last
        return and_(key.is_(None), seq < last_seq)
    beyond = key < value if descending else key > value
    return or_(beyond, and_(key == value, seq < last_seq), key.is_(None))


class _Sql:
    """The expressions of one dialect."""

    def __init__(self, dialect: str):
        self.postgres = dialect == "postgresql"

    # -- JSON values --------------------------------------------------------------------------

    def _document(self, field: Field) -> Any:
        return runs.c.config_values if field.source == "config" else runs.c.summary

    # On PostgreSQL each test is one jsonpath query (the text column is parsed once per test,
    # jsonb_path_query_first stops at the value); on SQLite json_type and json_extract share
    # SQLite's cache of the last documents parsed.

    def _pg_first(self, field: Field, test: str) -> Any:
        """The value at the field's path when it passes the jsonpath `test`, else NULL."""
        # strict: an array is not unwrapped into its items; silent: a missing key is NULL.
        path = "strict " + self._pg_jsonpath(field) + f" ? ({test})"
        return func.jsonb_path_query_first(
            cast(self._document(field), JSONB),
            cast(literal(path), JSONPATH),
            cast(literal("{}"), JSONB),
            true(),
        )

    def _pg_jsonpath(self, field: Field) -> str:
        parts = ["$"]
        for segment in field.path:
            if segment.isdigit():
                parts.append(f"[{segment}]")
            else:
                parts.append('."' + segment.replace("\\", "\\\\").replace('"', '\\"') + '"')
        return "".join(parts)

    def _sqlite_type(self, field: Field) -> Any:
        return func.json_type(self._document(field), self._sqlite_path(field))

    def _sqlite_value(self, field: Field) -> Any:
        return func.json_extract(self._document(field), self._sqlite_path(field))

    def _number(self, field: Field) -> Any:
        """The value when it is a number, else NULL."""
        if self.postgres:
            return cast(self._pg_first(field, '@.type() == "number"'), Float)
        return case((self._sqlite_type(field).in_(("integer", "real")), self._sqlite_value(field)))

    def _string(self, field: Field) -> Any:
        """The value when it is a string, else NULL."""
        if self.postgres:
            found = self._pg_first(field, '@.type() == "string"')
            return found.op("#>>", return_type=String)(literal([], ARRAY(String)))
        return case((self._sqlite_type(field) == "text", self._sqlite_value(field)))

    def _boolean(self, field: Field, value: bool) -> Any:
        if self.postgres:
            return self._pg_first(field, "@ == " + ("true" if value else "false")).is_not(None)
        return self._sqlite_type(field) == ("true" if value else "false")

    def _json_present(self, field: Field) -> Any:
        """The key is there with a value other than JSON null (true or false, never NULL)."""
        if self.postgres:
            return self._pg_first(field, '@.type() != "null"').is_not(None)
        return func.coalesce(self._sqlite_type(field), "null") != "null"

    def _sqlite_path(self, field: Field) -> str:
        parts = ["$"]
        for segment in field.path:
            if segment.isdigit():
                parts.append(f"[{segment}]")
            else:
                parts.append('."' + segment.replace('"', '""') + '"')
        return "".join(parts)

    def _pg_path(self, field: Field) -> Any:
        return literal(list(field.path), ARRAY(String))

    def output(self, field: Field) -> Any:
        """A field as the answer shows it: JSON text for config and summary values."""
        if field.source in ("config", "summary"):
            if self.postgres:
                doc = cast(self._document(field), JSONB)
                return cast(doc.op("#>", return_type=JSONB)(self._pg_path(field)), String)
            return self._document(field).op("->", return_type=String)(self._sqlite_path(field))
        if field.source == "metric":
            return _latest(field.path[0])
        if field.path[0] == "tag":
            return runs.c.tags
        return runs.c[_COLUMN_OF.get(field.path[0], field.path[0])]

    def sort_value(self, field: Field) -> Any:
        if field.source in ("config", "summary"):
            return self._number(field)
        return self.output(field)

    # -- the tree ----------------------------------------------------------------------------

    def node(self, node: Node) -> Any:
        if isinstance(node, And):
            return and_(*(self.node(part) for part in node.parts))
        if isinstance(node, Or):
            return or_(*(self.node(part) for part in node.parts))
        if isinstance(node, Not):
            return not_(self.node(node.part))
        return self.compare(node)

    def compare(self, compare: Compare) -> Any:
        field, op = compare.field, compare.op
        if op in ("in", "not_in"):
            if field.path == ("tag",) and field.source == "column":
                tagged = runs.c.seq.in_(
                    select(run_tags.c.run_seq).where(run_tags.c.tag.in_(map(str, compare.values)))
                )
                return tagged if op == "in" else not_(tagged)
            matches = [self._equal(field, value, compare) for value in compare.values]
            if op == "in":
                return or_(*matches)
            known = (func.coalesce(match, false()) for match in matches)
            return and_(self._present(field), not_(or_(*known)))
        if op == "=":
            return self._equal(field, compare.values[0], compare)
        if op == "!=":
            value = compare.values[0]
            if value is None:
                return self._present(field)
            if field.path == ("tag",) and field.source == "column":
                return not_(self._equal(field, value, compare))
            return and_(self._present(field), not_(self._equal(field, value, compare)))
        if op == "contains":
            return self._contains(field, str(compare.values[0]))
        return self._order(field, op, compare.values[0], compare)

    def _present(self, field: Field) -> Any:
        if field.source in ("config", "summary"):
            return self._json_present(field)
        if field.source == "metric":
            return _latest(field.path[0]).is_not(None)
        if field.path == ("tag",):
            return runs.c.seq.in_(select(run_tags.c.run_seq))
        return runs.c[_COLUMN_OF.get(field.path[0], field.path[0])].is_not(None)

    def _equal(self, field: Field, value: Value, compare: Compare) -> Any:
        if value is None:
            return not_(self._present(field))
        if field.source in ("config", "summary"):
            if isinstance(value, bool):
                return self._boolean(field, value)
            if isinstance(value, (int, float)):
                return self._number(field) == value
            return self._string(field) == value
        if field.source == "metric":
            return _latest(field.path[0]) == value
        name = field.path[0]
        if name == "tag":
            return runs.c.seq.in_(select(run_tags.c.run_seq).where(run_tags.c.tag == str(value)))
        if COLUMNS[name] == "time":
            return runs.c[_COLUMN_OF[name]] == _seconds(value, compare)
        return runs.c[_COLUMN_OF.get(name, name)] == str(value)

    def _contains(self, field: Field, text: str) -> Any:
        if field.source in ("config", "summary"):
            return self._string(field).icontains(text, autoescape=True)
        name = field.path[0]
        if name == "tag":
            return runs.c.seq.in_(
                select(run_tags.c.run_seq).where(run_tags.c.tag.icontains(text, autoescape=True))
            )
        if COLUMNS[name] == "time":
            raise bad_request("invalid_filter", f"contains: {name} is a time, not text")
        return runs.c[_COLUMN_OF.get(name, name)].icontains(text, autoescape=True)

    def _order(self, field: Field, op: str, value: Value, compare: Compare) -> Any:
        if field.source in ("config", "summary"):
            left: Any = self._number(field)
        elif field.source == "metric":
            left = _latest(field.path[0])
        else:
            left = runs.c[_COLUMN_OF[field.path[0]]]
            value = _seconds(value, compare)
        return {
            "<": left < value,
            "<=": left <= value,
            ">": left > value,
            ">=": left >= value,
        }[op]


def _latest(key: str) -> Any:
    """The latest value of the run's metric `key`: the point at its highest step, else (a
    metric logged without steps) its latest time-keyed point. One index probe each: the key by
    (run_seq, name), then its points by (key_id, step) backwards."""
    key_id = (
        select(metric_keys.c.id)
        .where(metric_keys.c.run_seq == runs.c.seq, metric_keys.c.name == key)
        .correlate(runs)
        .scalar_subquery()
    )
    # The last value of the key's last top-level block: its points may be rows or in chunks
    # (store/metric_chunks.py), and the block summaries cover both.
    b = metric_blocks
    stepped = (
        select(b.c.last_value)
        .where(b.c.key_id == key_id, b.c.level == len(BLOCK_SIZES))
        .order_by(b.c.block.desc())
        .limit(1)
        .correlate(runs)
        .scalar_subquery()
    )
    timed = (
        select(metric_time_points.c.value)
        .where(metric_time_points.c.key_id == key_id)
        .order_by(metric_time_points.c.ts.desc())
        .limit(1)
        .correlate(runs)
        .scalar_subquery()
    )
    return func.coalesce(stepped, timed)


def _seconds(value: Value, compare: Compare) -> float:
    """A time value: seconds since the epoch, or an ISO date (UTC unless it says otherwise)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        try:
            when = datetime.fromisoformat(value)
        except ValueError:
            pass
        else:
            if when.tzinfo is None:
                when = when.replace(tzinfo=UTC)
            return when.timestamp()
    raise bad_request(
        "invalid_filter",
        f"{compare.field.text} at position {compare.pos + 1} takes seconds since the epoch "
        f"or an ISO date (2026-01-31), not {value!r}",
    )
