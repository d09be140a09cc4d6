"""
The run filter language: a tokenizer and a recursive-descent parser into a small tree.

    filter  := or
    or      := and ("or" and)*
    and     := not ("and" not)*
    not     := "not" not | "(" filter ")" | compare
    compare := field OP value | field ["not"] "in" "(" value ("," value)* ")"
             | field "contains" value
    OP      := "=" | "==" | "!=" | "<" | "<=" | ">" | ">="
    field   := config.<path> | summary.<path> | metric:<key> | a run column (COLUMNS)
    value   := number | 'string' | "string" | true | false | null | a bare word (a string)
             | an ISO date (2026-01-31, 2026-01-31T12:00Z: for created and finished)

A path is dot-separated; a segment with a dot or a space in it is quoted (`config."a.b"`).
Keywords and column names are case-insensitive. Every error is a `FilterError` naming the
token and its position (1-based character), which the route answers as a 400.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "COLUMNS",
    "And",
    "Compare",
    "Field",
    "FilterError",
    "MAX_FILTER_CHARS",
    "Node",
    "Not",
    "Or",
    "Value",
    "parse_field",
    "parse_filter",
    "parse_sort",
]

# The run's own columns a filter names, with their type: text, or a time (a number of
# seconds since the epoch, or an ISO date string).
COLUMNS = {
    "id": "text",
    "name": "text",
    "status": "text",
    "kind": "text",
    "project": "text",
    "group": "text",
    "tag": "text",
    "model": "text",
    "created": "time",
    "finished": "time",
}
Value = float | int | str | bool | None
Source = Literal["config", "summary", "metric", "column"]
MAX_FILTER_CHARS = 4096
MAX_DEPTH = 32


class FilterError(ValueError):
    """A filter, sort or column that does not parse; the message names the token and where."""


@dataclass(frozen=True)
class Field:
    source: Source
    path: tuple[str, ...]  # the JSON path (config, summary), the metric key, or the column
    text: str  # as written, for messages


@dataclass(frozen=True)
class Compare:
    field: Field
    op: str  # = != < <= > >= in not_in contains
    values: tuple[Value, ...]
    pos: int


@dataclass(frozen=True)
class And:
    parts: tuple[Node, ...]


@dataclass(frozen=True)
class Or:
    parts: tuple[Node, ...]


@dataclass(frozen=True)
class Not:
    part: Node


Node = Compare | And | Or | Not

_SEGMENT = r'(?:[\w\-/@+]+|"[^"]*")'
_TOKEN = re.compile(
    r"""
    (?P<space>\s+)
  | (?P<string>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")
  | (?P<date>\d{4}-\d{2}-\d{2}(?:T\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?)?(?:Z|[+-]\d{2}:\d{2})?)
  | (?P<number>-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?(?![\w.]))
  | (?P<metric>metric:[^\s(),=!<>'"]+)
  | (?P<word>[A-Za-z_][\w\-/@+]*(?:\."""
    + _SEGMENT
    + r""")*)
  | (?P<op><=|>=|!=|==|=|<|>)
  | (?P<punct>[(),])
    """,
    re.VERBOSE,
)
_KEYWORDS = {"and", "or", "not", "in", "contains", "true", "false", "null"}


@dataclass(frozen=True)
class _Token:
    kind: str  # string number metric word op punct end
    text: str
    pos: int  # 0-based offset

    def describe(self) -> str:
        return "the end of the filter" if self.kind == "end" else f"{self.text!r}"


def _tokens(text: str) -> list[_Token]:
    out: list[_Token] = []
    pos = 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None:
            raise FilterError(f"unexpected {text[pos]!r} at position {pos + 1}")
        kind = match.lastgroup
        assert kind is not None
        if kind != "space":
            out.append(_Token(kind, match.group(), pos))
        pos = match.end()
    out.append(_Token("end", "", len(text)))
    return out


def _field_of(token: _Token) -> Field | None:
    """The field a word or metric token names, None when it names none."""
    if token.kind == "metric":
        return Field("metric", (token.text[len("metric:") :],), token.text)
    if token.kind != "word":
        return None
    head, _, rest = token.text.partition(".")
    if head in ("config", "summary") and rest:
        segments = re.findall(_SEGMENT, rest)
        path = tuple(s[1:-1] if s.startswith('"') else s for s in segments)
        return Field("config" if head == "config" else "summary", path, token.text)
    if token.text.lower() in COLUMNS:
        return Field("column", (token.text.lower(),), token.text)
    return None


class _Parser:
    def __init__(self, text: str):
        if len(text) > MAX_FILTER_CHARS:
            raise FilterError(f"the filter is over {MAX_FILTER_CHARS} characters")
        self.tokens = _tokens(text)
        self.at = 0
        self.depth = 0

    @property
    def token(self) -> _Token:
        return self.tokens[self.at]

    def keyword(self, *words: str) -> bool:
        return self.token.kind == "word" and self.token.text.lower() in words

    def fail(self, expected: str) -> FilterError:
        token = self.token
        where = f"at position {token.pos + 1}"
        return FilterError(f"expected {expected} {where}, found {token.describe()}")

    def take(self) -> _Token:
        token = self.token
        self.at += 1
        return token

    def expect_punct(self, char: str) -> None:
        if self.token.text != char or self.token.kind != "punct":
            raise self.fail(repr(char))
        self.take()

    def whole(self) -> Node:
        if self.token.kind == "end":
            raise self.fail("a comparison such as config.lr < 1e-4")
        node = self.or_()
        if self.token.kind != "end":
            raise self.fail("'and', 'or' or the end of the filter")
        return node

    def or_(self) -> Node:
        parts = [self.and_()]
        while self.keyword("or"):
            self.take()
            parts.append(self.and_())
        return parts[0] if len(parts) == 1 else Or(tuple(parts))

    def and_(self) -> Node:
        parts = [self.not_()]
        while self.keyword("and"):
            self.take()
            parts.append(self.not_())
        return parts[0] if len(parts) == 1 else And(tuple(parts))

    def not_(self) -> Node:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise FilterError(f"the filter nests deeper than {MAX_DEPTH} levels")
        try:
            if self.keyword("not"):
                self.take()
                return Not(self.not_())
            if self.token.kind == "punct" and self.token.text == "(":
                self.take()
                node = self.or_()
                self.expect_punct(")")
                return node
            return self.compare()
        finally:
            self.depth -= 1

    def compare(self) -> Compare:
        token = self.token
        field = _field_of(token)
        if field is None:
            raise self.fail(
                "a field (config.<path>, summary.<key>, metric:<key>, " + ", ".join(COLUMNS) + ")"
            )
        if token.kind == "word" and token.text.lower() in _KEYWORDS:
            raise self.fail("a field")
        self.take()
        op_token = self.token
        if op_token.kind == "op":
            self.take()
            op = "=" if op_token.text == "==" else op_token.text
            compare = Compare(field, op, (self.value(),), op_token.pos)
        elif self.keyword("in", "not"):
            negated = self.take().text.lower() == "not"
            if negated and not self.keyword("in"):
                raise self.fail("'in' after 'not'")
            if negated:
                self.take()
            compare = Compare(field, "not_in" if negated else "in", self.value_list(), op_token.pos)
        elif self.keyword("contains"):
            self.take()
            compare = Compare(field, "contains", (self.value(),), op_token.pos)
        else:
            raise self.fail(f"an operator after {field.text!r} (= != < <= > >= in contains)")
        _check(compare)
        return compare

    def value_list(self) -> tuple[Value, ...]:
        self.expect_punct("(")
        values = [self.value()]
        while self.token.kind == "punct" and self.token.text == ",":
            self.take()
            values.append(self.value())
        self.expect_punct(")")
        return tuple(values)

    def value(self) -> Value:
        token = self.token
        if token.kind == "number":
            self.take()
            if re.fullmatch(r"-?\d+", token.text) and -(2**63) <= int(token.text) < 2**63:
                return int(token.text)
            return float(token.text)  # beyond 64 bits, an integer compares as a float
        if token.kind == "date":
            self.take()
            return token.text
        if token.kind == "string":
            self.take()
            return re.sub(r"\\(.)", r"\1", token.text[1:-1])
        if token.kind == "word" and token.text.lower() in ("true", "false", "null"):
            self.take()
            return {"true": True, "false": False, "null": None}[token.text.lower()]
        if token.kind == "word" and token.text.lower() not in _KEYWORDS:
            self.take()
            return token.text
        raise self.fail("a value (a number, a 'string', true, false or null)")


def _check(compare: Compare) -> None:
    """The rules a comparison's types follow, checked before any SQL."""
    field, op, values = compare.field, compare.op, compare.values
    where = f"at position {compare.pos + 1}"
    if op in ("<", "<=", ">", ">="):
        value = values[0]
        time_column = field.source == "column" and COLUMNS[field.path[0]] == "time"
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            if not (time_column and isinstance(value, str)):
                raise FilterError(f"{op} {where} compares numbers; {value!r} is not a number")
        elif field.source == "column" and not time_column:
            raise FilterError(f"{op} {where}: {field.text} is text; use = != in contains")
    if op == "contains" and not isinstance(values[0], str):
        raise FilterError(f"contains {where} takes a string, not {values[0]!r}")
    if field.source == "metric" and op not in ("<", "<=", ">", ">=", "=", "!=", "in", "not_in"):
        raise FilterError(f"{op} {where}: {field.text} is a number")
    if field.source == "metric" and any(
        isinstance(v, bool) or not isinstance(v, (int, float)) for v in values if v is not None
    ):
        raise FilterError(f"{field.text} {where} is a number; compare it with numbers")


def parse_filter(text: str) -> Node:
    """The tree of a filter expression; FilterError naming the token and position."""
    return _Parser(text).whole()


def parse_field(text: str) -> Field:
    """One field (a sort key or a column of the answer)."""
    parser = _Parser(text.strip())
    field = _field_of(parser.token)
    if field is None or parser.tokens[1].kind != "end":
        raise FilterError(
            f"{text!r} is not a field: use config.<path>, summary.<key>, metric:<key> or one "
            "of " + ", ".join(COLUMNS)
        )
    return field


def parse_sort(text: str) -> tuple[Field, bool]:
    """A sort key: a field, descending with a leading '-'. (field, descending)."""
    descending = text.startswith("-")
    field = parse_field(text[1:] if descending or text.startswith("+") else text)
    if field.path == ("tag",):
        raise FilterError("runs cannot be sorted by tag (a run has many)")
    return field, descending
