"""One emulated boot: load the image, give its runtime a platform, let it patch itself, then arm and run.

Events go to a Reporter: results one human line each on stdout, problems as
diagnostics in sdtgen's one format on stderr; or, with --json, every event as
one JSON line on stdout and nothing else there. Firings come from the
runtime's packets: consumed as each closes (the platform's notify hook) with
--overflow drop, or when a run ends; shown in timestamp order, and copied to
the --trace sink as they come.
"""

from __future__ import annotations

import bisect
import heapq
import json
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple, TextIO

from sdtgen.boot.consumer import Consumer, Ring
from sdtgen.boot.limits import DEFAULT_BUFFER, DEFAULT_TIMEOUT, MAX_BUFFER, MAX_RINGS, MIN_BUFFER
from sdtgen.boot.machine import GuestFault, Interrupted, Machine
from sdtgen.boot.platform import Platform, runtime_entries
from sdtgen.boot.runtime import ARM_MODES, BRANCH, FIRING, InitResult, ProbeRuntime, Report
from sdtgen.calls import (
    check_call,
    decode_return,
    describe,
    function_address,
    matching_spec,
    parse_spec,
    read_string,
)
from sdtgen.elf.reader import STT_FUNC
from sdtgen.errors import ERROR, WARNING, Diagnostic, SdtError, printable
from sdtgen.image import Image
from sdtgen.probes import ProbeSpec
from sdtgen.table import SITE_SIZE, TableSite
from sdtgen.trace.packets import Decoder, Event, event_format
from sdtgen.trace.streams import Streams

REFUSED_PER_FUNCTION = 3  # refused sites shown per function on a terminal (all of them with --json)
REFUSED_LINES = 20  # refused-site lines shown in all
# Several CPUs: firings wait to be put in time order until every CPU has been read past them. They are
# shown in batches of SHOW_BATCH, and at most MAX_PENDING wait (about 200 MB); past that a run's firings
# are counted and traced but not shown (a CPU that records nothing holds the others back).
SHOW_BATCH = 4096
MAX_PENDING = 1_000_000
POLICIES = ("drop", "overwrite")


class Stopped(KeyboardInterrupt):
    """Ctrl-C stopped a guest call; where it was has been reported."""


@dataclass(frozen=True)
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


class Reporter:
    def __init__(self, as_json: bool = False, out: TextIO | None = None, err: TextIO | None = None,
                 file: str = "", quiet: bool = False) -> None:
        self.as_json = as_json
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.file = file  # the image, for diagnostics
        self.per_cpu = False  # several CPUs: a line starts with its CPU
        self.quiet = quiet  # firings are not shown (they still count, and go to the trace)

    def _emit(self, event: dict, human: str | None) -> None:
        if self.as_json:
            self.out.write(json.dumps(event) + "\n")
        elif human is not None:
            self.out.write(human + "\n")
        self.out.flush()

    def _diagnose(self, event: dict, severity: str, message: str, fix: str = "", where: str = "") -> None:
        if self.as_json:
            self._emit(event, None)
        else:
            self.out.flush()
            print(Diagnostic(self.file, severity, message, fix, where), file=self.err, flush=True)

    def patched(self, patched: int, refused: int, folded: int) -> None:
        more = f", {folded} folded into others" if folded else ""
        self._emit({"event": "patched", "sites": patched, "refused": refused, "folded": folded},
                   f"patched {patched} sites ({refused} refused{more})")

    def refused(self, refusals: list[tuple[TableSite, str, str]], where) -> None:
        """Every refusal in --json; on a terminal a few per function, then how many more.
        ``refusals``: (site entry, the runtime's reason, the bytes found there)."""
        shown: dict[str, int] = {}
        lines = 0
        for site, reason, found in refusals:
            at, function = where(site.addr)
            event = {"event": "refused", "probe": site.probe.spec, "pc": site.addr, "where": at,
                     "reason": reason, "bytes": found}
            if self.as_json:
                self._emit(event, None)
                continue
            shown[function] = shown.get(function, 0) + 1
            if shown[function] <= REFUSED_PER_FUNCTION and lines < REFUSED_LINES:
                lines += 1
                bytes_ = f" (found {_spaced(found)})" if found else ""
                self._diagnose(event, WARNING, f"refused {printable(site.probe.spec)}: {printable(reason)}{bytes_}",
                               "left unpatched", printable(at))
        hidden = len(refusals) - lines
        if hidden and not self.as_json:
            print(Diagnostic(self.file, WARNING, f"{hidden} more refused sites not shown",
                             "see all of them with --json"), file=self.err, flush=True)

    def changed(self, site: TableSite, found: str, expected: str, at: str) -> None:
        self._diagnose({"event": "changed", "probe": site.probe.spec, "pc": site.addr, "where": at, "bytes": found,
                        "expected": expected}, WARNING,
                       f"{printable(site.probe.spec)}: the site's code changed since the runtime wrote it: found "
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

    def returned(self, symbol: str, args: list[int], value: int | str | None, rtype: str,
                 cpu: int | None = None) -> None:
        if value is None:
            shown = "<unreadable>" if rtype == "str" else "void"
        else:
            shown = printable(json.dumps(value)) if isinstance(value, str) else str(value)
        event = {"event": "return", "symbol": symbol, "value": value}
        if cpu is not None:
            event["cpu"] = cpu
        self._emit(event, f"{_on_cpu(cpu)}{printable(symbol)}({', '.join(map(str, args))}) = {shown}")

    def fault(self, symbol: str, fault: GuestFault, where: str, last: str | None, cpu: int | None = None) -> None:
        kind = "interrupted" if isinstance(fault, Interrupted) else "fault"
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
            lines += f"\n{damaged:8d}  damaged (packets or counters the guest wrote over, left out)"
            event["damaged"] = damaged
        self._emit(event, lines)

    def warning(self, text: str) -> None:
        self._diagnose({"event": "warning", "text": text}, WARNING, printable(text))

    def error(self, text: str, fix: str = "") -> None:
        """What ended the session, and what to do."""
        self._diagnose({"event": "error", "text": text, "fix": fix}, ERROR, printable(text), printable(fix))

    def action(self, symbol: str, value: int, cpu: int | None = None) -> None:
        event = {"event": "action", "symbol": symbol, "value": value}
        if cpu is not None:
            event["cpu"] = cpu
        self._emit(event, f"{_on_cpu(cpu)}action {printable(symbol)} returned {value}")

    def probe(self, pid: int, spec: str, sites: int, armed: bool) -> None:
        self._emit({"event": "probe", "id": pid, "probe": spec, "sites": sites, "armed": armed},
                   f"{pid:4d}  {printable(spec):40s} {sites:3d} site(s)  {'armed' if armed else '-'}")

    def armed(self, verb: str, spec: str, sites: int) -> None:
        self._emit({"event": verb, "spec": spec, "sites": sites}, f"{verb} {sites} site(s)")

    def text(self, kind: str, text: str) -> None:
        self._emit({"event": kind, "text": text}, text)


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


def check_buffer_size(size: int) -> int:
    """BYTES per CPU: a power of two from MIN_BUFFER to MAX_BUFFER."""
    if not MIN_BUFFER <= size <= MAX_BUFFER or size & (size - 1):
        raise SdtError("", f"--buffer-size {size} is not a power of two from {MIN_BUFFER} to {MAX_BUFFER}",
                       "give e.g. 65536 or 1048576 (bytes per CPU)")
    return size


class BootSession:
    def __init__(self, path: str, reporter: Reporter, patch: bool = True, timeout: float = DEFAULT_TIMEOUT,
                 arm: str = "trap", buffer_size: int = DEFAULT_BUFFER, overflow: str = "drop",
                 cpus: int = 1, seed: int = 0, schedule: str = "parallel", stream: bool = True,
                 trace: tuple[str, str] | None = None,
                 precheck: Callable[[BootSession], None] | None = None) -> None:
        from sdtgen.boot.smp import MAX_CPUS, SCHEDULES

        self.reporter = reporter
        reporter.file = reporter.file or path
        # Everything the command line says is checked before anything is loaded or run.
        if overflow not in POLICIES:
            raise SdtError("", f"unknown overflow policy {printable(overflow)!r}", "use drop or overwrite")
        if arm not in ARM_MODES:
            raise SdtError("", f"unknown arming mode {printable(arm)!r}", "use trap or branch")
        if not 1 <= cpus <= MAX_CPUS:
            raise SdtError("", f"--cpus {cpus} is not a number of CPUs from 1 to {MAX_CPUS}")
        if schedule not in SCHEDULES:
            raise SdtError("", f"unknown schedule {printable(schedule)!r}", f"use one of {', '.join(SCHEDULES)}")
        check_buffer_size(buffer_size)
        if cpus * buffer_size > MAX_RINGS:
            raise SdtError("", f"{cpus} CPUs with --buffer-size {buffer_size} need {cpus * buffer_size >> 20} MiB of "
                           f"rings, more than the {MAX_RINGS >> 20} MiB a boot maps",
                           "give fewer --cpus or a smaller --buffer-size")
        if arm == BRANCH and not patch:
            raise SdtError("", "cannot arm with branches: nothing is patched (--no-patch)", "boot without --no-patch")
        self.timeout, self.seed, self.schedule = timeout, seed, schedule
        self.buffer_size, self.overflow, self.cpus = buffer_size, overflow, cpus
        self.stream = stream and overflow == "drop"  # a flight recorder is read when a run ends
        self.image = Image(path)
        self.machine: Machine | None = None
        self.smp = None
        self.sink = None
        self.faults = 0
        self._broken: set[int] = set()  # CPUs whose sdt_flush faulted: neither flushed nor read again
        self.hits: dict[str, int] = {}
        self.last_fired: str | None = None
        # Several CPUs: what each recorded and has not been shown (its events, and --action results after
        # the firing they followed), merged by time as far as every CPU has been read, and when a run ends.
        self._pending: dict[int, list[Event | ActionResult]] = {}
        self._read_to: dict[int, int] = {}  # CPU -> the time up to which its packets have been read
        self._held = 0  # items in _pending
        self._unshown = 0  # firings past MAX_PENDING in one run: counted and traced, not shown
        self._lock = threading.RLock()  # CPU threads read their packets from the notify hook
        self._clock: tuple[str, int] | None = None
        self._lost_shown = 0
        self._said: set[str] = set()
        try:
            self.entries = runtime_entries(self.image)
            self.probes = self.image.probes()
            self.bounds = self.image.bounds
            self.image.check_bootable(self.probes)
            if precheck is not None:  # the caller's own checks, against the image, before anything runs
                precheck(self)
            if trace is not None:
                self.sink = self._open_trace(*trace)
            self._boot(patch)
            if arm != "trap":
                self.set_arm(arm)
        except BaseException:
            self.close(abort=True)
            raise

    def _check_host(self) -> None:
        """Threads made small, and the boot refused if its CPUs would not fit the address-space limit."""
        from sdtgen.boot.host import check_address_space, prepare_threads
        from sdtgen.boot.machine import STACK_SIZE, tcg_buffer_for
        from sdtgen.elf.reader import PT_LOAD

        prepare_threads()
        guest = sum(s.memsz for s in self.image.elf.segments if s.type == PT_LOAD) + self.cpus * STACK_SIZE
        threads = self.cpus * (2 if self.cpus > 1 and self.schedule == "parallel" else 1)  # watchdogs, CPUs
        check_address_space(self.image.path, self.cpus, tcg_buffer_for(self.image.elf), guest,
                            self.cpus * self.buffer_size, threads)

    def _boot(self, patch: bool) -> None:
        from sdtgen.boot.smp import Smp

        arch = self.image.arch
        self._check_host()
        self.machine = Machine(self.image.elf, arch, cpus=self.cpus)
        self.clock_name, self.clock_hz = self.guest_clock()
        self.platform = Platform(self.machine, self.cpus, self.buffer_size, self.overflow, self.clock_hz)
        self.smp = Smp(self.machine, self.cpus, self.seed, self.schedule)
        for m in self.smp.cpus:
            self.platform.own_page(m)
        self.runtime = ProbeRuntime(self.smp.cpus, self.platform, self.entries, self.bounds)
        self.smp.sync = self.runtime.flush_all
        self.runtime.sync = self.smp.sync_cores
        self.runtime.on_warning = self.reporter.warning
        self.runtime.on_action = self._action
        self.runtime.on_packets = self._consume_now
        self.runtime.on_fired = self._flush_cpu
        self.reporter.per_cpu = self.cpus > 1
        self.decoder = Decoder([event_format(p.key, p.spec, p.args, arch.bits, arch.little) for p in self.probes],
                               arch.bits, arch.little)
        self.types = {p.spec: p.args for p in self.probes}
        self.streams = Streams(self.decoder, self.clock_hz, self.cpus, self.platform.packet_size,
                               self.reporter.warning)
        size = self.platform.packet_size
        rings = [Ring(self.platform.area(k), self.platform.ring(k), self.buffer_size // size, size)
                 for k in range(self.cpus)]
        self.consumer = Consumer(self.machine, rings, self._packet, self.streams)
        policy = 1 if self.overflow == "overwrite" else 0
        try:
            for k in range(self.cpus):
                r = self.runtime.call(self.machine, "sdt_cpu_attach", [self.platform.area(k), k,
                                                                       self.platform.ring(k), self.buffer_size,
                                                                       self.platform.packet_size, policy])
                if r:
                    raise SdtError(self.image.path, f"the runtime refused CPU {k}'s ring ({self.buffer_size} bytes "
                                   f"in packets of {self.platform.packet_size})", "give another --buffer-size")
            self.patched = patch
            init = self.runtime.init() if patch else None
        except GuestFault as e:  # the kernel's own boot-time code did not run: the image is not loadable as is
            raise SdtError(self.image.path, f"the runtime faulted while the boot set it up: {e.what} at "
                           f"{self.where(e.pc)}", "check that the image's loadable segments hold its code "
                           "(readelf -lW) and relink it") from None
        if init is not None:
            self._report_init(init)
        else:
            self.runtime.refresh()
            self.reporter.patched(0, 0, 0)
        firing = [s for s in self.runtime.sites if s.form in FIRING and s.state in ("off", "trap", "branch")]
        per_probe: dict[str, list[int]] = {}
        for s in firing:
            per_probe.setdefault(s.probe.spec, []).append(s.addr)
        # A record does not say which site fired: a probe with one site names it, others give None.
        self.single_site = {spec: addrs[0] for spec, addrs in per_probe.items() if len(addrs) == 1}

    def _report_init(self, result: InitResult) -> None:
        """The patched line, a refusal per site the runtime refused (with its words), its other reports."""
        by_entry = {r.site: r.line for r in result.reports if r.site}
        refused = []
        for s in result.of("refused"):
            reason, found, _ = site_report(by_entry.get(self._entry(s), ""))
            refused.append((s, reason or "refused by the runtime", found))
        self.reporter.patched(len(result.of("off")), len(refused), len(result.of("folded")))
        self.reporter.refused(refused, self.image.where)
        for r in result.reports:
            if not r.site:
                self.reporter.warning(r.line.removeprefix("sdt: "))

    def _entry(self, site: TableSite) -> int:
        """The address of a site's table entry (what the runtime's reports name)."""
        return self.bounds.sites[0] + SITE_SIZE * site.index

    def _open_trace(self, path: str, fmt: str):
        from sdtgen.trace.model import TraceMeta, TraceProbe
        from sdtgen.trace.sink import open_trace

        arch = self.image.arch
        name, hz = self.guest_clock()  # the rate the runtime is given (hooks.clock_hz), measured once
        probes = tuple(TraceProbe(p.key, p.provider, p.module, p.function, p.name, p.args) for p in self.probes)
        return open_trace(path, fmt, TraceMeta(arch.name, name, hz, self.cpus, probes), arch.bits, arch.little)

    # -- the consumer ------------------------------------------------------------------------
    def guest_clock(self) -> tuple[str, int]:
        """The clock events are stamped with (measured once: it takes 50 ms)."""
        if self._clock is None:
            from sdtgen.boot.clock import guest_clock

            self._clock = guest_clock(self.image.arch)
        return self._clock

    def _packet(self, cpu: int, data: bytes, seq: int) -> None:
        """One closed packet of ``cpu`` (its ring's slot for packet ``seq``): to the trace as it stands, its events
        shown (merged by time). Under -q, with no trace that takes events, its events are only counted by probe
        (a packet of one probe's events without reading them). A damaged packet is left out (Streams)."""
        counting = self.reporter.quiet and (self.sink is None or not self.sink.needs_events)
        read = self.streams.read(cpu, data, not counting, seq)
        if read is None:
            return
        packet, events, counts, last = read
        with self._lock:
            if self.sink is not None:
                self.sink.packet(cpu, data, packet, events if self.sink.needs_events else None)
            for probe, n in counts.items():
                self.hits[probe] = self.hits.get(probe, 0) + n
            if last is not None:
                self.last_fired = last
            if self.reporter.quiet:
                return
            if self.cpus == 1:
                self._show(events)
                return
            self._read_to[cpu] = max(self._read_to.get(cpu, 0), packet.end)
            if self._held + len(events) > MAX_PENDING:
                self._unshown += len(events)
                return
            self._pending.setdefault(cpu, []).extend(events)
            self._held += len(events)
            if self._held >= SHOW_BATCH and len(self._read_to) == self.cpus:
                self._emit_pending(min(self._read_to.values()))

    def _action(self, m: Machine, symbol: str, value: int) -> None:
        """An --action returned on CPU ``m``: shown after everything that CPU recorded before it."""
        with self._lock:
            if self.cpus == 1:
                self.reporter.action(symbol, value)
                return
            if self.reporter.quiet:
                self.reporter.action(symbol, value, m.cpu)
                return
            mine = self._pending.setdefault(m.cpu, [])
            ts = next((x.ts for x in reversed(mine)), self._read_to.get(m.cpu, 0))
            mine.append(ActionResult(ts, m.cpu, symbol, value))
            self._held += 1

    def _show(self, items: list) -> None:
        for e in items:
            if isinstance(e, ActionResult):
                self.reporter.action(e.symbol, e.value, e.cpu)
            else:
                self.reporter.fire(Firing(e.probe, self.single_site.get(e.probe), e.args, self.types[e.probe],
                                          e.cpu, e.ts))

    def _consume_now(self, cpu: int) -> None:
        """The notify hook: a packet of ``cpu`` closed (with --overflow drop, read as it closes)."""
        if self.stream:
            self.consumer.consume(cpu)

    def _flush_cpu(self, m: Machine) -> None:
        """What CPU ``m`` recorded so far, read now: an --action's result follows its firing."""
        self.runtime.flush(m)
        self.consumer.consume(m.cpu)

    def drain(self) -> None:
        """Every CPU's open packet closed and every closed packet read, shown in time order; what was lost
        said."""
        for m in self.smp.cpus:
            if m.cpu not in self._broken:
                self._flush_or_report(m)
        for cpu in range(self.cpus):
            if cpu not in self._broken:
                self.consumer.consume(cpu)
        with self._lock:
            self._emit_pending()
            if self._unshown:
                self.reporter.warning(f"{self._unshown} firing(s) not shown: more than {MAX_PENDING:,} in one run "
                                      "on several CPUs waited to be put in time order; they are counted and "
                                      "traced (-q with --trace for runs this long)")
                self._unshown = 0
        lost = self.consumer.total_lost
        if lost > self._lost_shown:
            self.reporter.warning(f"{lost - self._lost_shown} record(s) lost: the trace buffer was full "
                                  f"(--buffer-size {self.buffer_size}, --overflow {self.overflow})")
            self._lost_shown = lost

    def _emit_pending(self, upto: int | None = None) -> None:
        """What the CPUs recorded, in (time, CPU) order: all of it, or what is no later than ``upto`` (a
        time every CPU's packets have been read to, so nothing earlier can still come)."""
        ready = []
        for items in self._pending.values():
            n = len(items) if upto is None else bisect.bisect_right(items, upto, key=lambda x: x.ts)
            if n:
                ready.append(items[:n])
                del items[:n]
        self._held -= sum(map(len, ready))
        self._show(list(heapq.merge(*ready, key=lambda x: (x.ts, x.cpu))))

    def set_arm(self, mode: str) -> None:
        """``trap`` or ``branch``: how sites are armed from now on (the armed ones are rearmed)."""
        if mode not in ARM_MODES:
            raise SdtError("", f"unknown arming mode {printable(mode)!r}", "use trap or branch")
        if mode == BRANCH and not self.patched:
            raise SdtError("", "cannot arm with branches: nothing is patched (--no-patch)", "boot without --no-patch")
        if self.patched:
            before = len(self.runtime.reports)
            self.runtime.set_mode(mode)
            self._report_changes(self.runtime.reports[before:])
        self.runtime.mode = mode

    def finish_trace(self, interrupted: bool = False) -> None:
        """Every recorded event is in the trace: put it in place (after Ctrl-C, what could be read, deaf to
        another Ctrl-C until the trace is whole)."""
        if self.sink is None:
            return
        import signal

        deaf = interrupted and threading.current_thread() is threading.main_thread()
        old = signal.signal(signal.SIGINT, signal.SIG_IGN) if deaf else None
        try:
            if interrupted:
                self._drain_after_interrupt()
            else:
                self._drain_or_stop()
            sink, self.sink = self.sink, None
            sink.finish(self.consumer.lost())
        finally:
            if deaf:
                signal.signal(signal.SIGINT, old)

    def close(self, abort: bool = False) -> None:
        if self.sink is not None:
            self.sink.abort()
            self.sink = None
        for m in self.smp.cpus[1:] if self.smp is not None else []:
            m.close()
        if self.machine is not None:
            self.machine.close()
        self.image.close()

    # -- places ---------------------------------------------------------------------
    def where(self, addr: int) -> str:
        """``section:function+0xoff`` of an address, in the one diagnostic shape."""
        return self.image.where(addr)[0]

    # -- probes ---------------------------------------------------------------------
    def spec(self, text: str) -> ProbeSpec:
        return parse_spec(text)

    def check_spec(self, text: str) -> ProbeSpec:
        """A spec that matches a probe of the image's table (which of its sites verify is sdt_init's say)."""
        return matching_spec(text, self.probes)

    def check_function(self, symbol: str) -> int:
        """The address of the image's function ``symbol``."""
        return function_address(self.image, symbol)

    def matching(self, text: str) -> list[TableSite]:
        return self.runtime.matching(self.spec(text))

    def enable(self, spec: str) -> int:
        return self._arm(spec, True)

    def disable(self, spec: str) -> int:
        return self._arm(spec, False)

    def _arm(self, text: str, arm: bool) -> int:
        pattern = self.spec(text)
        if not self.patched:
            raise SdtError("", f"cannot arm or disarm {printable(text)!r}: nothing is patched (--no-patch), "
                           "so every site stays a call to its empty stub", "boot without --no-patch")
        if not self.runtime.matching(pattern):
            if arm and any(x.state == "changed" and pattern.matches(x.probe) for x in self.runtime.sites):
                raise SdtError(self.image.path, f"no site of {printable(text)!r} could be armed: "
                               "the guest rewrote every one")
            raise SdtError("", f"probe spec {printable(text)!r} reads as {describe(pattern)} and matches no "
                           "patched probe site", "list the probes with `sdtgen probes IMAGE`; "
                           "a spec is provider:module:function:name, filled from the right")
        before = len(self.runtime.reports)
        n = (self.runtime.enable if arm else self.runtime.disable)(pattern, text)
        self._report_changes(self.runtime.reports[before:])
        if n == 0 and arm:
            raise SdtError(self.image.path, f"no site of {printable(text)!r} could be armed: "
                           "the guest rewrote every one")
        return n

    def _report_changes(self, reports: list[Report]) -> None:
        by_index = {self._entry(s): s for s in self.runtime.sites}
        for r in reports:
            site = by_index.get(r.site)
            if site is not None and site.state == "changed":
                _, found, expected = site_report(r.line)
                self.reporter.changed(site, found, expected, self.where(site.addr))
            elif r.line not in self._said:  # the runtime says it at each call; once is enough here
                self._said.add(r.line)
                self.reporter.warning(r.line.removeprefix("sdt: "))

    def add_action(self, spec: str, symbol: str) -> None:
        """Call SYMBOL in the guest, with the probe's arguments, whenever a probe matching SPEC fires.

        The probes matching SPEC are enabled too (with the breakpoint: the host must see them fire).
        """
        func = self.check_function(symbol)
        pattern = self.spec(spec)
        if any(s.form == "goto" for s in self.runtime.matching(pattern)):  # their arguments exist only out of line
            self.reporter.warning(f"--action {spec}: asm goto sites fire from their out-of-line code, where no "
                                  "breakpoint stops them; the action follows the call sites' firings only")
        self.runtime.actions.append((pattern, func, symbol))
        try:
            self.enable(spec)
            self.runtime._trap_actions()
        except BaseException:
            self.runtime.actions.pop()
            raise

    def functions(self) -> list[str]:
        return sorted(n for n, s in self.image.symbols.items() if s.type == STT_FUNC)

    # -- calls ----------------------------------------------------------------------
    def check_run(self, target: str, args: list[int]) -> tuple[int, str]:
        """The function's address and the return type, once ``run(target, args)`` is known to be valid."""
        _, func, rtype = check_call(self.image, target, args)
        return func, rtype

    def run(self, target: str, args: list[int]) -> int | str | None:
        """Call ``SYMBOL[:TYPE]`` on every CPU; TYPE (int, long, uint, ulong, str, void) says how to read the
        result. One return (or fault) per CPU, in CPU order; CPU 0's value.

        Ctrl-C stops the guest: where it was is reported, then Stopped is raised.
        """
        func, rtype = self.check_run(target, args)
        symbol = target.partition(":")[0]
        self.last_fired = None
        try:
            results = self.smp.call_all(func, args, self.timeout)
        except Interrupted as fault:
            self._drain_after_interrupt()
            self.reporter.fault(symbol, fault, self.where(fault.pc), self.last_fired)
            raise Stopped() from None
        self._drain_or_stop()  # every CPU's records, merged in timestamp order
        first = None
        for cpu, raw in enumerate(results):
            shown = cpu if self.cpus > 1 else None
            if isinstance(raw, GuestFault):
                self.reporter.fault(symbol, raw, self.where(raw.pc), self.last_fired, cpu=shown)
                self.faults += 1
                continue
            m = self.smp.cpus[cpu]
            value = decode_return(raw, rtype, self.image.arch.bits, lambda a, m=m: read_guest_string(m, a))
            first = value if cpu == 0 else first
            self.reporter.returned(symbol, args, value, rtype, cpu=shown)
        return first

    def _flush_or_report(self, m: Machine) -> None:
        """sdt_flush on CPU ``m``. A fault there (a kernel that broke its CPU area or its ring) is one fault
        line, once: that CPU is not flushed or read again, and what it had not closed stays unread."""
        try:
            self.runtime.flush(m)
        except Interrupted:
            raise
        except GuestFault as fault:
            self._broken.add(m.cpu)
            self.reporter.fault("sdt_flush", fault, self.where(fault.pc), self.last_fired,
                                cpu=m.cpu if self.cpus > 1 else None)
            self.faults += 1

    def _drain_or_stop(self) -> None:
        """drain; Ctrl-C while the runtime flushes ends the session as one during a run does."""
        try:
            self.drain()
        except Interrupted as fault:
            self._drain_after_interrupt()
            self.reporter.fault("sdt_flush", fault, self.where(fault.pc), self.last_fired)
            raise Stopped() from None

    def _drain_after_interrupt(self) -> None:
        """What was recorded before Ctrl-C, read: the runtime's short sdt_flush calls deaf to a Ctrl-C that
        is still on its way (they keep their deadline); a fault there leaves the rest unread."""
        for m in self.smp.cpus:
            m.watchdog.deaf = True
        try:
            self.drain()
        except GuestFault:
            pass
        finally:
            for m in self.smp.cpus:
                m.watchdog.deaf = False

    def stats(self) -> None:
        self._drain_or_stop()
        self.reporter.stats(dict(self.hits), self.consumer.total_lost, self.streams.damaged)


def site_report(line: str) -> tuple[str, str, str]:
    """(what the runtime said of a site, the bytes it found there, the bytes it expected, as hex) from a
    report line: ``sdt: PROBE site at 0xADDR WHAT (found 0f 1f ...; expected e8 ...)``."""
    import re

    m = re.search(r" site at 0x[0-9a-f]+ (.*?)(?: \(found ([0-9a-f ]+?)(?:; expected ([0-9a-f ]+))?\))?$", line)
    if not m:
        return line, "", ""
    return m[1], (m[2] or "").replace(" ", ""), (m[3] or "").replace(" ", "")


def read_guest_string(machine: Machine, addr: int) -> str | None:
    def read(at: int, size: int) -> bytes | None:
        try:
            return machine.read(at, size)
        except GuestFault:
            return None

    return read_string(read, addr, 16)


