"""Streaming to lttng-relayd (docs/live.md): the fixture kernel as a Linux process (fixtures/process's kernel-proc)
streamed to Debian's real lttng-relayd while babeltrace2's lttng-live viewer reads it, against the native run of
the same C; and relay daemons that go away, refuse, answer garbage or stop reading, against which the run goes on
and its local trace stays whole."""

from __future__ import annotations

import io
import json
import re
import threading

import pytest
from native_oracle import build_fixture_native
from post_mortem_read import bt2_rows
from relayd_daemon import HOST, LiveViewer, free_ports, relayd
from session_pair import CALLS, Firings, native

from sdtgen.errors import SdtError
from sdtgen.session.reporter import Reporter
from sdtgen.session.starts import open_session

CPUS = 2
MACHINE = "proc-a"
LIVE_LINE = re.compile(r"^\[[^]]*\] \([^)]*\) \S+ (\S+): \{ cpu_id = (\d+),")


@pytest.fixture(scope="module")
def native_exe(tmp_path_factory):
    return build_fixture_native(tmp_path_factory.mktemp("native"))


def opened(kernel_proc, out: io.StringIO, url: str, trace=None):
    return open_session("process", str(kernel_proc), Reporter(as_json=True, out=out), timeout=60, relayd=url,
                        name=MACHINE, cpus=CPUS, trace=(str(trace), "ctf") if trace else None)


def run_calls(session, calls, cpu: int) -> None:
    for c in calls:
        session.run(c.function, list(c.args), cpu)


def firings_of(rows: list[dict], firings: Firings) -> list[tuple[int, tuple]]:
    """babeltrace2's events in its (time) order, the task events left out: (CPU, the native run's firing)."""
    return [(r["cpu"], firings(r["name"], list(r["fields"].values()))) for r in rows
            if "name" in r and r["name"] != "sdt:task"]


class Lines:
    """A viewer's standard output, line by line as it prints them (on a thread): what it printed so far."""

    def __init__(self, viewer: LiveViewer) -> None:
        self.viewer, self.lines, self.more = viewer, [], threading.Condition()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        for line in self.viewer.proc.stdout:
            with self.more:
                self.lines.append(line.rstrip("\n"))
                self.more.notify_all()
        with self.more:
            self.lines.append(None)  # the viewer ended
            self.more.notify_all()

    def events(self) -> list[tuple[int, str]]:
        """(CPU, probe) of each event printed, in its order, the task events left out."""
        return [(int(m[2]), m[1]) for m in (LIVE_LINE.match(line or "") for line in self.lines)
                if m and m[1] != "sdt:task"]

    def wait_for(self, want: list[tuple[int, str]], guard: float = 120) -> list[tuple[int, str]]:
        """Until the viewer printed ``want`` or ended; a hang guard, not a time measured: a viewer that shows
        nothing live fails here, however fast the machine."""
        with self.more:
            self.more.wait_for(lambda: self.events() == want or None in self.lines, guard)
            return self.events()


def attached(daemon, session: str) -> bool:
    """The relay daemon lists ``session`` with a viewer attached to it (babeltrace2 lists the live sessions)."""
    from helpers import run

    listing = run(["babeltrace2", "--input-format=lttng-live", f"net://{HOST}:{daemon.live}"], check=False).stdout
    return any(f"/host/{MACHINE}/{session} " in line and "1 client(s) connected" in line
               for line in listing.splitlines())


def test_a_process_streamed_to_lttng_relayd_is_shown_live_by_babeltrace2_and_stored_whole(kernel_proc, native_exe,
                                                                                          tmp_path):
    """The calls on CPU 0, then again on CPU 1 (the native run makes them twice over, in that order).
    babeltrace2's lttng-live viewer, attached before any event fires, prints CPU 0's events while the session is
    still running (before CPU 1's calls are made, while CPU 1's stream says only that it is quiet), then every
    event in time order; the relay daemon's stored trace, read offline, holds exactly the events of the native
    run, and exactly those of the local --trace written beside it."""
    import time

    with relayd(tmp_path) as daemon:
        out = io.StringIO()
        s = opened(kernel_proc, out, daemon.url, tmp_path / "local")
        try:
            firings = Firings(kernel_proc, s.target.bias)
            viewer = LiveViewer(daemon.live_url(MACHINE, "default"))
            lines = Lines(viewer)
            for _ in range(600):  # until it attached: a viewer sees only what is indexed after it attaches
                if attached(daemon, "default"):
                    break
                time.sleep(0.1)
            else:
                pytest.fail(f"babeltrace2 never attached: {lines.lines}")
            s.enable(":::")
            run_calls(s, CALLS, 0)
            first = [(0, p) for p, _ in native(native_exe, CALLS)]
            assert lines.wait_for(first) == first, "the viewer did not show CPU 0's events while the session ran"
            run_calls(s, CALLS, 1)
            s.drain()
            s.finish_trace()
        finally:
            s.close()
        code, _, errors = viewer.wait()
        lines.thread.join()
        everything = native(native_exe, CALLS + CALLS)
        half = len(everything) // 2
        assert half > 20
        assert code == 0, errors[-2000:]
        assert lines.events() == [(0 if k < half else 1, p) for k, (p, _) in enumerate(everything)]
        [stored] = daemon.traces(MACHINE, "default")
    rows = bt2_rows(stored)
    assert firings_of(rows, firings) == [(0 if k < half else 1, f) for k, f in enumerate(everything)]
    assert rows[1:] == bt2_rows(tmp_path / "local")[1:]  # every event as the local trace has it (row 0: its env)
    assert not [e for e in map(json.loads, out.getvalue().splitlines()) if e["event"] == "warning"]


def test_a_relayd_url_that_is_not_one_is_refused_in_one_line_before_anything_runs(kernel_proc):
    for url in ("tcp://127.0.0.1", "net://", "net://host:0", "net://host:70000", "net://a b"):
        with pytest.raises(SdtError, match=r"--relayd .* is not a relay daemon's address"):
            opened(kernel_proc, io.StringIO(), url)


def test_a_relay_daemon_that_is_not_there_is_said_in_one_line_before_the_kernel_starts(kernel_proc):
    control, data = free_ports(2)
    with pytest.raises(SdtError) as e:
        opened(kernel_proc, io.StringIO(), f"net://{HOST}:{control}:{data}")
    assert f"the relay daemon at net://{HOST}:{control}:{data}: cannot connect to its control port" in str(e.value)
    assert "\n" not in str(e.value)
