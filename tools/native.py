"""A kernel's own C, compiled for this machine and run natively: the firings and return values a boot
with every probe armed must reproduce (the matrix's reference, and the tests').

Every probe function the source calls is defined here to print its call as JSON, decoding each
argument the way C itself converts it (int, string, unsigned); every SDT_PROBE_ENABLED() check and
SDT_PROBES_ENABLED() read 1, as with every probe armed. The probes and their argument types are read
from the C source (probe_source), never from sdtgen. A call names its function and, as `sdtgen boot
--run SYMBOL:TYPE` does, how to read the result; its integer arguments go in the first argument
registers, which is how the SysV ABI passes any integer or pointer parameter.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

from probe_source import called_probes, checked_probes


@dataclass(frozen=True)
class Call:
    function: str
    args: tuple[int, ...]


# `sdtgen boot --run SYMBOL:TYPE`'s result types, as C types.
RESULT_TYPES = {"long": "long", "int": "int", "uint": "unsigned int", "ulong": "unsigned long", "void": "void",
                "str": "const char *"}
MAX_ARGS = 6


def prototypes(calls: list[str]) -> dict[str, tuple[str, list[str]]]:
    """function -> (result type, parameter types) of calls written SYMBOL[:TYPE], every parameter a long."""
    out = {}
    for call in calls:
        name, _, kind = call.partition(":")
        out[name] = (RESULT_TYPES[kind or "long"], ["long"] * MAX_ARGS)
    return out


SIGNED = {"long", "longint", "longlong", "longlongint", "signedlong", "int64_t", "intptr_t", "ssize_t", "off_t"}


def print_arg(ctype: str, i: int) -> str:
    t = ctype.replace(" ", "")
    if t == "int":
        return f'printf("%d", (int)a{i});'
    if t in ("char*", "constchar*"):
        return f"put_string((const char *)a{i});"
    if t in SIGNED:  # a signed word: C reads the register's bits as a negative number when its top bit is set
        return f'printf("%lld", (long long)(intptr_t)a{i});'
    return f'printf("%llu", (unsigned long long)a{i});'


def _print_result(ret: str, call: str) -> str:
    if ret == "void":
        return f'{{ {call}; printf("{{\\"return\\": null}}\\n"); }}'
    if "char" in ret:
        return f'{{ printf("{{\\"return\\": "); put_string({call}); printf("}}\\n"); }}'
    if ret.startswith("unsigned"):
        return f'printf("{{\\"return\\": %lu}}\\n", (unsigned long){call});'
    return f'printf("{{\\"return\\": %ld}}\\n", (long){call});'


def source_dirs(sources: list[Path]) -> list[Path]:
    """The directories of the sources (directories, or files): what declares their probes, headers included."""
    return list(dict.fromkeys(s if s.is_dir() else s.parent for s in sources))


def harness_source(sources: list[Path], protos: dict[str, tuple[str, list[str]]]) -> str:
    out = ["#include <stdio.h>", "#include <stdint.h>", "#include <stdlib.h>", "#include <string.h>",
           "static void put_string(const char *s) { putchar('\"'); for (; *s; s++) {",
           "  if (*s == '\"' || *s == '\\\\') putchar('\\\\'); putchar(*s); } putchar('\"'); }",
           "volatile _Bool sdt_probes_enabled = 1;"]
    roots = source_dirs(sources)
    out += [f"int {f}(void) {{ return 1; }}" for f in checked_probes(*roots)]
    params = ", ".join(f"uintptr_t a{i}" for i in range(MAX_ARGS))
    for probe in called_probes(*roots):
        body = ' printf(", "); '.join(print_arg(t, i) for i, t in enumerate(probe.args))
        out.append(f"void {probe.symbol}({params}) {{ printf(\"{{\\\"probe\\\": \\\"{probe.spec}\\\", "
                   f"\\\"args\\\": [\"); {body} printf(\"]}}\\n\"); }}")
    for name, (ret, types) in protos.items():
        out.append(f"{ret} {name}({', '.join(types) or 'void'});")
    out.append("int main(int argc, char **argv) { for (int i = 1; i < argc; i++) {")
    out.append("  char *f = strtok(argv[i], \":\"); long v[6] = {0}; int n = 0; char *a;")
    out.append("  while ((a = strtok(NULL, \",\")) && n < 6) v[n++] = strtol(a, NULL, 0);")
    for name, (ret, types) in protos.items():
        call = f"{name}({', '.join(f'v[{i}]' for i in range(len(types)))})"
        out.append(f'  if (!strcmp(f, "{name}")) {_print_result(ret, call)}')
    out.append("} return 0; }")
    return "\n".join(out) + "\n"


class NativeError(Exception):
    """The sources do not build or run on this machine; the message is the compiler's last line."""


def build_native(out: Path, sources: list[Path], protos: dict[str, tuple[str, list[str]]], include: str,
                 flags: tuple[str, ...] = ()) -> Path:
    """The sources (directories of .c files, or files) and the harness, built for this machine."""
    harness = out / "harness.c"
    harness.write_text(harness_source(sources, protos))
    exe = out / "native"
    files = [str(f) for s in sources for f in (sorted(s.glob("*.c")) if s.is_dir() else [s])]
    dirs = [f"-I{d}" for d in source_dirs(sources)]
    proc = subprocess.run(["gcc", "-O2", "-fno-builtin", "-no-pie", *dirs, f"-I{include}", *flags, "-o", str(exe),
                           str(harness), *files], capture_output=True, text=True)
    if proc.returncode != 0:
        raise NativeError(_last_line(proc.stderr))
    return exe


def run_native(exe: Path, calls: list[Call]) -> list[dict]:
    """Events in order: {"probe", "args"} for every probe call, {"return"} after each call."""
    argv = [f"{c.function}:{','.join(map(str, c.args))}" for c in calls]
    proc = subprocess.run([str(exe), *argv], capture_output=True, text=True)
    if proc.returncode != 0:
        raise NativeError(f"the native run exited {proc.returncode}: {_last_line(proc.stderr)}")
    return [json.loads(line) for line in proc.stdout.splitlines()]


def data_symbolizer(binary: Path, nm: str = "nm"):
    """addr -> "symbol+0xoff" over the data symbols nm lists, to compare pointers across two builds."""
    listing = subprocess.run([nm, str(binary)], capture_output=True, text=True, check=True).stdout
    syms = sorted((int(f[0], 16), f[2]) for f in (ln.split() for ln in listing.splitlines())
                  if len(f) == 3 and f[1] in "bBdDrR")

    def name(addr: int) -> str:
        best = max(((a, n) for a, n in syms if a <= addr), default=None)
        return f"{best[1]}+{addr - best[0]:#x}" if best else hex(addr)

    return name


def _last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:200] if lines else "failed"
