"""A serial line to a kernel: the one way `attach` and `record` open what --serial names.

The line is a TCP connection (QEMU's ``-serial tcp:HOST:PORT,server=on``, a board's serial server), a
pty or tty device (a board's UART; its speed set with stty beforehand), or a path: for `attach`, which
sends commands, the base path of a FIFO pair ``BASE.in``/``BASE.out`` (QEMU's ``-serial pipe:BASE``: QEMU
reads BASE.in and writes BASE.out); for `record`, which only listens, a FIFO or a capture file too.
Whatever the value, a line that cannot be one is one error line before anything is read.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import stat
import time
from collections.abc import Callable, Iterator

from sdtgen.errors import SdtError, printable
from sdtgen.targets.base import LEAVES, Host, OwnSession, Refused
from sdtgen.targets.control import WAKE, ChannelClosed, ControlTarget

CONNECT_WAIT = 10.0  # seconds to keep trying a TCP connection (QEMU may still be starting)
READ_SIZE = 1 << 16


def parse_tcp(spec: str) -> tuple[str, int]:
    """(host, port) of ``tcp:HOST:PORT``, or the one line saying why not."""
    host, _, port = spec[4:].rpartition(":")
    host = host.removeprefix("[").removesuffix("]")  # tcp:[::1]:PORT
    if not host or not host.isprintable() or any(c.isspace() for c in host) or not (
            port.isascii() and port.isdigit() and 0 < int(port) < 65536):
        raise SdtError("", f"--serial {printable(spec)!r} is not tcp:HOST:PORT",
                       "give a host name or address and a port from 1 to 65535, e.g. tcp:127.0.0.1:4444")
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
            raise ChannelClosed(f"the line ended: {e.strerror or e}") from None
        if not data:
            raise ChannelClosed(f"{self.name} closed")
        return data

    def chunks(self, on_end: Callable[[str], None]) -> Iterator[bytes]:
        """What arrives until the line's end, as it comes; a line that fails while it is read (a pty hung up, a
        connection reset) ends there, and ``on_end`` is told why."""
        while True:
            try:
                if not select.select([self.rfd], [], [], WAKE)[0]:  # a silent line: Python runs between waits
                    continue
                data = os.read(self.rfd, READ_SIZE)
            except OSError as e:
                on_end(f"the line ended: {e.strerror or e}")
                return
            if not data:
                return
            yield data

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        else:
            for fd in {self.rfd, self.wfd} - {None, -1}:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.rfd = self.wfd = -1


def open_line(spec: str, duplex: bool) -> Line:
    """The line ``spec`` names, open (``duplex``: one that carries commands too); one line saying why not."""
    if spec.startswith("tcp:"):
        return _tcp(spec, *parse_tcp(spec))
    if not spec.strip() or "\0" in spec:
        raise SdtError("", f"--serial {printable(spec)!r} is not a line",
                       "give tcp:HOST:PORT, a tty, a FIFO pair's base path or a file")
    if duplex and not os.path.exists(spec) and os.path.exists(spec + ".in") and os.path.exists(spec + ".out"):
        return _fifo_pair(spec)
    try:
        fd = os.open(spec, (os.O_RDWR if duplex else os.O_RDONLY) | os.O_NOCTTY)
    except OSError as e:
        raise SdtError(printable(spec), f"cannot open the serial line: {e.strerror}",
                       "give tcp:HOST:PORT, a tty, or the base path of a FIFO pair BASE.in/BASE.out" if duplex
                       else "") from None
    mode = os.fstat(fd).st_mode
    if stat.S_ISDIR(mode):
        os.close(fd)
        raise SdtError(printable(spec), "is a directory, not a serial line")
    if duplex and not (os.isatty(fd) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode)):
        os.close(fd)
        raise SdtError(printable(spec), "is not a line that carries commands both ways",
                       "give a tty or pty, tcp:HOST:PORT, or the base path of a FIFO pair BASE.in/BASE.out")
    if os.isatty(fd):
        import termios
        import tty

        tty.setraw(fd, termios.TCSANOW)  # bytes as they are: no echo, no line editing, no CR/LF mapping
    return Line(spec, fd, fd if duplex else None)


def _tcp(spec: str, host: str, port: int) -> Line:
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
    return Line(spec, sock.fileno(), sock.fileno(), sock)


def _fifo_pair(base: str) -> Line:
    """QEMU's -serial pipe:BASE: it reads BASE.in (our commands) and writes BASE.out (its frames)."""
    try:
        rfd = os.open(base + ".out", os.O_RDONLY | os.O_NONBLOCK)
        os.set_blocking(rfd, True)
        wfd = os.open(base + ".in", os.O_WRONLY | os.O_NONBLOCK)
        os.set_blocking(wfd, True)
    except OSError as e:
        raise SdtError(printable(base), f"cannot open the FIFO pair {printable(base)}.in/.out: {e.strerror}",
                       "start QEMU with -serial pipe:BASE first (it holds the FIFOs open)") from None
    return Line(base, rfd, wfd)


class AttachTarget(ControlTarget):
    """A running kernel on ``line``: asked for its hello; the rings attached if the kernel lets the host choose.
    What this session armed is disarmed when it ends, as DTrace does when a consumer exits."""

    capabilities = ControlTarget.capabilities | {LEAVES}

    def __init__(self, host: Host, line: Line, *, buffer_size: int, overflow: str, timeout: float,
                 announced: bool, own: OwnSession | None, rings: bool) -> None:
        """``announced``: the kernel says its hello unasked (one just booted), and is not asked for it. ``rings``:
        the default session's rings attached (False: a host that only lists what the kernel has)."""
        from sdtgen.transport.geometry import packet_size_for

        super().__init__(host, line, timeout=timeout, announced=announced)
        self.armed: list[str] = []
        self.programs: list[str] = []  # specs this session enabled a program with
        if own is None:
            if rings:
                self.attach_rings(buffer_size, packet_size_for(buffer_size), overflow, 0)
        else:  # the default session's rings are the kernel's: the host records in its own session's
            self.open_own(own)

    def enable(self, spec: str, mode: str) -> int:
        n = super().enable(spec, mode)
        self.armed.append(spec)
        return n

    def enable_program(self, spec: str, mode: str, program: int, size: int) -> int:
        n = super().enable_program(spec, mode, program, size)
        self.programs.append(spec)
        return n

    def leave(self) -> None:
        """The probes this session armed, disarmed while the kernel still answers, before the session's last flush and
        drain: every event the kernel records on its own CPUs until then is read, and none stays in a ring, unread and
        uncounted, for the next session to show as its own. Its programs stay attached until close, for the last
        printa. A disarm the kernel refuses is said, and the others still made."""
        for spec in reversed(self.armed):
            try:
                self.disable(spec)
            except Refused as e:
                self.host.warning(f"the kernel refused to disarm {printable(spec)} on leaving ({printable(e.text)}): "
                                  "it stays armed, and what it records is not read")
        self.armed = []

    def close(self) -> None:
        """What this session armed and did not disarm on leaving, disarmed; the line is the caller's to close."""
        if not self.halted:
            try:
                for spec in reversed(self.programs):  # detached: the kernel's own firings cost nothing again
                    self.disable_program(spec)
                for spec in reversed(self.armed):
                    self.disable(spec)
            except Exception:  # the kernel went away meanwhile: nothing to disarm
                pass
        self.armed = []
        self.programs = []
        self.close_own()  # the kernel runs on: its memory given back, the kernel's own sessions recording on
        self.packets.close()  # a packet still waiting for its verdict is stray, and said
