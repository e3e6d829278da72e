"""A real lttng-relayd (Debian's lttng-tools) on free loopback ports, for the tests that stream to one: its control,
data and live ports, its output directory, and how to read what it stored and what it serves live (babeltrace2)."""

from __future__ import annotations

import contextlib
import os
import re
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from helpers import need_tool, run

HOST = "127.0.0.1"


def free_ports(n: int) -> list[int]:
    """``n`` loopback ports nothing listens on now (the kernel's choice of each)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind((HOST, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


class Relayd:
    """lttng-relayd started on three free ports with its output under ``tmp``, LTTNG_HOME there too."""

    def __init__(self, tmp: Path) -> None:
        binary = need_tool("lttng-relayd", "lttng-tools")
        self.control, self.data, self.live = free_ports(3)
        self.out = tmp / "relayd-out"
        home = tmp / "lttng-home"
        home.mkdir(parents=True, exist_ok=True)
        self.log = tmp / "relayd.log"
        env = {**os.environ, "LTTNG_HOME": str(home), "HOME": str(home)}
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen([binary, "-C", f"tcp://{HOST}:{self.control}", "-D",
                                          f"tcp://{HOST}:{self.data}", "-L", f"tcp://{HOST}:{self.live}",
                                          "-o", str(self.out)], env=env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while not all(self._listening(p) for p in (self.control, self.data, self.live)):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise AssertionError(f"lttng-relayd did not start: {self.log.read_text(errors='replace')[-2000:]}")
            time.sleep(0.05)

    @staticmethod
    def _listening(port: int) -> bool:
        with contextlib.suppress(OSError), socket.create_connection((HOST, port), timeout=1):
            return True
        return False

    @property
    def url(self) -> str:
        return f"net://{HOST}:{self.control}:{self.data}"

    def live_url(self, machine: str, session: str) -> str:
        return f"net://{HOST}:{self.live}/host/{machine}/{session}"

    def traces(self, machine: str, session: str) -> list[Path]:
        """The trace directories the relay daemon stored for ``machine``'s relay session ``session``."""
        return sorted((self.out / machine).glob(f"{session}-*/kernel"))

    def kill(self) -> None:
        """Gone at once, as a crashed daemon goes (SIGKILL)."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@contextlib.contextmanager
def relayd(tmp: Path) -> Iterator[Relayd]:
    daemon = Relayd(tmp)
    try:
        yield daemon
    finally:
        daemon.stop()


class LiveViewer:
    """babeltrace2 reading a relay session live (lttng-live), started before the events fire: its lines as it
    printed them."""

    def __init__(self, url: str, *options: str, line_buffered: bool = False) -> None:
        """``options``: babeltrace2's before the URL; ``line_buffered``: each line written as printed (stdbuf), as
        at a terminal, not held in a pipe's buffer."""
        front = [need_tool("stdbuf", "coreutils"), "-oL"] if line_buffered else []
        self.proc = subprocess.Popen([*front, need_tool("babeltrace2", "babeltrace2"), *options,
                                      "--input-format=lttng-live", url],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def wait(self, timeout: float = 60) -> tuple[int, list[str], str]:
        """Its exit status, its lines and its errors once it ended (the relay session closed its streams)."""
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate()
            return -1, out.splitlines(), err
        return self.proc.returncode, out.splitlines(), err


# babeltrace2's text line of an event: [time] (delta) hostname probe: { cpu_id = N, ... }, ..., { its fields }
EVENT_LINE = re.compile(r"^\[[^]]*\] \([^)]*\) (\S+) (\S+): \{ cpu_id = (\d+),.*?(\{[^{}]*\})$")
FIELD = re.compile(r'(\w+) = ("(?:[^"\\]|\\.)*"|-?0x[0-9A-Fa-f]+|-?\d+)')


def text_event(line: str) -> tuple[str, int, str, list] | None:
    """(hostname, CPU, probe, its fields' values) of a babeltrace2 text line, or None for one that is no event: an
    integer as an int (its hexadecimal too, a pointer's), a string without its quotes."""
    m = EVENT_LINE.match(line)
    if not m:
        return None
    fields = [] if "cpu_id = " in m[4] else [v[1:-1] if v.startswith('"') else int(v, 0)
                                             for _, v in FIELD.findall(m[4])]
    return m[1], int(m[3]), m[2], fields


class Lines:
    """A live viewer's standard output, line by line as it prints them (on a thread): what it printed so far, and
    the host's real time (ns) when it read each line."""

    def __init__(self, viewer: LiveViewer) -> None:
        self.viewer, self.lines, self.more = viewer, [], threading.Condition()
        self.times: list[int] = []
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        for line in self.viewer.proc.stdout:
            at = time.time_ns()
            with self.more:
                self.lines.append(line.rstrip("\n"))
                self.times.append(at)
                self.more.notify_all()
        with self.more:
            self.lines.append(None)  # the viewer ended
            self.more.notify_all()

    def parsed(self) -> list[tuple[str, int, str, list]]:
        """(hostname, CPU, probe, fields) of each event printed, in its order, the task events left out."""
        return [e for e in map(text_event, (x for x in self.lines if x is not None)) if e and e[2] != "sdt:task"]

    def events(self) -> list[tuple[int, str]]:
        """(CPU, probe) of each event printed, in its order, the task events left out."""
        return [(cpu, probe) for _, cpu, probe, _ in self.parsed()]

    def wait_until(self, done, guard: float = 120) -> None:
        """Until ``done()`` (called under the lines' lock) or the viewer ended; a hang guard, not a time measured."""
        with self.more:
            self.more.wait_for(lambda: done() or None in self.lines, guard)

    def wait_for(self, want: list[tuple[int, str]], guard: float = 120) -> list[tuple[int, str]]:
        """Until the viewer printed ``want`` or ended; a hang guard, not a time measured: a viewer that shows
        nothing live fails here, however fast the machine."""
        self.wait_until(lambda: self.events() == want, guard)
        with self.more:
            return self.events()


def attached(daemon: Relayd, machine: str, session: str) -> bool:
    """The relay daemon lists ``machine``'s ``session`` with a viewer attached to it (babeltrace2 lists the live
    sessions)."""
    listing = run([need_tool("babeltrace2", "babeltrace2"), "--input-format=lttng-live", f"net://{HOST}:{daemon.live}"],
                  check=False).stdout
    return any(f"/host/{machine}/{session} " in line and "1 client(s) connected" in line
               for line in listing.splitlines())


def wait_attached(daemon: Relayd, machine: str, session: str, lines: Lines, tries: int = 600) -> None:
    """Until a viewer is attached to ``machine``'s ``session`` (a viewer sees only what is indexed after it
    attaches); a hang guard."""
    for _ in range(tries):
        if attached(daemon, machine, session):
            return
        time.sleep(0.1)
    raise AssertionError(f"babeltrace2 never attached to {machine}/{session}: {lines.lines}")
