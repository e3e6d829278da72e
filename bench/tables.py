"""`make bench` inputs and rows for the probe-table readers: scan of a real vmlinux.o, probes of USDT notes."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VMLINUX_O = ROOT / "build" / "realworld" / "linux-source-6.1" / "vmlinux.o"
SDT_H = Path("/usr/include/x86_64-linux-gnu/sys/sdt.h")


def usdt_library(work: Path, probes: int = 500) -> Path | None:
    """A shared object with ``probes`` USDT notes (sys/sdt.h from systemtap-sdt-dev), None without it."""
    out = work / f"libusdt{probes}.so"
    if out.exists():
        return out
    if not SDT_H.exists():
        return None
    inc = work / "sdt-include" / "sys"
    inc.mkdir(parents=True, exist_ok=True)
    for h in SDT_H.parent.glob("sdt*.h"):
        shutil.copy(h, inc / h.name)
    lines = ["#include <sys/sdt.h>"]
    for f in range(probes // 10):
        body = "".join(f"STAP_PROBE2(bench, p{f}_{k}, a + {k}, b);" for k in range(10))
        lines.append(f"long f{f}(long a, int b) {{ {body} return a * b; }}")
    src = work / "usdt.c"
    src.write_text("\n".join(lines) + "\n")
    subprocess.run(["gcc", "-O2", "-fPIC", "-shared", f"-I{inc.parent}", "-o", str(out), str(src)], check=True)
    return out


def largest_usdt_binary() -> Path | None:
    """The largest installed ELF file (over 1 MiB) that carries USDT notes, by its section headers."""
    found: list[tuple[int, Path]] = []
    for root in ("/usr/lib", "/usr/bin", "/usr/sbin", "/usr/libexec", "/usr/local/lib", "/opt"):
        for path in Path(root).rglob("*") if Path(root).is_dir() else ():
            try:
                if path.is_symlink() or not path.is_file() or path.stat().st_size < 1 << 20:
                    continue
                with open(path, "rb") as f:
                    if f.read(4) != b"\x7fELF":
                        continue
            except OSError:
                continue
            out = subprocess.run(["readelf", "-SW", str(path)], capture_output=True, text=True).stdout
            if " .note.stapsdt " in out:
                found.append((path.stat().st_size, path))
    return max(found)[1] if found else None
