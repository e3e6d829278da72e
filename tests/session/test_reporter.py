"""The kernel's console while it boots: held, and shown only when the boot fails (sdtgen/session/reporter.py)."""

from __future__ import annotations

import io
import json

from sdtgen.session.reporter import HELD_CONSOLE, Reporter


def test_a_boot_that_says_hello_drops_what_came_before_and_shows_what_comes_after():
    out = io.StringIO()
    r = Reporter(out=out)
    r.hold_console()
    r.console("OpenSBI v1.2")
    r.release_console(show=False)
    r.console("tinyk: up")
    assert out.getvalue() == "tinyk: up\n"


def test_a_boot_that_fails_shows_its_console_before_the_error_keeping_the_last_lines():
    out, err = io.StringIO(), io.StringIO()
    r = Reporter(out=out, err=err)
    r.hold_console()
    for k in range(HELD_CONSOLE + 3):
        r.console(f"line {k}")
    r.release_console(show=True)
    r.error("the kernel said no hello in time")
    lines = out.getvalue().splitlines()
    assert lines[0] == "(3 earlier line(s) of the kernel's console not kept)"
    assert lines[1:] == [f"line {k}" for k in range(3, HELD_CONSOLE + 3)] and "no hello" in err.getvalue()


def test_json_shows_every_line_as_it_comes():
    out = io.StringIO()
    r = Reporter(as_json=True, out=out)
    r.hold_console()
    r.console("OpenSBI v1.2")
    r.release_console(show=False)
    assert [json.loads(x) for x in out.getvalue().splitlines()] == [{"event": "console", "text": "OpenSBI v1.2"}]
