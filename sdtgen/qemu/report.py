"""What `sdtgen qemu` prints, through the emulated boot's Reporter: the same lines and JSON events as
`sdtgen boot`. The one module of this package that knows the emulated boot's interfaces (its Reporter,
and the rules for buffers it shares with `qemu`)."""

from __future__ import annotations

from sdtgen.boot.machine import GuestFault, Interrupted
from sdtgen.boot.platform import packet_size_for
from sdtgen.boot.session import Firing, Reporter, Stopped, check_buffer_size
from sdtgen.errors import printable
from sdtgen.trace.packets import Event

__all__ = ["QemuReport", "Reporter", "Stopped", "check_buffer_size", "packet_size_for"]


class QemuReport:
    def __init__(self, reporter: Reporter, path: str) -> None:
        self.reporter = reporter
        reporter.file = reporter.file or path

    def cpus(self, n: int) -> None:
        self.reporter.per_cpu = n > 1

    def patched(self, sites: int, refused: int) -> None:
        self.reporter.patched(sites, refused, 0)

    def fire(self, e: Event, pc: int | None, types: tuple[str, ...]) -> None:
        self.reporter.fire(Firing(e.probe, pc, e.args, types, e.cpu, e.ts))

    def returned(self, symbol: str, args: list[int], value: int | str | None, rtype: str, cpu: int | None) -> None:
        self.reporter.returned(symbol, args, value, rtype, cpu=cpu)

    def fault(self, symbol: str, what: str, pc: int, where: str, last: str | None, cpu: int | None,
              interrupted: bool = False) -> None:
        self.reporter.fault(symbol, (Interrupted if interrupted else GuestFault)(what, pc), where, last, cpu=cpu)

    def stats(self, hits: dict[str, int], lost: int, damaged: int = 0) -> None:
        self.reporter.stats(hits, lost, damaged)

    def warning(self, text: str) -> None:
        self.reporter.warning(text)

    def error(self, text: str, fix: str) -> None:
        self.reporter.error(text, fix)

    def line(self, text: str) -> None:
        """A line of the kernel's text, as `record` shows them (a text frame, or console output)."""
        self.reporter.text("text", printable(text, 2000))

    def console(self, text: str) -> None:
        """What the kernel printed outside frames (its own log, a panic before the line was up)."""
        self.reporter.text("console", printable(text.rstrip("\n"), 2000))
