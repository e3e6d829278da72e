"""`make bench`'s session rows (bench/sessions.py, bench/sessions.c, bench/flight.c): each program builds as a
process user builds it, and each case records what it fired into every session that takes it, read back from the
rings and counted against the firings (the flight recorder's against the fixture's own C run natively). What the
rows time is never asserted: only that what they time is what they say."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT, unavailable

_spec = importlib.util.spec_from_file_location("bench_sessions", ROOT / "bench" / "sessions.py")
ss = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = ss  # its dataclasses look their module up
_spec.loader.exec_module(ss)

INNER = 8  # loops of each case a round, in bench/sessions.c and bench/flight.c


def run_json(*cmd: object) -> dict:
    return json.loads(subprocess.run([str(c) for c in cmd], capture_output=True, text=True, check=True).stdout)


@pytest.fixture(scope="module")
def sessions_exe(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return ss.build_sessions(tmp_path_factory.mktemp("sessions"))


def test_every_session_that_takes_a_probe_records_each_firing_once(sessions_exe: Path) -> None:
    """Cases k1 and one (the default session, then session 1, alone: loops of N), k2, k4 and k8 (the default
    session and sessions 1 .. k-1: loops of N / k): each loop's firings once in each session that takes them."""
    n, rounds = 20_000, 2
    out = run_json(sessions_exe, n, 1_000, rounds)
    keys = {spec: str(key) for key, spec in ss.probe_keys(sessions_exe).items()}
    cases = {"k1": (0,), "one": (1,), "k2": range(2), "k4": range(4), "k8": range(8)}
    fired = [sum(n // max(len(takers), 1) for takers in cases.values() if s in takers) * INNER * rounds
             for s in range(ss.MAX_SESSIONS)]
    assert fired[0] == fired[1] == (n + n // 2 + n // 4 + n // 8) * INNER * rounds
    assert fired[7] == n // 8 * INNER * rounds
    for s, read in enumerate(out["read"]):
        want = {keys[ss.PROBE]: fired[s]}
        if s == 1:  # the other probe's site, armed by session 1 while the disarmed probe is timed: once a round
            want[keys[ss.OTHER]] = rounds
        assert read["keys"] == want, f"session {s}"
        assert (read["torn"], out["discarded"][s]) == (0, 0)
        assert read["tasks"] == read["packets"]  # one thread: each packet says its task once, first
    assert ss.check_sessions(out, ss.probe_keys(sessions_exe))[0] == []
    assert set(out["ns"]) == {*ss.SESSION_CASES, "off", "goto", "off_other", "goto_other"}
    assert all(len(v) == rounds for v in out["ns"].values())


def test_the_check_says_a_session_short_of_its_firings(sessions_exe: Path) -> None:
    """The bench's own check (a row is INVALID when it finds something) finds an event missing from a session."""
    out = run_json(sessions_exe, 5_000, 1_000, 1)
    keys = ss.probe_keys(sessions_exe)
    out["read"][3]["keys"] = {k: v - 1 for k, v in out["read"][3]["keys"].items()}
    problems, _ = ss.check_sessions(out, keys)
    assert len(problems) == 1 and problems[0].startswith("session 3 read")


def test_the_flight_recorder_records_every_firing_of_the_mix(tmp_path: Path) -> None:
    """The fixture kernel as a process running bench/mix.c: the flight recorder (a session of its own, every probe)
    and the default session each hold every firing of every loop, probe by probe as the native run fires them."""
    exe = ss.build_flight(tmp_path)
    iterations, rounds = 500, 2
    out = run_json(exe, iterations, rounds)
    native = ss.native_mix(tmp_path, iterations)
    assert len(native) >= 5 and sum(native.values()) > 5 * iterations  # strings, the switch, the ticks
    keys = ss.probe_keys(exe)
    for case in ("flight", "default"):
        read = out["read"][case]
        assert {keys[int(k)]: v for k, v in read["keys"].items()} == {p: v * INNER * rounds for p, v in native.items()}
        assert (read["torn"], out["read"][f"{case}_lost"]) == (0, 0)
    lapped = out["read"]["lapped"]  # 64 KiB rings: what was read and what was overwritten are every firing
    assert out["read"]["lapped_lost"] > 0 and lapped["torn"] == 0
    assert lapped["events"] + out["read"]["lapped_lost"] == sum(native.values()) * INNER * rounds
    assert out["loops"] == {case: INNER * rounds for case in ("off", "flight", "default", "lapped")}
    problems, _, per = ss.check_flight(out, keys, native)
    assert problems == [] and per == sum(native.values()) / iterations


def test_the_baseline_before_sessions_is_that_tree_s_build(tmp_path: Path) -> None:
    """bench/cpu_sdtgen.c built by the tree before sessions: that tree's gen wrote its recorders (the slot's
    ``program`` tested first, no ``route``), and its trace holds every event the program fired."""
    try:
        exe = ss.build_cpu(tmp_path, ss.PRE_SESSIONS)
    except ss.Unavailable as e:
        unavailable(f"the bench's baseline before sessions: {e} (a full clone has it)")
    stubs = (exe.parent / "sdt_stubs.c").read_text()
    assert re.search(r"__sdt_prog___dtrace_sdt_bench_cpu_loop_fire\.program != 0", stubs)
    assert ".route" not in stubs
    now = (ss.build_cpu(tmp_path).parent / "sdt_stubs.c").read_text()
    assert "__sdt_prog___dtrace_sdt_bench_cpu_loop_fire.route != 0" in now
    trace = tmp_path / "trace"
    trace.mkdir()
    out = run_json(exe, 20_000, 1_000, 10, 1, trace)
    assert out["read"] == out["fired"] == 20_010 and out["discarded"] == 0
