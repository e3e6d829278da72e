"""A kernel sdtgen never saw (examples/tinyk: S-mode under OpenSBI, its own boot code, linker script,
per-CPU data and polled UART, linking the runtime and its control core through the Makefile fragment)
is booted by `sdtgen qemu` with its own QEMU arguments and driven by `sdtgen attach` over TCP: armed,
run on one CPU or all, traced and tortured, each firing the native run's."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
import shutil
import socket
import subprocess
import threading
import time

import pytest
from helpers import CROSS, ROOT, SDTGEN, cross_tool, need_module, need_tool, run, sdtgen
from native import Call, run_native

from sdtgen import arch as arches
from sdtgen.layout import SITE

CALLS = [Call("net_rx", (5,)), Call("sched_tick", (17,))]

OPENSBI = ("-bios", "default")  # tinyk runs in S-mode under OpenSBI: the QEMU argument sdtgen's default lacks


def fired(events: list[dict], cpu: int) -> list[tuple[str, list]]:
    return [(e["probe"], e["args"]) for e in events if e["event"] == "fire" and e["cpu"] == cpu]


def expected(native_exe, calls) -> list[tuple[str, list]]:
    return [(e["probe"], e["args"]) for e in run_native(native_exe, calls) if "probe" in e]


def run_args(calls, cpu: int | None = None) -> list[str]:
    out = []
    for c in calls:
        out += ["--run", c.function, *[w for a in c.args for w in ("--arg", str(a))]]
        out += ["--cpu", str(cpu)] if cpu is not None else []
    return out


@pytest.mark.parametrize("mode", ["branch", "trap"])
def test_sdtgen_qemu_boots_it_with_its_own_qemu_arguments_and_every_cpu_fires_the_native_run(tinyk, tinyk_native,
                                                                                            mode):
    r = sdtgen("qemu", tinyk, "--cpus", "2", "--arm", mode, "--json", "--enable", "tk:::", *run_args(CALLS),
               *run_args(CALLS[:1], cpu=1), "--", *OPENSBI)
    assert r.returncode == 0, r.stderr
    events = [e for e in map(json.loads, r.stdout.splitlines()) if e["event"] != "console"]  # OpenSBI's banner
    assert events[0] == {"event": "patched", "sites": 6, "refused": 0, "folded": 0}  # tk:::, and the clock's sample
    want = expected(tinyk_native, CALLS)
    assert fired(events, 0) == want
    assert fired(events, 1) == want + expected(tinyk_native, CALLS[:1])  # --cpu 1: the last run, on CPU 1 only
    returns = [(e["symbol"], e["cpu"], e["value"]) for e in events if e["event"] == "return"]
    native_returns = [e["return"] for e in run_native(tinyk_native, CALLS) if "return" in e]
    assert returns == [("net_rx", 0, native_returns[0]), ("net_rx", 1, native_returns[0]),
                       ("sched_tick", 0, native_returns[1]), ("sched_tick", 1, native_returns[1]),
                       ("net_rx", 1, native_returns[0])]


def test_a_string_argument_reaches_the_kernel_and_its_probe(tinyk):
    r = sdtgen("qemu", tinyk, "--json", "--enable", "tk:net:rx:packet", "--run", "net_classify",
               "--arg", "str:a \"quoted\" name", "--", *OPENSBI)
    assert r.returncode == 0, r.stderr
    events = [json.loads(line) for line in r.stdout.splitlines()]
    assert [e["args"] for e in events if e["event"] == "fire"] == [[-1, 'a "quoted" name']]


def test_a_fault_in_a_call_comes_back_through_the_runtimes_setjmp_and_the_next_call_runs(tinyk, tinyk_native):
    """tinyk guards calls with sdt_setjmp (integer registers only): a call that reads past RAM ends in a fault
    event naming the address, and the kernel, back where the guard started, runs the next call to the native
    run's value."""
    assert " T sdt_setjmp\n" in run(["nm", str(tinyk)]).stdout
    r = sdtgen("qemu", tinyk, "--json", "--run", "net_classify", "--arg", "0x90000000", "--run", "net_rx", "--arg",
               "4", "--", *OPENSBI)
    events = [e for e in map(json.loads, r.stdout.splitlines()) if e["event"] != "console"]
    (fault,) = [e for e in events if e["event"] == "fault"]
    assert fault["symbol"] == "net_classify" and "address 0x90000000" in fault["fault"], fault
    native = [e["return"] for e in run_native(tinyk_native, [Call("net_rx", (4,))]) if "return" in e]
    assert [(e["symbol"], e["value"]) for e in events if e["event"] == "return"] == [("net_rx", native[0])]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclasses.dataclass(frozen=True)
class Running:
    """A kernel QEMU runs on its own: its UART (``--serial``'s argument) and QEMU's monitor, TCP servers both."""

    serial: str
    monitor: int  # the port


@contextlib.contextmanager
def listening(image):
    """``image`` booted by QEMU on its own (two CPUs), its UART a TCP server: a kernel that is already running."""
    a = arches.by_name("riscv64")
    port, monitor = free_port(), free_port()
    qemu = subprocess.Popen([need_tool(a.qemu.binary, a.qemu.package), "-machine", "virt", "-smp", "2", "-m", "128M",
                             *OPENSBI, "-nodefaults", "-display", "none",
                             "-monitor", f"tcp:127.0.0.1:{monitor},server=on,wait=off",
                             "-serial", f"tcp:127.0.0.1:{port},server=on,wait=off", "-kernel", str(image)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(0.5)
    try:
        yield Running(f"tcp:127.0.0.1:{port}", monitor)
    finally:
        qemu.kill()
        qemu.wait()


@pytest.fixture
def running_tinyk(tinyk):
    """tinyk booted by QEMU on its own, its UART a TCP server: a kernel that is already running."""
    with listening(tinyk) as running:
        yield running


def monitor(port: int, command: str) -> str:
    """What QEMU's monitor answers ``command``."""
    seen = b""
    with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
        s.sendall(command.encode() + b"\n")
        while seen.count(b"(qemu) ") < 2:  # its banner's prompt, then the one after the answer
            chunk = s.recv(65536)
            assert chunk, f"QEMU's monitor closed after {seen!r}"
            seen += chunk
    return seen.decode(errors="replace")


def symbols(image) -> dict[str, tuple[int, int]]:
    """nm's address and size of each sized symbol of ``image``."""
    out = run([cross_tool("riscv64", "nm"), "-S", str(image)]).stdout
    return {f[3]: (int(f[0], 16), int(f[1], 16)) for f in map(str.split, out.splitlines()) if len(f) == 4}


def control_core_cpu(running: Running, image) -> int:
    """The CPU tinyk's control core runs on, as QEMU sees it: the vCPU whose pc is in tinyk_main (the control core's
    UART loop, nm gives its bounds), numbered as the kernel numbers it, by the entry of its percpu array that the
    vCPU's tp points at (nm gives the array, the two vCPUs' tps an entry's size). Asked until one vCPU is in the loop
    (the other waits for jobs in tinyk_secondary; either may be in a trap when asked)."""
    syms = symbols(image)
    (main, size), (percpu, _) = syms["tinyk_main"], syms["percpu"]
    for _ in range(50):
        shown = monitor(running.monitor, "info registers -a")
        pcs = [int(v, 16) for v in re.findall(r"\n pc +([0-9a-f]+)", shown)]
        tps = [int(v, 16) for v in re.findall(r"x4/tp +([0-9a-f]+)", shown)]
        assert len(pcs) == len(tps) == 2 and tps[0] != tps[1], shown
        looping = [tp for pc, tp in zip(pcs, tps, strict=True) if main <= pc < main + size]
        if len(looping) == 1:
            return (looping[0] - percpu) // abs(tps[0] - tps[1])
        time.sleep(0.1)
    raise AssertionError(f"no vCPU of QEMU's was in tinyk_main's loop: {shown}")


def test_sdtgen_attach_arms_runs_and_traces_a_running_kernel_and_disarms_when_it_leaves(running_tinyk, tinyk,
                                                                                      tinyk_native, tmp_path):
    trace = tmp_path / "trace"
    r = sdtgen("attach", "--serial", running_tinyk.serial, tinyk, "--json", "--arm", "branch", "--enable", "tk:sched::",
               *run_args(CALLS[1:], cpu=0), "--trace", trace)
    assert r.returncode == 0, r.stderr
    events = [json.loads(line) for line in r.stdout.splitlines()]
    want = expected(tinyk_native, CALLS[1:])
    assert fired(events, 0) == want and not fired(events, 1)
    shown = [line for line in run([need_tool("babeltrace2", "babeltrace2"), str(trace)]).stdout.splitlines()
             if " sdt:task: " not in line]  # the thread each packet's events ran in (tinyk's task hook)
    assert [re.search(r" (tk:\S+): \{ cpu_id = 0,", line)[1] for line in shown] == [p for p, _ in want]
    again = sdtgen("attach", "--serial", running_tinyk.serial, tinyk, "--json", *run_args(CALLS, cpu=1))
    assert again.returncode == 0, again.stderr
    assert not [line for line in again.stdout.splitlines() if '"fire"' in line]  # the first session disarmed


def typed(serial: str, text: bytes, until: bytes | None = None) -> bytes:
    """``text`` typed on tinyk's console (its one UART, QEMU's TCP server) as a user at a terminal types: what
    the kernel printed, until ``until`` appears (or nothing is waited for)."""
    host, port = serial.removeprefix("tcp:").rsplit(":", 1)
    seen = b""
    with socket.create_connection((host, int(port)), timeout=20) as s:
        s.sendall(text)
        while until is not None and until not in seen:
            chunk = s.recv(4096)
            assert chunk, f"the console closed after {seen!r}"
            seen += chunk
    time.sleep(0.2)  # QEMU takes the next connection once it saw this one close
    return seen


def test_a_shell_on_the_same_uart_keeps_its_half_typed_line_while_attach_drives_the_kernel(running_tinyk, tinyk,
                                                                                           tinyk_native):
    """tinyk's console is its shell's and its control core's (sdt_control_claims): a line half typed at the
    shell stays half typed while `sdtgen attach` arms, runs and traces, none of attach's lines reaches the
    shell, and the shell finishes the line it had."""
    assert b"before\r\n" in typed(running_tinyk.serial, b"echo before\n", until=b"before\r\n")
    typed(running_tinyk.serial, b"echo mid")
    r = sdtgen("attach", "--serial", running_tinyk.serial, tinyk, "--json", "--enable", "tk:net::",
               *run_args(CALLS[:1], cpu=0))
    assert r.returncode == 0, r.stderr
    events = [json.loads(line) for line in r.stdout.splitlines()]
    assert fired(events, 0) == expected(tinyk_native, CALLS[:1])
    assert not [e for e in events if e["event"] == "console"]  # the shell heard none of attach's lines
    shown = typed(running_tinyk.serial, b"dle\n", until=b"\r\n")
    assert shown == b"middle\r\n"


SAMPLES = 300  # tinyk's clock samples at 1 kHz: more than two 4 KiB packets of CPU 1's ring, the last one open


def samples_attached(serial: str, image, *extra) -> tuple[subprocess.CompletedProcess, list[dict], list[int]]:
    """`sdtgen attach` arming tinyk's clock probe, and a call on CPU 0 that waits while CPU 1's timer interrupt takes
    SAMPLES samples, one a tick, each firing tk:clock:tick:sample with its number: every event is recorded on CPU 1,
    where the host runs nothing. The session, its JSON events, and the sample numbers that arrived, in order."""
    r = sdtgen("attach", "--serial", serial, image, "--json", "--enable", "tk:clock::", "--run", "sample", "--arg",
               SAMPLES, "--cpu", "0", *extra)
    events = [json.loads(line) for line in r.stdout.splitlines()]
    return r, events, [args[0] for probe, args in fired(events, 1) if probe == "tk:clock:tick:sample"]


def samples_taken(serial: str) -> dict[int, int]:
    """The kernel's own count, asked at its shell once attach has left: the samples each CPU's clock took."""
    host, port = serial.removeprefix("tcp:").rsplit(":", 1)
    seen = b""
    with socket.create_connection((host, int(port)), timeout=20) as s:
        s.sendall(b"samples\n")
        while not re.search(rb"samples 1 \d+\r\n", seen):
            chunk = s.recv(4096)
            assert chunk, f"the console closed after {seen!r}"
            seen += chunk
    time.sleep(0.2)  # QEMU takes the next connection once it saw this one close
    return {int(m[1]): int(m[2]) for m in re.finditer(rb"samples (\d+) (\d+)\r\n", seen)}


def test_attach_reads_every_event_a_kernel_recorded_on_its_own_cpu_before_it_leaves(running_tinyk, tinyk, tmp_path):
    """tinyk's timer interrupt on CPU 1 records SAMPLES events while the host's only call waits on CPU 0: when
    attach leaves, every one has arrived, in order, once each (CPU 1's open packet flushed there), `lost` is a
    truthful 0, and the kernel's own count at its shell and babeltrace2's reading of the trace agree."""
    trace = tmp_path / "trace"
    r, events, got = samples_attached(running_tinyk.serial, tinyk, "--trace", trace)
    assert r.returncode == 0 and not r.stderr, r.stderr
    control = control_core_cpu(running_tinyk, tinyk)  # QEMU's word, not the session's
    assert control == 0, f"the control core runs on CPU {control}, whose clock samples: no job flushed its packet"
    assert samples_taken(running_tinyk.serial) == {0: 0, 1: SAMPLES}  # the kernel's count, not the session's
    assert [e["value"] for e in events if e["event"] == "return"] == [SAMPLES]
    assert got == list(range(SAMPLES)), f"{len(got)} of {SAMPLES} samples arrived"
    assert not fired(events, 0) and not [e for e in events if e["event"] == "warning"]
    [stats] = [e for e in events if e["event"] == "stats"]
    assert stats["lost"] == 0 and stats["hits"] == {"tk:clock:tick:sample": SAMPLES}
    shown = [line for line in run([need_tool("babeltrace2", "babeltrace2"), str(trace)]).stdout.splitlines()
             if " sdt:task: " not in line]
    assert [int(re.search(r"cpu_id = 1, .*arg0 = (\d+)", line)[1]) for line in shown] == list(range(SAMPLES))
    # tinyk's task hook: a sample is taken in the clock's interrupt, which is no task's
    assert all(re.search(r"unreadable = 0, tid = 0 \}", line) for line in shown)


def test_attach_i_shows_what_a_kernel_records_on_its_own_and_leaves_nothing_recorded_for_the_next_session(
        running_tinyk, tinyk):
    """tinyk's clock samples on CPU 1 with no call of the host's running: `attach -i` shows its events while the console
    waits for its user, and when the user leaves, it disarms before its last flush and drain. Every sample recorded
    while armed arrives, numbered from 0 with no gap, and the next session, which arms nothing, finds none left in
    the ring (one recorded after the last drain would be read there, as its own); the kernel's count is the last
    word."""
    a = subprocess.Popen([SDTGEN, "attach", "--serial", running_tinyk.serial, str(tinyk), "-i", "--json", "--enable",
                          "tk:clock::", "--run", "sample_start", "--cpu", "0"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = []
    stuck = threading.Timer(30, a.kill)  # a console that shows nothing while it waits would wait for ever
    stuck.start()
    for line in a.stdout:  # half of CPU 1's ring fills and is sent while the console waits: shown as it arrives
        first.append(json.loads(line))
        if first[-1]["event"] == "fire":
            break
    stuck.cancel()
    assert first and first[-1]["event"] == "fire", "nothing the kernel recorded was shown while the console waited"
    a.stdin.close()  # the user leaves
    out, err = a.stdout.read(), a.stderr.read()  # the lines already read ahead stay in a.stdout's buffer
    assert a.wait(timeout=60) == 0, err
    events = first + [json.loads(line) for line in out.splitlines()]
    got = [args[0] for probe, args in fired(events, 1) if probe == "tk:clock:tick:sample"]
    assert got == list(range(len(got))) and got, f"{len(got)} samples arrived, not each of 0 to {max(got, default=0)}"
    control = control_core_cpu(running_tinyk, tinyk)  # QEMU's word, not the session's
    assert control == 0, f"the control core runs on CPU {control}, whose clock samples: no job flushed its packet"
    r = sdtgen("attach", "--serial", running_tinyk.serial, tinyk, "--json", "--run", "sample_stop", "--cpu", "0")
    assert r.returncode == 0, r.stderr
    after = [json.loads(line) for line in r.stdout.splitlines()]
    left = fired(after, 1)
    assert not left, f"{len(left)} samples of the first session were left in the ring, read by the next"
    [taken] = [e["value"] for e in after if e["event"] == "return"]
    assert taken > len(got)  # the kernel's count: the clock went on, disarmed, once the first session left
    assert not [e for e in events if e["event"] == "warning"], err  # no CPU's packet was left open
    assert [e["lost"] for e in events if e["event"] == "stats"] == [0]


@pytest.fixture(scope="module")
def tinyk_unflushable(tmp_path_factory):
    """tinyk built with a copy of the runtime whose `flush` job closes no packet on the last CPU, CPU 1 (as when the
    kernel's start op cannot run a job there, or the job comes inside a recorder). tinyk's control core runs on CPU 0
    whichever hart OpenSBI's lottery let in (the boot hart is CPU 0), so `flush` reaches CPU 1 through the start op.
    The copy only, in this test's own directory."""
    need_tool(*CROSS["riscv64"])
    out = tmp_path_factory.mktemp("tinyk-unflushable")
    runtime = out / "runtime"
    shutil.copytree(run([SDTGEN, "runtime-dir"]).stdout.strip(), runtime)
    control = runtime / "sdt_control.c"
    text = control.read_text()
    job = ("\tstruct cpu *c = (struct cpu *)arg;\n\n\tif (scope)\n\t\tsdt_session_flush(scope);\n\telse\n"
           "\t\tsdt_flush();\n\tsdt_store_release(&c->done, 1);\n}")
    assert text.count(job) == 1, "sdt_control.c's flush job changed: update this test's copy"
    not_on_cpu_1 = job.replace("\telse\n\t\tsdt_flush();", "\telse if (c != cpu_at(ops.ncpus - 1))\n\t\tsdt_flush();")
    control.write_text(text.replace(job, not_on_cpu_1))
    run(["make", "-C", str(ROOT / "examples" / "tinyk"), f"O={out}", f"SDTGEN={SDTGEN}", f"SDT_RUNTIME_DIR={runtime}"])
    return out / "tinyk.elf"


def test_a_cpu_whose_open_packet_flush_cannot_close_is_said_with_the_events_the_kernel_recorded_there(
        tinyk_unflushable):
    """The same session against a kernel whose flush cannot close CPU 1's packet: the samples in its open packet do
    not arrive (the first test would fail here), and attach says so, with exactly the count the kernel's own says is
    missing: what arrived and what is said missing are every sample the kernel took, once each."""
    with listening(tinyk_unflushable) as running:
        r, events, got = samples_attached(running.serial, tinyk_unflushable)
        taken = samples_taken(running.serial)
    assert r.returncode == 0, r.stderr
    assert taken == {0: 0, 1: SAMPLES} and 0 < len(got) < SAMPLES  # the open packet's samples are missing
    assert got == list(range(len(got)))  # what arrived is every closed packet's, in order
    [said] = [e["text"] for e in events if e["event"] == "warning"]
    assert said == (f"CPU 1's open packet could not be closed (the kernel runs no call on that CPU, or it was "
                    f"recording): the {SAMPLES - len(got)} events in it are not read"), said


def test_the_hello_counts_every_site_the_table_holds_as_patched(tinyk):
    """The hello's PATCHED is the sites sdt_init verified: every entry of tinyk's set_sdt_sites_set, as readelf
    sizes the section (none refused or folded in tinyk), and the session's first line says it."""
    sizes = [ln.split() for ln in run(["readelf", "-SW", str(tinyk)]).stdout.splitlines() if "set_sdt_sites_set" in ln]
    entries = int(sizes[0][sizes[0].index("set_sdt_sites_set") + 4], 16) // SITE.size(64)
    r = sdtgen("qemu", tinyk, "--run", "net_rx", "--arg", "1", "--", "-bios", "default")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == f"patched {entries} sites (0 refused)" and entries > 1


def tinyk_torture(tinyk, arm: str, toggles: int = 200, timeout: int = 120) -> tuple[int, dict]:
    """`sdtgen torture` on tinyk; ``timeout`` long enough that a host loaded many jobs deep still makes every toggle."""
    r = sdtgen("torture", tinyk, "--target", "qemu", "--cpus", "1", "--run", "sched_tick", "--arg", "9",
               "--toggles", str(toggles), "--arm", arm, "--json", "--timeout", str(timeout), "--qemu-arg=-bios",
               "--qemu-arg=default")
    return r.returncode, json.loads(r.stdout)


def test_sdtgen_torture_drives_the_kernels_own_control_core_on_qemu(tinyk):
    code, summary = tinyk_torture(tinyk, "trap")
    assert code == 0 and summary["passed"], summary
    assert (summary["torn"], summary["faults"], summary["wrong"]) == (0, 0, 0) and summary["toggles"] == 200
    assert summary["calls"] > 200 and summary["firings"] > 0
    assert summary["leaked"] == 0 and summary["windows"] > 50  # every disarmed window checked: nothing fired


def test_no_firing_in_a_disarmed_window_of_a_branch_armed_torture_on_tinyk(tinyk):
    """A vCPU that was translating the site's block when the disarm stored its nop keeps running the branch to the
    recorder (QEMU drops a block only on a store to its bytes): without the patch protocol's second store of the same
    bytes (docs/runtime.md), 1 to 11 % of the windows after a disarm recorded, on 10 runs of 12 at 200 toggles
    (at 1,000 toggles, on a host running 14 jobs on its 2 cores: 3 runs of 4)."""
    code, summary = tinyk_torture(tinyk, "branch", toggles=1000)
    assert (summary["torn"], summary["faults"], summary["wrong"]) == (0, 0, 0)
    assert summary["windows"] > 250 and summary["firings"] > 0, summary  # most disarms checked, while it fired armed
    assert summary["leaked"] == 0 and code == 0, f"{summary['leaked']} of {summary['windows']} windows recorded"


def test_the_emulated_boot_runs_the_same_kernel_with_the_same_output(tinyk, tinyk_native):
    r = sdtgen("boot", tinyk, "--json", "--enable", "tk:::", *run_args(CALLS))
    assert r.returncode == 0, r.stderr
    events = [json.loads(line) for line in r.stdout.splitlines()]
    assert fired(events, 0) == expected(tinyk_native, CALLS)


def test_qemu_arguments_that_take_the_serial_ports_are_refused_before_qemu_starts(tinyk):
    r = sdtgen("qemu", tinyk, "--run", "net_rx", "--arg", "1", "--", "-serial", "stdio")
    assert r.returncode == 2
    assert r.stderr.splitlines() == ["sdtgen: error: --qemu-arg -serial: sdtgen wires QEMU's serial ports, console "
                                     "and kernel itself; leave it out (the image names its control port with "
                                     "SDT_CONTROL_SERIAL)"]


def test_a_kernel_that_gives_no_aggregation_memory_is_told_which_member_to_give(tinyk):
    """tinyk's control core has no agg_memory: `tables` is refused, and the session says what to give, one line, having
    armed nothing."""
    r = sdtgen("qemu", tinyk, "--aggregate", "tk:sched:tick:run @ = count()", "--run", "sched_tick", "--arg", "3",
               "--", *OPENSBI)
    assert r.returncode == 2
    [line] = r.stderr.splitlines()
    assert "the kernel cannot attach aggregation tables" in line and "sdt_control_ops.agg_memory" in line, line
    assert "sched_tick" not in r.stdout, "the session ended before the run"


def test_the_firmwares_banner_before_the_hello_is_not_shown_but_json_has_it(tinyk):
    """OpenSBI prints its banner on the UART before tinyk's control core says hello: `sdtgen qemu` shows what
    the session did from the hello on (the banner is in --json's console events, and shown if the kernel never
    says hello)."""
    argv = ["qemu", tinyk, "--enable", "tk:net::", "--run", "net_rx", "--arg", "4", "--qemu-arg=-bios",
            "--qemu-arg=default"]
    events = [json.loads(line) for line in sdtgen(*argv, "--json", check=True).stdout.splitlines()]
    first = next(i for i, e in enumerate(events) if e["event"] == "patched")
    banner = [e["text"] for e in events[:first] if e["event"] == "console"]
    assert any("OpenSBI" in line for line in banner) and len(banner) > 10  # QEMU's firmware did print it
    lines = sdtgen(*argv, check=True).stdout.splitlines()
    assert lines[0].startswith("patched ") and not any(text in lines for text in banner)
    assert any(line.startswith("tk:net:") for line in lines) and lines[-1].startswith("net_rx(4) = ")


def test_its_task_hook_puts_each_cpus_thread_on_a_track_of_its_own_and_its_interrupts_on_none(tinyk, tinyk_native,
                                                                                               tmp_path):
    """tinyk's tasks (its kernel.c's task()): CPU N's kernel thread is task N + 1 named cpuN; the clock's samples are
    taken in an interrupt, no task's, while CPU 1's thread runs the calls: the two interleave in CPU 1's packets,
    and tinyk says each interrupt's entry and exit (sdt_task_switch). Perfetto's protos show each CPU's firings of
    the native run on its thread's track, and the samples on CPU 1's own track, as no task's."""
    need_module("perfetto.protos.perfetto.trace.perfetto_trace_pb2", "pip install 'sdtgen[perfetto]'")
    r = sdtgen("qemu", tinyk, "--cpus", "2", "--json", "-q", "--trace", tmp_path / "t.pftrace", "--enable", "tk:::",
               "--run", "sample_start", "--cpu", "0", *run_args(CALLS * 20), "--run", "sample_stop", "--cpu", "0",
               "--", *OPENSBI)
    assert r.returncode == 0, r.stderr
    samples = [e["value"] for e in map(json.loads, r.stdout.splitlines()) if e["event"] == "return"][-1]
    import sys

    sys.path.insert(0, str(ROOT / "tests" / "trace"))
    from test_perfetto import parse

    packets = parse(tmp_path / "t.pftrace")
    tracks = {p.track_descriptor.uuid: p.track_descriptor for p in packets if p.HasField("track_descriptor")}
    on: dict[str, list] = {}
    for p in packets:
        if p.HasField("track_event") and p.track_event.name:
            d = tracks[p.track_event.track_uuid]
            where = f"{d.thread.thread_name}/{d.thread.tid}" if d.HasField("thread") else d.name
            args = [getattr(a, a.WhichOneof("value")) for a in p.track_event.debug_annotations if a.name != "cpu"]
            on.setdefault(where, []).append((p.track_event.name, args))
    want = expected(tinyk_native, CALLS) * 20
    assert samples > 0 and on == {"cpu0/1": want, "cpu1/2": want,  # an interrupt's events stay on their CPU's track
                  "CPU 1": [("tk:clock:tick:sample", [k, 1]) for k in range(samples)]}
