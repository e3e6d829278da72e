"""What a target is: the kernel's side of a session, however the host reaches it.

A target mirrors the runtime's entry points and the control core's commands (sdtgen/runtime/
sdt_control.c): it boots or attaches to a kernel, and then arms, disarms, runs calls, reads memory,
drains the rings and tortures, answering with the plain records below. Everything above it (probe
specs checked against the image, the events decoded and put in order, the trace, the output, faults
and signals) is the session's (sdtgen/session/session.py), written once for every target.

Packets and the runtime's log lines reach the session through two callbacks a target is given:
``on_packet(cpu, bytes)`` for each packet it consumed (the packet as it stands in the ring, padded to
its size), ``on_log(entry, line)`` for each line the runtime reported (``entry``: the address of the
site table entry the line is about, 0 when none is known).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from sdtgen.trace.model import Lost

if TYPE_CHECKING:  # the dscript package is imported by what aggregates, not by every target
    from sdtgen.dscript.tables import CpuTables

PacketFn = Callable[[int, bytes], None]
LogFn = Callable[[int, str], None]
TRAP, BRANCH = "trap", "branch"
ARM_MODES = (TRAP, BRANCH)


@dataclass(frozen=True)
class CallFault:
    """How a call ended without returning: ``what`` in words, at ``pc``."""

    what: str
    pc: int
    interrupted: bool = False  # Ctrl-C (or SIGTERM, SIGHUP) stopped it


class Halted(Exception):
    """The kernel cannot go on (it hung, panicked, or its machine ended); the message says what happened, ``fix``
    what to do, and ``fault`` how the call that was running ended, when one was."""

    def __init__(self, message: str, fault: CallFault | None = None, fix: str = "") -> None:
        super().__init__(message)
        self.fault = fault
        self.fix = fix


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM, SIGHUP) stopped the kernel's call: ``fault`` says where it was."""

    def __init__(self, fault: CallFault) -> None:
        super().__init__(fault.what)
        self.fault = fault


class Refused(Exception):
    """The kernel refused a command: ``code`` is the SDT_ERR_* it gave, the message its words."""

    def __init__(self, code: int, text: str) -> None:
        super().__init__(text)
        self.code = code
        self.text = text


@dataclass(frozen=True)
class Booted:
    """What the kernel says of itself once it is up (the control core's hello, or the emulated boot's sdt_init)."""

    arch: str
    cpus: int
    clock: str  # what its clock reads, an identifier (the trace's clock name)
    clock_hz: int
    patched: int | None  # sites sdt_init wrote (None: the kernel does not say, as a stream that is only recorded)
    refused: int | None  # sites it refused
    folded: int | None  # entries naming another entry's instruction
    protocol: str  # "safe", or "naive" in a runtime built with -DSDT_NAIVE_PROTOCOL


@dataclass(frozen=True)
class Returned:
    """One CPU's end of a call: the return register (raw), or its fault."""

    cpu: int
    value: int = 0
    fault: CallFault | None = None


@dataclass(frozen=True)
class DamagedTables:
    """A CPU whose aggregation tables could not be believed: what is wrong with them."""

    cpu: int
    what: str


@dataclass(frozen=True)
class ProbeState:
    """A probe as the kernel's runtime sees it (the control core's `list`)."""

    key: int
    spec: str
    sites: int
    armed: int


@dataclass
class Summary:
    """What a torture run measured, the same on every target: CPUs calling a function over and over while
    another arms and disarms its probes through the runtime.

    An execution is **torn** when a CPU ran bytes of a site that are no instruction of the site's old state,
    its new state, or the protocol's breakpoint (the emulator checks every instruction fetched in a site;
    real CPUs show it as a fault whose pc lies inside a site). It is **faulted** when it faulted anywhere
    else, or did not come back; **wrong** when it returned another value than the same call with nothing
    armed. A **leak** is a disarmed window (from a disable's or an unload's return to the next arm) in which a site ran
    armed (the emulator watches every fetch) or a calling CPU recorded (a kernel's control core checks each caller's
    window): a disable that did not disarm.
    """

    protocol: str
    cpus: int  # the CPUs calling
    toggles: int  # asked for
    done: int = 0  # made
    calls: int = 0
    firings: int = 0  # events recorded (and lost to full rings): a run whose sites never fired proves nothing
    faults: int = 0
    torn: int = 0
    wrong: int = 0
    transient: int = 0  # traps on the protocol's transient breakpoint (the protocol was exercised)
    timed_out: bool = False
    leaked: int = 0  # disarmed windows in which a calling CPU recorded
    windows: int = 0  # disarmed windows checked (on a kernel's control core: one per calling CPU)
    checked: int = 0  # exhaustive: (state, position) pairs executed
    per_cpu_calls: list[int] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return (self.faults == 0 and self.torn == 0 and self.wrong == 0 and self.leaked == 0 and not self.timed_out
                and (self.firings > 0 or self.checked > 0))

    def as_dict(self) -> dict:
        return {"protocol": self.protocol, "cpus": self.cpus, "toggles": self.done, "asked": self.toggles,
                "calls": self.calls, "firings": self.firings, "faults": self.faults, "torn": self.torn,
                "wrong": self.wrong, "leaked": self.leaked, "windows": self.windows, "transient": self.transient,
                "timed_out": self.timed_out,
                "checked": self.checked, "passed": self.passed}

    def text(self) -> str:
        verdict = "ok" if self.passed else "FAILED"
        cpus = f"{self.cpus} CPU" + ("s" if self.cpus != 1 else "")
        if self.checked:
            return (f"{verdict}: {self.protocol} protocol, exhaustive: {self.checked} executions at every store, "
                    f"{self.torn} torn, {self.faults} faults")
        line = (f"{verdict}: {self.protocol} protocol, {cpus}, {self.done} toggles: {self.calls} calls, "
                f"{self.firings} firings, {self.faults} faults, {self.torn} torn, {self.wrong} wrong")
        if self.windows:
            line += f", {self.leaked} of {self.windows} disarmed windows fired"
        elif self.done:  # a kernel that gives no CPU area (sdt_control_ops.area) cannot watch its callers
            line += ", no disarmed window watched (that a disable disarms was not checked)"
        if self.timed_out:
            line += f" (timed out after {self.done} of {self.toggles} toggles)"
        elif self.firings == 0:
            line += " (no site fired: give arguments that reach the probes)"
        return line


class Target(Protocol):
    """The kernel's side of a session (see the module's docstring)."""

    booted: Booted
    on_packet: PacketFn
    on_log: LogFn

    def enable(self, spec: str, mode: str) -> int: ...

    def disable(self, spec: str) -> int: ...

    def set_mode(self, mode: str) -> int: ...

    def run(self, func: int, args: list[int | str], cpu: int | None, timeout: float) -> list[Returned]: ...

    def read(self, addr: int, size: int) -> bytes | None: ...

    def drain(self) -> None: ...

    def lost(self) -> dict[int, Lost]: ...

    def probes(self, spec: str = "") -> list[ProbeState]: ...

    def torture(self, func: int, args: list[int], spec: str, toggles: int, mode: str, timeout: float) -> Summary: ...

    # Loadable modules (a target that cannot load one has neither): the module's name, its sites patched, and its
    # functions and probes (TableProbe) as the kernel placed them; unload returns the sites it disarmed.
    # def load_module(self, path: str) -> LoadedModule: ...
    # def unload_module(self, name: str) -> int: ...
    # Programs and their tables (docs/aggregations.md): memory the kernel gives, the runtime's entry points.
    def attach_tables(self) -> None:
        """Every CPU's aggregation tables attached (sdt_agg_attach), once."""
        ...

    def load_program(self, code: bytes) -> int:
        """``code`` written into program memory the kernel gives, kept there: its address."""
        ...

    def enable_program(self, spec: str, mode: str, program: int, size: int) -> int:
        """sdt_enable_program of the loaded program at ``program``: the sites armed (Refused: the runtime's code)."""
        ...

    def disable_program(self, spec: str) -> int: ...

    def take_tables(self) -> list[CpuTables | DamagedTables]:
        """sdt_agg_switch, then every CPU's frozen half, read and checked."""
        ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class LoadedModule:
    """A module a target loaded: its name, the sites the runtime patched, its functions and its probes."""

    name: str
    patched: int
    functions: dict[str, int]
    probes: tuple
