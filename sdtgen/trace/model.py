"""What a trace is made of, as every writer takes it: the probes, the clock, and the runtime's packets.

Plain data, no emulator: a consumer (the emulated boot, `sdtgen qemu`, `sdtgen record`) reads packets
from the runtime's rings and hands each one, with its decoded events, to a sink (sdtgen/trace/sink.py).
"""

from __future__ import annotations

import re
import socket
import zlib
from typing import Literal

from sdtgen.errors import SdtError, printable
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


# A machine name is a path component everywhere it goes (lttng-relayd's host/NAME directory, a merged CTF trace's
# DIR/NAME): relayd's own rule, so a name one output takes every other takes too.
MACHINE_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
MAX_MACHINE_NAME = 64


def check_machine_name(name: str, option: str = "--name") -> str:
    """``name`` when it can name a machine in every output (non-empty, at most 64 of ``[A-Za-z0-9_.-]``, not
    starting with ``.``); else one line saying so, naming ``option``."""
    if MACHINE_NAME.fullmatch(name) and not name.startswith("."):
        return name
    why = ("is empty" if not name else f"is {len(name)} characters, more than {MAX_MACHINE_NAME}"
           if len(name) > MAX_MACHINE_NAME else "starts with '.'" if MACHINE_NAME.fullmatch(name)
           else "has a character other than letters, digits, '_', '.' and '-'")
    raise SdtError("", f"{option} {printable(name)!r} {why}: a machine name is a directory's name in every output",
                   f"give {option} a name of 1 to {MAX_MACHINE_NAME} of [A-Za-z0-9_.-], not starting with '.'")


def default_machine_name(kind: str, arch: str | None = None) -> str:
    """What a target is called when no --name says: this host's name (path-safe) + ``-`` + the target's kind, and
    for QEMU + ``-`` + the guest's architecture (several guests of one host are told apart by it)."""
    host = re.sub(r"[^A-Za-z0-9_.-]", "_", socket.gethostname()).lstrip(".") or "localhost"
    tail = f"-{kind}" + (f"-{arch}" if arch else "")
    return host[:MAX_MACHINE_NAME - len(tail)] + tail


def machine_id(name: str) -> int:
    """A machine's stable 32-bit id, from its name: the same name is the same machine in every run (never 0,
    which Perfetto reads as the host the trace was recorded on)."""
    return zlib.crc32(name.encode("utf-8")) or 1


# A correlation with no round trip (a recording: the first packet's end against its arrival): offset_ns is an upper
# bound (the packet ended no later than it arrived), how much earlier unknown.
UNBOUNDED = -1


@record(frozen=True)
class Machine:
    """Which machine a trace comes from, and where its kernel's clock stands against the host's real time
    (docs/trace.md, "Machines"): ``realtime = offset_ns + ticks_to_ns(t)``, correlated once when the session
    started (sdtgen/session/machine.py)."""

    name: str  # the machine name (check_machine_name)
    machine_id: int  # machine_id(name)
    offset_ns: int  # host CLOCK_REALTIME ns at the kernel clock's zero
    uncertainty_ns: int  # half the round trip of the correlation (0 when exact); UNBOUNDED: a one-sided bound

    @property
    def bounded(self) -> bool:
        return self.uncertainty_ns != UNBOUNDED

    def correlation(self) -> str:
        """How the machine's clock was put against the host's real time, in words (a trace's clock description)."""
        if self.offset_ns == 0 and not self.bounded:
            return "not correlated with the host's real time (no packet came to correlate it by)"
        if not self.bounded:
            return ("correlated with the host's CLOCK_REALTIME by its first packet's arrival: an upper bound (the "
                    "packet ended no later than it arrived)")
        return f"correlated with the host's CLOCK_REALTIME at the start, within {self.uncertainty_ns} ns"


@record(frozen=True)
class TraceMeta:
    arch: str  # sdtgen's architecture name: x86_64, i386, aarch64, riscv64
    clock_name: str  # an identifier: tsc, cntvct_el0, ...
    clock_hz: int  # clock ticks a second
    cpus: int
    probes: tuple[TraceProbe, ...]
    session: str = DEFAULT_SESSION  # the runtime's session the trace's packets come from (docs/sessions.md)
    session_id: int = 0  # its id: the packets' stream_id
    machine: Machine | None = None  # the machine it comes from and its clock's offset (None: not said)


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

