"""The fixture kernel linked with its QEMU platform (fixtures/qemu), built once per architecture and
runtime build, and `sdtgen qemu` run on it."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest
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
    need_tool(a.qemu_binary, a.qemu_package)
    if arch in CROSS:
        need_tool(*CROSS[arch])


@pytest.fixture(scope="session")
def qemu_kernel(tmp_path_factory):
    """``build(arch, naive=False, **make_vars)``: the image's path (built once for each)."""
    built: dict[tuple, Path] = {}

    def build(arch: str, naive: bool = False, **make_vars: str) -> Path:
        key = (arch, naive, *sorted(make_vars.items()))
        if key not in built:
            need_qemu(arch)
            out = tmp_path_factory.mktemp(f"qemu-{arch}{'-naive' if naive else ''}")
            run(["make", "-C", str(PLATFORM), f"ARCH={arch}", f"O={out}", f"SDTGEN={SDTGEN}", f"NAIVE={int(naive)}",
                 *(f"{k}={v}" for k, v in make_vars.items())])
            built[key] = out / "kernel.elf"
        return built[key]

    return build


class Qemu:
    """A QemuSession in this process whose JSON events the test reads."""

    def __init__(self, image: Path, **options) -> None:
        from sdtgen.qemu.report import QemuReport, Reporter
        from sdtgen.qemu.session import QemuSession

        self.buffer = io.StringIO()
        self.session = QemuSession(str(image), QemuReport(Reporter(as_json=True, out=self.buffer), str(image)),
                                   **options)

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
