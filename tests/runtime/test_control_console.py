# ruff: noqa: F811
"""A console shared with a shell (docs/control.md): the host puts SDT_CONTROL_ESCAPE before every command line;
the core takes an escaped line as the same command and drops a partial line an escape interrupts, and
sdt_control_claims gives a line discipline exactly the bytes from an escape to the end of its line, every other
byte staying the shell's, in order."""

from __future__ import annotations

import ctypes

from hypothesis import given, settings
from hypothesis import strategies as st

# core: test_control's fixture (the control core built for this machine), used here under its own name
from test_control import built_core, core, feed, replies  # noqa: F401

from sdtgen.layout import VALUES, WORD

ESC = bytes([VALUES["SDT_CONTROL_ESCAPE"]])


def split(lib, data: bytes) -> tuple[bytes, bytes]:
    """Every byte through sdt_control_claims, as a line discipline passes them: (the shell's, the core's)."""
    shell, control = bytearray(), bytearray()
    for b in data:
        (control if lib.sdt_control_claims(ctypes.c_char(b)) else shell).append(b)
    return bytes(shell), bytes(control)


def test_an_escaped_line_is_the_command_without_it(core):
    assert feed(core, ESC + b"hello\n") == feed(core, b"hello\n")
    assert core.harness_line(ESC + b"hello") == 0 and replies(core)[-1] == f"{WORD['ok']} hello 0"


def test_an_escape_drops_the_partial_line_before_it_and_nothing_is_answered_for_that(core):
    """A stray `lis` (a host that died mid-line, a shell's bytes) does not spoil the next command."""
    assert feed(core, b"lis") == []
    lines = feed(core, ESC + b"hello\n")
    assert lines[-1] == f"{WORD['ok']} hello 0" and len(lines) == 2
    assert feed(core, b"x" * (VALUES["SDT_CONTROL_LINE"] + 10)) == []  # overlong, then a command starts afresh
    assert feed(core, ESC + b"hello\n")[-1] == f"{WORD['ok']} hello 0"


def test_a_line_a_kernel_assembled_itself_is_the_command_after_its_last_escape(core):
    """A kernel with a line discipline of its own hands sdt_control_line the whole line, a stray partial one
    before the host's escape included: the command is what follows the last escape."""
    assert core.harness_line(b"lis" + ESC + b"hello") == 0 and replies(core)[-1] == f"{WORD['ok']} hello 0"
    assert core.harness_line(ESC + b"li" + ESC + b"s" + ESC + b"hello") == 0
    assert replies(core)[-1] == f"{WORD['ok']} hello 0"


def test_claims_gives_the_core_the_escaped_line_and_the_shell_the_rest(core):
    shell, control = split(core, b"echo be" + ESC + b"hello\n" + b"fore\n")
    assert (shell, control) == (b"echo before\n", ESC + b"hello\n")
    assert feed(core, control)[-1] == f"{WORD['ok']} hello 0"


SHELL_BYTES = st.binary(max_size=40).map(lambda b: b.replace(ESC, b""))
COMMAND = st.sampled_from([b"hello", b"stats", b"list", b"nonsense 1 2"])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(SHELL_BYTES, COMMAND), max_size=8), SHELL_BYTES)
def test_any_interleaving_splits_back_into_the_shells_bytes_and_the_hosts_lines(core, pieces, tail):
    """A model: the host's lines arrive between any of the shell's bytes (a line already begun included); the
    shell gets its bytes back in order and the core exactly the host's lines."""
    data = b"".join(s + ESC + c + b"\n" for s, c in pieces) + tail
    shell, control = split(core, data)
    assert shell == b"".join(s for s, _ in pieces) + tail
    assert control == b"".join(ESC + c + b"\n" for _, c in pieces)


def test_a_core_not_started_names_the_command_it_refuses(tmp_path):
    """Before sdt_control_init every line is refused, and the refusal names its command as every reply does (the
    host takes a reply only for the command it sent): `error -2 hello: ...`, escape and stray bytes not part of it."""
    lib = built_core(tmp_path / "unstarted.so")  # a copy of its own: harness_start is never called
    assert lib.harness_line(b"lis" + ESC + b"hello") == VALUES["SDT_ERR_INIT"]
    assert replies(lib)[-1].startswith(f"{WORD['error']} {VALUES['SDT_ERR_INIT']} hello: ")


def test_only_a_newline_or_carriage_return_ends_a_claimed_line_not_a_tab_or_another_control_byte(core):
    """A command's words may be split by a tab, and stray control bytes below CR (a backspace, a form feed, a
    vertical tab) are part of the host's line: the whole line to its newline is the core's, what follows the shell's."""
    line = ESC + b"nonsense\t1\x08\x0b\x0c\x01 2\n"
    assert split(core, line + b"ls\n") == (b"ls\n", line)
    assert split(core, ESC + b"hello\r" + b"ls\n") == (b"ls\n", ESC + b"hello\r")
