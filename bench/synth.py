"""Synthetic kernels for the benchmarks, generated as C and built with gcc and ld -r.

`large`: 1,000 translation units, 40 functions each, -ffunction-sections (80,000 text
and relocation sections), 15 relocations per function (600,000 in all), of which one
in two functions carries a probe site (20,000): probe relocations are a small minority.
`many_sites`: small functions, each a probe site, for patching 50,000 sites at boot. Partial-linked by
sdtgen's script, gen writes its site table in address order; by a plain `ld -r`, in the order of the
sections' names (f0_1, f0_10, f0_11, ...), which the runtime sorts at boot.
"""

from __future__ import annotations

import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

CFLAGS = ["-ffreestanding", "-mcmodel=kernel", "-mno-red-zone", "-fno-pic", "-O1", "-fno-inline",
          "-fno-asynchronous-unwind-tables", "-fno-stack-protector", "-ffunction-sections"]


def _unit(t: int, units: int, funcs: int, calls: int, probe_every: int) -> str:
    lines = ["#include <sdt.h>", f"SDT_PROBE_DEFINE2(bench, u{t}, f, hit, \"int\", \"long\");"]
    for f in range(funcs):
        peers = [((t * 7 + f * 13 + k * 101) % units, (f + k * 3) % funcs) for k in range(calls)]
        lines += [f"int f{u}_{g}(int);" for u, g in peers if (u, g) != (t, f)]
    for f in range(funcs):
        peers = [((t * 7 + f * 13 + k * 101) % units, (f + k * 3) % funcs) for k in range(calls)]
        body = " + ".join(f"f{u}_{g}(x + {k})" for k, (u, g) in enumerate(peers) if (u, g) != (t, f)) or "x"
        probe = f"SDT_PROBE2(bench, u{t}, f, hit, x, {f});" if f % probe_every == 0 else ""
        lines.append(f"int f{t}_{f}(int x) {{ if (x < 0) return x; {probe} return {body}; }}")
    return "\n".join(dict.fromkeys(lines)) + "\n"


def build(out: Path, units: int, funcs: int, calls: int, probe_every: int, include: str,
          script: Path | None = None, cflags: tuple[str, ...] = (), name: str = "") -> Path:
    """Generate and compile the units (``cflags`` after the usual, under ``name``), partial-link them (plain
    ``ld -r``, or with ``script``: sdtgen's partial script, one .text, as the Makefile fragment links); cached by
    the parameters."""
    tag = f"{units}x{funcs}x{calls}x{probe_every}{name}"
    partial = out / f"kernel-{tag}{'-merged' if script else ''}.o"
    if partial.exists():
        return partial
    src = out / f"src-{tag}"
    src.mkdir(parents=True, exist_ok=True)
    objs = []
    for t in range(units):
        (src / f"u{t}.c").write_text(_unit(t, units, funcs, calls, probe_every))
        objs.append(src / f"u{t}.o")

    def compile_one(t: int) -> None:
        if objs[t].exists():  # compiled for the other partial link of the same units
            return
        subprocess.run(["gcc", *CFLAGS, *cflags, f"-I{include}", "-c", "-o", str(objs[t]), str(src / f"u{t}.c")],
                       check=True)

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        list(pool.map(compile_one, range(units)))
    tmp = partial.with_suffix(".tmp")
    subprocess.run(["ld", "-r", *(["-T", str(script)] if script else []), "-o", str(tmp), *map(str, objs)], check=True)
    tmp.rename(partial)
    return partial


def fentry_standin(out: Path, include: str) -> Path:
    """When the realworld build is absent: an object of vmlinux.o's scale for `scan --prefix __fentry__` (Debian's
    linux-source-6.1 at tinyconfig with ftrace: 4.6 MiB, 7,366 __fentry__ calls), 150 units of 50 functions built
    as a kernel's with ftrace (-pg -mfentry -mrecord-mcount, one .text a unit) and partial-linked: 4.6 MiB,
    7,500 __fentry__ calls among 131,000 relocations."""
    return build(out, 150, 50, 15, 2, include, cflags=("-fno-function-sections", "-pg", "-mfentry",
                                                       "-mrecord-mcount"), name="-fentry")

