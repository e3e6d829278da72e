"""What a session prints: results one human line each on stdout, problems as diagnostics in sdtgen's one
format on stderr; or, with --json, every event as one JSON line on stdout and nothing else there.

The same lines and events for every target: the emulated boot, QEMU, an attached kernel, a process.
"""

from __future__ import annotations

import json
import sys
from collections import deque
from typing import NamedTuple, TextIO

from sdtgen.errors import ERROR, MAX_WARNING, WARNING, Diagnostic, printable
from sdtgen.plaindata import record
from sdtgen.targets.base import CallFault

REFUSED_PER_FUNCTION = 3  # refused sites shown per function on a terminal (all of them with --json)
REFUSED_LINES = 20  # refused-site lines shown in all


class Stopped(KeyboardInterrupt):
    """Ctrl-C stopped a guest call; where it was has been reported."""


@record(frozen=True)
class Firing:
    probe: str
    pc: int | None  # the site, when the probe has only one
    args: tuple[int | str | None, ...]
    types: tuple[str, ...]
    cpu: int | None = None
    ts: int | None = None  # the kernel's clock when it recorded the firing


class ActionResult(NamedTuple):
    """An --action's result, in a CPU's pending items after the firing it followed."""

    ts: int
    cpu: int
    symbol: str
    value: int


# Lines of the kernel's console held while it boots (Reporter.hold_console): a firmware's banner is about 40.
HELD_CONSOLE = 200


class Reporter:
    def __init__(self, as_json: bool = False, out: TextIO | None = None, err: TextIO | None = None,
                 file: str = "", quiet: bool = False, machine: str | None = None) -> None:
        self.as_json = as_json
        # The machine this session traces, when it is one of several (sdtgen/session/fleet.py): every line says it
        # (``[NAME] `` before each human line, a "machine" field in each JSON event).
        self.machine = machine
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.file = file  # the image, for diagnostics
        self.per_cpu = False  # several CPUs: a line starts with its CPU
        self.quiet = quiet  # firings are not shown (they still count, and go to the trace)
        self._held: deque[str] | None = None  # the console before the kernel's hello, while it boots
        self._held_dropped = 0
        self._errors_said: dict[int, int] = {}  # per CPU: the programs' errors a warning has said

    def _emit(self, event: dict, human: str | None) -> None:
        """One event, written whole in one call (the machines of a fleet write to one stdout at once)."""
        if self.as_json:
            self.out.write(json.dumps({"machine": self.machine, **event} if self.machine else event) + "\n")
        elif human is not None:
            self.out.write(self._said_by(human) + "\n")
        self.out.flush()

    def _said_by(self, text: str) -> str:
        """``text`` with each of its lines saying the machine, when there are several."""
        if self.machine is None:
            return text
        return "\n".join(f"[{self.machine}] {line}" for line in text.split("\n"))

    def _diagnostic(self, severity: str, message: str, fix: str = "", where: str = "") -> None:
        self.out.flush()
        self.err.write(self._said_by(str(Diagnostic(self.file, severity, message, fix, where))) + "\n")
        self.err.flush()

    def _diagnose(self, event: dict, severity: str, message: str, fix: str = "", where: str = "") -> None:
        if self.as_json:
            self._emit(event, None)
        else:
            self._diagnostic(severity, message, fix, where)

    def patched(self, patched: int, refused: int, folded: int) -> None:
        more = f", {folded} folded into others" if folded else ""
        self._emit({"event": "patched", "sites": patched, "refused": refused, "folded": folded},
                   f"patched {patched} sites ({refused} refused{more})")

    def module(self, name: str, sites: int, what: str) -> None:
        """A module loaded (the sites the runtime patched) or unloaded (the sites it disarmed)."""
        self._emit({"event": "module", "module": name, "did": what, "sites": sites},
                   f"module {name} {what}: {sites} sites {'patched' if what == 'loaded' else 'disarmed'}")

    def refused(self, refusals: list[tuple[str, int, str, str]], where) -> None:
        """Every refusal in --json; on a terminal a few per function, then how many more.
        ``refusals``: (probe spec, site address, the runtime's reason, the bytes found there)."""
        shown: dict[str, int] = {}
        lines = 0
        for spec, addr, reason, found in refusals:
            at, function = where(addr)
            event = {"event": "refused", "probe": spec, "pc": addr, "where": at, "reason": reason, "bytes": found}
            if self.as_json:
                self._emit(event, None)
                continue
            shown[function] = shown.get(function, 0) + 1
            if shown[function] <= REFUSED_PER_FUNCTION and lines < REFUSED_LINES:
                lines += 1
                bytes_ = f" (found {_spaced(found)})" if found else ""
                self._diagnose(event, WARNING, f"refused {printable(spec)}: {printable(reason)}{bytes_}",
                               "left unpatched", printable(at))
        hidden = len(refusals) - lines
        if hidden and not self.as_json:
            self._diagnostic(WARNING, f"{hidden} more refused sites not shown", "see all of them with --json")

    def changed(self, spec: str, addr: int, found: str, expected: str, at: str) -> None:
        self._diagnose({"event": "changed", "probe": spec, "pc": addr, "where": at, "bytes": found,
                        "expected": expected}, WARNING,
                       f"{printable(spec)}: the site's code changed since the runtime wrote it: found "
                       f"{_spaced(found)} where it wrote {_spaced(expected)}",
                       "the runtime leaves it as it is and writes there no more", printable(at))

    def fire(self, f: Firing) -> None:
        if self.quiet:
            return
        line = f"{printable(f.probe)}  {format_args(f)}".rstrip()
        if self.per_cpu:
            line = _on_cpu(f.cpu) + line
        self._emit({"event": "fire", "probe": f.probe, "pc": f.pc, "args": list(f.args), "cpu": f.cpu, "ts": f.ts},
                   line)

    def returned(self, symbol: str, args: list[int | str], value: int | str | None, rtype: str,
                 cpu: int | None = None) -> None:
        if value is None:
            shown = "<unreadable>" if rtype == "str" else "void"
        else:
            shown = printable(json.dumps(value)) if isinstance(value, str) else str(value)
        event = {"event": "return", "symbol": symbol, "value": value}
        if cpu is not None:
            event["cpu"] = cpu
        given = ", ".join(printable(json.dumps(a)) if isinstance(a, str) else str(a) for a in args)
        self._emit(event, f"{_on_cpu(cpu)}{printable(symbol)}({given}) = {shown}")

    def fault(self, symbol: str, fault: CallFault, where: str, last: str | None, cpu: int | None = None) -> None:
        kind = "interrupted" if fault.interrupted else "fault"
        event = {"event": kind, "symbol": symbol, "fault": fault.what, "pc": fault.pc, "where": where,
                 "last_probe": last}
        if cpu is not None:
            event["cpu"] = cpu
        self._diagnose(event, "error", f"{_on_cpu(cpu)}{kind} in {printable(symbol)}: {fault.what} "
                       f"(last probe fired: {printable(last or 'none')})", "", printable(where))

    def stats(self, hits: dict[str, int], lost: int = 0, damaged: int = 0) -> None:
        lines = "\n".join(f"{n:8d}  {printable(p)}" for p, n in sorted(hits.items())) or "no probe fired"
        if lost:
            lines += f"\n{lost:8d}  lost (the trace buffer was full: see --buffer-size, --overflow)"
        event = {"event": "stats", "hits": dict(sorted(hits.items())), "lost": lost}
        if damaged:
            lines += f"\n{damaged:8d}  damaged (packets, frames or counters the guest or the line spoiled, left out)"
            event["damaged"] = damaged
        self._emit(event, lines)

    def aggregations(self, totals, session: str | None = None) -> None:
        """The merged aggregations: as dtrace's printa prints them, or one JSON event; the updates the CPUs' full
        tables could not take, said as dtrace says them. ``session``: the runtime's session they were aggregated in,
        when not the default one: a heading (a JSON field) says it."""
        from sdtgen.dscript.printa import as_json, print_all

        if self.as_json:
            self._emit({"event": "aggregations", **({"session": session} if session else {}), **as_json(totals)}, None)
            return
        text = print_all(totals).rstrip("\n")
        if text and session:
            text = f"session {printable(session)}:\n{text}"
        if text:  # as dtrace: an aggregation with no rows prints nothing
            self._emit({}, text)
        for cpu, n in sorted(totals.dropped.items()):
            if n:
                self.warning(f"{n} aggregation drops on CPU {cpu}: its tables were full{held(totals, cpu)}: give "
                             "it more memory, or print more often")
        for cpu, n in sorted(totals.errors.items()):
            if n > self._errors_said.get(cpu, 0):  # the kernel's running count: said again only when it grew
                self._errors_said[cpu] = n
                self.warning(f"{n} error{'' if n == 1 else 's'} on CPU {cpu}: a clause divided by zero, met a "
                             "string it could not read or read the task (tid, curcontext, execname) of a kernel that "
                             "gives no task hook, and that firing did nothing more")

    def post_mortem(self, why: str, salvage, path: str | None, session: str | None = None,
                    snapshot: bool = False) -> None:
        """What a post-mortem read of a session's rings (sdtgen/transport/salvage.py; ``session``: its name, None for
        the default session), or of the snapshot it holds: one line, and a warning with the packets it could not
        trust."""
        where = f"; written to {printable(path)}" if path else ""
        of = f" of session {printable(session)}" if session else ""
        of += "'s snapshot" if snapshot else ""
        event = {"event": "post-mortem", "session": session or "default", "snapshot": snapshot, "why": why,
                 "trace": path,
                 "distrusted": salvage.distrusted,
                 "why_distrusted": salvage.why[:1],
                 "cpus": {str(cpu): {"events": len(c.events), "cut": c.cut, "in_flight": c.in_flight}
                          for cpu, c in sorted(salvage.cpus.items())}}
        self._emit(event, f"post-mortem{of} ({printable(why)}): {salvage.summary()}{where}")
        if salvage.distrusted and not self.as_json:
            n = salvage.distrusted
            self.warning(f"post-mortem{of}: {n} packet{'s' if n != 1 else ''} not trusted, left out: "
                         f"{salvage.why[0] if salvage.why else 'damaged'}")

    def snapshot_taken(self, session: str, said: dict[str, int]) -> None:
        """What the kernel said of a snapshot the host took (`snapshot NAME`)."""
        event = {"event": "snapshot-taken", "session": session, **said}
        self._emit(event, f"snapshot of session {printable(session)} taken: {said['kept']} packets kept "
                          f"({said['taken']} snapshots so far, {said['lapped']} packets lapped while copied, "
                          f"{said['busy']} refused as busy)")

    def snapshot(self, session: str, salvage, path: str) -> None:
        """What a snapshot read out of the kernel's memory holds: one line, and a warning with the packets it could
        not trust."""
        event = {"event": "snapshot", "session": session, "trace": path, "distrusted": salvage.distrusted,
                 "why_distrusted": salvage.why[:1],
                 "cpus": {str(cpu): {"events": len(c.events), "lapped": c.lapped, "cut": c.cut}
                          for cpu, c in sorted(salvage.cpus.items())}}
        self._emit(event, f"snapshot of session {printable(session)}: {salvage.summary()}; written to "
                          f"{printable(path)}")
        if salvage.distrusted and not self.as_json:
            n = salvage.distrusted
            self.warning(f"snapshot of session {printable(session)}: {n} packet{'s' if n != 1 else ''} not trusted, "
                         f"left out: {salvage.why[0] if salvage.why else 'damaged'}")

    def error(self, text: str, fix: str = "") -> None:
        """What ended the session (the kernel stopped answering, its machine ended), and what to do."""
        self._diagnose({"event": "error", "text": text, "fix": fix}, ERROR, printable(text), printable(fix))

    def warning(self, text: str) -> None:
        self._diagnose({"event": "warning", "text": text}, WARNING, printable(text, MAX_WARNING))

    def action(self, symbol: str, value: int, cpu: int | None = None) -> None:
        event = {"event": "action", "symbol": symbol, "value": value}
        if cpu is not None:
            event["cpu"] = cpu
        self._emit(event, f"{_on_cpu(cpu)}action {printable(symbol)} returned {value}")

    def probe(self, pid: int, spec: str, sites: int, armed: bool) -> None:
        self._emit({"event": "probe", "id": pid, "probe": spec, "sites": sites, "armed": armed},
                   f"{pid:4d}  {printable(spec):40s} {sites:3d} site(s)  {'armed' if armed else '-'}")

    def sessions(self, states: list) -> None:
        """The sessions a kernel has open (SessionState each), one line each, as `lttng list` shows its sessions."""
        if not self.as_json:
            self._emit({}, f"{'ID':>3}  {'NAME':15s} {'POLICY':9s} {'CPUS':>4} {'RING':>9} {'PACKET':>7} "
                           f"{'PACKETS':>10} {'DISCARDED':>9} {'OVERWRITTEN':>11} {'MISPLACED':>9} {'PROBES':>6}")
        for s in states:
            self._emit({"event": "session", "id": s.id, "name": s.name, "policy": s.policy, "cpus": s.cpus,
                        "ring": s.ring, "packet": s.packet, "packets": s.packets, "discarded": s.discarded,
                        "overwritten": s.overwritten, "misplaced": s.misplaced, "probes": s.probes},
                       f"{s.id:3d}  {printable(s.name):15s} {printable(s.policy):9s} {s.cpus:4d} {s.ring:9d} "
                       f"{s.packet:7d} {s.packets:10d} {s.discarded:9d} {s.overwritten:11d} {s.misplaced:9d} "
                       f"{s.probes:6d}")

    def armed(self, verb: str, spec: str, sites: int) -> None:
        self._emit({"event": verb, "spec": spec, "sites": sites}, f"{verb} {sites} site(s)")

    def text(self, kind: str, text: str) -> None:
        self._emit({"event": kind, "text": text}, text)

    def line(self, text: str) -> None:
        """A line of the kernel's text that is no reply, as `record` shows them (a text frame, console output)."""
        self.text("text", printable(text, 2000))

    def console(self, text: str) -> None:
        """What the kernel printed outside frames (its own log, a panic before the line was up)."""
        if self._held is not None:
            if len(self._held) == self._held.maxlen:
                self._held_dropped += 1
            self._held.append(text)
            return
        self.text("console", printable(text.rstrip("\n"), 2000))

    def hold_console(self) -> None:
        """From now until ``release_console``, the kernel's console is held, not shown: a firmware's banner and
        the kernel's boot log, before its control core's hello, are no part of a session's output once it says
        hello (the last HELD_CONSOLE lines are kept for a boot that fails). JSON shows every line as it comes."""
        if not self.as_json:
            self._held, self._held_dropped = deque(maxlen=HELD_CONSOLE), 0

    def release_console(self, show: bool) -> None:
        """The boot is over: the held console shown (``show``: the kernel never said hello, and its console is
        where it stopped) or let go, and the console shown as it comes from now on."""
        held, dropped = self._held, self._held_dropped
        self._held = None
        if show and held:
            if dropped:
                self.text("console", f"({dropped} earlier line(s) of the kernel's console not kept)")
            for text in held:
                self.console(text)


def held(totals, cpu: int) -> str:
    """What CPU ``cpu``'s tables hold between two snapshots, as the runtime cut the memory it was given."""
    from sdtgen.dscript.tables import capacity

    if cpu not in totals.shape:
        return ""
    nindex, arena = totals.shape[cpu]
    return f" (a half holds {capacity(nindex, arena)} entries of a count with one key, fewer of larger ones)"


def _spaced(hexbytes: str) -> str:
    return " ".join(hexbytes[i:i + 2] for i in range(0, len(hexbytes), 2))


def _on_cpu(cpu: int | None) -> str:
    """How a line starts with its CPU, on a machine of several: ``cpu2 `` (nothing on one CPU)."""
    return "" if cpu is None else f"cpu{cpu} "


def format_args(f: Firing) -> str:
    parts = []
    for i, (value, ctype) in enumerate(zip(f.args, f.types, strict=True)):
        if isinstance(value, str):
            parts.append(f"arg{i}={printable(json.dumps(value))}")
        elif value is None:
            parts.append(f"arg{i}=<unreadable>")
        elif "*" in ctype:
            parts.append(f"arg{i}={value & ((1 << 64) - 1):#x}")
        else:
            parts.append(f"arg{i}={value}")
    return " ".join(parts)
