"""sdtgen's one diagnostic voice, objtool's shape.

Every message a user reads, from any subcommand, is one line::

    FILE: error|warning: section:function+0xoff: message; fix

``FILE`` is the file the problem is in (``sdtgen`` when there is none), the
place is left out when there is none, and so is the fix. Control characters
from an ELF file never reach the terminal raw: ``printable`` escapes them.
"""

from __future__ import annotations

import sys

from sdtgen.plaindata import record

ERROR, WARNING = "error", "warning"
MAX_SHOWN = 200  # characters of one name or value from a file a message shows; the rest is elided
# characters of one warning at most: sdtgen's sentence whole (the names in it capped as they went in), a line of
# the kernel's own log cut
MAX_WARNING = 1000


def printable(text: str, limit: int | None = MAX_SHOWN) -> str:
    """``text`` safe for a terminal line: control characters escaped, and a name or value from a
    file longer than ``limit`` elided. sdtgen's own sentences pass ``limit=None``: they are never cut
    (the names in them were capped as they went in)."""
    if text.isprintable() and (limit is None or len(text) <= limit):
        return text
    cut = text if limit is None else text[:limit]
    out = [ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in cut]
    if len(cut) < len(text):
        out.append(f"...({len(text) - len(cut)} more characters)")
    return "".join(out)


def sentence(text: str) -> str:
    """One of sdtgen's own messages, safe for a terminal line and never cut."""
    return printable(text, None)


def place(section: str, function: str | None, offset: int) -> str:
    """The symbolized place of a byte: ``section:function+0xoff`` (``section+0xoff`` with no function)."""
    if function:
        return f"{section}:{function}+{offset:#x}"
    return f"{section}+{offset:#x}"


@record(frozen=True)
class Diagnostic:
    file: str
    severity: str  # ERROR or WARNING
    message: str
    fix: str = ""
    where: str = ""  # place() of the problem, when it has one

    def __str__(self) -> str:
        parts = [self.file or "sdtgen", self.severity]
        if self.where:
            parts.append(self.where)
        parts.append(self.message)
        line = ": ".join(parts)
        return f"{line}; {self.fix}" if self.fix else line


def warn(file: str, message: str, fix: str = "", where: str = "") -> None:
    print(Diagnostic(file, WARNING, message, fix, where), file=sys.stderr)


class SdtError(Exception):
    """Bad input or a failed step. ``str()`` is the whole user-facing line, in the one format."""

    def __init__(self, file: str, what: str, fix: str = "", where: str = "") -> None:
        self.file = file
        self.what = what
        self.fix = fix
        self.place = where
        super().__init__(str(Diagnostic(file, ERROR, what, fix, where)))

    @property
    def where(self) -> str:  # the file, as older callers name it
        return self.file
