"""sdtgen/session/starts.py: the sessions the commands start, with the defaults the command line shows."""

from __future__ import annotations

import argparse
import inspect

from sdtgen.cli import build_parser
from sdtgen.session.starts import torture


def test_torture_on_the_command_line_takes_the_defaults_the_session_start_has():
    """`sdtgen torture` without --cpus, --toggles, --arm, --seed or --timeout runs what starts.torture runs when
    given none of them: one set of defaults, read by the command line from the session's constants."""
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    cli = {a.dest: a.default for a in sub.choices["torture"]._actions}
    signature = inspect.signature(torture).parameters
    shared = ("cpus", "toggles", "arm", "seed", "timeout")
    assert {k: cli[k] for k in shared} == {k: signature[k].default for k in shared}
