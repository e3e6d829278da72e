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


def listening_qemu(image: Path, cpus: int, commands: str, tmp_path: Path):
    """QEMU running the x86-64 ``image`` on its own on ``cpus`` vCPUs, its UART a TCP server, its boot running
    ``commands`` (fw_cfg) as a kernel's boot code would, before any host attaches: yields the line `sdtgen attach
    --serial` takes, and stops QEMU after (a generator for a pytest fixture)."""
    import socket
    import subprocess
    import time

    from sdtgen.targets.qemu import qemu_command

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    a = arches.by_name("x86_64")  # fw_cfg, which carries the boot's commands
    boot = tmp_path / "commands"
    boot.write_text(commands)
    argv = qemu_command(a.qemu.binary, a, str(image), cpus, 128 << 20, 0, str(tmp_path),
                        ["-fw_cfg", f"name=opt/sdtgen/commands,file={boot}"])
    argv[argv.index("stdio")] = f"tcp:127.0.0.1:{port},server=on,wait=off"
    qemu = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        yield f"tcp:127.0.0.1:{port}"
    finally:
        qemu.kill()
        qemu.wait()
