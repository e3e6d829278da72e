"""How a tracing session ends: Ctrl-C keeps what was recorded (as dtrace and lttng do) and exits 130;
SIGTERM and SIGHUP leave the trace whole or not there at all, whichever thread takes them, and no
temporary file; options that would write nothing, or something else than asked, are refused first."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import pytest
from helpers import sdtgen
from test_interrupt import BOUND, cpu_seconds, start, wait_spinning

SPIN = ("--arm", "branch", "--enable", "tk:::", "--run", "probed:int", "--arg", "5", "--run", "spin", "--arg", "0")


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.startswith("."))


def spin_then(tricks, tmp_path, sig: int, fmt: str = "ctf") -> tuple[int, str, str, Path]:
    trace = tmp_path / ("trace" if fmt == "ctf" else "trace.json")
    proc = start(tricks, *SPIN, "--trace", trace, "--trace-format", fmt, "--cpus", "2")
    first = proc.stdout.readline()
    assert first.startswith("patched"), first
    wait_spinning(proc.pid, cpu_seconds(proc.pid))
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=BOUND)
    return proc.returncode, first + out, err, trace


@pytest.mark.parametrize("fmt", ["ctf", "chrome"])
def test_ctrl_c_writes_what_was_recorded_and_exits_130(tricks, tmp_path, fmt):
    code, out, err, trace = spin_then(tricks, tmp_path, signal.SIGINT, fmt)
    assert code == 130 and "Traceback" not in err
    assert "tk:code:probed:entry" in out  # the firing before the spin, shown
    assert trace.exists() and leftovers(tmp_path) == []
    if fmt == "chrome":
        import json

        doc = json.loads(trace.read_text())
        assert [e["args"] for e in doc["traceEvents"] if e["ph"] == "i"] == [{"arg0": 5}] * 2  # both CPUs
    else:
        assert (trace / "metadata").exists() and (trace / "stream_0").stat().st_size > 0


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_and_sighup_leave_no_trace_and_no_temporary_file(tricks, tmp_path, sig):
    code, _, err, trace = spin_then(tricks, tmp_path, sig)
    assert code == 128 + sig and "Traceback" not in err
    assert not trace.exists() and leftovers(tmp_path) == []


# sdtgen in-process, with one thing added: the moment the trace's directory has put the old trace aside and
# not yet renamed the new one into place, the process gets SIGTERM (kill(2): any thread that does not hold it
# back may take it; the main thread holds it back there). Then a pause, for a thread that took it to act.
IN_PROCESS = """
import os, signal, sys, time
from sdtgen.__main__ import main

target, rename = sys.argv[1], os.rename


def rename_then_terminate(src, dst, *args, **kw):
    rename(src, dst, *args, **kw)
    if os.fspath(src) == target:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.5)


os.rename = rename_then_terminate
sys.argv = ["sdtgen", *sys.argv[2:]]
sys.exit(main())
"""


def test_sigterm_while_the_trace_goes_in_place_waits_for_it_whichever_thread_could_take_it(tricks, tmp_path):
    """Every thread of a boot holds SIGTERM back while the main thread does (the watchdog, the CPUs): a signal
    that comes while the trace replaces an earlier one acts once it is in place. A thread that let it in would
    raise it half way, and leave the old trace renamed aside and no trace."""
    from helpers import need_tool, run

    trace = tmp_path / "trace"
    probe = ["--enable", "tk:::", "--run", "probed:int", "--arg"]
    assert sdtgen("boot", tricks, *probe, "5", "--trace", trace).returncode == 0  # an earlier trace to replace
    script = tmp_path / "in_process.py"
    script.write_text(IN_PROCESS)
    proc = run([sys.executable, str(script), str(trace), "boot", str(tricks), *probe, "7", "--trace", str(trace)],
               check=False, cwd=tmp_path)
    assert proc.returncode == 128 + signal.SIGTERM and proc.stderr == ""
    assert leftovers(tmp_path) == []
    events = run([need_tool("babeltrace2", "babeltrace2"), str(trace)]).stdout.splitlines()
    assert len(events) == 1 and "arg0 = 7" in events[0]  # the new trace, whole


@pytest.mark.parametrize(("argv", "what"), [
    (["--trace-format", "ctf"], "--trace-format without --trace writes nothing"),
    (["--trace", ""], "--trace needs a path"),
    (["--trace", "/nonexistent/dir/t"], "does not exist"),
])
def test_options_that_would_write_nothing_are_refused_before_anything_runs(tricks, argv, what):
    proc = sdtgen("boot", tricks, "--run", "probed:int", "--arg", "1", *argv)
    assert proc.returncode == 2 and proc.stdout == "" and what in proc.stderr
    assert len(proc.stderr.splitlines()) == 1


@pytest.mark.parametrize("attempt", range(4))
def test_ctrl_c_while_traps_fire_keeps_every_shown_firing_in_the_trace(kernel, tmp_path, attempt):
    """The default arming on one CPU, a probe trapping in a loop, Ctrl-C while firings stream: exit 130,
    the one line saying where the guest was, and babeltrace2 reads exactly the firings that were shown."""
    from helpers import need_tool, run

    trace = tmp_path / "trace"
    proc = start(kernel.image, "--enable", "hk:sched:run:tick", "--run", "sched_run", "--arg", "100000000",
                 "--trace", trace)
    shown = 0
    for line in proc.stdout:
        shown += line.startswith("hk:sched:run:tick")
        if shown == 10 * (attempt + 1):
            break
    proc.send_signal(signal.SIGINT)
    out, err = proc.stdout.read(), proc.stderr.read()  # through the pipes' buffers (communicate() skips them)
    proc.wait(timeout=BOUND)
    shown += sum(ln.startswith("hk:sched:run:tick") for ln in out.splitlines())
    assert proc.returncode == 130, err
    (line,) = err.splitlines()
    assert "interrupted in sched_run" in line and "Traceback" not in err
    events = run([need_tool("babeltrace2", "babeltrace2"), str(trace)]).stdout.splitlines()
    assert len(events) == shown and all("hk:sched:run:tick" in e for e in events)
