"""The stack a control command needs: GCC's own call graph with each function's frame (-fcallgraph-info=su)
of the runtime as a kernel builds it (the fragment's sources and an architecture's port, the kernel's flags),
and the deepest path from the control core's entry points through it.

Calls through a pointer are the kernel's (the reply function, sdt_control_ops, the function `run` calls) and
are counted as nothing here: their own stack comes on top; but the control core's own dispatch (`command`,
through its table of commands) reaches each of its commands (`cmd_*`), and is counted so. A cycle in the
graph (recursion) is refused, since no bound would hold.

    python tools/stack_usage.py [ARCH...]     # each architecture's bound and its deepest path
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from toolchain import compiler, kernel_cflags, runtime_dir, runtime_sources

ENTRIES = ("sdt_control_line", "sdt_control_input")
NODE = re.compile(r'^node: \{ title: "([^"]+)" label: "[^"]*?\\n(?:[^"\\]*\\n)?(\d+) bytes \(([\w,]+)\)')
NAME = re.compile(r'^node: \{ title: "([^"]+)"')
EDGE = re.compile(r'^edge: \{ sourcename: "([^"]+)" targetname: "([^"]+)"')
DISPATCH = "command"  # the control core's function that calls each command through its table
COMMAND = "cmd_"  # what every command's function is named


@dataclass(frozen=True)
class Usage:
    arch: str
    bytes: int  # the deepest path's frames, summed
    path: tuple[str, ...]  # its functions, the entry first


def call_graph(ci_files: list[Path]) -> tuple[dict[str, int], dict[str, set[str]]]:
    """(each function's frame bytes, each function's callees) of GCC's .ci files; a frame GCC cannot bound
    (alloca, a variable-length array) is refused."""
    frames: dict[str, int] = {}
    calls: dict[str, set[str]] = {}
    for ci in ci_files:
        for line in ci.read_text().splitlines():
            if m := NODE.match(line):
                if m[3] not in ("static", "dynamic,bounded"):  # bounded: GCC knows the most it takes
                    raise SystemExit(f"{m[1]}: a frame of {m[3]} size has no bound")
                frames[m[1]] = int(m[2])
            elif m := EDGE.match(line):
                calls.setdefault(m[1], set()).add(m[2])
    def name(title: str) -> str:  # as written in C, less a clone's suffix (command.constprop.0)
        return title.rsplit(":", 1)[-1].split(".", 1)[0]

    commands = {f for f in frames if name(f).startswith(COMMAND)}
    dispatch = [f for f in calls if name(f) == DISPATCH and "__indirect_call" in calls[f]]
    if commands and not dispatch:
        raise SystemExit(f"no {DISPATCH} calls through the command table: the {COMMAND}* functions would not count")
    for fn in dispatch:
        calls[fn] |= commands
    return frames, calls


def deepest(entry: str, frames: dict[str, int], calls: dict[str, set[str]]) -> tuple[int, tuple[str, ...]]:
    """The most stack any chain of calls from ``entry`` takes, and that chain."""
    best: dict[str, tuple[int, tuple[str, ...]]] = {}

    def walk(fn: str, on_path: tuple[str, ...]) -> tuple[int, tuple[str, ...]]:
        if fn in on_path:
            raise SystemExit(f"recursion through {fn}: {' -> '.join((*on_path, fn))}")
        if fn not in best:
            below = [walk(c, (*on_path, fn)) for c in calls.get(fn, ()) if c in frames]
            depth, chain = max(below, default=(0, ()))
            best[fn] = (frames[fn] + depth, (fn, *chain))
        return best[fn]

    return walk(entry, ())


def measure(arch: str, out: Path) -> Usage:
    cc = compiler("gcc", arch).command
    sources = [*runtime_sources(), runtime_dir() / "arch" / f"sdt_{arch}.c"]
    cis = []
    for src in sources:
        obj = out / f"{src.stem}.o"
        subprocess.run([*cc, *kernel_cflags(arch), "-fno-lto", f"-I{runtime_dir().parent / 'include'}",
                        "-fcallgraph-info=su", "-c", "-o", str(obj), str(src)], check=True, cwd=out)
        cis.append(obj.with_suffix(".ci"))
    frames, calls = call_graph(cis)
    depth, path = max(deepest(e, frames, calls) for e in ENTRIES)
    return Usage(arch, depth, tuple(p.rsplit(":", 1)[-1] for p in path))


def main(argv: list[str]) -> int:
    for arch in argv or ["x86_64", "i386", "aarch64", "riscv64"]:
        with tempfile.TemporaryDirectory() as tmp:
            u = measure(arch, Path(tmp))
        print(f"{arch}: {u.bytes} bytes: {' -> '.join(u.path)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
