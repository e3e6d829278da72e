"""A serial line to a kernel that is already running, and the target that drives it (`sdtgen attach`).

The line is a TCP connection (QEMU's ``-serial tcp:HOST:PORT,server=on``, a board's serial server), a
pty or tty device (a board's UART; its speed set with stty beforehand), or, for `attach`, the base path
of a FIFO pair ``BASE.in``/``BASE.out`` (QEMU's ``-serial pipe:BASE``: QEMU reads BASE.in and writes
BASE.out). `record`, which only listens, also takes a single FIFO or a capture file.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import stat
import time

from sdtgen.errors import SdtError, printable
from sdtgen.targets.control import ChannelClosed, ControlTarget

CONNECT_WAIT = 10.0  # seconds to keep trying a TCP connection (QEMU may still be starting)
READ_SIZE = 1 << 16


def parse_tcp(spec: str) -> tuple[str, int]:
    """(host, port) of ``tcp:HOST:PORT``, or the one line saying why not."""
    host, _, port = spec[4:].rpartition(":")
    host = host.strip("[]")
    if not host or not port.isascii() or not port.isdigit() or not 0 < int(port) < 65536:
        raise SdtError("", f"--serial {printable(spec)!r} is not tcp:HOST:PORT (a port from 1 to 65535)")
    if not host.isascii() or not host.isprintable() or " " in host:
        raise SdtError("", f"--serial {printable(spec)!r}: {printable(host)!r} is not a host name or address")
    return host, int(port)


class Line:
    """Bytes to and from a kernel on a serial line: a socket, or file descriptors to read and write."""

    def __init__(self, name: str, rfd: int, wfd: int | None, sock: socket.socket | None = None) -> None:
        self.name = name
        self.rfd, self.wfd, self.sock = rfd, wfd, sock

    def write(self, data: bytes) -> None:
        if self.wfd is None:
            raise ChannelClosed(f"{self.name} is read-only")
        try:
            while data:
                data = data[os.write(self.wfd, data):]
        except OSError as e:
            raise ChannelClosed(f"{self.name}: {e.strerror}") from None

    def read(self, timeout: float) -> bytes | None:
        ready, _, _ = select.select([self.rfd], [], [], max(timeout, 0))
        if not ready:
            return None
        try:
            data = os.read(self.rfd, READ_SIZE)
        except OSError as e:
            raise ChannelClosed(f"{self.name}: {e.strerror}") from None
        if not data:
            raise ChannelClosed(f"{self.name} closed")
        return data

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        else:
            for fd in {self.rfd, self.wfd} - {None}:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.rfd = self.wfd = -1


def open_line(spec: str, duplex: bool) -> Line:
    """The line ``spec`` names, open (``duplex``: one that takes commands too); one line saying why not."""
    if spec.startswith("tcp:"):
        host, port = parse_tcp(spec)
        deadline = time.monotonic() + CONNECT_WAIT
        while True:
            try:
                sock = socket.create_connection((host, port), timeout=CONNECT_WAIT)
                break
            except (OSError, UnicodeError) as e:
                if time.monotonic() >= deadline:
                    raise SdtError("", f"cannot connect to {printable(host)}:{port}: "
                                   f"{getattr(e, 'strerror', None) or e}",
                                   "start QEMU with -serial tcp:HOST:PORT,server=on first") from None
                time.sleep(0.1)
        sock.settimeout(None)
        return Line(spec, sock.fileno(), sock.fileno(), sock)
    if not spec.strip():
        raise SdtError("", "--serial needs a line", "give tcp:HOST:PORT, a tty, or a FIFO pair's base path")
    if duplex and not os.path.exists(spec) and os.path.exists(spec + ".in") and os.path.exists(spec + ".out"):
        return _fifo_pair(spec)
    try:
        fd = os.open(spec, (os.O_RDWR if duplex else os.O_RDONLY) | os.O_NOCTTY | os.O_NONBLOCK)
    except OSError as e:
        raise SdtError(spec, f"cannot open the serial line: {e.strerror}",
                       "give tcp:HOST:PORT, a tty, or the base path of a FIFO pair BASE.in/BASE.out") from None
    mode = os.fstat(fd).st_mode
    if stat.S_ISDIR(mode):
        os.close(fd)
        raise SdtError(spec, "is a directory, not a serial line")
    if duplex and not (os.isatty(fd) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode)):
        os.close(fd)
        raise SdtError(spec, "is not a line that carries commands both ways",
                       "give a tty or pty, tcp:HOST:PORT, or the base path of a FIFO pair BASE.in/BASE.out")
    os.set_blocking(fd, True)
    if os.isatty(fd):
        import termios
        import tty

        tty.setraw(fd, termios.TCSANOW)  # bytes as they are: no echo, no line editing, no CR/LF mapping
    return Line(spec, fd, fd if duplex else None)


def _fifo_pair(base: str) -> Line:
    """QEMU's -serial pipe:BASE: it reads BASE.in (our commands) and writes BASE.out (its frames)."""
    try:
        rfd = os.open(base + ".out", os.O_RDONLY | os.O_NONBLOCK)
        os.set_blocking(rfd, True)
        wfd = os.open(base + ".in", os.O_WRONLY | os.O_NONBLOCK)
        os.set_blocking(wfd, True)
    except OSError as e:
        raise SdtError(base, f"cannot open the FIFO pair {printable(base)}.in/.out: {e.strerror}",
                       "start QEMU with -serial pipe:BASE first (it holds the FIFOs open)") from None
    return Line(base, rfd, wfd)


class AttachTarget(ControlTarget):
    """A running kernel on ``line``: asked for its hello; the rings attached if the kernel lets the host choose.
    What this session armed is disarmed when it ends, as DTrace does when a consumer exits."""

    def __init__(self, session, line: Line, *, buffer_size: int, overflow: str, timeout: float) -> None:
        from sdtgen.boot.platform import packet_size_for

        super().__init__(session, line, timeout=timeout, announced=False)
        self.armed: list[str] = []
        self.attach_rings(buffer_size, packet_size_for(buffer_size), overflow, 0)

    def enable(self, spec: str, mode: str) -> int:
        n = super().enable(spec, mode)
        self.armed.append(spec)
        return n

    def close(self) -> None:
        """The probes this session armed, disarmed; the line is the caller's to close."""
        if not self.halted:
            for spec in reversed(self.armed):
                try:
                    self.disable(spec)
                except Exception:  # the kernel went away meanwhile: nothing to disarm
                    break
        self.armed = []
