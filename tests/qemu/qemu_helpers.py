"""What the QEMU tests share: which architectures a run boots, and a session or `sdtgen qemu` whose JSON
events a test reads."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

from helpers import CROSS, ROOT, SDTGEN, need_tool, run

from sdtgen import arch as arches

PLATFORM = ROOT / "fixtures" / "qemu"
# `make test` boots a representative case of each kind: RISC-V (one-store patches), x86-64 where the
# breakpoint protocol or fw_cfg matters. `make qemu` (SDTGEN_QEMU_ALL=1) boots all four architectures in
# every case and runs the torture test for SDTGEN_QEMU_TOGGLES toggles (10,000 there).
ALL = os.environ.get("SDTGEN_QEMU_ALL", "") == "1"
EVERY = ("riscv64", "aarch64", "x86_64", "i386")
ARCHES = EVERY if ALL else ("riscv64",)
TOGGLES = int(os.environ.get("SDTGEN_QEMU_TOGGLES", "100"))


def need_qemu(arch: str) -> None:
    a = arches.by_name(arch)
    need_tool(a.qemu.binary, a.qemu.package)
    if arch in CROSS:
        need_tool(*CROSS[arch])



class Qemu:
    """A QemuSession in this process whose JSON events the test reads."""

    def __init__(self, image: Path, **options) -> None:
        from sdtgen.session.reporter import Reporter
        from sdtgen.session.starts import open_session

        self.buffer = io.StringIO()
        self.session = open_session("qemu", str(image), Reporter(as_json=True, out=self.buffer), **options)

    def events(self) -> list[dict]:
        out = [json.loads(line) for line in self.buffer.getvalue().splitlines()]
        self.buffer.seek(0)
        self.buffer.truncate()
        return out

    def close(self) -> None:
        self.session.close()


def qemu_json(image: Path, *args: str, check: bool = True) -> list[dict]:
    """`sdtgen qemu IMAGE --json ARGS...`: its events."""
    proc = run([SDTGEN, "qemu", str(image), "--json", *map(str, args)], check=False, timeout=300)
    if check:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines()]
