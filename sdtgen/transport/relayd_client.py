"""A connection to lttng-relayd as lttng-consumerd makes one: the control socket (commands, each answered but
SEND_METADATA) and the data socket (packets, never answered), over the protocol of relayd_wire.py.

The relay daemon is a peer like any other: every reply is read with a bound on its size and a deadline, and
anything amiss (a refusal, a reply of the wrong shape, the connection closed, no answer in time) is one
RelaydError whose message is one line saying which command it was and what came back.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import time

from sdtgen.errors import SdtError, printable
from sdtgen.plaindata import record
from sdtgen.transport import relayd_wire as wire

CONTROL_PORT, DATA_PORT, LIVE_PORT = 5342, 5343, 5344  # lttng's defaults (lttng-relayd(8))
REPLY_TIMEOUT = 5.0  # seconds a relay daemon has to answer a command, or to take a packet's bytes


class RelaydError(Exception):
    """The relay daemon refused, went away, or said something that is not the protocol: the message says what."""


@record(frozen=True)
class RelayUrl:
    host: str
    control: int = CONTROL_PORT
    data: int = DATA_PORT

    def __str__(self) -> str:
        return f"net://{self.host}:{self.control}:{self.data}"


_URL = re.compile(r"net://(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+)(?::(?P<control>\d{1,5})(?::(?P<data>\d{1,5}))?)?/?")


def parse_relayd_url(text: str) -> RelayUrl:
    """``net://HOST[:CONTROL[:DATA]]`` (lttng's ports 5342 and 5343 when not given), or one line saying why not."""
    m = _URL.fullmatch(text)
    ports = [int(p) for p in (m["control"], m["data"]) if p] if m else []
    if m is None or not all(1 <= p <= 65535 for p in ports):
        raise SdtError("", f"--relayd {printable(text)!r} is not a relay daemon's address",
                       "give net://HOST[:CONTROL_PORT[:DATA_PORT]], e.g. net://127.0.0.1 (ports 5342 and 5343)")
    control = ports[0] if ports else CONTROL_PORT
    return RelayUrl(m["host"].strip("[]"), control, ports[1] if len(ports) > 1 else DATA_PORT)


class RelaydClient:
    """Both sockets to the relay daemon at ``url``, the protocol version agreed (VERSION): connected at once, so a
    daemon that is not there, is not a relay daemon, or does not answer is said before anything runs."""

    def __init__(self, url: RelayUrl, timeout: float | None = None) -> None:
        self.url, self.timeout = url, timeout or REPLY_TIMEOUT
        self.control = self._connect(url.control, "control")
        try:
            self.data = self._connect(url.data, "data")
            major, minor = self.call(wire.VERSION, wire.request(wire.VERSION,
                                                                wire.VERSION_BODY.pack(wire.MAJOR, wire.MINOR)),
                                     wire.VERSION_BODY)
            # it says its own version: both speak the lower minor (lttng-tools' relayd_version_check)
            self.minor = min(minor, wire.MINOR)
            if major != wire.MAJOR:
                raise RelaydError(f"it answered `VERSION` with version {major}.{minor}: it is no lttng-relayd, or "
                                  f"one of another protocol than {wire.MAJOR}.x")
            if self.minor < wire.MIN_MINOR:
                raise RelaydError(f"it speaks protocol {major}.{minor}; sdtgen needs {wire.MAJOR}.{wire.MIN_MINOR} "
                                  "or later (lttng-tools 2.11 or later)")
        except BaseException:
            self.close()
            raise

    def _connect(self, port: int, which: str) -> socket.socket:
        try:
            s = socket.create_connection((self.url.host, port), timeout=self.timeout)
        except OSError as e:
            raise RelaydError(f"cannot connect to its {which} port {port}: {e.strerror or e}") from None
        s.settimeout(self.timeout)
        return s

    # -- commands ---------------------------------------------------------------------------------------
    def call(self, cmd: int, message: bytes, reply):
        """Send ``message`` on the control socket and read the ``reply`` struct's fields (within the deadline)."""
        self.send_control(cmd, message)
        return reply.unpack(self._read(reply.size, cmd))

    def _send_pieces(self, sock: socket.socket, pieces: list) -> None:
        """sendall of several buffers at once (sendmsg), the whole within the socket's timeout, as sendall's."""
        views = [memoryview(p).cast("B") for p in pieces if len(p)]
        deadline = time.monotonic() + self.timeout
        try:
            while views:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError
                sock.settimeout(left)
                sent = sock.sendmsg(views)
                while sent:
                    if sent >= len(views[0]):
                        sent -= len(views.pop(0))
                    else:
                        views[0], sent = views[0][sent:], 0
        finally:
            sock.settimeout(self.timeout)

    def send_control(self, cmd: int, message: bytes) -> None:
        self._send(self.control, message, f"`{wire.NAMES[cmd]}`")

    def expect_ok(self, cmd: int, message: bytes, what: str = "") -> None:
        (ret,) = self.call(cmd, message, wire.GENERIC_REPLY)
        if ret != wire.LTTNG_OK:
            raise RelaydError(f"it refused {what or '`' + wire.NAMES[cmd] + '`'} (lttng error {ret})")

    def create_session(self, name: str, hostname: str, live_timer_us: int) -> tuple[int, str]:
        """A live session: (the relay daemon's id of it, its output directory under the daemon's -o)."""
        message = wire.create_session(name, hostname, live_timer_us, os.urandom(16), os.getpid(), int(time.time()))
        sid, ret, length = self.call(wire.CREATE_SESSION, message, wire.CREATE_SESSION_REPLY)
        if ret != wire.LTTNG_OK:
            raise RelaydError(f"it refused the session {printable(hostname)}/{printable(name)} (lttng error {ret})")
        return sid, self._path(length, wire.CREATE_SESSION)

    def add_stream(self, channel: str, pathname: str) -> int:
        handle, ret = self.call(wire.ADD_STREAM, wire.add_stream(channel, pathname, 0), wire.STATUS_STREAM)
        if ret != wire.LTTNG_OK:
            raise RelaydError(f"it refused the stream {printable(pathname)}/{printable(channel)} (lttng error {ret})")
        return handle

    def close_chunk(self) -> str:
        """The trace chunk closed where it is: the session's directory the relay daemon says."""
        ret, length = self.call(wire.CLOSE_TRACE_CHUNK, wire.close_chunk(0, int(time.time())),
                                wire.CLOSE_CHUNK_REPLY)
        if ret != wire.LTTNG_OK:
            raise RelaydError(f"it refused to close the trace chunk (lttng error {ret})")
        return self._path(length, wire.CLOSE_TRACE_CHUNK)

    def _path(self, length: int, cmd: int) -> str:
        if not 1 <= length <= wire.MAX_PATH:
            raise RelaydError(f"its reply to `{wire.NAMES[cmd]}` says a path of {length} bytes, which is not the "
                              f"protocol (1 to {wire.MAX_PATH})")
        return self._read(length, cmd).rstrip(b"\0").decode("utf-8", "replace")

    def send_data(self, header: bytes, content: bytes | memoryview) -> None:
        """A packet on the data socket: its header and its content in gather writes, the content never copied (a
        stream's bytes are most of what the host moves)."""
        self._send(self.data, [header, content], "a packet")

    # -- bounded reads and writes, each with its deadline -------------------------------------------
    def _send(self, sock: socket.socket, data, what: str) -> None:
        """``data`` (bytes, or a list of pieces sent as one) whole within the deadline, or a RelaydError."""
        try:
            if isinstance(data, list):
                self._send_pieces(sock, data)
            else:
                sock.sendall(data)  # its timeout bounds the whole send (Python 3.5+)
        except TimeoutError:
            raise RelaydError(f"it took none of {what}'s bytes for {self.timeout:g} s (not reading)") from None
        except ConnectionError:
            raise RelaydError(f"it closed the connection before {what} was sent") from None
        except OSError as e:
            raise RelaydError(f"{what} could not be sent: {e.strerror or e}") from None

    def _read(self, n: int, cmd: int) -> bytes:
        """Exactly ``n`` bytes of ``cmd``'s reply, all within the deadline."""
        deadline = time.monotonic() + self.timeout
        out = bytearray()
        name = wire.NAMES[cmd]
        while len(out) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RelaydError(f"it did not answer `{name}` within {self.timeout:g} s")
            self.control.settimeout(left)
            try:
                chunk = self.control.recv(n - len(out))
            except TimeoutError:
                raise RelaydError(f"it did not answer `{name}` within {self.timeout:g} s") from None
            except ConnectionError:
                chunk = b""  # reset: closed, as an orderly close is
            except OSError as e:
                raise RelaydError(f"its answer to `{name}` could not be read: {e.strerror or e}") from None
            if not chunk:
                raise RelaydError(f"it closed the connection instead of answering `{name}`"
                                  + (f" ({len(out)} of {n} bytes came)" if out else ""))
            out += chunk
        self.control.settimeout(self.timeout)
        return bytes(out)

    def close(self) -> None:
        for s in (getattr(self, "control", None), getattr(self, "data", None)):
            if s is not None:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()


def connect_relayd(url: RelayUrl, timeout: float | None = None) -> RelaydClient:
    """The relay daemon at ``url``, connected and its version agreed; one line (SdtError) if it cannot be."""
    try:
        return RelaydClient(url, timeout)
    except RelaydError as e:
        raise SdtError("", f"the relay daemon at {url}: {e}",
                       "start it (lttng-relayd -d), or check --relayd's host and ports") from None
