"""A kernel that damages the runtime's state: a wild store over its cpu_area hook makes the flush at the run's end
fault in the guest, and boot says so in one line, exit 1, no traceback; ring counters, a clock and lost counts it
writes over are believed only as far as its ring and the trace readers can hold them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import ROOT, SDTGEN, build_c_kernel, need_module, run, sdtgen, unavailable

SOURCE = r"""
#include <sdt.h>
#include <sdt_runtime.h>
SDT_PROBE_DEFINE1(dm, , , hello, "int");
int kmain(int v) { SDT_PROBE1(dm, , , hello, v); return v + 1; }
static struct sdt_cpu *wild(void) { return (struct sdt_cpu *)0xdead0000; }
__attribute__((noinline)) int scribble(void)
{
	sdt_hooks.cpu_area = wild;	/* where no memory is: every flush from now on faults at once */
	return 0;
}
"""


@pytest.mark.parametrize("extra", [[], ["--json"], ["--trace", "TRACE"]])
def test_a_flush_that_faults_on_the_kernels_damage_is_one_line(tmp_path, extra):
    """Said once: the CPU is neither flushed nor read again, by the stats of --json or by the trace's end."""
    image = build_c_kernel(tmp_path, "x86_64", SOURCE)
    extra = [str(tmp_path / "trace") if a == "TRACE" else a for a in extra]
    proc = sdtgen("boot", image, "--enable", "dm:::", "--no-stream", "--run", "kmain", "--arg", "4",
                  "--run", "scribble:int", *extra)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    if "--json" in extra:
        events = [json.loads(x) for x in proc.stdout.splitlines()]
        (fault,) = [e for e in events if e["event"] == "fault"]
        assert fault["symbol"] == "sdt_flush" and "0xdead" in fault["fault"]
        assert events[-1] == {"event": "stats", "hits": {"dm:::hello": 1}, "lost": 0}  # kmain's, read before
        return
    (line,) = proc.stderr.splitlines()
    assert line.startswith(f"{image}: error: ") and "fault in sdt_flush: " in line and "0xdead" in line, line
    assert proc.stdout.splitlines()[-1] == "scribble() = 0"
    if "--trace" in extra:
        assert (tmp_path / "trace" / "metadata").is_file()  # what was read is traced


# A kernel that writes over its own struct sdt_cpu and clock through the runtime's hooks: what the host reads is
# believed only as far as the ring and the trace readers can hold it.
HOSTILE = r"""
#include <sdt.h>
#include <sdt_runtime.h>
SDT_PROBE_DEFINE1(hg, , , tick, "long");
long kmain(long n) { for (long i = 0; i < n; i++) SDT_PROBE1(hg, , , tick, i); return n; }
long overclaim(long n)	/* n more packets closed than were: a consumer would read the ring's old ones again */
{
	struct sdt_cpu *c = sdt_hooks.cpu_area();
	c->write_seq += n;
	c->commit_seq += n;
	return 0;
}
long overclose(long n)	/* n more packets closed than were ever opened */
{
	sdt_hooks.cpu_area()->commit_seq += n;
	return 0;
}
long readahead(long n)	/* the consumer's own field, past what was closed */
{
	struct sdt_cpu *c = sdt_hooks.cpu_area();
	c->read_seq = c->commit_seq + n;
	return 0;
}
static sdt_u64 now = 1000000000;
static sdt_u64 backwards(void) { return now -= 1000; }
long clock_back(long x) { sdt_hooks.clock = backwards; return x; }
long lost_max(long x)
{
	struct sdt_cpu *c = sdt_hooks.cpu_area();
	c->discarded = c->overwritten = ~0ull;
	return x;
}
"""
RING = ["--buffer-size", "2048", "--enable", "hg:::"]  # two packets of 1 KiB a CPU


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    return build_c_kernel(tmp_path_factory.mktemp("hg"), "x86_64", HOSTILE, "hg")


def boot(image, *argv: str):
    proc = run([SDTGEN, "boot", str(image), *map(str, argv)], check=False, timeout=300)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return proc


def bt2_events(trace) -> list[dict]:
    """What babeltrace2 reads of a CTF trace (Debian's python3-bt2; it exits non-zero on one it refuses)."""
    python, reader = "/usr/bin/python3", ROOT / "tests" / "trace" / "bt2_read.py"
    if not Path(python).exists() or run([python, "-c", "import bt2"], check=False).returncode:
        unavailable("babeltrace2's Python bindings not found: apt-get install python3-bt2")
    proc = run([python, str(reader), str(trace)], check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return [json.loads(x) for x in proc.stdout.splitlines()]


def test_ring_counters_that_claim_more_than_the_ring_holds_are_read_no_further(hostile):
    """A million packets claimed closed in a ring of two: the host reads two, finds them stale, and says so once;
    the counts are the firings the C made, 100 before and 3 after."""
    proc = boot(hostile, *RING, "-q", "--json", "--run", "kmain", "--arg", 100, "--run", "overclaim", "--arg",
                1_000_000, "--run", "kmain", "--arg", 3)
    events = [json.loads(x) for x in proc.stdout.splitlines()]
    (warning,) = [e["text"] for e in events if e["event"] == "warning"]
    assert warning.startswith("the ring of CPU 0 is damaged: 1000000 packets closed and unread, more than its 2")
    assert events[-1]["hits"] == {"hg:::tick": 103} and events[-1]["damaged"] >= 1


@pytest.mark.parametrize(("damage", "said", "hits", "lost"), [
    ("readahead", "1 packets opened, 1 closed, 6 read", 10, 5),  # the runtime's ring looks full to it: 5 lost
    ("overclose", "1 packets opened, 1000001 closed, 1 read", 15, 0),  # its next close puts commit_seq right
])
def test_ring_counters_that_cannot_be_are_read_no_further(hostile, damage, said, hits, lost):
    """read_seq past commit_seq, or commit_seq past write_seq: nothing is read until they agree, said once; what
    fired is what was read before, and after, or what the runtime itself counts lost."""
    proc = boot(hostile, *RING, "-q", "--json", "--run", "kmain", "--arg", 10, "--run", damage, "--arg",
                5 if damage == "readahead" else 1_000_000, "--run", "kmain", "--arg", 5)
    events = [json.loads(x) for x in proc.stdout.splitlines()]
    warnings = [e["text"] for e in events if e["event"] == "warning"]
    assert [w for w in warnings if "damaged" in w] == [f"the ring of CPU 0 is damaged: {said}; nothing more is read "
                                                       "from it until they agree (further damage to CPU 0's packets "
                                                       "is only counted)"]
    assert (events[-1]["hits"], events[-1]["lost"], events[-1]["damaged"]) == ({"hg:::tick": hits}, lost, 1)


@pytest.mark.parametrize("fmt", ["ctf", "perfetto"])
def test_a_clock_that_goes_backwards_leaves_its_packets_out_of_a_trace_that_opens(hostile, tmp_path, fmt):
    trace = tmp_path / ("t" if fmt == "ctf" else "t.pftrace")
    proc = boot(hostile, *RING, "--run", "kmain", "--arg", 20, "--run", "clock_back", "--arg", 0, "--run", "kmain",
                "--arg", 20, "--trace", trace, "--trace-format", fmt)
    (line,) = proc.stderr.splitlines()
    assert ": warning: a damaged packet left out: packet " in line and "before it begins" in line, line
    shown = [x for x in proc.stdout.splitlines() if x.startswith("hg:::tick")]
    assert shown == [f"hg:::tick  arg0={i}" for i in range(20)]  # the first run's, as the C passed them
    if fmt == "ctf":
        assert [e["fields"]["arg0"] for e in bt2_events(trace) if "name" in e] == list(range(20))
    else:
        assert perfetto_instants(trace) == 20


@pytest.mark.parametrize("fmt", ["ctf", "perfetto"])
def test_lost_counts_of_2_64_minus_1_are_not_believed(hostile, tmp_path, fmt):
    trace = tmp_path / ("t" if fmt == "ctf" else "t.pftrace")
    proc = boot(hostile, *RING, "--run", "kmain", "--arg", 20, "--run", "lost_max", "--arg", 0, "--run", "kmain",
                "--arg", 20, "--trace", trace, "--trace-format", fmt)
    (line,) = proc.stderr.splitlines()
    assert "the lost counts of CPU 0 (18446744073709551615 discarded, 18446744073709551615 overwritten) are " \
           "damaged: 0 and 0 are kept" in line, line
    if fmt == "ctf":
        read = bt2_events(trace)
        assert [e["fields"]["arg0"] for e in read if "name" in e] == list(range(20))
        assert not [e for e in read if "discarded" in e]
    else:
        assert perfetto_instants(trace) == 20


def perfetto_instants(path) -> int:
    """The instant events of a Perfetto trace, read with Perfetto's own protos (every counter an int64)."""
    pb = need_module("perfetto.protos.perfetto.trace.perfetto_trace_pb2", "pip install 'sdtgen[perfetto]'")
    trace = pb.Trace()
    trace.ParseFromString(path.read_bytes())
    events = [p.track_event for p in trace.packet if p.HasField("track_event")]
    assert all(-(1 << 63) <= e.counter_value < 1 << 63 for e in events)
    return sum(e.type == pb.TrackEvent.TYPE_INSTANT for e in events)
