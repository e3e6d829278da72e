"""`sdtgen record`: the packet stream of any kernel that drains its rings with sdt_serial_drain, from
a serial line into a CTF trace directory, packet by packet as they arrive.

The line is a TCP connection (QEMU's ``-serial tcp:HOST:PORT,server=on``) or a path: a pty, a tty
device (a board's UART; its speed is set with stty beforehand), a FIFO or a capture file. Each kept
packet goes to its CPU's stream as it stands (its content, then zeros to its packet size), so a trace
costs a copy and memory stays bounded however long the recording. The kernel's text frames and
console bytes are shown as they come.
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
from sdtgen.qemu.frames import INFO, TEXT, Console, Frame, FrameReader, Info, info
from sdtgen.qemu.packets import PacketSink
from sdtgen.trace.packets import Decoder, Packet, PacketError, event_format

CONNECT_WAIT = 10.0  # seconds to keep trying a TCP connection (QEMU may still be starting)
READ_SIZE = 1 << 16
DEFAULT_HZ = 1_000_000_000  # a clock rate for a kernel that never said its own


def open_serial(spec: str) -> Iterator[bytes]:
    """The bytes of the line ``spec`` as they arrive, until its end."""
    if spec.startswith("tcp:"):
        host, _, port = spec[4:].rpartition(":")
        if not host or not port.isdigit():
            raise SdtError("", f"--serial {printable(spec)!r} is not tcp:HOST:PORT")
        return _tcp(host.strip("[]"), int(port))
    return _path(spec)


def _tcp(host: str, port: int) -> Iterator[bytes]:
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
    sock.settimeout(None)
    with sock:
        while data := sock.recv(READ_SIZE):
            yield data


def _path(path: str) -> Iterator[bytes]:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOCTTY)
    except OSError as e:
        raise SdtError(path, f"cannot open the serial line: {e.strerror}") from None
    try:
        if os.isatty(fd):
            tty.setraw(fd, termios.TCSANOW)  # bytes as they are: no echo, no line editing, no CR/LF mapping
        elif stat.S_ISDIR(os.fstat(fd).st_mode):
            raise SdtError(path, "is a directory, not a serial line")
        while data := os.read(fd, READ_SIZE):
            yield data
    finally:
        os.close(fd)


class Recording:
    """A trace directory filled from a serial line: each kept packet appended to its CPU's stream as it
    comes (sdtgen.trace.ctf.CtfSink), the metadata written from ``image``'s probes and the clock rate the
    kernel's info frame gave, when the line ends."""

    def __init__(self, trace: str, image: str, on_text: Callable[[str], None]) -> None:
        from sdtgen.image import Image

        with Image(image) as im:  # an image without probe tables is refused here, before anything is recorded
            arch = im.arch
            self.probes = im.probes()
        self.arch = arch
        self.decoder = Decoder([event_format(p.key, p.spec, p.args, arch.bits, arch.little) for p in self.probes],
                               arch.bits, arch.little)
        self.trace = trace
        self.on_text = on_text
        self.stream: Info | None = None  # the kernel's info frame, once it came
        self.ctf = None  # the CTF sink, opened with the first packet (the info frame comes before it)
        self.sink = PacketSink([self._packet])
        self.reader = FrameReader()
        self.cpus: dict[int, Packet] = {}  # CPU -> its last packet's header
        self.events = 0
        self._check_destination()

    def _check_destination(self) -> None:
        self._open(0).abort()  # the trace directory is checked before anything is read (and left as it was)

    def _open(self, hz: int):
        from sdtgen.trace.ctf import CtfSink
        from sdtgen.trace.model import TraceMeta, TraceProbe

        probes = tuple(TraceProbe(p.key, p.provider, p.module, p.function, p.name, p.args) for p in self.probes)
        meta = TraceMeta(self.arch.name, self.arch.clock_name or "clock", hz, 0, probes)
        return CtfSink(self.trace, meta, self.arch.bits, self.arch.little)

    @property
    def damaged(self) -> int:
        """Frames damaged on the line, and packets whose verdict never came."""
        return self.reader.corrupt + self.sink.stray

    def run(self, source: Iterator[bytes]) -> None:
        """Record until the line ends (Ctrl-C and SIGTERM raise KeyboardInterrupt: then call finish)."""
        for data in source:
            for item in self.reader.feed(data):
                self._take(item)
        for item in self.reader.close():
            self._take(item)
        self.finish()

    def finish(self) -> None:
        """Put the trace in place: the streams so far, each closed with its CPU's discarded count, and the
        metadata."""
        from sdtgen.trace.model import Lost

        if self.ctf is None:
            self.ctf = self._open(self._hz())
        ctf, self.ctf = self.ctf, None
        ctf.finish({cpu: Lost(p.discarded, 0) for cpu, p in self.cpus.items()})

    def _hz(self) -> int:
        if self.stream is None:
            self.on_text(f"sdtgen record: the kernel sent no info frame (sdt_serial_info): the trace's clock "
                         f"is taken to count {DEFAULT_HZ:,} ticks a second")
            return DEFAULT_HZ
        return self.stream.clock_hz

    def _packet(self, cpu: int, data: bytes) -> None:
        try:
            packet = self.decoder.packet(data, f"CPU {cpu}: ")
        except PacketError as e:
            self.on_text(f"sdtgen record: a damaged packet left out: {e}")
            return
        if self.ctf is None:
            self.ctf = self._open(self._hz())
        self.ctf.packet(cpu, data, packet, None)
        self.cpus[cpu] = packet
        self.events += packet.events

    def _take(self, item: Frame | Console) -> None:
        if isinstance(item, Console):
            for line in item.data.decode("utf-8", "replace").splitlines():
                self.on_text(line)
        elif item.type == TEXT:
            self.on_text(item.payload.decode("utf-8", "replace"))
        elif item.type == INFO:
            self.stream = info(item)
            if self.stream.bits != self.arch.bits:
                raise SdtError(self.trace, f"the kernel on the line has {self.stream.bits}-bit words, the image "
                               f"{self.arch.bits}-bit ones", "give the image of the kernel that streams")
        else:
            self.sink.frame(item)
