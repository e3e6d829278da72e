"""Live streaming's flush (docs/live.md): as LTTng's live timer flushes each sub-buffer every period, even one
partly filled, a session that streams to a relay daemon has every CPU's open packet closed and read every live
period while no command holds the kernel's control core (between commands, a console waiting for its user,
--interval's wait), so a viewer sees an event within about a period of its firing, not when its packet fills."""

from __future__ import annotations

import threading


class LiveFlush:
    """Every ``seconds``, the session's target drained (the control core's `flush` and `drain`) when no command
    runs, then the sinks told every CPU was read up to now (Session.caught_up)."""

    def __init__(self, session, seconds: float) -> None:
        self.session, self.seconds = session, seconds
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, name="sdtgen-live", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        s = self.session
        while not self.done.wait(self.seconds):
            if s.halted or s.target is None:
                return
            if not s._target_lock.acquire(blocking=False):  # a command holds the control core: its packets come
                continue                                    # as they fill, and all of them when it ends
            try:
                if self.done.is_set():
                    return
                s.target.drain()
                # Shown and told under the target's lock: a command's packets read meanwhile would otherwise be
                # given out ahead of earlier events another CPU's flushed packet holds.
                s._emit_pending()
                s.caught_up()
            except Exception:  # the kernel stopped: the next command (or the end) says so
                return
            finally:
                s._target_lock.release()

    def stop(self) -> None:
        self.done.set()
        self.thread.join()
