"""The parsed form of a script: clauses of probe descriptions, a predicate and aggregations (plain data)."""

from __future__ import annotations

from sdtgen.plaindata import record


@record(frozen=True)
class Node:
    at: int  # offset of its first character in the script


@record(frozen=True)
class Int(Node):
    value: int  # as written: 0 .. 2^64 - 1
    unsigned: bool = False  # a u/U suffix, or a value past INT64_MAX


@record(frozen=True)
class Str(Node):
    value: bytes


@record(frozen=True)
class Var(Node):
    name: str  # arg0..arg5, cpu, probeprov, probemod, probefunc, probename


@record(frozen=True)
class Unary(Node):
    op: str  # - + ! ~
    operand: Node


@record(frozen=True)
class Binary(Node):
    op: str  # * / % + - << >> < <= > >= == != & ^ | && ^^ ||
    left: Node
    right: Node


@record(frozen=True)
class Ternary(Node):
    cond: Node
    then: Node
    other: Node


@record(frozen=True)
class Cast(Node):
    ctype: str  # the C type written, e.g. "unsigned int"
    operand: Node


@record(frozen=True)
class Aggregation(Node):
    name: str  # "" for the anonymous @
    keys: tuple[Node, ...]
    func: str  # count sum min max avg quantize lquantize
    args: tuple[Node, ...]


@record(frozen=True)
class Clause:
    number: int  # from 1, in the script's order
    text: str  # as written, for diagnostics
    specs: tuple[str, ...]
    predicate: Node | None
    actions: tuple[Aggregation, ...] = ()
    record: bool = True  # no aggregation: a firing that passes is recorded (DTrace's default action)
    snapshot: bool = False  # snapshot(): the session the program runs in is snapshotted (docs/sessions.md)
