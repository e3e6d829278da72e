"""The fixture kernel as the whole example builds it (docs/post-mortem.md, "A whole example"): its own C with
fixtures/qemu/panic/panic.c (a panic on every CPU), flight.c (its own flight recorder, opened at boot) and
second_line.c (a second control line on x86's COM2; QEMU's virt boards have one UART, and no second line); one build
per architecture, shared by the tests that boot it."""

from __future__ import annotations

from pathlib import Path

from helpers import FIXTURE, ROOT

QEMU_FIXTURE = ROOT / "fixtures" / "qemu"
ADDED = [QEMU_FIXTURE / "panic" / "panic.c", QEMU_FIXTURE / "flight.c"]
SECOND_LINE = QEMU_FIXTURE / "second_line.c"
TWO_LINES = ("x86_64", "i386")  # the pc machine: COM2


def whole_kernel(qemu_kernel, arch: str) -> Path:
    """``qemu_kernel`` (tests/conftest.py) of these sources for ``arch``: the image's path."""
    added = [*ADDED, SECOND_LINE] if arch in TWO_LINES else ADDED
    return qemu_kernel(arch, KERNEL_SRCS=" ".join(str(p) for p in [*sorted(FIXTURE.glob("*.c")), *added]))
