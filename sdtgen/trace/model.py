"""What a trace is made of, as every writer takes it: the probes, the clock, and the runtime's packets.

Plain data, no emulator: a consumer (the emulated boot, `sdtgen qemu`, `sdtgen record`) reads packets
from the runtime's rings and hands each one, with its decoded events, to a sink (sdtgen/trace/sink.py).
"""

from __future__ import annotations

import re
from typing import Literal

from sdtgen.layout import VALUES
from sdtgen.plaindata import record

FORMATS = ("ctf", "perfetto", "chrome")
DEFAULT_SESSION = "default"  # the runtime's default session's name (docs/sessions.md): what a trace of it says
Format = Literal["ctf", "perfetto", "chrome"]


@record(frozen=True)
class TraceProbe:
    key: int  # the event id its events carry (sdt_probe.key)
    provider: str
    module: str
    function: str
    name: str
    arg_types: tuple[str, ...]  # declared C types, as sdt.h's SDT_PROBE_DEFINEn names them

    @property
    def spec(self) -> str:
        return f"{self.provider}:{self.module}:{self.function}:{self.name}"


# The contexts a task event says (layout.py: SDT_CONTEXT_*), by value.
CONTEXTS = {v: n[len("SDT_CONTEXT_"):].lower() for n, v in VALUES.items()
            if n.startswith("SDT_CONTEXT_") and n != "SDT_CONTEXT_UNSAID"}


@record(frozen=True)
class Task:
    """Who a firing ran for, as the kernel's task hook said it (docs/runtime.md): an event recorded by a kernel
    with no hook, or before its packet said any, has none (None), which is not task 0."""

    id: int  # the kernel's task id; 0: none (an interrupt, the kernel's own context)
    context: str  # CONTEXTS: kernel, task or interrupt
    name: str | None  # the kernel's name of it; None when it has none

    def __str__(self) -> str:
        return f"{self.name or '?'}/{self.id}" + ("" if self.context == "task" else f" ({self.context})")


@record(frozen=True)
class TraceMeta:
    arch: str  # sdtgen's architecture name: x86_64, i386, aarch64, riscv64
    clock_name: str  # an identifier: tsc, cntvct_el0, ...
    clock_hz: int  # clock ticks a second
    cpus: int
    probes: tuple[TraceProbe, ...]
    session: str = DEFAULT_SESSION  # the runtime's session the trace's packets come from (docs/sessions.md)
    session_id: int = 0  # its id: the packets' stream_id


@record
class Lost:
    """What one CPU's ring lost: events discarded (ring full, nested, too big) and events in packets the
    writer overwrote before they were read."""

    discarded: int = 0
    overwritten: int = 0

    @property
    def total(self) -> int:
        return self.discarded + self.overwritten


def ticks_to_ns(ticks: int, hz: int) -> int:
    """Clock ticks as nanoseconds since the clock's zero, rounded down (exact integer arithmetic)."""
    return ticks * 1_000_000_000 // hz


# What a machine may be called (docs/live.md): a relay daemon's host directory takes it as it is (path-safe).
_MACHINE_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,63}")


def check_machine_name(name: str, option: str = "--name") -> str:
    """A machine's name as every output shows it (the relay session's hostname, the trace's): 1 to 64 letters,
    digits, '_', '.' or '-', not starting with '.'; one line if it is not."""
    if not _MACHINE_NAME.fullmatch(name):
        from sdtgen.errors import SdtError, printable

        raise SdtError("", f"{option} {printable(name)!r} is not a machine name",
                       "give 1 to 64 letters, digits, '_', '.' or '-', not starting with '.'")
    return name


def default_machine_name(kind: str, arch: str | None = None) -> str:
    """The name of a machine no --name named: this host's name, made path-safe, then the target's kind (and for
    QEMU, the guest's architecture), e.g. ``build7-qemu-riscv64``."""
    import socket

    host = re.sub(r"[^A-Za-z0-9_.-]", "_", socket.gethostname()).lstrip(".") or "localhost"
    suffix = f"-{kind}" + (f"-{arch}" if arch else "")
    return host[:64 - len(suffix)] + suffix
