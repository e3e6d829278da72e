"""The command protocol of the fixture's QEMU platform (fixtures/qemu/platform.c; docs/qemu.md).

Commands go to the kernel as text lines; everything comes back in frames of the serial transport:
text frames (one reply line each) and the runtime's packets, interleaved. A command's reply is every
text line up to the one that starts with ``ok`` or ``error``. Two kinds of line may come at any
time: ``report ...`` (the runtime's log) and ``panic ...`` (an exception outside any guarded call).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from sdtgen.qemu.frames import TEXT, Console, Frame, FrameReader
from sdtgen.qemu.machine import Qemu


class Timeout(Exception):
    """The kernel did not finish answering in time."""


class Panic(Exception):
    """The kernel stopped a CPU on an exception outside any call it guards."""


class Link:
    def __init__(self, qemu: Qemu, on_frame: Callable[[Frame], object], on_report: Callable[[str], None],
                 on_console: Callable[[bytes], None]) -> None:
        self.qemu = qemu
        self.reader = FrameReader()
        self.on_frame = on_frame  # packets and verdicts
        self.on_report = on_report
        self.on_console = on_console
        self._lines: list[str] = []

    def _pump(self, deadline: float) -> None:
        data = self.qemu.read(deadline - time.monotonic())
        if data is None:
            if time.monotonic() >= deadline:
                raise Timeout()
            return
        for item in self.reader.feed(data):
            if isinstance(item, Console):
                self.on_console(item.data)
            elif item.type == TEXT:
                line = item.payload.decode("utf-8", "replace")
                if line.startswith("report "):
                    self.on_report(line[len("report "):])
                elif line.startswith("panic "):
                    raise Panic(line)
                else:
                    self._lines.append(line)
            else:
                self.on_frame(item)

    def line(self, timeout: float) -> str:
        """The next reply line."""
        deadline = time.monotonic() + timeout
        while not self._lines:
            self._pump(deadline)
        return self._lines.pop(0)

    def command(self, text: str, timeout: float) -> list[str]:
        """Send one command; its reply, the final ``ok``/``error`` line last."""
        self.qemu.write(text.encode("ascii") + b"\n")
        deadline = time.monotonic() + timeout
        out: list[str] = []
        while True:
            while not self._lines:
                self._pump(deadline)
            out.append(self._lines.pop(0))
            if out[-1].split(" ", 1)[0] in ("ok", "error"):
                return out
