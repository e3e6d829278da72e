"""Live streaming's flush (docs/live.md): as LTTng's live timer flushes each sub-buffer every period, even one
partly filled, a session that streams to a relay daemon has every CPU's open packet closed and read every live
period while no command holds the kernel's control core (between commands, a console waiting for its user,
--interval's wait), so a viewer sees an event within about a period of its firing, not when its packet fills."""

from __future__ import annotations

from sdtgen.session.drive import BetweenCommands


class LiveFlush(BetweenCommands):
    """Every ``seconds``, the session's target drained (the control core's `flush` and `drain`) when no command
    runs, then the sinks told every CPU was read up to now (Session.caught_up)."""

    name = "sdtgen-live"

    def work(self, target) -> None:
        target.drain()
        self.session._emit_pending()
        self.session.caught_up()
