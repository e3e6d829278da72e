"""What a target is: the kernel's side of a session, however the host reaches it.

A target mirrors the runtime's entry points and the control core's commands (sdtgen/runtime/
sdt_control.c): it boots or attaches to a kernel, and then arms, disarms, runs calls, reads memory,
drains the rings and tortures, answering with the plain records below. Everything above it (probe
specs checked against the image, the events decoded and put in order, the trace, the output, faults
and signals) is the session's (sdtgen/session/session.py), written once for every target.

A target is built with a ``Host`` and sees nothing else of the host: the image it runs (its path, its
architecture, its symbols) and the sinks it hands what the kernel says to (a packet, a log line, a console
line, a warning, an --action's result, a fault of the runtime's own). The faults, the probes' hits, the last
firing and every enabling stay the session's, as libdtrace's consumer reaches the kernel through a vector of
functions and barectf's platform gets callbacks: neither hands the lower side the upper object.

What only some targets can do is declared, not probed: each target's ``capabilities`` names the optional
verbs it has (MODULES, ACTIONS, LISTENS, IDLE, EXHAUSTIVE, LEAVES, SALVAGES, SESSIONS, CLOCK), each a small protocol
below. (A capability is named for what the target does, as its protocol is: LISTENS is not the kind of target
sdtgen.targets.LISTEN opens, which has it.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from sdtgen.layout import VALUES
from sdtgen.plaindata import record
from sdtgen.trace.model import Lost

if TYPE_CHECKING:  # the dscript package is imported by what aggregates, not by every target
    from sdtgen.dscript.tables import CpuTables
    from sdtgen.image import Image
    from sdtgen.trace.streams import Streams

PacketFn = Callable[..., bool]  # (cpu, the packet as it stands in the ring, [its ring slot's number]): taken
LogFn = Callable[[int, str], None]
TRAP, BRANCH = "trap", "branch"
ARM_MODES = (TRAP, BRANCH)

# The optional verbs a target declares in its ``capabilities`` (each a protocol below).
MODULES = "modules"  # load_module, unload_module: a kernel that loads modules
ACTIONS = "actions"  # add_action, remove_action: a guest function called when a probe fires
LISTENS = "listens"  # listen: a kernel that streams by itself, read to the line's end
IDLE = "idle"  # idle: what the kernel sends while no command runs, read
EXHAUSTIVE = "exhaustive"  # exhaustive: every interleaving of a patch with a fetch, checked
LEAVES = "leaves"  # leave: a kernel left running when the session ends, its probes disarmed first
SALVAGES = "salvages"  # rings: the machine's memory and its CPU areas, read after a crash (docs/post-mortem.md)
SESSIONS = "sessions"  # open_own, sessions: a runtime with several tracers at once, the host's one of them
CLOCK = "clock"  # clock: the kernel's clock read now, on the host's request (its correlation with real time)


@record(frozen=True)
class CallFault:
    """How a call ended without returning: ``what`` in words, at ``pc``."""

    what: str
    pc: int
    interrupted: bool = False  # Ctrl-C (or SIGTERM, SIGHUP) stopped it


@record(frozen=True)
class Host:
    """What a target sees of the host: the image facts it reads and the sinks it calls (never the session)."""

    image: Image  # the kernel's file: its path, architecture (image.arch), symbols and where an address lies
    arm: str  # how the session arms its first enabling (TRAP or BRANCH)
    packet: PacketFn  # a closed packet of a CPU: whether it was taken (a damaged one is left out and counted)
    log: LogFn  # a line the runtime reported (``entry``: the site table entry it is about, 0 when none is known)
    console: Callable[[str], None]  # what the kernel printed on its console
    line: Callable[[str], None]  # a line a streaming kernel sent, shown as it comes
    warning: Callable[[str], None]  # something lost or doubtful, said once
    action: Callable[[int, str, int], None]  # an --action's guest function returned (cpu, symbol, value)
    fault: Callable[[str, CallFault, int], None]  # the runtime's own call WHAT faulted on a CPU: said and counted
    # The packets' checks, once the target knows the kernel's clock rate, CPUs and packet size (None: each CPU's
    # first packet says it) and the largest packet it takes.
    open_streams: Callable[..., Streams]
    # A call ended the kernel's work without stopping its machine (the emulator's guest faulted, or did not
    # return), said before the target reads anything through the kernel's own code: the post-mortem's moment.
    crashed: Callable[[str], None] = lambda why: None


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


@record(frozen=True)
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


@record(frozen=True)
class Returned:
    """One CPU's end of a call: the return register (raw), or its fault."""

    cpu: int
    value: int = 0
    fault: CallFault | None = None


@record(frozen=True)
class DamagedTables:
    """A CPU whose aggregation tables could not be believed: what is wrong with them."""

    cpu: int
    what: str


@record(frozen=True)
class SessionState:
    """One session a kernel's runtime has open (the control core's `sessions` line, docs/sessions.md): its id (the
    stream_id of its packets; 0 the default session), name, ring policy ("drop" or "overwrite"), CPUs, the first
    CPU's ring and packet bytes, packets opened over its CPUs, events lost (discarded when a ring was full,
    overwritten unread), firings on a CPU past its CPUs (misplaced), and the probes it takes."""

    id: int
    name: str
    policy: str
    cpus: int
    ring: int
    packet: int
    packets: int
    discarded: int
    overwritten: int
    misplaced: int
    probes: int


def snapshot_fix(code: int) -> str:
    """What to do when the runtime refused a snapshot with ``code`` (sdt_snapshot's errors, docs/sessions.md)."""
    if code == VALUES["SDT_ERR_BUSY"]:
        return "a snapshot of it was under way, or it is closing: take it again"
    if code == VALUES["SDT_ERR_ARG"]:
        return ("open it with snapshot packets (sdt_session_config's snapshot_packets, or `session open` with "
                "SNAPSHOT_PACKETS)")
    return "see --sessions for the sessions the kernel has open"


@record(frozen=True)
class OwnSession:
    """The session a host opens for itself beside the kernel's (``--session NAME``): each CPU's ring of ``ring``
    bytes cut in packets of ``packet``, ``policy`` ("drop" or "overwrite"), ``tables`` bytes of each CPU's
    aggregation tables (0: none)."""

    name: str
    ring: int
    packet: int
    policy: str
    tables: int = 0


@record(frozen=True)
class ProbeState:
    """A probe as the kernel's runtime sees it (the control core's `list`)."""

    key: int
    spec: str
    sites: int
    armed: int


@record
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

    With a keeping session (``--keep SPEC``): a second session counts every firing of SPEC's probes (an aggregation
    of its own) while the torture's session arms and disarms the same sites. ``kept`` is what it counted over
    ``kept_calls`` calls made while it held them (the callers' and the targets' reference calls); every call fires
    the kept probes as often, so a firing lost to it leaves ``kept`` no multiple of ``kept_calls`` (the tests hold
    it to the native run's count a call). ``kept_dropped``: updates its tables could not take; ``kept_disarmed``:
    executions of a kept site the emulator saw disarmed (the torture's disarm took a site the other session keeps).
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
    idle: int = 0  # calling CPUs that finished no call (the emulator counts each): their part proves nothing
    keep: str = ""  # the keeping session's spec ("": none)
    kept: int = 0
    kept_calls: int = 0
    kept_dropped: int = 0
    kept_disarmed: int = 0
    kept_each: int = 0  # the kept probes' firings in one call, counted by the keeping session after the run

    @property
    def kept_whole(self) -> bool:
        """The keeping session counted every firing: each call's (kept_each, measured by one call more) times the
        calls, none dropped, no kept site seen disarmed."""
        if not self.keep:
            return True
        if self.checked:
            return self.kept_disarmed == 0
        return (self.kept_each > 0 and self.kept_calls > 0 and self.kept == self.kept_calls * self.kept_each
                and self.kept_dropped == 0 and self.kept_disarmed == 0)

    @property
    def passed(self) -> bool:
        return (self.faults == 0 and self.torn == 0 and self.wrong == 0 and self.leaked == 0 and not self.timed_out
                and self.idle == 0 and self.fired and self.kept_whole)

    @property
    def fired(self) -> bool:
        """The sites ran armed: the torture's session recorded, the exhaustive check executed, or the keeping session
        counted. The last alone suffices: arming a site another session keeps only sets the torture's session's bit,
        so its armed windows can be too short for a busy machine's callers to record in; the kept count proves the
        sites fired through every toggle."""
        return self.firings > 0 or self.checked > 0 or (bool(self.keep) and self.kept > 0)

    def as_dict(self) -> dict:
        return {"protocol": self.protocol, "cpus": self.cpus, "toggles": self.done, "asked": self.toggles,
                "calls": self.calls, "firings": self.firings, "faults": self.faults, "torn": self.torn,
                "wrong": self.wrong, "leaked": self.leaked, "windows": self.windows, "transient": self.transient,
                "timed_out": self.timed_out, "idle": self.idle,
                "checked": self.checked, "passed": self.passed,
                **({"keep": self.keep, "kept": self.kept, "kept_calls": self.kept_calls,
                    "kept_dropped": self.kept_dropped, "kept_disarmed": self.kept_disarmed,
                    "kept_each": self.kept_each} if self.keep else {})}

    def text(self) -> str:
        verdict = "ok" if self.passed else "FAILED"
        cpus = f"{self.cpus} CPU" + ("s" if self.cpus != 1 else "")
        if self.checked:
            return (f"{verdict}: {self.protocol} protocol, exhaustive: {self.checked} executions at every store, "
                    f"{self.torn} torn, {self.faults} faults" + self._kept_text())
        line = (f"{verdict}: {self.protocol} protocol, {cpus}, {self.done} toggles: {self.calls} calls, "
                f"{self.firings} firings, {self.faults} faults, {self.torn} torn, {self.wrong} wrong")
        if self.windows:
            line += f", {self.leaked} of {self.windows} disarmed windows fired"
        elif self.done:  # a kernel that gives no CPU area (sdt_control_ops.area) cannot watch its callers
            line += ", no disarmed window watched (that a disable disarms was not checked)"
        if self.idle:
            line += f" ({self.idle} calling CPU" + ("s" if self.idle != 1 else "") + " finished no call)"
        if self.timed_out:
            line += f" (timed out after {self.done} of {self.toggles} toggles)"
        elif not self.fired:
            line += " (no site fired: give arguments that reach the probes)"
        return line + self._kept_text()

    def _kept_text(self) -> str:
        if not self.keep:
            return ""
        if self.checked:
            return f"; {self.keep} kept armed by another session: {self.kept_disarmed} executions found it disarmed"
        text = f"; kept by another session: {self.kept} firings of {self.keep} in {self.kept_calls} calls"
        if self.kept_dropped:
            text += f", {self.kept_dropped} its tables could not take"
        if self.kept_disarmed:
            text += f", {self.kept_disarmed} executions of a kept site found it disarmed"
        if self.kept_calls and self.kept % self.kept_calls:
            text += " (not the same number each call: firings were lost)"
        return text


@record(frozen=True)
class TortureJob:
    """A torture as the session asks for it (see Summary): every CPU but one calls ``func`` (``symbol``) with
    ``args`` over and over while the last arms (``mode``) and disarms ``spec`` ``toggles`` times (mode
    ``module``: unloads and loads the module, ``spec`` enabled throughout), for at most ``timeout`` seconds.
    ``mask``: the bits of the return value compared. ``progress``: told the toggles made so far, as they are.
    ``keep``: the keeping session's spec ("": none); the target calls ``take`` once, before its calls begin (after
    the reference call, when it makes one the host can order), so the keeping session holds its sites throughout."""

    func: int
    symbol: str
    args: list[int]
    mask: int
    spec: str
    toggles: int
    mode: str
    timeout: float
    progress: Callable[[int], None] = lambda done: None
    keep: str = ""
    take: Callable[[], None] = lambda: None


class Target(Protocol):
    """The kernel's side of a session (see the module's docstring)."""

    booted: Booted
    capabilities: frozenset[str]  # the optional verbs it has (MODULES, ACTIONS, LISTENS, IDLE, EXHAUSTIVE, LEAVES)
    damaged: int  # packets, frames and counters the guest or the line spoiled: left out, and counted
    # The last drain closed every CPU's open packet (a control core can say one stayed open, or refuse to flush):
    # only then may a live stream say a CPU has nothing before the drain (docs/live.md, "Quiet CPUs").
    flushed_all: bool

    def enable(self, spec: str, mode: str) -> int: ...

    def disable(self, spec: str) -> int: ...

    def set_mode(self, mode: str) -> int: ...

    def run(self, func: int, args: list[int | str], cpu: int | None, timeout: float) -> list[Returned]: ...

    def read(self, addr: int, size: int) -> bytes | None: ...

    def drain(self) -> None: ...

    def lost(self) -> dict[int, Lost]: ...

    def probes(self, spec: str = "") -> list[ProbeState]: ...

    def torture(self, job: TortureJob) -> Summary:
        """The torture on this kernel (its ``firings``: the events it counted that never reached the host's sinks,
        such as those full rings lost; the session adds those it saw)."""
        ...

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


class Modules(Protocol):
    """MODULES: loadable modules."""

    expects_modules: bool  # the boot made room for a module: an enabling applies to those loaded later too

    def load_module(self, path: str) -> LoadedModule:
        """The module's name, its sites patched, its functions and probes (TableProbe) as the kernel placed them."""
        ...

    def unload_module(self, name: str) -> int:
        """The sites it disarmed."""
        ...


class Actions(Protocol):
    """ACTIONS: a guest function called with a probe's arguments whenever a probe matching a spec fires (the
    session enables the spec once the action is added, and removes it if that is refused)."""

    def add_action(self, spec: str, func: int, symbol: str) -> None: ...

    def remove_action(self, spec: str, func: int) -> None:
        """The action on ``spec`` calling ``func`` added last taken back, that one only (another the same stays)."""
        ...


class Listens(Protocol):
    """LISTENS: a kernel that streams by itself."""

    def listen(self) -> None:
        """What it sends, read to the line's end."""
        ...


class Idles(Protocol):
    """IDLE: what the kernel sends between commands, read for up to ``seconds``."""

    def idle(self, seconds: float) -> None: ...


class Leaves(Protocol):
    """LEAVES: a kernel that keeps running when the session ends (attach): what the session armed, disarmed
    before its last flush and drain, so nothing it records after them stays unread for the next session."""

    def leave(self) -> None: ...


class Sessions(Protocol):
    """SESSIONS: a runtime with several sessions (docs/sessions.md). ``open_own`` opens the host's own session beside
    the kernel's and makes every session-scoped verb (enable, disable, programs, tables, drain, lost) act on it; the
    packets taken from then on are its own (their stream_id its id: another's are left out, counted in ``damaged``
    and said). ``close`` closes it before the kernel is left or powered off."""

    def open_own(self, own: OwnSession) -> int:
        """`session open`: the session's id (Refused: the runtime's code, SDT_ERR_MEMORY, FULL, EXISTS, NAME)."""
        ...

    def sessions(self) -> list[SessionState]:
        """Every session the kernel has open, the default one first (`sessions`)."""
        ...

    def read_session(self, name: str, take: PacketFn) -> SessionState:
        """Another session's packets read by name (the kernel's flight recorder): drained into ``take``."""
        ...

    def take_snapshot(self, name: str) -> dict[str, int]:
        """`snapshot NAME`: the session's snapshot taken now (docs/sessions.md, "Snapshots"); what the kernel said."""
        ...

    def memory(self) -> Rings | None:
        """The kernel's memory read through the control core (`read`), with the registry's address where the image
        has one, as a post-mortem reads a machine's; None without the registry."""
        ...


class Clock(Protocol):
    """CLOCK: the clock the kernel stamps events with, read when the host asks (the control core's `clock`, the
    emulator's own clock routine): the host reads its real-time clock around it (sdtgen/session/machine.py)."""

    def clock(self) -> int:
        """The kernel clock's value now, in its ticks."""
        ...


class Exhaustive(Protocol):
    """EXHAUSTIVE: every store the runtime makes to ``symbol``'s sites (or the loaded module's) against every
    instruction boundary another CPU may fetch at, in every order the store's bytes can land."""

    def exhaustive(self, symbol: str, module: bool, keep: str = "", take: Callable[[], None] = lambda: None) -> Summary:
        """``keep``: the host's own session holds its probes armed (``take`` arms them) while the default session's
        changes are checked."""
        ...


@record(frozen=True)
class Rings:
    """Where a post-mortem reads: the machine's memory (``read(addr, size)``, ValueError where it has none); the
    default session's CPU areas the host was told of (CPU k's struct sdt_cpu at ``areas[k]``, its ring at
    ``rings[k]``, both the host's addresses; empty when it was told of none); ``host``, a kernel address as the
    host reads it, when the host knows exactly how the kernel's memory maps (then each area's self field is
    checked); ``registry``, the host's address of the runtime's sdt_session_table when the image has one (every
    session's areas are found there); ``kernel``, the best the host knows of the mapping, by which it follows the
    registry's addresses (the image's segments: a kernel's memory mapped as its data is)."""

    read: Callable[[int, int], bytes]
    areas: tuple[int, ...] = ()
    rings: tuple[int | None, ...] = ()
    host: Callable[[int], int] | None = None
    registry: int | None = None
    kernel: Callable[[int], int] | None = None


class Salvages(Protocol):
    """SALVAGES: the rings can be read from outside the kernel, whatever state it is in."""

    def rings(self) -> Rings | None:
        """The memory and areas, or None when this machine's cannot be read now (said why, once)."""
        ...


@record(frozen=True)
class LoadedModule:
    """A module a target loaded: its name, the sites the runtime patched, its functions and its probes."""

    name: str
    patched: int
    functions: dict[str, int]
    probes: tuple
