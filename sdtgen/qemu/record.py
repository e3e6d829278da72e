"""`sdtgen record`: the packet stream of any kernel that drains its rings with sdt_serial_drain, from
a serial line into a CTF trace directory, packet by packet as they arrive.

The line is a TCP connection (QEMU's ``-serial tcp:HOST:PORT,server=on``) or a path: a pty, a tty
device (a board's UART; its speed is set with stty beforehand), a FIFO or a capture file. Each kept
packet is appended to ``stream_<cpu>`` as it stands (its content, then zeros to its packet size), so
a trace costs a copy and memory stays bounded however long the recording. The kernel's text frames
and console bytes are shown as they come.
"""

from __future__ import annotations

import os
import re
import socket
import stat
import termios
import time
import tty
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from sdtgen.errors import SdtError, printable
from sdtgen.layout import PACKET
from sdtgen.qemu.frames import INFO, TEXT, Console, Frame, FrameReader, Info, info
from sdtgen.qemu.packets import PacketSink

CONNECT_WAIT = 10.0  # seconds to keep trying a TCP connection (QEMU may still be starting)
READ_SIZE = 1 << 16
EVENTS = PACKET.offset("events", 64)  # the packet header's count of its events


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


TRACE_FILE = re.compile(r"metadata|stream_\d+")


def prepare_directory(directory: Path) -> None:
    """A trace directory to record into: new, or one a recording made (its files are replaced)."""
    if directory.exists():
        if not directory.is_dir():
            raise SdtError(str(directory), "exists and is not a directory", "give a new directory for the trace")
        others = [p.name for p in directory.iterdir() if not TRACE_FILE.fullmatch(p.name) or not p.is_file()]
        if others:
            raise SdtError(str(directory), f"holds {printable(others[0])!r}, which no trace has",
                           "give a new directory, or an old trace's")
        for p in directory.iterdir():
            p.unlink()
    else:
        try:
            directory.mkdir(parents=True)
        except OSError as e:
            raise SdtError(str(directory), f"cannot create the trace directory: {e.strerror}") from None


class StreamFiles:
    """One CTF stream file a CPU, appended to packet by packet."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.files: dict[int, object] = {}
        self.events = 0

    def __call__(self, cpu: int, packet: bytes) -> None:
        f = self.files.get(cpu)
        if f is None:
            f = self.files[cpu] = open(self.directory / f"stream_{cpu}", "wb")  # noqa: SIM115 (kept open)
        f.write(packet)
        self.events += int.from_bytes(packet[EVENTS:EVENTS + 4], "little")

    def close(self) -> None:
        for f in self.files.values():
            f.close()


def ctf_metadata(image: str | None, stream: Info | None) -> str | None:
    """HOOK: the CTF 1.8 metadata that describes the runtime's packets for ``image``'s probes.

    sdtgen/trace/ctf.py is getting it (rendered from sdtgen/layout.py's packet layout and the image's
    probe descriptors); until then a recording has its stream files and no metadata, and says so.
    """
    return None


@dataclass
class Recording:
    trace: Path
    image: str | None
    on_text: Callable[[str], None]
    stream: Info | None = None  # the kernel's info frame, once it came
    corrupt: int = 0
    metadata: str | None = None

    def run(self, source: Iterator[bytes]) -> PacketSink:
        """Record until the line ends (or Ctrl-C, SIGTERM); what became of the packets."""
        prepare_directory(self.trace)
        self.files = StreamFiles(self.trace)
        self.sink = sink = PacketSink([self.files])
        reader = self.reader = FrameReader()
        try:
            for data in source:
                for item in reader.feed(data):
                    self._take(item, sink)
            for item in reader.close():
                self._take(item, sink)
        finally:
            self.files.close()
            self.corrupt = reader.corrupt + sink.stray  # damaged frames, and packets that lost their verdict
            self.metadata = ctf_metadata(self.image, self.stream)
            if self.metadata is not None:
                (self.trace / "metadata").write_text(self.metadata)
        return sink

    def _take(self, item: Frame | Console, sink: PacketSink) -> None:
        if isinstance(item, Console):
            for line in item.data.decode("utf-8", "replace").splitlines():
                self.on_text(line)
        elif item.type == TEXT:
            self.on_text(item.payload.decode("utf-8", "replace"))
        elif item.type == INFO:
            self.stream = info(item)
        else:
            sink.frame(item)
