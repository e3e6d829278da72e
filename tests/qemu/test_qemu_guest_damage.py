"""A kernel on QEMU that writes over its own struct sdt_cpu and clock through the runtime's hooks: `sdtgen qemu`
believes its packets and lost counts only as far as the trace readers can hold them. Each trace opens (babeltrace2,
Perfetto's protos), with the events recorded before the damage, and the exit status says something was damaged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import ROOT, SDTGEN, need_module, run, unavailable

ARCH = "riscv64"
SOURCE = r"""
#include <sdt.h>
#include <sdt_runtime.h>
SDT_PROBE_DEFINE1(hg, , , tick, "long");
long kmain(long n) { for (long i = 0; i < n; i++) SDT_PROBE1(hg, , , tick, i); return n; }
long lost_max(long x)
{
	struct sdt_cpu *c = sdt_hooks.cpu_area();
	c->discarded = c->overwritten = ~0ull;
	return x;
}
static sdt_u64 now = 1000000000;
static sdt_u64 backwards(void) { return now -= 1000; }
long clock_back(long x) { sdt_hooks.clock = backwards; return x; }
"""


@pytest.fixture(scope="module")
def hostile(qemu_kernel, tmp_path_factory) -> Path:
    src = tmp_path_factory.mktemp("hostile") / "hostile.c"
    src.write_text(SOURCE)
    return qemu_kernel(ARCH, KERNEL_SRCS=str(src), KERNEL_CFLAGS="")


@pytest.mark.parametrize("fmt", ["ctf", "perfetto"])
def test_lost_counts_and_a_clock_the_kernel_wrote_over_leave_a_trace_that_opens(hostile, tmp_path, fmt):
    trace = tmp_path / ("t" if fmt == "ctf" else "t.pftrace")
    proc = run([SDTGEN, "qemu", str(hostile), "--buffer-size", "2048", "--enable", "hg:::", "--run", "kmain", "--arg",
                "20", "--run", "lost_max", "--arg", "0", "--run", "kmain", "--arg", "20", "--run", "clock_back",
                "--arg", "0", "--run", "kmain", "--arg", "20", "--trace", str(trace), "--trace-format", fmt, "-q"],
               check=False, timeout=300)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    (line,) = proc.stderr.splitlines()
    assert "warning: a damaged packet left out: packet 2 of CPU 0 says 18446744073709551615 events were " \
           "discarded" in line, line
    if fmt == "ctf":
        python, reader = "/usr/bin/python3", ROOT / "tests" / "trace" / "bt2_read.py"
        if not Path(python).exists() or run([python, "-c", "import bt2"], check=False).returncode:
            unavailable("babeltrace2's Python bindings not found: apt-get install python3-bt2")
        read = run([python, str(reader), str(trace)], check=False)
        assert read.returncode == 0, read.stderr[-2000:]
        rows = [json.loads(x) for x in read.stdout.splitlines()]
        assert [r["fields"]["arg0"] for r in rows if "name" in r] == list(range(20))
    else:
        pb = need_module("perfetto.protos.perfetto.trace.perfetto_trace_pb2", "pip install 'sdtgen[perfetto]'")
        t = pb.Trace()
        t.ParseFromString(trace.read_bytes())
        events = [p.track_event for p in t.packet if p.HasField("track_event")]
        assert [e.debug_annotations[0].int_value for e in events if e.type == pb.TrackEvent.TYPE_INSTANT] == \
            list(range(20))
