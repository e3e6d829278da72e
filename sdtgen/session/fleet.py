"""Several machines traced in one command (`sdtgen fleet`, `attach`/`record` with several --serial): each machine a
session of its own (sdtgen/session/starts.py) on a thread of its own, the same actions on each, so one slow or failing
machine never holds up the others. Every line a machine's session prints says the machine (the Reporter's
``machine``); each machine's summary line comes as soon as it ends; the fleet fails if any machine failed, and a last
line says which.

The trace: ``--trace DIR`` one CTF trace a machine (DIR/NAME/), ``--trace F.pftrace`` (or .json) one file of every
machine; ``--relayd URL`` streams each machine as a relay session of its own, named after it (the Tracing's).
"""

from __future__ import annotations

import copy
import ctypes
import os
import re
import sys
import threading
from collections.abc import Callable
from typing import TextIO

from sdtgen.errors import SdtError, printable
from sdtgen.plaindata import record, replace
from sdtgen.session.reporter import Reporter
from sdtgen.session.starts import Tracing, record_session, trace_session
from sdtgen.targets import ATTACH, EMULATOR, LISTEN, PROCESS, QEMU
from sdtgen.targets.qemu import TRANSPORTS
from sdtgen.trace.model import check_machine_name, machine_id

# What each kind of machine is (sdtgen.targets's kinds: `record` listens to a kernel that streams by itself, `boot` is
# the emulator), and the keys its --machine spec takes after the image.
KINDS = {"qemu": QEMU, "process": PROCESS, "attach": ATTACH, "record": LISTEN, "boot": EMULATOR}
KEYS = {"qemu": ("cpus", "qemu-arg", "transport"), "process": ("cpus",), "attach": ("serial",),
        "record": ("serial",), "boot": ("cpus",)}
MACHINE_FORM = "NAME=KIND:IMAGE[,key=value...]"


@record(frozen=True)
class Machine:
    """One machine of a fleet: its name, its kind (a key of KINDS), its image and its own options."""

    name: str
    kind: str
    image: str
    serial: str | None = None  # attach, record: the line
    cpus: int | None = None  # qemu, process, boot (None: the target's default)
    qemu_args: tuple[str, ...] = ()
    transport: str | None = None  # qemu: shared or serial


@record
class Outcome:
    """How a machine's session ended: clean or not (and why not), what it recorded."""

    name: str
    ok: bool = False
    why: str = ""
    events: int = 0
    lost: int = 0
    damaged: int = 0
    started: bool = False  # its session opened: its part of the merged trace was begun


def parse_machine(text: str) -> Machine:
    """--machine NAME=KIND:IMAGE[,key=value...], checked: one line for anything wrong, before anything starts."""
    option = f"--machine {printable(text)}"
    fix = f"give {MACHINE_FORM}, e.g. vm1=qemu:kernel.elf,cpus=4 or b1=attach:kernel.elf,serial=tcp:board1:4000"
    name, eq, rest = text.partition("=")
    kind, colon, rest = rest.partition(":")
    image, *pairs = rest.split(",")
    if not (eq and colon and image):
        raise SdtError("", f"{option} is not {MACHINE_FORM}", fix)
    check_machine_name(name, "--machine NAME")
    if kind not in KINDS:
        raise SdtError("", f"{option}: unknown kind {printable(kind)!r}", f"use one of {', '.join(KINDS)}")
    fields: dict = {"qemu_args": []}
    for pair in pairs:
        key, eq, value = pair.partition("=")
        if not eq or key not in KEYS[kind]:
            takes = ", ".join(f"{k}=" for k in KEYS[kind])
            raise SdtError("", f"{option}: a {kind} machine takes no {printable(pair)!r}", f"it takes {takes}")
        if key == "cpus":
            if not (value.isascii() and value.isdigit()) or int(value) < 1:
                raise SdtError("", f"{option}: cpus={printable(value)} is not a number of CPUs", "give cpus=N, N >= 1")
            fields["cpus"] = int(value)
        elif key == "qemu-arg":
            fields["qemu_args"].append(value)
        elif key == "transport" and value not in TRANSPORTS:
            raise SdtError("", f"{option}: transport={printable(value)} is not a transport",
                           f"give transport= one of {', '.join(TRANSPORTS)}")
        else:
            fields[key] = value
    if kind in ("attach", "record") and not fields.get("serial"):
        raise SdtError("", f"{option}: an {kind} machine needs its line", f"add ,serial=LINE ({fix})")
    return Machine(name, kind, image, fields.get("serial"), fields.get("cpus"), tuple(fields["qemu_args"]),
                   fields.get("transport"))


def serial_machines(kind: str, image: str, lines: list[str]) -> list[Machine]:
    """`attach`/`record` with several --serial: a machine a line, named after it (``tcp:board1:4000`` is
    ``board1-4000``, a device or FIFO its file's name), a ``-N`` after a name two lines share."""
    names: list[str] = []
    for line in lines:
        base = re.sub(r"[^A-Za-z0-9_.-]+", "-", line.removeprefix("tcp:") if line.startswith("tcp:")
                      else os.path.basename(line.rstrip("/"))).strip("-.")[:60] or "line"
        name, n = base, 1
        while name in names:
            n += 1
            name = f"{base}-{n}"
        names.append(name)
    return [Machine(name, kind, image, line) for name, line in zip(names, lines, strict=True)]


def check_fleet(machines: list[Machine], t: Tracing) -> None:
    """What a fleet refuses before anything starts: no machine, two of one name, what only one machine can have."""
    if not machines:
        raise SdtError("", "a fleet needs machines", f"give --machine {MACHINE_FORM} for each")
    seen: set[str] = set()
    for m in machines:
        try:  # every image there before any machine starts (a missing one would fail its machine alone, later)
            with open(m.image, "rb"):
                pass
        except OSError as e:
            raise SdtError(printable(m.image), f"machine {m.name}'s image cannot be read: {e.strerror or e}",
                           "check the path") from None
        if m.name in seen:
            raise SdtError("", f"two machines are named {m.name!r}: each names its own trace and relay session",
                           "give each --machine a name of its own")
        same = [n for n in seen if machine_id(n) == machine_id(m.name)]
        if same:  # Perfetto would show them as one machine, their tracks one
            raise SdtError("", f"machines {same[0]!r} and {m.name!r} have the same machine id "
                           f"({machine_id(m.name)}, a CRC-32 of the name)", "rename one of them")
        seen.add(m.name)
    if t.interactive:
        raise SdtError("", "-i opens one console, and a fleet has several machines", "leave out -i")
    if t.name is not None:
        raise SdtError("", "--name names one machine, and each machine of a fleet has its own name",
                       "leave out --name: `fleet --machine NAME=...` names each, several --serial each after its line")
    if t.post_mortem is not None or any(kind == "snapshot" for kind, _, _ in t.actions):
        raise SdtError("", "--post-mortem and --snapshot write one PATH, and a fleet has several machines",
                       "trace each machine with --trace DIR (one CTF trace a machine)")
    if any(kind == "script" and value == "-" for kind, value, _ in t.actions):
        raise SdtError("", "--script - reads standard input once, and a fleet has several machines",
                       "give the script as a file")


class Lines:
    """One output several machines write to at once: each write whole (a line is never cut by another's)."""

    def __init__(self, out: TextIO) -> None:
        self.out, self.lock = out, threading.Lock()

    def write(self, text: str) -> int:
        with self.lock:
            n = self.out.write(text)
            self.out.flush()
            return n

    def flush(self) -> None:
        with self.lock:
            self.out.flush()


class MachineReporter(Reporter):
    """A machine's reporter: every line says the machine, and the first error is kept for its summary."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.first_error = ""

    def error(self, text: str, fix: str = "") -> None:
        self.first_error = self.first_error or text
        super().error(text, fix)

    def refusal(self, e: SdtError) -> None:
        """What the machine's session refused before its kernel started (its line, its image): its one line."""
        self.first_error = self.first_error or e.what
        if self.as_json:
            self._emit({"event": "error", "text": str(e), "fix": e.fix}, None)
        else:
            self.out.flush()
            self.err.write(self._said_by(str(e)) + "\n")
            self.err.flush()

    def ended(self, o: Outcome) -> None:
        """The machine's summary, said as soon as it ends."""
        said = f"{o.events} events, {o.lost} lost, {o.damaged} damaged"
        self._emit({"event": "machine", "ok": o.ok, "why": o.why, "events": o.events, "lost": o.lost,
                    "damaged": o.damaged}, f"done: {said}" if o.ok else f"failed: {printable(o.why)}; {said}")


def run_fleet(machines: list[Machine], t: Tracing, buffer_size: int | None = None, overflow: str | None = None,
              out: TextIO | None = None, err: TextIO | None = None) -> bool:
    """Every machine's session at once, ``t``'s actions on each (its image each machine's own), each on a thread of
    its own; whether every machine ended clean. ``buffer_size`` and ``overflow``: each CPU's ring, on every machine.
    Ctrl-C (SIGTERM, SIGHUP) ends every machine's session as it ends one's."""
    from sdtgen.session.starts import check_timeout, trace_option

    check_fleet(machines, t)
    check_timeout(t.timeout)
    for m in machines:  # the trace apart from every image
        trace = trace_option(m.image, t.trace, t.trace_format)
    if t.relayd is not None:
        from sdtgen.transport.relayd import parse_relayd_url

        parse_relayd_url(t.relayd)
    from sdtgen.trace.sink import open_merged_trace

    merged = open_merged_trace(*trace) if trace is not None else None
    out, err = Lines(out or sys.stdout), Lines(err or sys.stderr)
    outcomes = {m.name: Outcome(m.name) for m in machines}
    running = []
    for m in machines:
        reporter = MachineReporter(as_json=t.as_json, quiet=t.quiet, out=out, err=err, machine=m.name)
        running.append(Running(m.name, _machine_run(m, t, reporter, merged, buffer_size, overflow, outcomes[m.name])))
    for r in running:
        r.thread.start()
    stopped: BaseException | None = None
    try:
        for r in running:
            r.wait()
    except BaseException as e:  # Ctrl-C, SIGTERM, SIGHUP: each machine's session ends as Ctrl-C ends one
        stopped = e
        for r in running:
            r.interrupt()
        for r in running:  # a second one leaves at once
            r.wait()
    if merged is not None:  # every machine's part, whole (one that failed keeps what it wrote); none: nothing at all
        merged.finish() if any(o.started for o in outcomes.values()) else merged.abort()
    failed = [o.name for o in outcomes.values() if not o.ok]
    if failed:
        Reporter(as_json=t.as_json, out=out, err=err).error(
            f"{len(failed)} of {len(machines)} machines failed: {', '.join(failed)}", "see their lines above")
        if stopped is not None:  # the command ends as the signal ends one machine's stopped in its actions
            raise stopped
    return not failed  # every machine ended clean, a signal or not (as dtrace's --interval sessions end on Ctrl-C)


class Running:
    """A machine's thread: waited for, and interrupted while its session runs. Never through Thread.join or is_alive:
    Python 3.11's, interrupted by a signal in the main thread, mark a thread that runs on as stopped."""

    def __init__(self, name: str, work: Callable[[Running], None]) -> None:
        self.done = threading.Event()
        self.in_session = True  # where Ctrl-C is raised in it: not once it says its summary
        self.thread = threading.Thread(target=self._run, args=(work,), name=f"sdtgen-machine-{name}", daemon=True)

    def _run(self, work: Callable[[Running], None]) -> None:
        try:
            work(self)
        except KeyboardInterrupt:  # raised as it ended its session: its summary is said or not, it is done
            pass
        finally:
            self.done.set()

    def wait(self) -> None:
        """Until the machine is done; a signal meanwhile raises its exception here, in the main thread."""
        while not self.done.wait(0.2):
            pass

    def interrupt(self) -> None:
        """Ctrl-C raised in the machine's thread as the main thread hears it, so its session ends as one does on
        Ctrl-C: between two of its bytecodes (a wait on its kernel's line blocks at most control.WAKE seconds)."""
        if self.in_session and not self.done.is_set() and self.thread.ident is not None:
            set_async = ctypes.pythonapi.PyThreadState_SetAsyncExc
            set_async.argtypes = (ctypes.c_ulong, ctypes.py_object)  # a thread id passed whole
            set_async(self.thread.ident, KeyboardInterrupt)


def _machine_run(m: Machine, t: Tracing, reporter: MachineReporter, merged, buffer_size: int | None,
                 overflow: str | None, outcome: Outcome) -> Callable[[Running], None]:
    """What machine ``m``'s thread does: its session, then its summary line, whatever ended it."""
    sessions: list = []

    def run(me: Running) -> None:
        try:
            if m.kind == "record":
                got = record_session(m.image, m.serial, None, relayd=t.relayd, name=m.name, reporter=reporter,
                                     trace_to=merged, opened=sessions.append)
                outcome.ok = got is not None
            else:
                options = {"buffer_size": buffer_size, "overflow": overflow}
                if m.kind in ("qemu", "process", "boot"):
                    options["cpus"] = m.cpus
                if m.kind == "qemu":
                    options.update(qemu_args=list(m.qemu_args), transport=m.transport)
                outcome.ok = trace_session(KINDS[m.kind], machine_tracing(t, m), m.serial, reporter=reporter,
                                           trace_to=merged, opened=sessions.append, **options)
        except SdtError as e:
            reporter.refusal(e)
        except KeyboardInterrupt:
            reporter.first_error = reporter.first_error or "interrupted"
        except Exception as e:  # a machine's thread never takes the others with it: said as that machine's failure
            reporter.error(f"{type(e).__name__}: {e}")
        finally:
            me.in_session = False
            outcome.started = bool(sessions)
            if sessions:
                _count(sessions[0], outcome)
            if not outcome.ok:
                outcome.why = reporter.first_error or _why(sessions[0] if sessions else None)
            reporter.ended(outcome)

    return run


def machine_tracing(t: Tracing, m: Machine) -> Tracing:
    """The fleet's Tracing as machine ``m``'s session takes it: its image, its name (its trace's, its relay
    session's), its trace the fleet's (a machine of the merged trace), its actions its own (a predicate's or an
    aggregation's program is compiled for its image as it starts)."""
    return replace(t, image=m.image, name=m.name, actions=copy.deepcopy(t.actions), trace=None, trace_format=None)


def _count(session, outcome: Outcome) -> None:
    """What a machine's session recorded, for its summary."""
    outcome.events = sum(session.hits.values())
    outcome.damaged = session.damaged
    if session.streams is not None:
        outcome.lost = sum(x.total for x in session.streams.last_lost().values())


def _why(session) -> str:
    """Why a session that said no error of its own did not end clean."""
    if session is None:
        return "it never started"
    if session.faults:
        return f"{session.faults} fault{'s' if session.faults > 1 else ''} in its calls"
    if session.damaged:
        return f"{session.damaged} packets damaged"
    if session.refused_modules:
        return f"{session.refused_modules} modules refused"
    return "interrupted"
