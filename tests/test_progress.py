"""The progress line: on a terminal a line rewritten in place and erased at the end; anything else, nothing."""

from __future__ import annotations

import io
import os
import pty
import select

from sdtgen.progress import progress_line, seconds


def test_a_stream_that_is_no_terminal_gets_nothing():
    out = io.StringIO()
    with progress_line(lambda t: "working", out):
        pass
    assert out.getvalue() == ""


def test_a_terminal_gets_one_line_rewritten_then_erased():
    master, slave = pty.openpty()
    try:
        with open(slave, "w", closefd=False) as out, progress_line(lambda t: "step 1", out):
            pass
        seen = b""
        while select.select([master], [], [], 0.5)[0]:  # a pty may hand the writes over in more than one read
            seen += os.read(master, 4096)
        seen = seen.decode()
    finally:
        os.close(slave)
        os.close(master)
    assert seen == "\rstep 1\r\x1b[K"


def test_seconds_read_as_a_person_says_them():
    assert (seconds(7.9), seconds(125)) == ("7 s", "2 min 05 s")
