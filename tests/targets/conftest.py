"""tinyk (examples/tinyk): a kernel sdtgen never saw, built once with its own Makefile."""

from __future__ import annotations

import pytest
from helpers import CROSS, ROOT, SDTGEN, need_tool, run

from sdtgen import arch as arches

TINYK = ROOT / "examples" / "tinyk"


@pytest.fixture(scope="session")
def tinyk(tmp_path_factory):
    a = arches.by_name("riscv64")
    need_tool(a.qemu.binary, a.qemu.package)
    need_tool(*CROSS["riscv64"])
    out = tmp_path_factory.mktemp("tinyk")
    run(["make", "-C", str(TINYK), f"O={out}", f"SDTGEN={SDTGEN}"])
    return out / "tinyk.elf"


@pytest.fixture(scope="session")
def tinyk_native(tmp_path_factory):
    """tinyk's work.c built for this machine, every probe a function that prints its call (tools/native.py)."""
    from native import build_native

    out = tmp_path_factory.mktemp("tinyk-native")
    protos = {"net_rx": ("long", ["int"]), "sched_tick": ("long", ["int"])}
    include = run([SDTGEN, "include-dir"]).stdout.strip()
    return build_native(out, [TINYK / "work.c"], protos, include)
