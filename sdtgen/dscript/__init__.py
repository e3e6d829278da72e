"""Predicates and aggregations in DTrace's syntax, compiled for the runtime a kernel links (docs/aggregations.md).

``compile_script(text, probes, bits)`` is the entry point: the probes are the image's (``Image.probes()``),
so an argument a probe does not have, a string used as an integer, a division by a constant zero, too many
keys or a program over the runtime's limits is refused with one line naming the clause, before anything is
armed. The host's side of the tables (reading, merging, printing) is in ``tables``, ``merge`` and ``printa``.
"""

from __future__ import annotations

from collections.abc import Iterable

from sdtgen.dscript.compiler import AggInfo, ClauseError, Compiled, Program, compile_clauses
from sdtgen.dscript.parser import ParseError, parse
from sdtgen.errors import SdtError, sentence

__all__ = ["AggInfo", "Compiled", "Program", "compile_script"]

SHOWN = 60  # characters of a clause a message quotes


def compile_script(text: str, probes: Iterable, bits: int, source: str = "", first_id: int = 1) -> Compiled:
    """The programs and aggregations of ``text`` for an image whose probes are ``probes`` and whose words are
    ``bits`` wide; SdtError (one line: the clause, what is wrong, what to do) for anything the runtime could
    not run. Aggregation ids start at ``first_id``."""
    try:
        clauses = parse(text)
    except ParseError as e:
        raise SdtError(source, sentence(f"{position(text, e.at)}: {e}"), e.fix or
                       "write clauses as provider:module:function:name /predicate/ @name[keys] = function(args)") \
            from None
    try:
        return compile_clauses(clauses, probes, bits, first_id, text_of=lambda c: shorten(c.text))
    except ClauseError as e:
        raise SdtError(source, sentence(str(e)), e.fix) from None


def position(text: str, at: int) -> str:
    line = text.count("\n", 0, at)
    column = at - (text.rfind("\n", 0, at) + 1) + 1
    near = text[at:at + 20].split("\n")[0]
    where = f"line {line + 1}, column {column}" if "\n" in text.strip("\n") else f"column {column}"
    return f"{where} ({near!r})" if near else where


def shorten(text: str) -> str:
    return text if len(text) <= SHOWN else text[:SHOWN - 3] + "..."
