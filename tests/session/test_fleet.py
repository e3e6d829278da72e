"""Several machines in one command (sdtgen/session/fleet.py): `sdtgen fleet`, `attach` and `record` with several
--serial. Each machine's session runs on its own with the same actions, its lines say which machine it is, its events
are its native run's (the fixture's C compiled for this machine, tools/native.py) and its CTF trace, read back by
babeltrace2, holds them; a machine whose line never answers holds none of the others' results back (shown by the
order of the lines, never by a clock); a bad --machine is one line."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import time
from pathlib import Path

import pytest
from helpers import SDTGEN, sdtgen
from native_oracle import Call
from process_oracle import ACTIONS, fired, firing, native, read_back, runs, serve
from serial_line import Packet, event, info, text

from sdtgen.image import Image

LINE_GUARD = 120  # seconds without a line before a test stops waiting (a hang guard, never an assertion on time)


@pytest.fixture(scope="module")
def want(native_exe) -> tuple[list, list, int]:
    return native(native_exe)


def test_two_process_machines_each_fire_their_native_run_and_each_has_its_own_trace(kernel_proc, want, tmp_path):
    firings, returns, _ = want
    trace = tmp_path / "fleet"
    r = sdtgen("fleet", "--machine", f"one=process:{kernel_proc}", "--machine", f"two=process:{kernel_proc},cpus=2",
               *ACTIONS, "--trace", str(trace), "--json", "--timeout", "120")
    assert r.returncode == 0 and r.stderr == "", r.stderr
    events = [json.loads(line) for line in r.stdout.splitlines()]
    assert {e["machine"] for e in events} == {"one", "two"}  # every line says its machine
    assert fired(events, 0, "one") == firings
    assert fired(events, 0, "two") == fired(events, 1, "two") == firings
    assert [e["value"] for e in events if e["machine"] == "one" and e["event"] == "return"] == returns
    ends = {e["machine"]: e for e in events if e["event"] == "machine"}
    assert ends["one"]["ok"] and ends["two"]["ok"] and ends["two"]["lost"] == 0
    assert sorted(p.name for p in trace.iterdir()) == ["one", "two"]
    assert read_back(trace / "one") == {0: firings}
    assert read_back(trace / "two") == {0: firings, 1: firings}


def test_a_human_line_says_its_machine(kernel_proc):
    r = sdtgen("fleet", "--machine", f"one=process:{kernel_proc}", "--machine", f"two=process:{kernel_proc}",
               "--enable", "hk:sched::", "--run", "sched_run", "--arg", "2")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    for name in ("one", "two"):
        assert f"[{name}] hk:sched:run:tick  arg0=1 arg1=3" in lines
        assert f"[{name}] sched_run(2) = 3" in lines
        assert f"[{name}] done: 2 events, 0 lost, 0 damaged" in lines


class Lines:
    """A running command's standard output, a JSON event a line, read as they come."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc, self.buffer, self.seen = proc, b"", []

    def next(self) -> dict | None:
        while b"\n" not in self.buffer:
            ready, _, _ = select.select([self.proc.stdout], [], [], LINE_GUARD)
            assert ready, f"no line in {LINE_GUARD} s; so far {self.seen}"
            data = os.read(self.proc.stdout.fileno(), 65536)
            if not data:
                return None
            self.buffer += data
        line, self.buffer = self.buffer.split(b"\n", 1)
        self.seen.append(json.loads(line))
        return self.seen[-1]

    def until(self, check) -> None:
        while not check(self.next()):
            pass

    def rest(self) -> None:
        """Every line until the command ends, at most LINE_GUARD seconds from now (a hang guard: a command that
        goes on printing would never end otherwise)."""
        guard = time.monotonic() + LINE_GUARD
        while self.next() is not None:
            assert time.monotonic() < guard, f"still printing after {LINE_GUARD} s: {self.seen[-3:]}"


def streamed(image: Path, cpus: int) -> tuple[bytes, dict[int, list]]:
    """What a kernel that streams by itself sends on its line (docs/runtime.md's frames, tests/serial_line.py): the
    info frame and a packet a CPU of hk:sched:run:tick firings, and those firings, CPU by CPU."""
    with Image(str(image)) as im:
        key = next(p.key for p in im.probes() if p.spec == "hk:sched:run:tick")
    data, sent = info(1_000_000_000), {}
    for cpu in range(cpus):
        ticks = [(1000 + 10 * k, k, 7 * k + cpu) for k in range(3)]
        data += Packet(cpu, 1, [event(ts, key, (a, b)) for ts, a, b in ticks], 1000, 1100).sent()
        sent[cpu] = [firing("hk:sched:run:tick", [a, b]) for _, a, b in ticks]
    return data, sent


def test_a_machine_whose_line_says_nothing_holds_none_of_the_others_results_back(kernel_proc, want, tmp_path):
    """`quiet` records a line on which nothing comes until the test has read every result of `busy`, machine
    summary included: had the fleet waited for it, that summary could not have come. Then its kernel streams, and
    its recording holds what it sent."""
    firings, _, _ = want
    fifo = tmp_path / "line"
    os.mkfifo(fifo)
    held = os.open(fifo, os.O_RDWR)  # a writer on the line from the start: the recording waits for bytes
    proc = subprocess.Popen([SDTGEN, "fleet", "--machine", f"quiet=record:{kernel_proc},serial={fifo}",
                             "--machine", f"busy=process:{kernel_proc}", *ACTIONS,
                             "--json", "--timeout", "120"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out = Lines(proc)
        out.until(lambda e: e is None or (e["event"] == "machine" and e["machine"] == "busy"))
        assert out.seen[-1]["ok"]
        assert [e for e in out.seen if e["machine"] == "quiet"] == []  # nothing of it yet: its line is silent
        data, sent = streamed(kernel_proc, 2)
        os.write(held, data)
        os.close(held)
        held = None
        out.rest()
        assert proc.wait(LINE_GUARD) == 0, proc.stderr.read()
    finally:
        if held is not None:
            os.close(held)
        proc.kill()
        proc.wait()
    assert fired(out.seen, 0, "busy") == firings
    assert {cpu: fired(out.seen, cpu, "quiet") for cpu in sent} == sent
    [end] = [e for e in out.seen if e["event"] == "machine" and e["machine"] == "quiet"]
    assert end["ok"] and end["events"] == 6


def test_a_failed_machine_fails_the_fleet_and_the_last_line_names_it(kernel_proc, want, tmp_path):
    _, _, total = want
    r = sdtgen("fleet", "--machine", f"gone=attach:{kernel_proc},serial={tmp_path / 'nothing'}",
               "--machine", f"fine=process:{kernel_proc}", *ACTIONS)
    assert r.returncode == 1
    assert r.stderr.splitlines() == [
        f"[gone] {tmp_path / 'nothing'}: error: cannot open the serial line: No such file or directory; give "
        "tcp:HOST:PORT, a tty, or the base path of a FIFO pair BASE.in/BASE.out",
        "sdtgen: error: 1 of 2 machines failed: gone; see their lines above"]
    lines = r.stdout.splitlines()
    assert "[gone] failed: cannot open the serial line: No such file or directory; 0 events, 0 lost, 0 damaged" in lines
    assert f"[fine] done: {total} events, 0 lost, 0 damaged" in lines


@pytest.mark.parametrize(("spec", "said"), [
    ("vm1", "--machine vm1 is not NAME=KIND:IMAGE[,key=value...]"),
    ("vm1=qemu", "--machine vm1=qemu is not NAME=KIND:IMAGE[,key=value...]"),
    ("vm/1=qemu:k.elf", "--machine NAME 'vm/1' has a character other than letters, digits, '_', '.' and '-'"),
    ("vm1=vm:k.elf", "--machine vm1=vm:k.elf: unknown kind 'vm'"),
    ("vm1=process:k.elf,serial=/dev/ttyS0", "--machine vm1=process:k.elf,serial=/dev/ttyS0: a process machine takes "
                                           "no 'serial=/dev/ttyS0'"),
    ("vm1=qemu:k.elf,cpus=many", "--machine vm1=qemu:k.elf,cpus=many: cpus=many is not a number of CPUs"),
    ("b1=attach:k.elf", "--machine b1=attach:k.elf: an attach machine needs its line"),
    ("vm1=qemu:k.elf,cpus=\u00b2", "--machine vm1=qemu:k.elf,cpus=\u00b2: cpus=\u00b2 is not a number of CPUs"),
    ("vm1=qemu:k.elf,cpus=\u0663", "--machine vm1=qemu:k.elf,cpus=\u0663: cpus=\u0663 is not a number of CPUs"),
    ("vm1=qemu:k.elf,transport=bogus", "--machine vm1=qemu:k.elf,transport=bogus: transport=bogus is not a transport"),
])
def test_a_bad_machine_is_one_line(spec, said):
    r = sdtgen("fleet", "--machine", spec, "--run", "kmain")
    assert r.returncode == 2 and r.stdout == ""
    [line] = r.stderr.splitlines()
    assert line.startswith(f"sdtgen: error: {said}"), line


def test_two_machines_of_one_name_are_refused(kernel_proc):
    r = sdtgen("fleet", "--machine", f"a=process:{kernel_proc}", "--machine", f"a=process:{kernel_proc},cpus=2")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.splitlines() == ["sdtgen: error: two machines are named 'a': each names its own trace and relay "
                                     "session; give each --machine a name of its own"]


def test_two_machines_of_one_machine_id_are_refused(kernel_proc):
    """Two names whose CRC-32 is the same would be one machine_id, their tracks one, in a merged Perfetto file."""
    import zlib

    assert zlib.crc32(b"plumless") == zlib.crc32(b"buckeroo")
    r = sdtgen("fleet", "--machine", f"plumless=process:{kernel_proc}", "--machine", f"buckeroo=process:{kernel_proc}")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.splitlines() == ["sdtgen: error: machines 'plumless' and 'buckeroo' have the same machine id "
                                     f"({zlib.crc32(b'plumless')}, a CRC-32 of the name); rename one of them"]


def test_a_missing_image_is_one_line_before_any_machine_starts(kernel_proc, tmp_path):
    r = sdtgen("fleet", "--machine", f"a=process:{kernel_proc}", "--machine", f"b=qemu:{tmp_path / 'k.elf'}",
               "--run", "kmain")
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr.splitlines() == [f"{tmp_path / 'k.elf'}: error: machine b's image cannot be read: No such file or "
                                     "directory; check the path"]


def test_attach_with_two_lines_drives_both_kernels_each_a_machine_named_after_its_line(kernel_proc, want, tmp_path):
    """Two kernels, each a process served on a FIFO pair (as QEMU's -serial pipe:BASE): one `sdtgen attach` with
    both lines, the same actions on each; each fires its native run on each of its CPUs, and has its own trace."""
    firings, returns, _ = want
    kernels = [serve(kernel_proc, tmp_path / name, 2) for name in ("east", "west")]
    try:
        r = sdtgen("attach", kernel_proc, "--serial", str(tmp_path / "east"), "--serial", str(tmp_path / "west"),
                   *ACTIONS, "--json", "--trace", str(tmp_path / "trace"))
    finally:
        for k in kernels:
            k.kill()
            k.wait()
    assert r.returncode == 0 and r.stderr == "", r.stderr
    events = [json.loads(line) for line in r.stdout.splitlines()]
    for name in ("east", "west"):
        assert fired(events, 0, name) == fired(events, 1, name) == firings
        assert [e["value"] for e in events if e["machine"] == name and e["event"] == "return" and e["cpu"] == 1] \
            == returns
        assert read_back(tmp_path / "trace" / name) == {0: firings, 1: firings}
    assert sorted(e["machine"] for e in events if e["event"] == "machine" and e["ok"]) == ["east", "west"]


def test_record_with_two_lines_records_each_kernel_into_a_trace_of_its_own(kernel_proc, tmp_path):
    """Two kernels' streams (capture files of the documented frames): each a machine, its events what its line
    carried, its trace in DIR/NAME/ read back by babeltrace2."""
    lines = {"a.cap": streamed(kernel_proc, 1), "b.cap": streamed(kernel_proc, 2)}
    for name, (data, _) in lines.items():
        (tmp_path / name).write_bytes(data)
    r = sdtgen("record", kernel_proc, *[w for name in lines for w in ("--serial", str(tmp_path / name))],
               "--trace", str(tmp_path / "trace"), "--json")
    assert r.returncode == 0 and r.stderr == "", r.stderr
    events = [json.loads(line) for line in r.stdout.splitlines()]
    for name, (_, sent) in lines.items():
        assert {cpu: fired(events, cpu, name) for cpu in sent} == sent
        assert read_back(tmp_path / "trace" / name) == sent


def test_sigterm_ends_every_machines_session_as_ctrl_c_ends_one_and_each_trace_is_kept(kernel_proc, native_exe,
                                                                                         tmp_path):
    """With --interval each session runs after its actions until Ctrl-C, as dtrace's, and a recording until its line
    ends or Ctrl-C: SIGTERM to the fleet ends all three, the two processes each with its last printa (a count of
    hk:vfs's firings) and its trace of hk:sched's whole (babeltrace2 reads the native run's), the recording of a
    line that has said one text line since as Ctrl-C ends a recording; exit 0."""
    calls = [Call("sched_run", (4,)), Call("vfs_lookup_id", (3,))]
    ran = native(native_exe, calls)[0]
    ticks, lookups = [f for f in ran if f[0].startswith("hk:sched:")], [f for f in ran if f[0].startswith("hk:vfs:")]
    trace, fifo = tmp_path / "trace", tmp_path / "line"
    os.mkfifo(fifo)
    held = os.open(fifo, os.O_RDWR)  # a writer on the line from the start: the recording waits for bytes
    proc = subprocess.Popen([SDTGEN, "fleet", "--machine", f"a=process:{kernel_proc}", "--machine",
                             f"b=process:{kernel_proc},cpus=2", "--machine", f"rec=record:{kernel_proc},serial={fifo}",
                             "--aggregate", "hk:vfs:: { @n = count(); }", "--enable", "hk:sched::", *runs(calls),
                             "--interval", "0.2", "--trace", str(trace), "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out = Lines(proc)
        printed: set[str] = set()
        out.until(lambda e: e is None or printed.update([e["machine"]] if e["event"] == "aggregations" else [])
                  or printed == {"a", "b"})
        os.write(held, info(1_000_000_000) + text("listening"))
        out.until(lambda e: e is None or (e["machine"], e["event"]) == ("rec", "text"))  # it reads its line
        proc.send_signal(signal.SIGTERM)
        out.rest()
        assert proc.wait(LINE_GUARD) == 0, proc.stderr.read()
    finally:
        os.close(held)
        proc.kill()
        proc.wait()
    ends = {e["machine"]: e for e in out.seen if e["event"] == "machine"}
    assert ends["a"]["ok"] and ends["b"]["ok"] and ends["rec"]["ok"] and ends["rec"]["events"] == 0
    assert read_back(trace / "a") == {0: ticks}
    assert read_back(trace / "b") == {0: ticks, 1: ticks}
    last = {e["machine"]: e for e in out.seen if e["event"] == "aggregations"}
    assert [r["value"] for r in last["a"]["aggregations"][0]["rows"]] == [len(lookups)]
    assert [r["value"] for r in last["b"]["aggregations"][0]["rows"]] == [2 * len(lookups)]


def test_an_emulated_boot_and_a_process_at_once_each_fire_the_native_run(kernel, kernel_proc, want):
    """The emulator runs its CPUs on threads of their own, and its Ctrl-C watchdog on the main thread only: a `boot`
    machine on a fleet's thread fires what the process beside it fires, the native run's, on each of its CPUs."""
    firings, returns, total = want
    r = sdtgen("fleet", "--machine", f"emu=boot:{kernel.image},cpus=2", "--machine", f"proc=process:{kernel_proc}",
               *ACTIONS, "--json")
    assert r.returncode == 0 and r.stderr == "", r.stderr
    events = [json.loads(line) for line in r.stdout.splitlines()]
    assert fired(events, 0, "emu") == fired(events, 1, "emu") == fired(events, 0, "proc") == firings
    assert [e["value"] for e in events if e["machine"] == "emu" and e["event"] == "return" and e["cpu"] == 1] \
        == returns
    ends = {e["machine"]: e for e in events if e["event"] == "machine"}
    assert (ends["emu"]["ok"], ends["emu"]["events"], ends["proc"]["events"]) == (True, 2 * total, total)


@pytest.mark.parametrize(("options", "said"), [
    (["-i"], "-i opens one console, and a fleet has several machines; leave out -i"),
    (["--snapshot", "s", "pm"], "--post-mortem and --snapshot write one PATH, and a fleet has several machines; trace "
                                "each machine with --trace DIR (one CTF trace a machine)"),
    (["--script", "-"], "--script - reads standard input once, and a fleet has several machines; give the script as "
                        "a file"),
])
def test_what_only_one_machine_can_have_is_refused_in_one_line(kernel_proc, options, said):
    r = sdtgen("fleet", "--machine", f"a=process:{kernel_proc}", "--machine", f"b=process:{kernel_proc}", *options)
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr.splitlines() == [f"sdtgen: error: {said}"]


def test_each_machine_streams_to_lttng_relayd_as_a_relay_session_of_its_own(kernel_proc, want, tmp_path):
    """`--relayd URL` on a fleet: Debian's lttng-relayd stores each machine under its own name (its relay
    session's hostname), and babeltrace2 reads in each stored trace that machine's native run on each of its CPUs."""
    from relayd_daemon import relayd

    firings, _, _ = want
    with relayd(tmp_path) as daemon:
        r = sdtgen("fleet", "--machine", f"one=process:{kernel_proc}", "--machine", f"two=process:{kernel_proc},cpus=2",
                   *ACTIONS, "--relayd", daemon.url, "-q")
        assert r.returncode == 0 and r.stderr == "", r.stderr
        [one] = daemon.traces("one", "default")
        [two] = daemon.traces("two", "default")
        assert read_back(one) == {0: firings}
        assert read_back(two) == {0: firings, 1: firings}


def test_a_fleet_none_of_whose_machines_started_writes_no_trace(kernel_proc, tmp_path):
    r = sdtgen("fleet", "--machine", f"a=attach:{kernel_proc},serial={tmp_path / 'none-a'}",
               "--machine", f"b=attach:{kernel_proc},serial={tmp_path / 'none-b'}", "--run", "sched_run",
               "--trace", str(tmp_path / "fleet.pftrace"))
    assert r.returncode == 1
    assert r.stderr.splitlines()[-1] == "sdtgen: error: 2 of 2 machines failed: a, b; see their lines above"
    assert list(tmp_path.iterdir()) == []  # no trace, and nothing of one left behind


def test_each_line_of_a_machines_printa_says_its_machine(kernel_proc):
    """A printa is several lines: each starts with its machine, so two machines' printouts never mix unsaid."""
    r = sdtgen("fleet", "--machine", f"a=process:{kernel_proc}", "--machine", f"b=process:{kernel_proc},cpus=2",
               "--aggregate", "hk:sched:run:tick { @n[cpu] = count(); }", "--run", "sched_run", "--arg", "3", "-q")
    assert r.returncode == 0, r.stderr
    rows = [line.split() for line in r.stdout.splitlines() if len(line.split()) == 3]
    assert sorted(rows) == [["[a]", "0", "3"], ["[b]", "0", "3"], ["[b]", "1", "3"]]


def test_sigterm_ends_a_machine_whose_kernel_never_answers_and_the_fleet_says_it(kernel_proc, tmp_path):
    """An attached kernel whose line never answers its hello (a FIFO pair no kernel serves) waits up to --timeout;
    SIGTERM ends it then, not at its timeout, and the fleet, one machine of it stopped unfinished, ends as the signal
    ends a session: 143, the machine named."""
    base = tmp_path / "line"
    os.mkfifo(f"{base}.in")
    os.mkfifo(f"{base}.out")
    held = [os.open(f"{base}.{end}", os.O_RDWR) for end in ("in", "out")]  # no kernel behind them
    proc = subprocess.Popen([SDTGEN, "fleet", "--machine", f"deaf=attach:{kernel_proc},serial={base}", "--machine",
                             f"a=process:{kernel_proc}", "--aggregate", "hk:sched:: { @n = count(); }", "--run",
                             "sched_run", "--arg", "3", "--interval", "0.2", "--timeout", "3600", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out = Lines(proc)
        out.until(lambda e: e is None or (e["machine"], e["event"]) == ("a", "aggregations"))
        proc.send_signal(signal.SIGTERM)
        out.rest()
        assert proc.wait(LINE_GUARD) == 128 + signal.SIGTERM
    finally:
        for fd in held:
            os.close(fd)
        proc.kill()
        proc.wait()
    ends = {e["machine"]: e for e in out.seen if e["event"] == "machine"}
    assert ends["a"]["ok"] and not ends["deaf"]["ok"]
    assert out.seen[-1] == {"event": "error", "text": "1 of 2 machines failed: deaf", "fix": "see their lines above"}
