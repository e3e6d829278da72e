"""A kernel that damages the runtime's state (a wild store over its cpu_area hook): the flush at the run's end
faults in the guest, and boot says so in one line, exit 1, no traceback."""

from __future__ import annotations

import json

import pytest
from helpers import build_c_kernel, sdtgen

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
