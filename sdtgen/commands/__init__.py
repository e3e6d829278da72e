"""The sdtgen commands: each a parser builder (``add_NAME(sub)``) beside what it runs (``cmd_NAME(args)``), in the
module of its kind: build.py (scan, gen, check, probes, cost), tools.py (linker-script, arch, the directories)
and tracing.py (boot, qemu, attach, record, torture). sdtgen/cli.py imports only the module of the command a
run asks for, and only parses; what a command does is the library's (the session's, for tracing), and what it
prints is here. What they share: the exit status, JSON out, aligned columns, integers on the command line.
"""

from __future__ import annotations

import argparse
import sys

from sdtgen.errors import printable

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


def package_path(*parts: str) -> str:
    import os

    return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), *parts)


def emit_json(obj: object) -> None:
    import json

    sys.stdout.write(json.dumps(obj))  # one shot, no indent: the C encoder, fast on 20,000 sites
    sys.stdout.write("\n")


def table(rows: list[list[str]], header: list[str]) -> str:
    """Aligned columns; names from ELF files have control characters escaped (a name must not move
    the cursor, clear the screen or print a line of its own).

    Column by column, so a kernel's tens of thousands of rows cost one C-level check each, not a call per cell.
    """
    from itertools import repeat

    from sdtgen.errors import MAX_SHOWN

    columns = []
    for column in zip(header, *rows, strict=True):
        column = [str(c) for c in column]
        if max(map(len, column)) > MAX_SHOWN or not "".join(column).isprintable():
            column = [printable(c) for c in column]
        columns.append(column)
    padded = [list(map(str.ljust, c, repeat(max(map(len, c))))) for c in columns[:-1]]  # each call in C
    return "\n".join(map(str.rstrip, map("  ".join, zip(*padded, columns[-1], strict=True))))


def int_arg(text: str) -> int:
    try:
        return int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
