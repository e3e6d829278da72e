"""A program the host starts and talks to over its standard input and output: QEMU, a process harness.

It runs in a session of its own, so the terminal's Ctrl-C reaches sdtgen only, which then stops it:
SIGTERM, a few seconds to exit, then SIGKILL. If sdtgen itself dies, the kernel sends it SIGKILL
(PR_SET_PDEATHSIG): nothing is left running either way. That signal comes when the *thread* that started the
child ends (prctl(2)), so children are started from the main thread or from one thread that lives as long as
sdtgen (_spawn): a session opened on a thread of its own (a machine of several) outlives that thread. SIGTERM
and SIGHUP raise KeyboardInterrupt while it runs (termination_as_interrupt), so it is stopped on the way out.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import subprocess
import threading
import time
from concurrent.futures import Future
from queue import SimpleQueue

from sdtgen.errors import printable
from sdtgen.targets.control import ChannelClosed

STOP_GRACE = 5.0  # seconds a child has to exit after SIGTERM
PR_SET_PDEATHSIG = 1


def _die_with_parent(parent: int) -> None:
    """In the child, before exec: SIGKILL when sdtgen dies, even by SIGKILL."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # sdtgen died before prctl took effect
        os._exit(1)


_spawns: SimpleQueue = SimpleQueue()  # (the Popen's arguments, its future) for the spawning thread
_spawner: threading.Thread | None = None
_spawner_lock = threading.Lock()


def _spawn(argv: list[str], **options) -> subprocess.Popen:
    """subprocess.Popen(argv, **options) from a thread that ends only with sdtgen: the calling one when it is the
    main thread, else one started for that once."""
    global _spawner
    if threading.current_thread() is threading.main_thread():
        return subprocess.Popen(argv, **options)
    with _spawner_lock:
        if _spawner is None:
            _spawner = threading.Thread(target=_spawn_all, name="sdtgen-spawner", daemon=True)
            _spawner.start()
    done: Future = Future()
    _spawns.put((argv, options, done))
    return done.result()


def _spawn_all() -> None:
    while True:
        argv, options, done = _spawns.get()
        try:
            done.set_result(subprocess.Popen(argv, **options))
        except BaseException as e:  # raised in the thread that asked
            done.set_exception(e)


class Exited(Exception):
    """The child ended: ``status`` is its exit status, ``stderr`` what it said."""

    def __init__(self, status: int, stderr: str) -> None:
        super().__init__(f"exited with status {status}")
        self.status = status
        self.stderr = stderr


class Child:
    """A running child: bytes to and from its standard input and output."""

    def __init__(self, argv: list[str]) -> None:
        parent = os.getpid()
        self.argv = argv
        self._stderr = bytearray()
        self.proc = _spawn(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           start_new_session=True, preexec_fn=lambda: _die_with_parent(parent))
        self.started = time.monotonic()

    @property
    def stderr(self) -> str:
        return self._stderr.decode("utf-8", "replace")

    def write(self, data: bytes) -> None:
        try:
            self.proc.stdin.write(data)
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise Exited(self.proc.wait(), self.stderr) from None

    def read(self, timeout: float) -> bytes | None:
        """What the serial port has said, waiting up to ``timeout`` s; None if nothing came. Exited at its end."""
        out, err = self.proc.stdout.fileno(), self.proc.stderr.fileno()
        ready, _, _ = select.select([out, err], [], [], max(timeout, 0))
        if err in ready:
            self._stderr += os.read(err, 65536)
        if out not in ready:
            return None
        data = os.read(out, 1 << 16)
        if not data:
            with contextlib.suppress(OSError):
                self._stderr += self.proc.stderr.read()
            raise Exited(self.proc.wait(), self.stderr)
        return data

    def wait(self, timeout: float) -> int | None:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self) -> int:
        """End the child whatever state it is in; its exit status."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
            if self.wait(STOP_GRACE) is None:
                self.proc.kill()
        status = self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            with contextlib.suppress(OSError):
                f.close()
        return status




class ChildChannel:
    """A control channel on a child's standard input and output; ``name`` says what it is in messages."""

    def __init__(self, child: Child, name: str) -> None:
        self.child = child
        self.name = name

    def _closed(self, e: Exited) -> ChannelClosed:
        tail = e.stderr.strip().splitlines()[-1:] or ["nothing on stderr"]
        return ChannelClosed(f"{self.name} exited with status {e.status} ({printable(tail[0])})")

    def write(self, data: bytes) -> None:
        try:
            self.child.write(data)
        except Exited as e:
            raise self._closed(e) from None

    def read(self, timeout: float) -> bytes | None:
        try:
            return self.child.read(timeout)
        except Exited as e:
            raise self._closed(e) from None

    def close(self) -> None:
        self.child.stop()


@contextlib.contextmanager
def termination_as_interrupt():
    """SIGTERM and SIGHUP raise KeyboardInterrupt while QEMU runs, so it is stopped on the way out."""
    def interrupt(signum, frame):
        raise KeyboardInterrupt(signal.Signals(signum).name)

    old = {s: signal.signal(s, interrupt) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
