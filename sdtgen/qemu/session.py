"""One boot on QEMU: the kernel patches itself at boot (its sdt_init), then the host enables, disables
and runs functions over the serial line, as `sdtgen boot` does in the emulator.

The image must be linked with the fixture's QEMU platform (fixtures/qemu), which answers the commands
(sdtgen.qemu.link). Events come back as the runtime's packets; each command's are reported, merged
across CPUs in timestamp order, before its results.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from sdtgen.calls import check_call, decode_return, matching_spec, read_string, single_sites
from sdtgen.errors import SdtError, printable
from sdtgen.image import Image
from sdtgen.probes import ProbeSpec
from sdtgen.qemu.link import Link, Panic, Timeout
from sdtgen.qemu.machine import Qemu, QemuExited, find_qemu, memory_for, qemu_argv
from sdtgen.qemu.packets import PacketSink
from sdtgen.qemu.report import QemuReport, Stopped, check_buffer_size, packet_size_for
from sdtgen.trace.packets import Decoder, Event, event_format
from sdtgen.trace.streams import Streams, clock_problem

PLATFORM_SYMBOL = "platform_main"  # what says the image has the fixture's QEMU platform
EXIT_WAIT = 5.0  # seconds QEMU has to power off after `exit`
READ_CHUNK = 128  # bytes one `read` command asks for (the kernel answers up to 200)
LINKED = "check that the image is linked with fixtures/qemu's platform for its architecture and boots in QEMU"


class Halted(Exception):
    """The kernel cannot go on (it hung, panicked or QEMU ended): what happened has been reported."""


@dataclass(frozen=True)
class Torture:
    """What `torture` measured: CPUs 1.. calling a function while CPU 0 armed and disarmed its probes."""

    protocol: str  # "safe", or "naive" in a runtime built with -DSDT_NAIVE_PROTOCOL
    cpus: int
    toggles: int
    calls: int
    faults: int  # calls that faulted outside a probe site
    torn: int  # calls that faulted inside a probe site: an instruction seen half written
    wrong: int  # calls that returned another value than with nothing armed

    @property
    def passed(self) -> bool:
        """No call tore, faulted or returned a wrong value, and the other CPUs called (the verdict)."""
        return self.torn == 0 and self.faults == 0 and self.wrong == 0 and self.calls > 0


@dataclass(frozen=True)
class Hello:
    arch: str
    cpus: int
    clock: str
    clock_hz: int
    patched: int


class QemuSession:
    def __init__(self, path: str, report: QemuReport, *, cpus: int = 1, arm: str = "trap",
                 buffer_size: int = 1 << 20, overflow: str = "overwrite", timeout: float = 20.0,
                 trace: tuple[str, str] | None = None,
                 precheck: Callable[[QemuSession], None] | None = None) -> None:
        self.report = report
        self.timeout = timeout
        self.cpus = cpus
        self.faults = 0
        self.mode = arm
        self.image = Image(path)
        self.qemu: Qemu | None = None
        self.sink = None  # the trace: a sdtgen.trace.sink.TraceSink, open from the hello on
        self.halted = False
        try:
            self._check(arm, buffer_size, overflow)
            self._prepare()
            if precheck is not None:  # the caller's own checks, against the image, before QEMU starts
                precheck(self)
            self._boot(path, buffer_size, overflow, trace)
        except BaseException:
            self.close()
            raise

    # -- boot ------------------------------------------------------------------------------------
    def _check(self, arm: str, buffer_size: int, overflow: str) -> None:
        if arm not in ("trap", "branch"):
            raise SdtError("", f"unknown arming mode {printable(arm)!r}", "use trap or branch")
        if overflow not in ("overwrite", "drop"):
            raise SdtError("", f"unknown overflow policy {printable(overflow)!r}", "use drop or overwrite")
        check_buffer_size(buffer_size)
        self.binary = find_qemu(self.image.arch)
        if PLATFORM_SYMBOL not in self.image.symbols:
            raise self.image.elf.fail("the image has no QEMU platform (no platform_main)",
                                      "link it with fixtures/qemu: make -C fixtures/qemu ARCH=... KERNEL_SRCS=...")
        self.image.check_bootable(self.image.probes())

    def _prepare(self) -> None:
        arch = self.image.arch
        self.probes = [p for p in self.image.probes() if p.key]
        self.types = {p.spec: p.args for p in self.probes}
        self.decoder = Decoder([event_format(p.key, p.spec, p.args, arch.bits, arch.little) for p in self.probes],
                               arch.bits, arch.little)
        self.single_site = single_sites(self.image)
        self.hits: Counter[str] = Counter()
        self.sink = None  # the trace: a sdtgen.trace.sink.TraceSink, open from the hello on
        self._new: dict[int, list[Event]] = {}  # this command's events, per CPU
        self.packets = PacketSink([self._packet])
        self.streams: Streams | None = None  # the packets' checks, once the hello gave the clock
        self.refused = 0
        self.last_fired: str | None = None

    def _boot(self, path: str, buffer_size: int, overflow: str, trace: tuple[str, str] | None) -> None:
        arch = self.image.arch
        memory = memory_for(self.cpus, buffer_size)
        self.qemu = Qemu(qemu_argv(self.binary, arch, path, self.cpus, memory))
        self.link = Link(self.qemu, self.packets.frame, self._log, self._console)
        words = self._guard(lambda: self.link.line(self.timeout), "boot").split()
        numbers = [_hex(w) for w in words[2:3] + words[4:6]]
        if len(words) != 6 or words[0] != "hello" or None in numbers:
            self._halt(f"the kernel's first line is not its hello: {printable(' '.join(words))!r}", LINKED)
        self.hello = Hello(words[1], numbers[0], words[3], numbers[1], numbers[2])
        if self.hello.arch != arch.name or self.hello.cpus != self.cpus:
            self._halt(f"the kernel says it is {printable(self.hello.arch)} on {self.hello.cpus} CPUs, "
                       f"not {arch.name} on {self.cpus}", LINKED)
        if clock_problem(self.hello.clock_hz):
            self._halt(f"the kernel says its clock counts {self.hello.clock_hz} ticks a second",
                       "its platform must give sdt_hooks.clock_hz the clock's rate")
        self.streams = Streams(self.decoder, self.hello.clock_hz, self.cpus, packet_size_for(buffer_size),
                               self.report.warning)
        self.report.cpus(self.cpus)
        self.report.patched(self.hello.patched, self.refused)
        policy = 1 if overflow == "overwrite" else 0
        if trace is not None:
            self.sink = self._open_trace(*trace)
        self._command(f"ring {buffer_size:x} {packet_size_for(buffer_size):x} {policy} {memory:x}", "ring")

    def _log(self, line: str) -> None:
        """A line of the runtime's log: at boot, a site sdt_init refused."""
        if " site at 0x" in line and not hasattr(self, "hello"):
            self.refused += 1
        self.report.warning(line)

    def _console(self, data: bytes) -> None:
        self.report.console(data.decode("utf-8", "replace"))

    def _packet(self, cpu: int, data: bytes) -> None:
        if self.streams is None:  # before the hello: no packet can be checked, nor should any come
            self.packets.damaged += 1
            return
        read = self.streams.read(cpu, data)
        if read is None:
            return
        packet, events = read.packet, read.events
        if self.sink is not None:
            self.sink.packet(cpu, data, packet, events if self.sink.needs_events else None)
        self._new.setdefault(cpu, []).extend(events)

    def _open_trace(self, path: str, fmt: str):
        from sdtgen.trace.model import TraceMeta, TraceProbe
        from sdtgen.trace.sink import open_trace

        arch = self.image.arch
        probes = tuple(TraceProbe(p.key, p.provider, p.module, p.function, p.name, p.args) for p in self.probes)
        meta = TraceMeta(arch.name, self.hello.clock, self.hello.clock_hz, self.cpus, probes)
        return open_trace(path, fmt, meta, arch.bits, arch.little)

    def finish_trace(self) -> None:
        """Every recorded event is in the trace: put it in place (also after Ctrl-C, or a kernel that stopped:
        what it recorded so far)."""
        if self.sink is None:
            return
        if not self.halted:
            self.lost()  # the kernel's last counts, as far as they can be believed
        sink, self.sink = self.sink, None
        sink.finish(self.streams.last_lost())

    def _flush_events(self) -> dict[int, str]:
        """Report the events that came since the last command, merged in timestamp order; each CPU's last probe."""
        streams = [self._new[c] for c in sorted(self._new)]
        self._new = {}
        events = streams[0] if len(streams) == 1 else list(heapq.merge(*streams, key=lambda e: e.ts))
        last: dict[int, str] = {}
        for e in events:
            self.report.fire(e, self.single_site.get(e.probe), self.types[e.probe])
            last[e.cpu] = e.probe
        self.hits.update(e.probe for e in events)
        if events:
            self.last_fired = events[-1].probe
        return last

    # -- talking to the kernel -------------------------------------------------------------------
    def _halt(self, message: str | None, fix: str = "") -> None:
        """The kernel cannot go on: say why (unless said) and what to do, and end the session."""
        self.faults += 1
        self.halted = True
        if message is not None:
            self.report.error(message, fix)
        raise Halted(message)

    def _guard(self, action, what: str, running: str | None = None):
        """Run a link action; a hung, panicked or vanished kernel ends the session. ``running``: the
        function a timeout interrupts, reported as the emulated boot reports one that does not return."""
        try:
            return action()
        except Timeout:
            if running is None:
                self._halt(f"{what}: the kernel did not answer within {self.timeout:g} s",
                           LINKED + ", or give a longer --timeout" if what == "boot" else "give a longer --timeout")
            self._flush_events()
            self.report.fault(running, f"did not return within {self.timeout:g} s", 0, "", self.last_fired, None)
            self._halt(None)
        except Panic as e:
            words = str(e).split()
            detail = f"exception {words[2]} at {words[3]}" if len(words) >= 4 else str(e)
            pc = _hex(words[3]) if len(words) >= 4 else None
            self._halt(f"{what}: CPU {words[1] if len(words) > 1 else '?'} stopped on an {detail} outside any "
                       f"call ({'?' if pc is None else self.image.symbolize(pc)})",
                       "a bug in the kernel, where the place says")
        except QemuExited as e:
            tail = e.stderr.strip().splitlines()[-1:] or ["nothing on stderr"]
            self._halt(f"{what}: QEMU exited with status {e.status} ({printable(tail[0])})",
                       LINKED + " (QEMU's message says why)" if what == "boot" else "QEMU's message says why")

    def _command(self, text: str, what: str, timeout: float | None = None, running: str | None = None) -> list[str]:
        lines = self._guard(lambda: self.link.command(text, self.timeout if timeout is None else timeout), what,
                            running)
        if lines[-1].startswith("error"):
            raise SdtError(self.image.path, f"{what}: the kernel says: {printable(lines[-1][len('error '):])}")
        return lines

    @staticmethod
    def _count(line: str) -> int:
        """The number an ``ok WHAT [-]N`` line ends with."""
        words = line.split()
        return -int(words[-1], 16) if len(words) >= 2 and words[-2] == "-" else int(words[-1], 16)

    # -- probes ----------------------------------------------------------------------------------
    def spec(self, text: str) -> ProbeSpec:
        return matching_spec(text, self.probes)

    def check_spec(self, text: str) -> ProbeSpec:
        return matching_spec(text, self.probes)

    def enable(self, text: str) -> int:
        self.spec(text)
        n = self._count(self._command(f"enable {self.mode} {text}", f"enable {printable(text)}")[-1])
        if n <= 0:
            raise SdtError(self.image.path, f"no site of {printable(text)!r} could be armed (the runtime says {n})",
                           "the kernel's log above says why")
        return n

    def disable(self, text: str) -> int:
        self.spec(text)
        return self._count(self._command(f"disable {text}", f"disable {printable(text)}")[-1])

    # -- calls -----------------------------------------------------------------------------------
    def check_run(self, target: str, args: list[int]) -> tuple[int, str]:
        """The function's address and return type, once ``run(target, args)`` is known to be valid."""
        _, func, rtype = check_call(self.image, target, args)
        return func, rtype

    def run(self, target: str, args: list[int], cpu: int | None = None) -> int | str | None:
        """Call ``SYMBOL[:TYPE]`` on ``cpu``, or on every CPU at once (None); CPU 0's result, or ``cpu``'s."""
        func, rtype = self.check_run(target, args)
        if cpu is not None and not 0 <= cpu < self.cpus:
            raise SdtError("", f"CPU {cpu} is not one of the machine's {self.cpus}")
        symbol = target.partition(":")[0]
        mask = (1 << self.image.arch.bits) - 1
        words = " ".join(f"{a & mask:x}" for a in args)
        who = "all" if cpu is None else f"{cpu:x}"
        try:
            lines = self._command(f"run {who} {func:x} {len(args):x} {words}".rstrip(), printable(symbol),
                                  running=symbol)
        except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM/SIGHUP (machine.termination_as_interrupt)
            self._flush_events()
            self.report.fault(symbol, f"interrupted ({e.args[0] if e.args else 'Ctrl-C'})", 0, "", self.last_fired,
                              None, interrupted=True)
            self.halted = True  # the call is still running: QEMU is stopped, not asked to power off
            raise Stopped() from None
        except Halted:
            self._flush_events()
            raise
        last = self._flush_events()
        first, wanted = None, 0 if cpu is None else cpu
        for line in lines[:-1]:
            w = line.split()
            ran = int(w[1], 16)
            shown_cpu = ran if self.cpus > 1 else None
            if w[0] == "fault":
                cause, pc, addr = (int(x, 16) for x in w[2:5])
                self.faults += 1
                self.report.fault(symbol, f"CPU exception {cause:#x} (address {addr:#x})", pc,
                                  self.image.symbolize(pc), last.get(ran), shown_cpu)
                continue
            value = decode_return(int(w[2], 16), rtype, self.image.arch.bits, self._string)
            first = value if ran == wanted else first
            self.report.returned(symbol, args, value, rtype, shown_cpu)
        return first

    def torture(self, target: str, args: list[int], spec: str, toggles: int, timeout: float) -> Torture:
        """CPUs 1.. call ``target`` over and over while CPU 0 arms (in this session's mode) and disarms
        ``spec`` ``toggles`` times; the rings' records are drained at the end."""
        func, _ = self.check_run(target, args)
        self.spec(spec)
        if self.cpus < 2:
            raise SdtError("", "torture needs two CPUs or more: one toggles, the others call")
        mask = (1 << self.image.arch.bits) - 1
        words = " ".join(f"{a & mask:x}" for a in args)
        lines = self._command(f"torture {func:x} {len(args):x} {words} {toggles:x} {self.mode} {spec}", "torture",
                              timeout=timeout)
        self._flush_events()
        w = lines[0].split()
        return Torture(w[1], *(int(x, 16) for x in w[2:8]))

    def read(self, addr: int, size: int) -> bytes | None:
        """``size`` bytes of the kernel's memory at ``addr``; None where there is no memory."""
        out = bytearray()
        while len(out) < size:
            n = min(READ_CHUNK, size - len(out))
            lines = self._command(f"read {addr + len(out):x} {n:x}", "read")
            if lines[0] == "fault":
                return None
            out += bytes.fromhex(lines[0].split(" ", 1)[1] if " " in lines[0] else "")
        return bytes(out)

    def _string(self, addr: int) -> str | None:
        """The NUL-terminated string at ``addr``, read as the emulated boot reads one."""
        return read_string(self.read, addr, READ_CHUNK)

    def lost(self) -> dict[int, tuple[int, int]]:
        """Each CPU's lost events so far: (discarded when its ring was full, overwritten unread), as far as the
        counts the kernel sends can be believed (sdtgen.trace.streams)."""
        out = {}
        for line in self._command("stats", "stats")[:-1]:
            w = line.split()
            numbers = [_hex(x) for x in w[1:]]
            if len(w) != 4 or w[0] != "cpu" or None in numbers or numbers[0] >= self.cpus:
                self.report.warning(f"the kernel's stats line {printable(line)!r} is not `cpu K DISCARDED "
                                    "OVERWRITTEN` of one of its CPUs: left out")
                continue
            cpu, discarded, overwritten = numbers
            lost = self.streams.lost(cpu, discarded, overwritten)
            out[cpu] = (lost.discarded, lost.overwritten)
        return out

    def stats(self) -> None:
        lost = self.lost()
        self._flush_events()
        damaged = self.link.reader.corrupt + self.packets.stray
        if damaged:
            self.report.warning(f"{damaged} frame(s) from the kernel were damaged on the serial line: "
                                "their records are missing")
        self.report.stats(dict(self.hits), sum(d + o for d, o in lost.values()), self.damaged)

    @property
    def damaged(self) -> int:
        """Packets and counts the kernel sent that could not be believed (left out)."""
        return self.packets.damaged + (self.streams.damaged if self.streams is not None else 0)

    def close(self) -> None:
        """Power the machine off (or stop QEMU if it does not answer); nothing is left running. A trace not
        finished is discarded."""
        if self.sink is not None:
            self.sink.abort()
            self.sink = None
        if self.qemu is not None:
            status = None
            if self.qemu.proc.poll() is None and hasattr(self, "hello") and not self.halted:
                try:
                    self.qemu.write(b"exit 0\n")
                    status = self.qemu.wait(EXIT_WAIT)
                except (QemuExited, KeyboardInterrupt):
                    pass
            self.qemu.stop()
            self.qemu = None
            if status is not None and status != self.image.arch.qemu_exit_ok:
                self.report.warning(f"QEMU exited with status {status} after `exit 0`, not "
                                    f"{self.image.arch.qemu_exit_ok}: the platform did not power off")
        self.image.close()


_HEX = frozenset("0123456789abcdefABCDEF")


def _hex(word: str) -> int | None:
    """A number the kernel sent in hexadecimal digits (no sign, no underscores), or None when the word is not one."""
    return int(word, 16) if word and _HEX.issuperset(word) else None
