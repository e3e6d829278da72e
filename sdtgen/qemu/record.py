"""`sdtgen record`: the packet stream of any kernel that drains its rings with sdt_serial_drain, from
a serial line into a CTF trace directory, packet by packet as they arrive, and its events shown as they
come (as `sdtgen boot` shows them).

The line is a TCP connection (QEMU's ``-serial tcp:HOST:PORT,server=on``) or a path: a pty, a tty
device (a board's UART; its speed is set with stty beforehand), a FIFO or a capture file. Nothing on
the line is believed before it is checked: frames by their CRCs, packets by sdtgen.trace.streams (a
damaged one is left out and counted), CPU numbers against MAX_CPUS, the clock against what a trace can
declare. Each packet goes to its CPU's stream as it stands (its content, then zeros to its packet size),
so memory stays bounded however long the recording: one frame, and the events waiting to be shown in
time order. The trace is put in place whole when the line ends (or on Ctrl-C), or not at all.
"""

from __future__ import annotations

import os
import socket
import stat
import termios
import time
import tty
from collections.abc import Callable, Iterator

from sdtgen.errors import SdtError, printable
from sdtgen.qemu.frames import INFO, MAX_PACKET, TEXT, Console, Frame, FrameError, FrameReader, Info, info
from sdtgen.qemu.packets import PacketSink
from sdtgen.qemu.report import QemuReport
from sdtgen.trace.order import TimeOrder
from sdtgen.trace.packets import Decoder, Event, event_format

CONNECT_WAIT = 10.0  # seconds to keep trying a TCP connection (QEMU may still be starting)
READ_SIZE = 1 << 16
DEFAULT_HZ = 1_000_000_000  # a clock rate for a kernel that never said its own
MAX_CPUS = 4096  # CPU numbers a recording takes: 0 to 4095 (the line does not say how many the kernel has)
SHOW_LIMIT = 1 << 16  # events waiting to be shown in time order, at most (an idle CPU holds back no more)


def open_serial(spec: str, on_end: Callable[[str], None]) -> Iterator[bytes]:
    """The bytes of the line ``spec`` as they arrive, until its end; a line that fails while it is read (a
    pty hung up, a connection reset) ends there, and ``on_end`` is told why."""
    if spec.startswith("tcp:"):
        host, _, port = spec[4:].rpartition(":")
        host = host.removeprefix("[").removesuffix("]")  # tcp:[::1]:PORT
        if not host or not host.isprintable() or any(c.isspace() for c in host) or not (
                port.isascii() and port.isdigit() and 0 < int(port) < 65536):
            raise SdtError("", f"--serial {printable(spec)!r} is not tcp:HOST:PORT",
                           "give a host name or address and a port from 1 to 65535, e.g. tcp:127.0.0.1:4444")
        return _tcp(host, int(port), on_end)
    if "\0" in spec:
        raise SdtError("", f"--serial {printable(spec)!r} is not a path (it holds a NUL byte)")
    return _path(spec, on_end)


def _tcp(host: str, port: int, on_end: Callable[[str], None]) -> Iterator[bytes]:
    deadline = time.monotonic() + CONNECT_WAIT
    while True:
        try:
            sock = socket.create_connection((host, port), timeout=CONNECT_WAIT)
            break
        except OSError as e:
            if time.monotonic() >= deadline:
                raise SdtError("", f"cannot connect to {printable(host)}:{port}: {e.strerror or e}",
                               "start QEMU with -serial tcp:HOST:PORT,server=on first") from None
            time.sleep(0.1)
        except (UnicodeError, ValueError) as e:  # a name the resolver cannot even look up
            raise SdtError("", f"cannot connect to {printable(host)}:{port}: {printable(str(e))}",
                           "give a host name or address") from None
    sock.settimeout(None)
    with sock:
        yield from _reads(lambda: sock.recv(READ_SIZE), on_end)


def _path(path: str, on_end: Callable[[str], None]) -> Iterator[bytes]:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOCTTY)
    except OSError as e:
        raise SdtError(printable(path), f"cannot open the serial line: {e.strerror}") from None
    try:
        if os.isatty(fd):
            tty.setraw(fd, termios.TCSANOW)  # bytes as they are: no echo, no line editing, no CR/LF mapping
        elif stat.S_ISDIR(os.fstat(fd).st_mode):
            raise SdtError(printable(path), "is a directory, not a serial line")
        yield from _reads(lambda: os.read(fd, READ_SIZE), on_end)
    finally:
        os.close(fd)


def _reads(read: Callable[[], bytes], on_end: Callable[[str], None]) -> Iterator[bytes]:
    while True:
        try:
            data = read()
        except OSError as e:
            on_end(f"the line ended: {e.strerror or e}")
            return
        if not data:
            return
        yield data


class Recording:
    """A trace directory filled from a serial line: each packet that holds appended to its CPU's stream as it
    comes (sdtgen.trace.ctf.CtfSink), the metadata written from ``image``'s probes and the clock rate the
    kernel's info frame gave when the line ends; its events shown through ``report`` as they come (merged
    across CPUs in time order), or only counted (``quiet``)."""

    def __init__(self, trace: str, image: str, report: QemuReport, quiet: bool = False) -> None:
        from sdtgen.calls import single_sites
        from sdtgen.image import Image

        with Image(image) as im:  # an image without probe tables is refused here, before anything is recorded
            self.arch = im.arch
            self.probes = im.probes()
            self.single_site = single_sites(im)
        self.types = {p.spec: p.args for p in self.probes}
        self.decoder = Decoder([event_format(p.key, p.spec, p.args, self.arch.bits, self.arch.little)
                                for p in self.probes], self.arch.bits, self.arch.little)
        self.trace = trace
        self.report = report
        report.reporter.per_cpu = True  # the line does not say how many CPUs the kernel has: each event says its
        self.quiet = quiet
        self.stream: Info | None = None  # the kernel's info frame, once it came
        self.ctf = None  # the CTF sink, opened with the first packet (the info frame comes before it)
        self.streams = None  # the packets' checks (sdtgen.trace.streams), from the first packet on
        self.sink = PacketSink([self._packet])
        self.reader = FrameReader()
        self.order = TimeOrder(SHOW_LIMIT)  # events waiting to be shown in time order
        self.cpus: set[int] = set()
        self.packets = 0  # packets in the trace
        self.events = 0
        self.bad_frames = 0  # info frames of the wrong size, frames of no type sdtgen knows
        self._check_destination()

    def _check_destination(self) -> None:
        self._open(DEFAULT_HZ).abort()  # the trace directory is checked before anything is read (and left as it was)

    def _open(self, hz: int):
        from sdtgen.trace.ctf import CtfSink
        from sdtgen.trace.model import TraceMeta, TraceProbe

        probes = tuple(TraceProbe(p.key, p.provider, p.module, p.function, p.name, p.args) for p in self.probes)
        meta = TraceMeta(self.arch.name, self.arch.clock_name or "clock", hz, 0, probes)
        return CtfSink(self.trace, meta, self.arch.bits, self.arch.little)

    @property
    def damaged(self) -> int:
        """Frames damaged on the line or not what they say, packets whose verdict never came, packets left out."""
        return (self.reader.corrupt + self.sink.stray + self.sink.damaged + self.bad_frames +
                (self.streams.damaged if self.streams is not None else 0))

    def run(self, source: Iterator[bytes]) -> None:
        """Record until the line ends, or Ctrl-C (SIGTERM and SIGHUP too: KeyboardInterrupt), then put the trace
        in place; on any other way out (a refusal, a failure) nothing is left of it."""
        try:
            try:
                for data in source:
                    for item in self.reader.feed(data):
                        self._take(item)
                for item in self.reader.close():
                    self._take(item)
                self.sink.close()
            except KeyboardInterrupt:  # the usual way to end a recording: what came so far is kept
                pass
            self._finish()
        except BaseException:
            self.abort()
            raise

    def _finish(self) -> None:
        """The events still waiting shown; the streams so far, each closed with its CPU's discarded count, and
        the metadata, put in place."""
        self._show(self.order.rest())
        if self.ctf is None:
            self._start()
        ctf, self.ctf = self.ctf, None
        ctf.finish(self.streams.last_lost())

    def abort(self) -> None:
        if self.ctf is not None:
            self.ctf.abort()
            self.ctf = None

    def _start(self) -> None:
        """The trace and the packets' checks, at the clock rate the kernel said (or a default, said so)."""
        from sdtgen.trace.streams import Streams

        if self.stream is None:
            self.report.warning(f"the kernel sent no info frame (sdt_serial_info): the trace's clock is taken to "
                                f"count {DEFAULT_HZ:,} ticks a second")
        hz = DEFAULT_HZ if self.stream is None else self.stream.clock_hz
        self.streams = Streams(self.decoder, hz, MAX_CPUS, None, self.report.warning, MAX_PACKET)
        self.ctf = self._open(hz)

    def _packet(self, cpu: int, data: bytes) -> None:
        if self.ctf is None:
            self._start()
        read = self.streams.read(cpu, data, not self.quiet)
        if read is None:
            return
        self.ctf.packet(cpu, data, read.packet, None)
        self.packets += 1
        self.events += sum(read.counts.values())
        self.cpus.add(cpu)
        if not self.quiet:
            self._show(self.order.add(cpu, read.events, read.packet.end))

    def _show(self, events: list[Event]) -> None:
        for e in events:
            self.report.fire(e, self.single_site.get(e.probe), self.types[e.probe])

    def _take(self, item: Frame | Console) -> None:
        if isinstance(item, Console):
            for line in item.data.decode("utf-8", "replace").splitlines():
                self.report.line(line)
        elif item.type == TEXT:
            self.report.line(item.payload.decode("utf-8", "replace"))
        elif item.type == INFO:
            self._info(item)
        elif not self.sink.frame(item):
            self.bad_frames += 1

    def _info(self, item: Frame) -> None:
        from sdtgen.trace.streams import clock_problem

        try:
            said = info(item)
        except FrameError:
            self.bad_frames += 1
            return
        if self.stream is not None and said != self.stream:
            raise SdtError(self.trace, f"the kernel's info frame changed: a clock of {said.clock_hz} Hz and "
                           f"{said.bits}-bit words after {self.stream.clock_hz} Hz and {self.stream.bits}-bit",
                           "record one boot of one kernel at a time")
        if said.bits != self.arch.bits:
            raise SdtError(self.trace, f"the kernel on the line has {said.bits}-bit words, the image "
                           f"{self.arch.bits}-bit ones", "give the image of the kernel that streams")
        problem = clock_problem(said.clock_hz)
        if problem is not None:
            raise SdtError(self.trace, f"the kernel's info frame gives {problem}",
                           "give sdt_hooks.clock_hz its clock's rate before sdt_serial_info")
        if self.ctf is not None and self.stream is None:
            raise SdtError(self.trace, "the kernel's info frame came after its first packet",
                           "call sdt_serial_info before the first packet is drained")
        self.stream = said
