"""One session's packets to several sinks at once (a local --trace and a relay daemon): each gets every packet, the
events only where it needs them, and each is finished (or aborted) even when another fails."""

from __future__ import annotations

from sdtgen.trace.model import Lost
from sdtgen.trace.packets import Event, Packet
from sdtgen.trace.sink import TraceSink


class Tee:
    def __init__(self, sinks: list[TraceSink]) -> None:
        self.sinks = sinks
        self.needs_events = any(s.needs_events for s in sinks)

    def packet(self, cpu: int, data: bytes, packet: Packet, events: list[Event] | None) -> None:
        for s in self.sinks:
            s.packet(cpu, data, packet, events if s.needs_events else None)

    def caught_up(self) -> None:
        """Every CPU was read up to now: told to the sinks that stream live."""
        for s in self.sinks:
            if hasattr(s, "caught_up"):
                s.caught_up()

    def finish(self, lost: dict[int, Lost]) -> None:
        """Each finished in turn; one that fails leaves the ones after it aborted, and its error raised."""
        for k, s in enumerate(self.sinks):
            try:
                s.finish(lost)
            except BaseException:
                for rest in self.sinks[k + 1:]:
                    rest.abort()
                raise

    def abort(self) -> None:
        for s in self.sinks:
            s.abort()
