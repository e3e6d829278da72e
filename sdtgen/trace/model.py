"""What a run recorded, as the trace writers take it: probes, events and the clock.

Plain data, no emulator: the data path fills these, the writers in this package read them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Literal

FORMATS = ("ctf", "perfetto", "chrome")
Format = Literal["ctf", "perfetto", "chrome"]


@dataclass(frozen=True)
class TraceProbe:
    id: int  # the event id in the trace; unique per trace
    provider: str
    module: str
    function: str
    name: str
    arg_types: tuple[str, ...]  # declared C types, as sdt.h's SDT_PROBE_DEFINEn names them

    @property
    def spec(self) -> str:
        return f"{self.provider}:{self.module}:{self.function}:{self.name}"


@dataclass(frozen=True)
class TraceEvent:
    probe_id: int
    cpu: int
    ts: int  # guest clock ticks
    args: tuple[int | str | None, ...]  # a str is the string copied when the probe fired; None: unreadable


@dataclass(frozen=True)
class TraceMeta:
    arch: str  # sdtgen's architecture name: x86_64, i386, aarch64, riscv64
    clock_name: str  # an identifier: tsc, cntvct_el0, ...
    clock_hz: int  # guest clock ticks a second
    cpus: int
    probes: tuple[TraceProbe, ...]
    lost: dict[int, int] = field(default_factory=dict)  # CPU -> events its ring buffer lost


def ticks_to_ns(ticks: int, hz: int) -> int:
    """Guest ticks as nanoseconds since the clock's zero, rounded down (exact integer arithmetic)."""
    return ticks * 1_000_000_000 // hz


def write_trace(path: str | os.PathLike[str], fmt: Format, meta: TraceMeta, events: list[TraceEvent]) -> None:
    """Write ``events`` (merged in timestamp order) to ``path`` in ``fmt``, all or nothing.

    ``ctf`` makes a directory; the others one file. A path that cannot be written is an SdtError.
    """
    if fmt == "ctf":
        from sdtgen.trace.ctf import write_ctf as write
    elif fmt == "perfetto":
        from sdtgen.trace.perfetto import write_perfetto as write
    elif fmt == "chrome":
        from sdtgen.trace.chrome import write_chrome as write
    else:
        raise ValueError(f"unknown trace format {fmt!r}: one of {', '.join(FORMATS)}")
    write(path, meta, events)
