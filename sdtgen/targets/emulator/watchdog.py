"""Stopping a running guest from outside: at a deadline (--timeout), or on Ctrl-C."""

from __future__ import annotations

import signal
import socket
import threading
import time
from contextlib import contextmanager, suppress

from sdtgen.limits import DEFAULT_TIMEOUT

INTERRUPTED, TIMED_OUT = "interrupted", "timed out"
ENDING = (signal.SIGTERM, signal.SIGHUP)  # the command is ending: the guest stops, the signal's handler does the rest


class Watchdog:
    """Stops the emulator from a thread of its own: at a call's deadline, or when Ctrl-C arrives.

    A Python signal handler cannot run while the main thread is inside
    emu_start(), but the interpreter's C handler still writes the signal's
    number to the wakeup fd; this thread reads it and calls emu_stop(), which
    Unicorn allows from another thread. It repeats the stop until the call
    ends, in case the first one came between two emu_start()s.
    """

    def __init__(self, uc) -> None:
        self.uc = uc
        self.reason: str | None = None
        self.timeout = DEFAULT_TIMEOUT
        self._deadline: float | None = None
        self._lock = threading.RLock()  # the SIGINT handler may run while the main thread holds it
        self._thread: threading.Thread | None = None
        self._closed = False
        self.deaf = False  # Ctrl-C is ignored (the deadline still holds): the short calls that follow one
        self._read, self._write = socket.socketpair()
        self._write.setblocking(False)

    @contextmanager
    def watching(self, timeout: float):
        main = threading.current_thread() is threading.main_thread()
        old_fd = old_handler = None
        if main:
            old_handler = signal.signal(signal.SIGINT, self._sigint)
            old_fd = signal.set_wakeup_fd(self._write.fileno(), warn_on_full_buffer=False)
        with self._lock:
            self.reason, self.timeout = None, timeout
            self._deadline = time.monotonic() + timeout
        if self._thread is None:
            self._thread = threading.Thread(target=self._watch, name="sdtgen-watchdog", daemon=True)
            self._thread.start()
        self._wake()
        try:
            yield
        finally:
            with self._lock:
                self._deadline = None
            if main:
                signal.set_wakeup_fd(old_fd)
                signal.signal(signal.SIGINT, old_handler)

    def close(self) -> None:
        """End the thread and free its sockets."""
        with self._lock:
            self._closed = True
        if self._thread is not None:
            self._wake()
            self._thread.join()
        self._read.close()
        self._write.close()

    def interrupt(self) -> None:
        """Ctrl-C from the program itself: the call stops, as if the signal had come."""
        with self._lock:
            if self._deadline is not None:
                self.reason = INTERRUPTED
                self.uc.emu_stop()

    def _sigint(self, signum, frame) -> None:
        with self._lock:
            if self._deadline is not None and not self.deaf:
                self.reason = INTERRUPTED

    def _wake(self) -> None:
        with suppress(BlockingIOError):  # a full buffer: it is awake already
            self._write.send(b"\0")

    def _watch(self) -> None:
        import select

        signal.pthread_sigmask(signal.SIG_BLOCK, (signal.SIGINT, *ENDING))  # the main thread takes them
        while True:
            with self._lock:
                if self._closed:
                    return
                deadline, reason = self._deadline, self.reason
                if deadline is not None and reason is not None:
                    # Again, in case the last stop came between two emu_start()s. Under the lock, so
                    # that no stop is ever made for a call that has already ended.
                    self.uc.emu_stop()
            if deadline is None:
                wait = None
            elif reason is not None:
                wait = 0.05
            else:
                wait = max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([self._read], [], [], wait)
            data = self._read.recv(256) if ready else b""
            with self._lock:
                if self._deadline is None or self.reason is not None:
                    continue
                if (signal.SIGINT in data and not self.deaf) or any(sig in data for sig in ENDING):
                    self.reason = INTERRUPTED
                elif time.monotonic() >= self._deadline:
                    self.reason = TIMED_OUT
                else:
                    continue
                self.uc.emu_stop()
