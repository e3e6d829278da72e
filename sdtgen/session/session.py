"""One tracing session over any target: the emulated boot, QEMU, an attached kernel, a process.

The session owns what every target shares: the image and its probe model (every spec and call checked
against it before anything runs), the events (each packet decoded by the image's probe descriptors,
merged across CPUs in (timestamp, CPU) order as far as every CPU has been read), the trace sink, the
reporter, the faults, and how a session ends (Ctrl-C keeps what was recorded). A target owns only how
commands and bytes reach the kernel (sdtgen/targets/base.py).
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable

from sdtgen.calls import (
    check_call,
    decode_return,
    describe,
    function_address,
    matching_spec,
    parse_spec,
    read_string,
    single_sites,
)
from sdtgen.elf.reader import STT_FUNC
from sdtgen.errors import SdtError, printable
from sdtgen.event_format import event_format
from sdtgen.image import Image
from sdtgen.limits import DEFAULT_TIMEOUT
from sdtgen.probes import ProbeSpec
from sdtgen.session.machine import correlate, from_arrival, unknown
from sdtgen.session.reporter import ActionResult, Firing, Reporter, Stopped
from sdtgen.targets.base import (
    ACTIONS,
    ARM_MODES,
    CLOCK,
    EXHAUSTIVE,
    LEAVES,
    LISTENS,
    MODULES,
    SALVAGES,
    SESSIONS,
    CallFault,
    Halted,
    Host,
    Interrupted,
    Refused,
    Returned,
    Summary,
    Target,
    TortureJob,
)
from sdtgen.trace.model import DEFAULT_SESSION, Lost, Machine, check_machine_name
from sdtgen.trace.order import TimeOrder
from sdtgen.trace.packets import Decoder
from sdtgen.trace.sink import MergedTrace
from sdtgen.trace.streams import Streams

# Several CPUs: firings wait to be put in time order until every CPU has been read past them, at most
# MAX_PENDING of them (about 200 MB): past that, a CPU that records nothing holds the others back no more.
MAX_PENDING = 1_000_000
STRING_CHUNK = 128  # bytes a `str` result is read in


def check_arm(arm: str) -> str:
    """``trap`` or ``branch``, checked before anything starts."""
    if arm not in ARM_MODES:
        raise SdtError("", f"unknown arming mode {printable(arm)!r}", "use trap or branch")
    return arm


StartFn = Callable[[Host], Target]



def filtered(spec: str) -> bool:
    """An enabling with a predicate (``SPEC /predicate/``): a probe spec has no '/' of its own."""
    return "/" in spec

class Session:
    """A kernel booted (or attached to) by ``start``, which makes the target once the image is checked: given the
    Host (the image, this session's sinks), never the session."""

    def __init__(self, path: str, reporter: Reporter, start: StartFn, *, arm: str = "trap",
                 timeout: float = DEFAULT_TIMEOUT, trace: tuple[str, str] | MergedTrace | None = None,
                 precheck: Callable[[Session], None] | None = None,
                 post_mortem: tuple[str, str] | None = None, relayd: str | None = None,
                 machine: str | None = None) -> None:
        # The machine the trace says it comes from (docs/trace.md, "Machines"): its name, and once correlated its
        # clock against the host's real time; a trace waits for a recording's first packet to correlate it.
        self.machine_name = check_machine_name(machine) if machine is not None else None
        if trace is not None and not isinstance(trace, tuple) and machine is None:
            raise ValueError("a merged trace holds machines: give the session its machine name")
        if relayd is not None and machine is None:
            raise ValueError("a relay session is a machine's: give the session its machine name")
        self.reporter = reporter
        reporter.file = reporter.file or path
        self.mode = check_arm(arm)
        self.timeout = timeout
        self.image = Image(path)
        self.target: Target | None = None
        self.last_target: Target | None = None  # the target once the session is closed: what it counted
        self.sink = None  # the local --trace's, a relay daemon's (--relayd), or a Tee of both
        self._relay = None  # the relay daemon connected before the kernel starts (RelaydClient), until its sink opens
        self._live = None  # the live flush while a relay daemon is streamed to (sdtgen/session/live.py)
        self.post_mortem_trace = post_mortem  # (path, format) of --post-mortem: the rings' trace after a crash
        self.salvaged = None  # what the post-mortem read, session id -> Salvage (sdtgen/session/post_mortem.py)
        self.faults = 0
        self.halted = False
        self.hits: dict[str, int] = {}
        self.last_fired: str | None = None
        self.booting = True
        self.cpus = 1  # until the kernel says
        self.streams: Streams | None = None  # every packet's checks, once the target knows its clock
        self._boot_log: list[tuple[int, str]] = []
        self._said: set[str] = set()
        self._changed: set[str] = set()  # probes with a site someone else rewrote (the runtime left it)
        # What each CPU recorded and has not been shown (its events, and --action results after the firing they
        # followed), given out in (time, CPU) order as far as every CPU has been read, and when a command ends.
        self._order = TimeOrder(MAX_PENDING)
        self._last_ts: dict[int, int] = {}  # CPU -> the time of the last event it recorded
        self._lock = threading.RLock()  # an emulated CPU's thread may hand over packets from its notify hook
        self.modules: dict[str, list] = {}  # loaded modules: name -> their probes
        self.refused_modules = 0  # loads refused (said; the session went on)
        self.module_functions: dict[str, int] = {}
        self._aggregations = None  # what --aggregate compiled and armed (sdtgen/session/aggregations.py)
        self._target_lock = threading.RLock()  # one command at a time: --interval's printing runs on a thread
        self.own: str | None = None  # the session the host opened for itself (--session), None: the default one
        self.own_id = 0  # its id: the stream_id of its packets
        self.machine: Machine | None = None
        self._trace_later: tuple[str, str] | MergedTrace | None = None
        self._by_arrival = False  # the machine's clock is correlated by its first packet's arrival
        self._held: list[tuple] = []  # packets taken while the clock was correlated: the trace's first
        try:
            arch = self.image.arch
            self.probes = [p for p in self.image.probes() if p.key]
            self.image.check_bootable(self.image.probes())
            self.types = {p.spec: p.args for p in self.probes}
            self.decoder = Decoder([event_format(p.key, p.spec, p.args, arch.bits, arch.little)
                                    for p in self.probes], arch.bits, arch.little)
            if precheck is not None:  # the caller's own checks, against the image, before anything runs
                precheck(self)
            for out in (trace, post_mortem):
                if isinstance(out, tuple):  # a merged trace checked its destination when it was opened
                    self._check_trace(*out)
            if relayd is not None:  # a relay daemon that is not there, or no relay daemon, said before anything runs
                from sdtgen.transport.relayd import connect_relayd, parse_relayd_url

                self._relay = connect_relayd(parse_relayd_url(relayd))
            self.reporter.hold_console()  # a firmware's banner, the kernel's boot log: shown only if it fails
            try:
                self.target = start(self.host())
            except Halted as h:  # the kernel never came up: said once, here, after its console
                self.reporter.release_console(show=True)
                self.reporter.error(str(h), h.fix)
                raise
            except BaseException:
                self.reporter.release_console(show=True)
                raise
            self.reporter.release_console(show=False)
            self.booting = False
            booted = self.target.booted
            if SESSIONS in self.target.capabilities and self.target.own is not None:  # --session: its packets only
                self.own, self.own_id = self.target.own.name, self.target.own_id
                self.decoder.stream = self.own_id
            self.cpus = booted.cpus
            self.reporter.per_cpu = self.cpus > 1
            self._report_boot(booted)
            self._trace_later = trace  # opened once the machine's clock is correlated (at once without a machine)
            if self.machine_name is not None and CLOCK in self.target.capabilities:
                self.machine = self._correlate()
            elif self.machine_name is not None:  # a kernel asked nothing: its first packet correlates the clock
                self._by_arrival = True
            if not self._by_arrival:
                self._open_later()
            if arm != "trap":
                self.set_arm(arm)
        except BaseException:
            self.close()
            raise

    # -- what targets hand over ------------------------------------------------------------------
    def host(self) -> Host:
        """What a target sees of this session: the image, how it arms first, and the sinks below."""
        r = self.reporter
        return Host(self.image, self.mode, self.on_packet, self.on_log, r.console, r.line, r.warning, self.on_action,
                    self.on_fault, self.open_streams, self.on_crash)

    def on_fault(self, what: str, fault: CallFault, cpu: int) -> None:
        """The runtime's own call ``what`` (sdt_flush, say) faulted on ``cpu``: said, and counted as a fault."""
        self.reporter.fault(what, fault, self.where(fault.pc), self.last_fired, cpu=cpu if self.cpus > 1 else None)
        self.faults += 1

    def on_log(self, entry: int, line: str) -> None:
        """A line of the runtime's log: at boot, refusals and the like; later, a site found changed."""
        if self.booting:
            self._boot_log.append((entry, line))
            return
        what, found, expected = site_report(line)
        site = site_of(line)
        if site is not None and what.startswith("changed since"):
            spec, addr = site
            self._changed.add(spec)
            self.reporter.changed(spec, addr, found, expected, self.where(addr))
        elif line not in self._said:  # the runtime says some of it at each call; once is enough here
            self._said.add(line)
            self.reporter.warning(line.removeprefix("sdt: "))

    def open_streams(self, clock_hz: int, cpus: int, packet_size: int | None, max_packet: int | None = None) -> Streams:
        """The packets' checks (sdtgen/trace/streams.py), made by the target once it knows the kernel's clock, CPUs
        and packet size (None: each CPU's first packet says it)."""
        self.streams = Streams(self.decoder, clock_hz, cpus, packet_size, self.reporter.warning, max_packet)
        return self.streams

    def on_packet(self, cpu: int, data: bytes, seq: int | None = None) -> bool:
        """One closed packet of ``cpu`` (``seq``: the number its ring's slot holds, when the target read it from the
        ring): checked (a damaged one is left out and counted), to the trace as it stands, its events shown in time
        order. Under -q, with no trace that takes events, its events are only counted by probe. Whether it was
        taken."""
        counting = self.reporter.quiet and not self._outputs_waiting() and (self.sink is None or
                                                                          not self.sink.needs_events)
        read = self.streams.read(cpu, data, not counting, seq) if self.streams is not None else None
        if read is None:
            if self.streams is None:
                self.reporter.warning(f"a packet of CPU {cpu} came before the kernel said its clock: left out")
            return False
        with self._lock:
            if self._by_arrival and self.machine is None:  # a recording's first packet: its clock
                self.machine = from_arrival(self.machine_name, read.packet.end, self.target.booted.clock_hz,
                                            time.time_ns())
                self._open_later()
            if self.sink is not None:
                self.sink.packet(cpu, data, read.packet, read.events if self.sink.needs_events else None)
            elif self._outputs_waiting():
                self._held.append((cpu, data, read))
            for probe, n in read.counts.items():
                self.hits[probe] = self.hits.get(probe, 0) + n
            if read.last is not None:
                self.last_fired = read.last
            if self.reporter.quiet:
                return True
            if read.events:
                self._last_ts[cpu] = read.events[-1].ts
            if self.cpus == 1:  # one CPU's events come in their order: shown as they come
                self._show(read.events)
            else:
                self._show(self._order.add(cpu, read.events, read.packet.end))
        return True

    def on_action(self, cpu: int, symbol: str, value: int) -> None:
        """An --action returned on ``cpu``: shown after everything that CPU recorded before it."""
        with self._lock:
            if self.cpus == 1 or self.reporter.quiet:
                self.reporter.action(symbol, value, cpu if self.cpus > 1 else None)
                return
            ts = self._last_ts.get(cpu, 0)
            self._show(self._order.add(cpu, [ActionResult(ts, cpu, symbol, value)], ts))

    # -- boot -----------------------------------------------------------------------------------
    def _report_boot(self, booted) -> None:
        """The patched line, a refusal per site the runtime refused (with its words), its other reports."""
        refused, others = [], []
        for _, line in self._boot_log:
            site = site_of(line)
            if site is not None:
                reason, found, _ = site_report(line)
                refused.append((*site, reason or "refused by the runtime", found))
            else:
                others.append(line)
        self.refused_sites = {addr for _, addr, _, _ in refused}
        if booted.patched is not None:  # a kernel that only streams says nothing of its sites
            self.reporter.patched(booted.patched, booted.refused, booted.folded)
        self.reporter.refused(refused, self.image.where)
        for line in others:
            self.reporter.warning(line.removeprefix("sdt: "))
        # A record does not say which site fired: a probe with one site names it, others give None.
        self.single_site = {spec: addr for spec, addr in single_sites(self.image).items()
                            if addr not in self.refused_sites}

    def _correlate(self) -> Machine:
        """The machine's clock against the host's real time, read now (sdtgen/session/machine.py)."""
        try:
            return correlate(self.machine_name, self.target.clock, self.target.booted.clock_hz)
        except Refused as e:
            self.reporter.warning(f"the kernel did not read its clock ({e.text}): the trace of {self.machine_name} "
                                  "is not placed in the host's real time")
            return unknown(self.machine_name)

    def _open_later(self) -> None:
        """The trace that waited for the clock's correlation, opened now, the packets taken meanwhile its first."""
        with self._lock:
            if not self._outputs_waiting():
                return
            trace, self._trace_later = self._trace_later, None
            self.sink = self._open(trace) if trace is not None else None
            if self._relay is not None:
                self._stream_live()
            held, self._held = self._held, []
            for cpu, data, read in held:
                self.sink.packet(cpu, data, read.packet, read.events if self.sink.needs_events else None)

    def _outputs_waiting(self) -> bool:
        """A trace or a relay daemon's stream waits for the machine's clock to be correlated."""
        return self._trace_later is not None or self._relay is not None

    def _open(self, trace: tuple[str, str] | MergedTrace):
        """--trace's sink: a trace of its own (path, format), or this machine's of a merged trace."""
        return self._open_trace(*trace) if isinstance(trace, tuple) else self._open_trace(None, None, merged=trace)

    def _check_trace(self, path: str, fmt: str) -> None:
        """The trace's destination, checked before the kernel starts (and left as it was)."""
        from sdtgen.trace.model import TraceMeta
        from sdtgen.trace.sink import open_trace

        arch = self.image.arch
        open_trace(path, fmt, TraceMeta(arch.name, "clock", 1, 1, ()), arch.bits, arch.little).abort()

    def _open_trace(self, path: str | None, fmt: str | None, target: Target | None = None,
                    session: tuple[str, int] | None = None, merged: MergedTrace | None = None):
        """A trace of the host's own session (the default one without --session), or of ``session`` (its name and
        the stream id its packets carry in the trace: a post-mortem writes every session's as stream 0)."""
        from sdtgen.trace.sink import open_trace

        arch, meta = self.image.arch, self._trace_meta(target, session)
        if merged is not None:
            return merged.machine(meta, arch.bits, arch.little)
        return open_trace(path, fmt, meta, arch.bits, arch.little)

    def _trace_meta(self, target: Target | None = None, session: tuple[str, int] | None = None):
        """What a trace of the session (see _open_trace) says of its kernel: its clock, CPUs, probes."""
        from sdtgen.trace.model import TraceMeta, TraceProbe

        arch, booted = self.image.arch, (target or self.target).booted
        probes = tuple(TraceProbe(p.key, p.provider, p.module, p.function, p.name, p.args) for p in self.probes)
        name, stream = session or (self.own or DEFAULT_SESSION, self.own_id)
        return TraceMeta(arch.name, booted.clock, booted.clock_hz, self.cpus, probes, name, stream, self.machine)

    def _stream_live(self) -> None:
        """The relay daemon's sink beside the local trace's (a Tee), and the live flush (of every target but a
        kernel that streams by itself, which no command reaches)."""
        from sdtgen.targets.base import LISTENS
        from sdtgen.trace.tee import Tee
        from sdtgen.transport.relayd import LIVE_PERIOD, RelaydSink

        arch = self.image.arch
        client, self._relay = self._relay, None
        every_cpu = LISTENS not in self.target.capabilities  # a recording does not say how many CPUs its kernel has
        relay = RelaydSink(client, self.machine_name, self._trace_meta(), arch.bits, arch.little,
                           self.reporter.warning, every_cpu=every_cpu)
        self.sink = relay if self.sink is None else Tee([self.sink, relay])
        if every_cpu:  # a kernel that streams by itself flushes by itself: no command reaches it
            from sdtgen.session.live import LiveFlush

            self._live = LiveFlush(self, LIVE_PERIOD)

    def caught_up(self) -> None:
        """Every CPU's open packet was just closed and read: the sinks that stream live told so. Not when the
        kernel said a CPU's packet stayed open (or refused to flush): that CPU may still hold earlier events, and
        a stream must never say it is past them (docs/live.md, "Quiet CPUs")."""
        if self.target is None or not self.target.flushed_all:
            return
        with self._lock:
            if self.sink is not None and hasattr(self.sink, "caught_up"):
                self.sink.caught_up()

    def _stop_live(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    # -- places ---------------------------------------------------------------------------------
    def where(self, addr: int) -> str:
        """``section:function+0xoff`` of an address, in the one diagnostic shape."""
        return self.image.where(addr)[0]

    def _place(self, fault: CallFault) -> str:
        """Where a call faulted; nothing when the kernel could not say (a call that did not return)."""
        return self.where(fault.pc) if fault.pc else ""

    # -- probes ---------------------------------------------------------------------------------
    def spec(self, text: str) -> ProbeSpec:
        return parse_spec(text)

    def check_spec(self, text: str) -> ProbeSpec:
        """A spec that matches a probe of the image's table (which of its sites verify is sdt_init's say)."""
        return matching_spec(text, self.probes)

    def check_function(self, symbol: str) -> int:
        """The address of the image's function ``symbol`` (or of a loaded module's)."""
        if symbol in self.module_functions:
            return self.module_functions[symbol]
        return function_address(self.image, symbol)

    def spec_of(self, symbol: str) -> str:
        """One spec for the probes with sites in function ``symbol``: the fields they share, the others empty."""
        sym = self.image.symbols.get(symbol)
        if sym is None:
            self.check_function(symbol)
        end = sym.value + max(sym.size, 1)
        fields = {(s.probe.provider, s.probe.module, s.probe.function, s.probe.name) for s in self.image.sites()
                  if sym.value <= s.addr < end}
        if not fields:
            raise SdtError(self.image.path, f"{printable(symbol)} has no probe site",
                           "name a function with SDT probes in it (see `sdtgen probes IMAGE`)")
        return ":".join(column[0] if len(set(column)) == 1 else "" for column in zip(*fields, strict=True))

    def add_action(self, spec: str, symbol: str) -> None:
        """Call SYMBOL in the kernel, with the probe's arguments, whenever a probe matching SPEC fires (the probes
        matching it are enabled too): the emulated boot, which runs the kernel's calls itself, can."""
        func = self.check_function(symbol)
        self.check_spec(spec)
        if ACTIONS not in self.target.capabilities:
            raise SdtError("", f"--action {printable(spec)}={printable(symbol)}: only the emulated boot calls a "
                           "function when a probe fires", "use sdtgen boot")
        self.target.add_action(spec, func, symbol)
        try:
            self.enable(spec)
        except BaseException:
            self.target.remove_action(spec, func)
            raise

    def functions(self) -> list[str]:
        return sorted(n for n, s in self.image.symbols.items() if s.type == STT_FUNC)

    def enable(self, spec: str, compiled=None, source: str = "--enable") -> int:
        """Arm the probes ``spec`` matches; ``SPEC /predicate/`` (DTrace's enabling with a predicate) arms them
        with a program that records only the firings for which the predicate holds (compiled already, or now)."""
        if filtered(spec):
            return self.aggregate(spec, compiled if compiled is not None else self.compile_filter(spec, source))
        return self._arm(spec, True)

    def compile_filter(self, text: str, source: str = "--enable"):
        """``SPEC[, SPEC...] /predicate/`` compiled as a clause without actions (it records what passes)."""
        from sdtgen.dscript.parser import ParseError, parse

        try:
            clauses = parse(text)
        except ParseError:
            clauses = []  # compile_aggregate says what is wrong, and where
        if any(c.actions for c in clauses) or len(clauses) > 1:
            raise SdtError(source, f"{printable(text)!r} is more than a spec and a predicate",
                           "give SPEC /predicate/ (aggregations: --aggregate CLAUSES)")
        return self.compile_aggregate(text, source)

    def disable(self, spec: str) -> int:
        """Disarm the probes ``spec`` matches. A probe that runs a program (a filter of ``--enable 'SPEC /pred/'``,
        an aggregation's clause) has it detached too, as DTrace's enablings end with their disabling: enabled
        again, it records every firing, and no later enabling runs a predicate it does not say. What the
        aggregations gathered until then stays in them."""
        if filtered(spec):
            raise SdtError("", f"--disable {printable(spec)!r} takes a probe spec, not a predicate",
                           "give the spec alone: every enabling of its probes ends")
        programs = self._aggregations.programs if self._aggregations is not None else {}
        pattern = self.spec(spec)
        running = [p.key for p in self.probes if p.key in programs and pattern.matches(p)]
        if running:
            try:
                self._guard(lambda: self.target.disable_program(spec), f"disable {printable(spec)}")
            except Refused as e:
                raise SdtError(self.image.path, f"the runtime refused to detach the programs of {printable(spec)!r}: "
                               f"{printable(e.text)}") from None
            for key in running:
                del programs[key]
        return self._arm(spec, False)

    def _arm(self, text: str, arm: bool) -> int:
        pattern = self.spec(text)
        # The runtime applies it to modules loaded later too.
        later = MODULES in self.target.capabilities and self.target.expects_modules
        if not any(pattern.matches(p) for p in self.probes) and not later:
            raise SdtError("", f"probe spec {printable(text)!r} reads as {describe(pattern)} and matches no "
                           "probe of the image", "list the probes with `sdtgen probes IMAGE`; "
                           "a spec is provider:module:function:name, filled from the right")
        try:
            n = self._guard(lambda: self.target.enable(text, self.mode) if arm else self.target.disable(text),
                            f"{'enable' if arm else 'disable'} {printable(text)}")
        except Refused as e:
            raise SdtError(self.image.path, f"the runtime refused to {'enable' if arm else 'disable'} "
                           f"{printable(text)!r}: {printable(e.text)}") from None
        if n == 0 and arm and later and not any(pattern.matches(p) for p in self.probes):
            self.reporter.warning(f"{printable(text)!r} matches no probe loaded yet: modules loaded later get it")
        elif n == 0 and arm:
            if any(pattern.matches(p) for p in self.probes if p.spec in self._changed):
                raise SdtError(self.image.path, f"no site of {printable(text)!r} could be armed: the guest rewrote "
                               "every one")
            raise SdtError(self.image.path, f"no site of {printable(text)!r} could be armed: the runtime refused "
                           "every one", "the kernel's log says why")
        return n

    def set_arm(self, mode: str) -> None:
        """``trap`` or ``branch``: how sites are armed from now on (the armed ones are rearmed)."""
        check_arm(mode)
        try:
            self._guard(lambda: self.target.set_mode(mode), f"arm with {mode}")
        except Refused as e:
            raise SdtError(self.image.path, f"the runtime refused to arm with {mode}: {printable(e.text)}") from None
        self.mode = mode

    def sessions(self) -> list:
        """The sessions the kernel has open (SessionState each, the default one first): a target without sessions
        (the emulator, a kernel that only streams) is said in one line."""
        if SESSIONS not in self.target.capabilities:
            raise SdtError(self.image.path, "this target has no sessions to list (a kernel that only streams)",
                           "use boot, qemu, attach or the process target")
        return self._guard(self.target.sessions, "sessions")

    def list_probes(self, spec: str = ""):
        """The probes ``spec`` matches as the kernel's runtime keeps them: sites, and how many are armed."""
        if spec:
            self.check_spec(spec)
        return self._guard(lambda: self.target.probes(spec), "list")

    # -- aggregations ---------------------------------------------------------------------------
    @property
    def aggregations(self):
        """The scripts aggregated and the consumer's totals (made when the first is compiled)."""
        if self._aggregations is None:
            from sdtgen.session.aggregations import Aggregations

            self._aggregations = Aggregations(self)
        return self._aggregations

    @property
    def aggregating(self) -> bool:
        return self._aggregations is not None and self._aggregations.totals is not None

    def compile_aggregate(self, text: str, source: str = "--aggregate"):
        """``text`` compiled against the image's probes, before anything of it is armed (one line if refused)."""
        return self.aggregations.compile(text, source)

    def aggregate(self, text: str, compiled=None, source: str = "--aggregate") -> int:
        """Aggregate ``text`` (compiled already, or now) in the kernel from now on: the sites armed."""
        return self.aggregations.arm(compiled if compiled is not None else self.compile_aggregate(text, source))

    def snapshot(self):
        """The merged totals with every CPU's tables taken now (None when nothing aggregates)."""
        return self.aggregations.snapshot() if self.aggregating else None

    def printa(self) -> None:
        """The merged aggregations, as printa prints them (or as JSON)."""
        totals = self.snapshot()
        if totals is not None:
            self.reporter.aggregations(totals, self.own)

    def clear(self) -> None:
        """DTrace's clear(): the host's totals start again."""
        if self.aggregating:
            self.aggregations.clear()

    # -- calls ----------------------------------------------------------------------------------
    def check_run(self, target: str, args: list[int | str]) -> tuple[int, str]:
        """The function's address and the return type, once ``run(target, args)`` is known to be valid."""
        _, func, rtype = check_call(self.image, target, args, self.module_functions)
        return func, rtype

    # -- modules --------------------------------------------------------------------------------
    def load_module(self, path: str) -> None:
        """Load the module ``path`` (the target relocates it and calls sdt_module_load): its probes list, arm and
        record like the image's, and its functions run."""
        if self.sink is not None:  # the console's `module`: the trace's metadata has no room for its probes
            raise SdtError("", f"cannot load {printable(path)} while tracing: the trace's metadata was written "
                           "without the module's probes", "start the session without --trace")
        if MODULES not in self.target.capabilities:
            raise SdtError("", f"cannot load {printable(path)}: this target loads no modules", "use sdtgen boot")
        try:
            loaded = self._guard(lambda: self.target.load_module(path), f"load {printable(path)}")
        except Refused as e:  # the kernel's own refusal (a control target): said as the runtime's are
            raise SdtError(path, f"the runtime refused to load it: {printable(e.text)}") from None
        arch = self.image.arch
        self.modules[loaded.name] = [p for p in loaded.probes if p.key]
        self.module_functions.update(loaded.functions)
        for p in self.modules[loaded.name]:
            self.types[p.spec] = p.args
        self.decoder.add(event_format(p.key, p.spec, p.args, arch.bits, arch.little) for p in self.modules[loaded.name])
        self.probes = [p for p in self.probes if p not in self.modules[loaded.name]] + self.modules[loaded.name]
        self.reporter.module(loaded.name, loaded.patched, "loaded")

    def load_module_or_say(self, path: str) -> bool:
        """``load_module``, for --module and a script's or the console's `module FILE` alike: a load refused leaves
        the kernel as it was, so it is said (and the exit status says it) and the session goes on."""
        try:
            self.load_module(path)
            return True
        except SdtError as e:
            self.refused_modules += 1
            self.reporter.error(f"module {printable(path)} not loaded: {e.what}", e.fix)
            return False

    def module_spec(self) -> str:
        """One spec for the loaded module's probes: the fields they share, the others empty."""
        fields = {(p.provider, p.module, p.function, p.name) for probes in self.modules.values() for p in probes}
        return ":".join(c[0] if len(set(c)) == 1 else "" for c in zip(*fields, strict=True))

    def unload_module(self, name: str) -> None:
        if MODULES not in self.target.capabilities or name not in self.modules:
            raise SdtError("", f"no module {printable(name)!r} is loaded", "load it first (--module FILE)")
        n = self._guard(lambda: self.target.unload_module(name), f"unload {printable(name)}")
        gone = self.modules.pop(name)
        self.probes = [p for p in self.probes if p not in gone]
        self.reporter.module(name, n, "unloaded")

    def run(self, target: str, args: list[int | str], cpu: int | None = None) -> int | str | None:
        """Call ``SYMBOL[:TYPE]`` on ``cpu``, or on every CPU at once; TYPE (int, long, uint, ulong, str, void)
        says how to read the result. One return (or fault) per CPU, in CPU order; CPU 0's value (or ``cpu``'s).

        Ctrl-C stops the kernel's call: where it was is reported, then Stopped is raised.
        """
        func, rtype = self.check_run(target, args)
        if cpu is not None and not 0 <= cpu < self.cpus:
            raise SdtError("", f"--cpu {cpu} is not one of the kernel's {self.cpus} CPUs (0 to {self.cpus - 1})")
        symbol = target.partition(":")[0]
        self.last_fired = None
        with self._lock:
            self._order.expect(range(self.cpus) if cpu is None else [cpu])
        results = self._guard(lambda: self.target.run(func, args, cpu, self.timeout), printable(symbol), symbol)
        if self.own is not None:  # the host's own session: what the call recorded is read now, shown before its
            self.drain()          # results, as the default session's packets come with them (a stream, not a tail)
        self._emit_pending()
        first, wanted = None, 0 if cpu is None else cpu
        for r in results:
            shown = r.cpu if self.cpus > 1 else None
            if r.fault is not None:
                self.reporter.fault(symbol, r.fault, self._place(r.fault), self.last_fired, cpu=shown)
                self.faults += 1
                continue
            value = decode_return(r.value, rtype, self.image.arch.bits, self._string)
            first = value if r.cpu == wanted else first
            self.reporter.returned(symbol, args, value, rtype, cpu=shown)
        return first

    def _string(self, addr: int) -> str | None:
        """The NUL-terminated string at ``addr`` in the kernel's memory, or None where there is none."""
        return read_string(self.read, addr, STRING_CHUNK)

    def read(self, addr: int, size: int) -> bytes | None:
        return self._guard(lambda: self.target.read(addr, size), "read")

    def torture(self, target: str, args: list[int], spec: str, toggles: int, module: bool = False,
                progress: Callable[[int], None] | None = None, keep: str = "") -> Summary:
        """Every CPU but one calls ``target`` over and over while that one arms (in this session's mode) and
        disarms ``spec`` ``toggles`` times (``module``: unloads and loads the module loaded, ``spec`` enabled
        throughout); the rings' records are read at the end. ``progress``: told the toggles made, as they are.
        ``keep``: the host's own session (--session) holds ``keep``'s probes throughout and counts their firings
        (Summary's kept), while the toggles are the default session's."""
        func, rtype = self.check_run(target, args)
        self.check_spec(spec)
        mask = (1 << (32 if rtype in ("int", "uint") else self.image.arch.bits)) - 1
        take = self._keeping(keep) if keep else (lambda: None)
        job = TortureJob(func, target.partition(":")[0], args, mask, spec, toggles, "module" if module else self.mode,
                         self.timeout, *([progress] if progress is not None else [lambda done: None]), keep, take)
        summary = self._guard(lambda: self.target.torture(job), "torture")
        self._emit_pending()
        summary.firings += sum(self.hits.values())  # what the session saw, and what the target says never reached it
        if keep:
            self._kept(summary, keep)
            if not summary.checked:  # what one call fires of the kept probes, counted by the keeping session
                counted = summary.kept
                self._guard(lambda: self.target.run(func, args, 0, self.timeout), "torture")
                self._kept(summary, keep)
                summary.kept, summary.kept_each = counted, summary.kept - counted
        return summary

    KEPT = "kept"  # the keeping session's aggregation: @kept = count() on every probe it keeps

    def _keeping(self, keep: str) -> Callable[[], None]:
        """What makes the host's own session keep ``keep``'s probes: an aggregation counting their firings,
        compiled now (refused before anything runs), armed when the target says."""
        if SESSIONS not in self.target.capabilities or self.own is None:
            raise SdtError("", "--keep needs a session of the host's own beside the torture's", "")
        if filtered(keep):
            raise SdtError("--keep", f"{printable(keep)!r} is not a probe spec", "give SPEC alone, no predicate")
        text = f"{keep} {{ @{self.KEPT} = count(); }}"
        compiled = self.compile_aggregate(text, "--keep")
        return lambda: self.aggregate(text, compiled, "--keep")

    def _kept(self, summary: Summary, keep: str) -> None:
        totals = self._guard(self.aggregations.snapshot, "read the aggregations")
        summary.keep = keep
        if totals is not None:
            [info] = [a for a in totals.aggregations if a.name == self.KEPT]
            summary.kept = sum(v[0] for v in totals.rows.get(info.id, {}).values())
            summary.kept_dropped = sum(totals.dropped.values())

    def exhaustive(self, target: str, args: list[int], module: bool = False, keep: str = "") -> Summary:
        """At every store the runtime makes to ``target``'s sites (``module``: the loaded module's), another CPU
        started at every instruction boundary of the site, in every order the store's bytes can land. ``keep``:
        the host's own session holds its probes armed meanwhile (none may be seen disarmed)."""
        self.check_run(target, args)
        if EXHAUSTIVE not in self.target.capabilities:
            raise SdtError("", "--exhaustive runs in the emulator only (it starts a CPU at every byte of a site)",
                           "leave out --target and --serial")
        symbol = target.partition(":")[0]
        if keep:
            take = self._keeping(keep)
            return self._guard(lambda: self.target.exhaustive(symbol, module, keep, take), "torture")
        return self._guard(lambda: self.target.exhaustive(symbol, module), "torture")

    def listen(self) -> None:
        """A kernel that streams by itself: what it sends, read until its line ends (`sdtgen record`)."""
        if LISTENS not in self.target.capabilities:
            raise SdtError("", "this target takes commands: it streams nothing by itself", "use sdtgen record")
        self.target.listen()
        self._emit_pending()

    # -- the end of a command, of a session ----------------------------------------------------------
    def _guard(self, action, what: str, running: str | None = None):
        """A target action; a kernel that cannot go on ends the session (said once), Ctrl-C stops it.
        ``running``: the function a stop interrupts, reported as a fault of that call."""
        try:
            with self._target_lock:
                return action()
        except Interrupted as stop:
            self._emit_pending()
            self.reporter.fault(running or what, stop.fault, self._place(stop.fault), self.last_fired)
            raise Stopped() from None
        except Halted as h:
            self._emit_pending()
            self.faults += 1
            self.halted = True
            if h.fault is not None and running is not None:
                self.reporter.fault(running, h.fault, self._place(h.fault), self.last_fired)
                why = f"{running}: {h.fault.what}"
            elif h.fault is not None:
                self.reporter.error(f"{what}: {h.fault.what}", h.fix)
                why = f"{what}: {h.fault.what}"
            else:
                self.reporter.error(f"{what}: {h}", h.fix)
                why = str(h)
            try:
                self.post_mortem(why, final=True)
            except (SdtError, OSError) as e:  # the trace could not be written: said, and the halt still raised
                self.reporter.error(f"post-mortem: {e}")
            raise

    # -- post-mortem (docs/post-mortem.md) ----------------------------------------------------------------
    def on_crash(self, why: str) -> None:
        """A target's call faulted or hung and the kernel goes on (the emulator): the rings read as the crash left
        them, when --post-mortem asks."""
        if self.post_mortem_trace is not None:
            self.post_mortem(why, final=False)

    def post_mortem(self, why: str, final: bool) -> None:
        """Each session's rings read out of the machine's memory, once, as the kernel left them when it panicked,
        hung or died (``why``): every packet they still hold and the open packets' complete events, each checked
        (sdtgen/session/post_mortem.py). Said in one line a session; written to --post-mortem's trace (each
        session's its own); and when the kernel cannot go on (``final``), what the session had not read yet of the
        default session goes to its own output and --trace too."""
        target = self.target
        if self.salvaged is not None or target is None or SALVAGES not in target.capabilities:
            return
        rings = target.rings()
        if rings is None:
            if self.post_mortem_trace is not None:
                self.reporter.warning("post-mortem: the machine's memory cannot be read (its RAM is not shared with "
                                      "the host, and QEMU cannot save it): no post-mortem trace is written")
            return
        from sdtgen.session.post_mortem import read_sessions, session_path

        arch = self.image.arch
        # the salvage writes every session's packets as stream 0 (one stream class a trace): its decoder takes
        # that stream, whatever session --session made the live decoder's
        decoder = copy.copy(self.decoder)
        decoder.stream = 0
        read = read_sessions(rings, decoder, target.booted.clock_hz, arch.bits, arch.little, self.reporter.warning)
        self.salvaged = {r.id: r.salvage for r in read if not r.snapshot}
        if not read and self.post_mortem_trace is not None:
            self.reporter.warning("post-mortem: no session's CPU areas are known (the kernel never said where they "
                                  "are, and the image has no sdt_session_table): no post-mortem trace is written")
        for r in read:
            got = r.salvage
            # the default session's tail no consumer read: the output ends there (with --session the output is the
            # host's own session's, whose tail is in the post-mortem trace and its line)
            if final and r.id == 0 and self.own is None and self.streams is not None:
                for cpu, c in sorted(got.cpus.items()):
                    for data, packet in c.packets:
                        if packet.packet.seq > self.streams.last_seq(cpu):
                            self.on_packet(cpu, data, packet.packet.seq)
                self._emit_pending()
            path = None
            if self.post_mortem_trace is not None:
                path = session_path(self.post_mortem_trace[0], r.name + (".snapshot" if r.snapshot else ""), r.id)
                self._write_salvage(path, self.post_mortem_trace[1], target, r.name, got)
            self.reporter.post_mortem(why, got, path, None if r.id == 0 else r.name, r.snapshot)

    def _write_salvage(self, path: str, fmt: str, target: Target, name: str, got) -> None:
        """The packets a post-mortem or a snapshot read (a Salvage) of session ``name``, written as a trace."""
        sink = self._open_trace(path, fmt, target, (name, 0))  # salvage's packets: stream 0
        try:
            for cpu, c in sorted(got.cpus.items()):
                for data, packet in c.packets:
                    sink.packet(cpu, data, packet.packet, packet.events if sink.needs_events else None)
            sink.finish(got.lost())
        except BaseException:
            sink.abort()
            raise

    # -- snapshots (docs/sessions.md, "Snapshots") ---------------------------------------------------------
    def take_snapshot(self, name: str) -> None:
        """--take-snapshot NAME: session NAME's snapshot taken now (the control core's `snapshot NAME`, or the
        emulator's call of sdt_snapshot)."""
        if SESSIONS not in self.target.capabilities:
            raise SdtError(self.image.path, "this target has no sessions to snapshot",
                           "use the emulator, qemu, attach or the process target; or have the kernel call sdt_snapshot")
        said = self._guard(lambda: self.target.take_snapshot(name), "snapshot")
        self.reporter.snapshot_taken(name, said)

    def read_snapshot(self, name: str, path: str) -> None:
        """--snapshot NAME PATH: the snapshot session NAME holds (the kernel's last, taken by its panic or assert
        path, a probe's snapshot() or --take-snapshot), read out of the kernel's memory through the runtime's
        registry (the machine's memory, or the control core's `read`), every packet checked as a post-mortem's,
        written to PATH (its format from the extension, as --trace's)."""
        from sdtgen.session.post_mortem import read_snapshot
        from sdtgen.trace.sink import guess_format

        target = self.target
        rings = self._guard(target.rings, "read") if SALVAGES in target.capabilities else \
            self._guard(target.memory, "read") if SESSIONS in target.capabilities else None
        if rings is None:
            raise SdtError(self.image.path, f"the snapshot of session {printable(name)!r} cannot be read: the host "
                           "cannot read this kernel's memory", "use qemu, attach, the process target or boot")
        arch = self.image.arch
        decoder = copy.copy(self.decoder)
        decoder.stream = 0
        got = self._guard(lambda: read_snapshot(rings, name, decoder, target.booted.clock_hz, arch.bits,
                                                arch.little, self.reporter.warning), "read")
        if isinstance(got, str):
            raise SdtError(self.image.path, f"the snapshot of session {printable(name)!r} cannot be read: {got}",
                           "open the session with snapshot packets, and take one (sdt_snapshot, --take-snapshot)")
        self._write_salvage(path, guess_format(path) or "ctf", target, name, got)
        self.reporter.snapshot(name, got, path)

    def leave(self) -> None:
        """A kernel the session leaves running (attach): what the session armed, disarmed before its last drain."""
        if LEAVES in self.target.capabilities and not self.halted:
            self._guard(self.target.leave, "disable")

    def drain(self) -> None:
        """Every CPU's open packet closed and every closed packet read, shown in time order."""
        self._guard(self.target.drain, "drain")
        self._emit_pending()
        self.caught_up()

    def _emit_pending(self) -> None:
        """Every event still waiting to be put in time order, shown (a command ended: nothing earlier can come)."""
        with self._lock:
            self._show(self._order.rest())

    def _show(self, items: list) -> None:
        for e in items:
            if isinstance(e, ActionResult):
                self.reporter.action(e.symbol, e.value, e.cpu)
            else:
                self.reporter.fire(Firing(e.probe, self.single_site.get(e.probe), e.args, self.types[e.probe],
                                          e.cpu, e.ts))

    def lost(self) -> dict[int, Lost]:
        """Each CPU's lost events as the kernel counts them, as far as the counts can be believed."""
        said = self._guard(self.target.lost, "stats")
        return {cpu: self.streams.lost(cpu, x.discarded, x.overwritten) for cpu, x in said.items()}

    @property
    def damaged(self) -> int:
        """Packets, frames and counters the guest or the line spoiled: left out, and counted."""
        target = self.target or self.last_target
        tables = self._aggregations.damaged if self._aggregations is not None else 0
        return ((self.streams.damaged if self.streams is not None else 0) + (target.damaged if target else 0)
                + tables)

    def stats(self) -> None:
        self.drain()
        lost = self.lost()
        self.reporter.stats(dict(self.hits), sum(x.total for x in lost.values()), self.damaged)

    def finish_trace(self, interrupted: bool = False) -> None:
        """Every recorded event is in the trace: put it in place (after Ctrl-C or a kernel that stopped, what
        could be read, deaf to another Ctrl-C until the trace is whole)."""
        self._stop_live()
        if self.sink is None and not self._outputs_waiting():
            return
        import signal

        deaf = interrupted and threading.current_thread() is threading.main_thread()
        old = signal.signal(signal.SIGINT, signal.SIG_IGN) if deaf else None
        try:
            if not self.halted:
                try:
                    self.target.drain()
                    self.lost()  # the kernel's last counts, as far as they can be believed
                except (Halted, Interrupted):
                    pass
            self._emit_pending()
            if self._outputs_waiting():  # a recording that sent no packet: its clock never correlated
                self.machine = unknown(self.machine_name)
                self._open_later()
            sink, self.sink = self.sink, None
            sink.finish(self.streams.last_lost() if self.streams is not None else {})
        finally:
            if deaf:
                signal.signal(signal.SIGINT, old)

    def close(self) -> None:
        """The kernel left as a target leaves it (QEMU powered off, an attached kernel as it runs); a trace not
        finished is discarded."""
        self._stop_live()
        if self._relay is not None:
            self._relay.close()
            self._relay = None
        if self.sink is not None:
            self.sink.abort()
            self.sink = None
        if self.target is not None:
            self.last_target, self.target = self.target, None
            self.last_target.close()
        self.image.close()


def site_report(line: str) -> tuple[str, str, str]:
    """(what the runtime said of a site, the bytes it found there, the bytes it expected, as hex) from a
    report line: ``sdt: PROBE site at 0xADDR WHAT (found 0f 1f ...; expected e8 ...)``."""
    import re

    m = re.search(r" site at 0x[0-9a-f]+ (.*?)(?: \(found ([0-9a-f ]+?)(?:; expected ([0-9a-f ]+))?\))?$", line)
    if not m:
        return line, "", ""
    return m[1], (m[2] or "").replace(" ", ""), (m[3] or "").replace(" ", "")


def site_of(line: str) -> tuple[str, int] | None:
    """(probe spec, site address) of a report line about one site, or None."""
    import re

    m = re.match(r"sdt: (?:(\S+) )?site at 0x([0-9a-f]+) ", line)
    return (m[1] or "?", int(m[2], 16)) if m else None


__all__ = ["CallFault", "Returned", "Session", "Stopped"]
