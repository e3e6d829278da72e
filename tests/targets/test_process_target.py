"""`sdtgen torture --target process`: the fixture kernel as a Linux process (threads as CPUs, its control core
on standard input and output), tortured on this machine's real cores with the summary every target gives."""

from __future__ import annotations

import json
import re

from helpers import on_terminal, sdtgen
from process_oracle import ACTIONS, fired, native, read_back


def torture(image, *options: str) -> tuple[int, dict]:
    r = sdtgen("torture", image, "--target", "process", "--run", "sched_run", "--arg", "20", "--json",
               "--timeout", "300", *options)
    assert r.stderr == "", r.stderr
    return r.returncode, json.loads(r.stdout)


def test_the_safe_protocol_never_tears_under_real_threads(kernel_proc):
    code, s = torture(kernel_proc, "--cpus", "2", "--toggles", "3000", "--arm", "trap")
    assert (s["protocol"], s["toggles"], s["cpus"]) == ("safe", 3000, 2)
    assert (s["torn"], s["faults"], s["wrong"]) == (0, 0, 0) and s["calls"] > 3000 and s["firings"] > 0
    assert code == 0 and s["passed"]


def test_a_terminal_sees_how_long_the_kernels_torture_has_run(kernel_proc):
    """The kernel toggles on its own CPUs and answers at the end: on a terminal, standard error says what it
    does and for how long so far, on one line erased at the end (piped, nothing: torture() above)."""
    r, seen = on_terminal("torture", kernel_proc, "--target", "process", "--run", "sched_run", "--arg", "20",
                          "--json", "--timeout", "300", "--cpus", "2", "--toggles", "1000")
    assert r.returncode == 0 and json.loads(r.stdout)["toggles"] == 1000
    assert re.search(r"torture: the kernel toggles 1000 times on 2 CPU\(s\), \d+ s of at most 5 min 00 s", seen)
    assert "\n" not in seen and seen.endswith("\r\x1b[K")


def test_sdtgen_process_traces_the_program_and_every_cpu_fires_the_native_run(kernel_proc, native_exe, tmp_path):
    """`sdtgen process`: the program run with --cpus threads, each firing what its C fires natively (the JSON events),
    and babeltrace2 reading the same on each CPU out of the CTF trace it wrote."""
    firings, returns, total = native(native_exe)
    r = sdtgen("process", kernel_proc, "--cpus", "2", *ACTIONS, "--json", "--trace", str(tmp_path / "trace"))
    assert r.returncode == 0 and r.stderr == "", r.stderr
    events = [json.loads(line) for line in r.stdout.splitlines()]
    assert fired(events, 0) == fired(events, 1) == firings
    assert [e["value"] for e in events if e["event"] == "return" and e["cpu"] == 0] == returns
    [stats] = [e for e in events if e["event"] == "stats"]
    assert (sum(stats["hits"].values()), stats["lost"]) == (2 * total, 0)
    assert read_back(tmp_path / "trace") == {0: firings, 1: firings}


def test_sdtgen_process_refuses_what_is_no_program_in_one_line(tmp_path):
    (tmp_path / "k").write_text("not a program")
    r = sdtgen("process", str(tmp_path / "k"), "--run", "kmain")
    assert r.returncode == 2 and r.stdout == ""
    assert len(r.stderr.splitlines()) == 1 and "Traceback" not in r.stderr, r.stderr
