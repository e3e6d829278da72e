"""The fixture kernel's own C, compiled for this machine and run natively: the firings and return
values the emulated boot must reproduce. Every probe function the source calls is defined here to
print its call as JSON, decoding each argument the way C itself converts it (int, string,
unsigned). The probes and their argument types are read from the C source (fixture_source), never
from sdtgen."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from fixture_source import called_probes
from helpers import FIXTURE, run, sdtgen

# The fixture's callable functions with their real C prototypes.
PROTOTYPES = {
    "kmain": ("long", ["int"]),
    "vfs_lookup_id": ("int", ["int"]),
    "sched_run": ("long", ["int"]),
    "sched_switch": ("long", ["int", "int", "int", "int", "long", "unsigned long"]),
    "kmem_alloc": ("long", ["long"]),
    "proc_exec": ("int", ["int"]),
    "proc_exit": ("void", ["int"]),
}


@dataclass(frozen=True)
class Call:
    function: str
    args: tuple[int, ...]


def _print_arg(ctype: str, i: int) -> str:
    t = ctype.replace(" ", "")
    if t == "int":
        return f'printf("%d", (int)a{i});'
    if t in ("char*", "constchar*"):
        return f"put_string((const char *)a{i});"
    return f'printf("%llu", (unsigned long long)a{i});'


def harness_source(root: Path = FIXTURE) -> str:
    out = ["#include <stdio.h>", "#include <stdint.h>", "#include <stdlib.h>", "#include <string.h>",
           "static void put_string(const char *s) { putchar('\"'); for (; *s; s++) {",
           "  if (*s == '\"' || *s == '\\\\') putchar('\\\\'); putchar(*s); } putchar('\"'); }"]
    params = ", ".join(f"uintptr_t a{i}" for i in range(6))
    for probe in called_probes(root):
        body = ' printf(", "); '.join(_print_arg(t, i) for i, t in enumerate(probe.args))
        out.append(f"void {probe.symbol}({params}) {{ printf(\"{{\\\"probe\\\": \\\"{probe.spec}\\\", "
                   f"\\\"args\\\": [\"); {body} printf(\"]}}\\n\"); }}")
    for name, (ret, types) in PROTOTYPES.items():
        out.append(f"{ret} {name}({', '.join(types)});")
    out.append("int main(int argc, char **argv) { for (int i = 1; i < argc; i++) {")
    out.append("  char *f = strtok(argv[i], \":\"); long v[6] = {0}; int n = 0; char *a;")
    out.append("  while ((a = strtok(NULL, \",\")) && n < 6) v[n++] = strtol(a, NULL, 0);")
    for name, (ret, types) in PROTOTYPES.items():
        call = f"{name}({', '.join(f'v[{i}]' for i in range(len(types)))})"
        if ret == "void":
            out.append(f'  if (!strcmp(f, "{name}")) {{ {call}; printf("{{\\"return\\": null}}\\n"); }}')
        else:
            out.append(f'  if (!strcmp(f, "{name}")) printf("{{\\"return\\": %ld}}\\n", (long){call});')
    out.append("} return 0; }")
    return "\n".join(out) + "\n"


def build_native(out: Path) -> Path:
    harness = out / "harness.c"
    harness.write_text(harness_source())
    exe = out / "native"
    include = sdtgen("include-dir", check=True).stdout.strip()
    sources = sorted(str(p) for p in FIXTURE.glob("*.c"))
    run(["gcc", "-O2", "-fno-builtin", "-no-pie", f"-I{FIXTURE}", f"-I{include}", "-o", str(exe), str(harness),
         *sources])
    return exe


def data_symbolizer(binary: Path):
    """addr -> "symbol+0xoff" over the data symbols nm lists, to compare pointers across two builds."""
    syms = sorted((int(f[0], 16), f[2]) for f in (ln.split() for ln in run(["nm", str(binary)]).stdout.splitlines())
                  if len(f) == 3 and f[1] in "bBdDrR")

    def name(addr: int) -> str:
        best = max(((a, n) for a, n in syms if a <= addr), default=None)
        return f"{best[1]}+{addr - best[0]:#x}" if best else hex(addr)

    return name


def run_native(exe: Path, calls: list[Call]) -> list[dict]:
    """Events in order: {"probe", "args"} for every probe call, {"return"} after each call."""
    argv = [f"{c.function}:{','.join(map(str, c.args))}" for c in calls]
    return [json.loads(line) for line in run([str(exe), *argv]).stdout.splitlines()]
