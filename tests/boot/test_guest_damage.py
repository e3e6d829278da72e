"""A kernel that damages its own CPU area (a wild store over the runtime's open-packet pointer): the flush
at the run's end faults in the guest, and boot says so in one line, exit 1, no traceback."""

from __future__ import annotations

from helpers import build_c_kernel, sdtgen

SOURCE = r"""
#include <sdt.h>
#include <sdt_runtime.h>
SDT_PROBE_DEFINE1(dm, , , hello, "int");
int kmain(int v) { SDT_PROBE1(dm, , , hello, v); return v + 1; }
__attribute__((noinline)) int scribble(void)
{
	struct sdt_cpu *c = sdt_hooks.cpu_area();

	SDT_PROBE1(dm, , , hello, 7);	/* a packet is open */
	c->current = 0xdead0000;	/* and now where no memory is: closing it writes there */
	return 0;
}
"""


def test_a_flush_that_faults_on_the_kernels_damage_is_one_line(tmp_path):
    image = build_c_kernel(tmp_path, "x86_64", SOURCE)
    proc = sdtgen("boot", image, "--enable", "dm:::", "--no-stream", "--run", "kmain", "--arg", "4",
                  "--run", "scribble:int")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    (line,) = proc.stderr.splitlines()
    assert line.startswith(f"{image}: error: ") and "fault in sdt_flush: " in line and "0xdead" in line, line
    assert proc.stdout.splitlines()[-1] == "scribble() = 0"
