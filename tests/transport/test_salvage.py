"""The post-mortem read of the rings (sdtgen/transport/salvage.py) in the emulator: a call that faults after its
probes fired leaves every CPU's events, up to the fault, in a trace babeltrace2 and Perfetto open, equal to the
native run of the same C; a packet whose bytes were damaged in memory is counted and left out, never trusted.

(QEMU, a kernel that panics or hangs: tests/qemu/test_qemu_post_mortem.py.)"""

from __future__ import annotations

import io
import json

import pytest
from helpers import need_module, sdtgen
from post_mortem_read import bt2_rows, events_by_cpu, native_firings

from sdtgen.errors import SdtError
from sdtgen.layout import EVENT, PACKET, VALUES
from sdtgen.session.reporter import Reporter
from sdtgen.session.starts import Tracing, open_session, trace_session

BAD = 0x10  # vfs_lookup's path: its entry probe fires, then the loop reads the string and faults
ENTRY = ("hk:vfs:lookup:entry", ["<unreadable>"])


def test_a_call_that_faults_leaves_each_cpus_events_up_to_it(kernel, native_exe, tmp_path):
    ticks = 50
    pm = tmp_path / "pm"
    proc = sdtgen("boot", kernel.image, "--cpus", "2", "--enable", "hk:sched::", "--enable", "hk:vfs:lookup:entry",
                  "--run", "sched_run", "--arg", str(ticks), "--run", "vfs_lookup", "--arg", str(BAD),
                  "--post-mortem", str(pm), "--json")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    events = [json.loads(x) for x in proc.stdout.splitlines()]
    (said,) = [e for e in events if e["event"] == "post-mortem"]
    assert said["why"].startswith("vfs_lookup: ") and "0x10" in said["why"] and said["distrusted"] == 0
    # Said before the kernel's own sdt_flush ran again: before the faults the run's end reports.
    assert events.index(said) < min(k for k, e in enumerate(events) if e["event"] == "fault")
    native = native_firings(native_exe, ticks)
    assert events_by_cpu(bt2_rows(pm)) == {0: [*native, ENTRY], 1: [*native, ENTRY]}


def test_perfetto_opens_the_post_mortem(kernel, native_exe, tmp_path):
    pb = need_module("perfetto.protos.perfetto.trace.perfetto_trace_pb2", "pip install 'sdtgen[perfetto]'")
    pm = tmp_path / "pm.pftrace"
    proc = sdtgen("boot", kernel.image, "--enable", "hk:sched::", "--run", "sched_run", "--arg", "30",
                  "--run", "vfs_lookup", "--arg", str(BAD), "--post-mortem", str(pm), "-q")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    t = pb.Trace()
    t.ParseFromString(pm.read_bytes())
    ticks = [p.track_event for p in t.packet if p.HasField("track_event") and p.track_event.type ==
             pb.TrackEvent.TYPE_INSTANT]
    assert [e.debug_annotations[0].int_value for e in ticks] == [args[0] for _, args in
                                                                 native_firings(native_exe, 30)]


def test_a_damaged_packet_is_counted_and_said_never_trusted(kernel, native_exe, tmp_path):
    """An event id of the second packet overwritten in memory: that packet is left out (its events only), the count
    and the reason said in one warning line, the rest of the ring read."""
    ticks = 100  # packets of 1 KiB: some 30 events each
    out, err = io.StringIO(), io.StringIO()
    session = open_session("emulator", str(kernel.image), Reporter(out=out, err=err), buffer_size=8192,
                           post_mortem=(str(tmp_path / "pm"), "ctf"))
    try:
        session.enable("hk:sched::")
        session.enable("hk:vfs:lookup:entry")
        session.run("sched_run", [ticks])
        target, bits = session.target, session.image.arch.bits
        ring, size = target.platform.ring(0), target.platform.packet_size
        head = PACKET.size(bits)
        per_packet = (size - head) // ((EVENT.size(bits) + 16 + 7) & ~7)
        target.machine.write(ring + size + head + EVENT.offset("id", bits), b"\xff\xff\xff\xff")
        session.run("vfs_lookup", [BAD])
        got = session.salvaged[0]
    finally:
        session.close()
    native = native_firings(native_exe, ticks)
    assert got.distrusted == 1 and "which is no probe's of the image" in got.why[0], got.why
    assert [(e.probe, list(e.args)) for e in got.cpus[0].events] == \
        [*native[:per_packet], *native[2 * per_packet:], ("hk:vfs:lookup:entry", [None])]  # None: unreadable
    warnings = [line for line in err.getvalue().splitlines() if "post-mortem" in line]
    assert len(warnings) == 1 and "1 packet not trusted, left out: " in warnings[0], err.getvalue()
    assert "which is no probe's of the image" in warnings[0]
    (line,) = [x for x in out.getvalue().splitlines() if x.startswith("post-mortem")]
    assert f"CPU 0 {ticks - per_packet + 1} events" in line and "1 packet not trusted" in line, line


def test_the_post_mortem_path_is_checked_before_the_kernel_starts(kernel, tmp_path):
    with pytest.raises(SdtError, match="the post-mortem trace and the image are the same file"):
        trace_session("emulator", Tracing(str(kernel.image), [], post_mortem=str(kernel.image)))
    with pytest.raises(SdtError, match="--post-mortem reads the machine's memory"):
        trace_session("attach", Tracing(str(kernel.image), [], post_mortem=str(tmp_path / "pm")), "/dev/null")


@pytest.mark.parametrize("field, value, said", [
    ("self", 0x1234, "its self field says 0x1234"),
    ("write_seq", 1 << 40, "1099511627776 packets opened"),
    ("packets", 3, "it says 3 packets of"),
])
def test_an_area_that_does_not_check_is_not_read_and_said(kernel, native_exe, tmp_path, field, value, said):
    """CPU 0's struct sdt_cpu damaged in memory: none of its ring is read, the damage counted and said; CPU 1's read."""
    from sdtgen.layout import CPU

    ticks = 20
    session = open_session("emulator", str(kernel.image), Reporter(out=io.StringIO(), err=io.StringIO()), cpus=2,
                           post_mortem=(str(tmp_path / "pm"), "ctf"))
    try:
        session.enable("hk:sched::")
        session.run("sched_run", [ticks])
        target, bits = session.target, session.image.arch.bits
        target.machine.write(target.platform.area(0) + CPU.offset(field, bits), value.to_bytes(8, "little"))
        session.run("vfs_lookup", [BAD])
        got = session.salvaged[0]
    finally:
        session.close()
    assert got.distrusted == 1 and said in got.why[0] and "CPU 0's struct sdt_cpu" in got.why[0], got.why
    assert 0 not in got.cpus and [(e.probe, list(e.args)) for e in got.cpus[1].events] == \
        native_firings(native_exe, ticks)


SESSIONS = r"""
#include <sdt.h>
#include <sdt_runtime.h>
SDT_PROBE_DEFINE1(pm, , , tick, "long");
SDT_PROBE_DEFINE1(pm, , , other, "long");
static struct sdt_session flight;
static char memory[32768] __attribute__((aligned(64)));
long flight_open(long cpus)	/* the kernel's own flight recorder of pm:::tick, overwriting */
{
	struct sdt_session_config cfg = {.ncpus = (sdt_u32)cpus, .policy = SDT_OVERWRITE};
	cfg.ring_bytes = 4096;
	cfg.packet_size = 1024;
	int id = sdt_session_open(&flight, "flight", &cfg, memory, sizeof(memory)), n;
	if (id < 0)
		return id;
	n = sdt_session_enable(&flight, "pm:::tick", SDT_TRAP);
	return n < 0 ? n : id;
}
long crash(long n)	/* both probes n times, then a read of no memory */
{
	for (long i = 0; i < n; i++) {
		SDT_PROBE1(pm, , , tick, i);
		SDT_PROBE1(pm, , , other, i);
	}
	return *(volatile long *)0x10;
}
"""


def test_each_session_of_the_emulated_kernel_is_read_into_its_own_trace(tmp_path):
    """A kernel that opens its own flight recorder (pm:::tick) beside the host's default session (pm:::other): the
    registry, sdt_session_table, found by the image's symbols, gives the flight recorder's areas; each trace holds
    its own session's events up to the fault."""
    from helpers import build_c_kernel

    image = build_c_kernel(tmp_path, "x86_64", SESSIONS)
    n = 40
    proc = sdtgen("boot", image, "--run", "flight_open", "--arg", "1", "--enable", "pm:::other", "--run", "crash",
                  "--arg", str(n), "--post-mortem", str(tmp_path / "pm"), "--json")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    said = {e["session"]: e for e in map(json.loads, proc.stdout.splitlines()) if e["event"] == "post-mortem"}
    assert sorted(said) == ["default", "flight"] and not any(e["distrusted"] for e in said.values()), said
    assert events_by_cpu(bt2_rows(tmp_path / "pm")) == {0: [("pm:::other", [i]) for i in range(n)]}
    assert events_by_cpu(bt2_rows(tmp_path / "pm-flight")) == {0: [("pm:::tick", [i]) for i in range(n)]}


def test_a_registry_that_points_outside_the_machines_memory_is_said_not_a_traceback():
    """A damaged sdt_session_table whose session address the host cannot map: one problem said, that session not
    read, no exception (the host's address map raises ValueError for memory the machine does not have)."""
    from sdtgen.layout import REGISTRY
    from sdtgen.transport.registry import find_sessions

    fields = dict.fromkeys(REGISTRY.names(), 0)
    fields.update({"magic": VALUES["SDT_REGISTRY_MAGIC"], "version": VALUES["SDT_REGISTRY_VERSION"],
                   "max": VALUES["SDT_MAX_SESSIONS"], "sessions[1]": 0xDEAD0000})
    memory = REGISTRY.struct(64, True).pack(*fields.values())

    def read(at: int, size: int) -> bytes:
        if at + size > len(memory):
            raise ValueError(f"{at:#x} is past the machine's memory")
        return memory[at:at + size]

    def host(at: int) -> int:
        if at >= len(memory):
            raise ValueError(f"{at:#x} is not the machine's")
        return at

    found = find_sessions(read, 0, host, 64, True)
    assert found.sessions == [] and len(found.problems) == 1
    assert "0xdead0000" in found.problems[0] and "not in the machine's memory" in found.problems[0]


SNAPSHOT = r"""
#include <sdt.h>
#include <sdt_runtime.h>
SDT_PROBE_DEFINE1(pm, , , tick, "long");
static struct sdt_session flight;
static char memory[32768] __attribute__((aligned(64)));
long flight_open(long cpus)	/* the kernel's own flight recorder of pm:::tick, overwriting, 2 packets kept */
{
	struct sdt_session_config cfg = {.ncpus = (sdt_u32)cpus, .policy = SDT_OVERWRITE};
	cfg.ring_bytes = 4096;
	cfg.packet_size = 1024;
	cfg.snapshot_packets = 2;
	int id = sdt_session_open(&flight, "flight", &cfg, memory, sizeof(memory)), n;
	if (id < 0)
		return id;
	n = sdt_session_enable(&flight, "pm:::tick", SDT_TRAP);
	return n < 0 ? n : id;
}
long assert_after(long n)	/* the probe n times, then an assert path's snapshot, then n more */
{
	long kept;
	for (long i = 0; i < n; i++)
		SDT_PROBE1(pm, , , tick, i);
	kept = sdt_snapshot(&flight);
	for (long i = n; i < 2 * n; i++)
		SDT_PROBE1(pm, , , tick, i);
	return kept;
}
long stuck_snapshot(void)	/* as if a CPU had stopped inside a snapshot (a panic there): the next is refused */
{
	flight.snapshot_lock = 1;
	return sdt_snapshot(&flight);
}
long tick_range(long from, long to)	/* the probe from ``from`` to ``to`` - 1 */
{
	for (long i = from; i < to; i++)
		SDT_PROBE1(pm, , , tick, i);
	return to - from;
}
"""


def test_boot_reads_the_snapshot_an_emulated_kernel_took(tmp_path):
    """`sdtgen boot --snapshot`: the kernel's assert path snapshots its flight recorder and records on; the host reads
    the snapshot in the emulator's memory through the registry: the firings before the call's snapshot, the last
    ones, in a trace babeltrace2 opens."""
    from helpers import build_c_kernel

    image = build_c_kernel(tmp_path, "x86_64", SNAPSHOT)
    n = 200
    proc = sdtgen("boot", image, "--run", "flight_open", "--arg", "1", "--run", "assert_after", "--arg", str(n),
                  "--snapshot", "flight", str(tmp_path / "snap"), "--json")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [e["value"] for e in events if e["event"] == "return"] == [1, 3]  # two closed packets and the open one
    got = events_by_cpu(bt2_rows(tmp_path / "snap"))[0]
    assert 2 * 40 < len(got) < n and got == [("pm:::tick", [i]) for i in range(n - len(got), n)]


def test_boot_takes_a_snapshot_of_the_kernels_session_by_name_while_recording_goes_on(tmp_path):
    """`sdtgen boot --take-snapshot NAME`: the host's trigger, sdt_snapshot of the kernel's own flight recorder between
    two runs; `--snapshot` after the second reads what it kept: the first run's last firings, not the second's."""
    from helpers import build_c_kernel

    image = build_c_kernel(tmp_path, "x86_64", SNAPSHOT)
    n = 200
    proc = sdtgen("boot", image, "--run", "flight_open", "--arg", "1", "--run", "tick_range", "--arg", "0", "--arg",
                  str(n), "--take-snapshot", "flight", "--run", "tick_range", "--arg", str(n), "--arg", str(2 * n),
                  "--snapshot", "flight", str(tmp_path / "snap"), "--json")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    [taken] = [e for e in events if e["event"] == "snapshot-taken"]
    assert (taken["session"], taken["kept"], taken["packets"], taken["taken"]) == ("flight", 3, 2, 1)
    got = events_by_cpu(bt2_rows(tmp_path / "snap"))[0]
    assert 2 * 40 < len(got) < n and got == [("pm:::tick", [i]) for i in range(n - len(got), n)]


def test_a_snapshot_refused_as_busy_is_said_when_the_older_one_is_read(tmp_path):
    """A CPU stopped inside a snapshot makes the next sdt_snapshot busy (refused, counted): `--snapshot` reads the one
    the session holds and says that a later one was refused, so the trace is not taken for the moment asked for."""
    from helpers import build_c_kernel

    image = build_c_kernel(tmp_path, "x86_64", SNAPSHOT)
    proc = sdtgen("boot", image, "--run", "flight_open", "--arg", "1", "--run", "assert_after", "--arg", "100",
                  "--run", "stuck_snapshot", "--snapshot", "flight", str(tmp_path / "snap"), "--json")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [e["value"] for e in events if e["event"] == "return"][-1] == VALUES["SDT_ERR_BUSY"]
    said = [e["text"] for e in events if e["event"] == "warning"] + proc.stderr.splitlines()
    assert any("refused 1 snapshot(s) as busy" in w and "last of the 1 taken" in w for w in said), said
