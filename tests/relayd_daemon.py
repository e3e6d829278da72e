"""A real lttng-relayd (Debian's lttng-tools) on free loopback ports, for the tests that stream to one: its control,
data and live ports, its output directory, and how to read what it stored and what it serves live (babeltrace2)."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from helpers import need_tool

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

    def __init__(self, url: str) -> None:
        self.proc = subprocess.Popen([need_tool("babeltrace2", "babeltrace2"), "--input-format=lttng-live", url],
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
