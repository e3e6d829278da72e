"""The programs a session starts (sdtgen/targets/child.py): a child dies with sdtgen, and only with it."""

from __future__ import annotations

import io
import threading

from session_pair import CALLS, Firings, native

from sdtgen.session.reporter import Reporter
from sdtgen.session.starts import open_session


def test_a_session_opened_on_a_thread_that_ended_still_has_its_kernel(kernel_proc, native_exe):
    """A machine's session opened on a thread of its own, which then ends (as a pool's worker may): the process
    it started runs on, and the calls made from another thread fire as the native run's. The kernel's signal on
    its parent's death comes when the thread that started it ends, not sdtgen; a child started from that thread
    was killed with it."""
    import json

    opened: list = []
    out = io.StringIO()
    t = threading.Thread(target=lambda: opened.append(open_session("process", str(kernel_proc),
                                                                   Reporter(as_json=True, out=out), timeout=60)))
    t.start()
    t.join()
    [s] = opened
    firings = Firings(kernel_proc, s.target.bias)
    try:
        s.enable(":::")
        for c in CALLS:
            s.run(c.function, list(c.args), 0)
        s.drain()
    finally:
        s.close()
    fired = [firings(e["probe"], e["args"]) for e in map(json.loads, out.getvalue().splitlines())
             if e["event"] == "fire"]
    assert fired == native(native_exe, CALLS)
