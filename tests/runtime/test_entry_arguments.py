"""Every public function of sdt_runtime.h returns an SDT_ERR_* for what it cannot use and does nothing else (no
crash, no state changed): NULL pointers, an empty probe spec (refused as DTrace refuses an empty description,
while ":::" matches every probe), a mode, hooks, size or sequence number it cannot take. Called by
tests/runtime/entry_arguments.c, a program of its own built with the runtime by gcc for this machine."""

from __future__ import annotations

import pytest
from helpers import need_tool, run
from runtime_support import HERE, include_dir, runtime_dir

from sdtgen.layout import VALUES

SPEC, INIT, MODE, ARG = (VALUES[f"SDT_ERR_{n}"] for n in ("SPEC", "INIT", "MODE", "ARG"))
EXPECTED = {
    "enable_before_init": INIT, "init_null": ARG, "init_text_null": ARG, "init_readable_null": ARG,
    "init_release_alone": ARG, "flush_before_init": 0, "init": 0, "init_again": INIT, "flush_no_area": 0,
    "enable_null": ARG, "enable_empty": SPEC, "enable_all": 0, "enable_mode": MODE, "enable_five_fields": SPEC,
    "disable_null": ARG, "disable_empty": SPEC, "disable_all": 0, "set_mode_zero": MODE, "trap_null": ARG,
    "attach_null": ARG, "attach_ring_null": ARG, "attach": 0, "consume_null": 0, "consume_seq_null": 0,
    "consume_done_null": ARG, "consume_done_unclosed": ARG, "consume_done_future": ARG, "read_seq": 0,
    "event_slow_null": 0, "event_begin_null": 0, "event_below_header": 0, "event_past_size_field": 0,
    "discarded": 2,  # the two events no packet can hold are counted as discarded
    "drain_null": ARG, "drain_put_null": ARG, "info_null": ARG, "frame_put_null": ARG, "frame_data_null": ARG,
    "frame_type": ARG, "put_bytes": 0,  # nothing reached the line
    "frame_empty": 0, "info": 0, "crc_null": 0x1234,
}


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    out = tmp_path_factory.mktemp("entry") / "entry_arguments"
    rt = runtime_dir()
    run([need_tool("gcc", "gcc"), "-O2", "-Wall", "-Wextra", "-Werror", "-ffreestanding", f"-I{include_dir()}",
         f"-I{rt}", "-o", str(out), str(HERE / "entry_arguments.c"), str(rt / "sdt_runtime.c"),
         str(rt / "arch" / "sdt_x86_64.c"), str(rt / "sdt_serial.c")])
    return out


def test_every_entry_point_refuses_what_it_cannot_use(program):
    proc = run([str(program)], check=False, timeout=60)
    got = {name: int(value) for name, value in (line.split() for line in proc.stdout.splitlines())}
    assert proc.returncode == 0, (proc.returncode, list(got)[-1:])  # the last call that returned before a crash
    assert got == EXPECTED
