"""The runtime is freestanding: built with a kernel's plain flags by gcc or clang, for every architecture and
optimisation level, its sources (every one the Makefile fragment builds) compile without a warning (-Wall
-Wextra -Werror), and they and their port together call nothing outside themselves. nm lists what is undefined:
only the linker sets' bounds, which the kernel's link defines. (AArch64 compilers outline atomics into
libgcc's __aarch64_* helpers unless told not to; a kernel has no libgcc.)"""

from __future__ import annotations

import pytest
from helpers import ARCHES, ROOT, cross_tool, need_tool, run
from toolchain import runtime_sources

from sdtgen import arch as arches

RUNTIME = ROOT / "sdtgen" / "runtime"
BOUNDS = {f"__{end}_set_sdt_{name}_set" for end in ("start", "stop") for name in ("sites", "probes")}
# A kernel's flags that say nothing of atomics or libraries: what sdtgen's registry gives, less the one
# flag a kernel may not know to give.
PLAIN = {a.name: [f for f in a.toolchain.cflags if f != "-mno-outline-atomics"] for a in arches.all_arches()}


def test_the_fragment_builds_the_serial_transport_the_control_core_and_the_setjmp_with_the_core():
    assert [(p.parent, p.name) for p in runtime_sources()] == [(RUNTIME, "sdt_runtime.c"), (RUNTIME, "sdt_serial.c"),
                                                               (RUNTIME, "sdt_control.c"),
                                                               (RUNTIME, "sdt_setjmp.c")]


def compilers(arch: str) -> list[tuple[str, list[str]]]:
    a = arches.by_name(arch)
    out = [("gcc", [cross_tool(arch, "gcc")] if a.toolchain.cross_prefix else ["gcc"])]
    if arch != "x86_64":
        out.append(("clang", [need_tool("clang", "clang"), f"--target={a.toolchain.triple}"]))
    return out


@pytest.mark.parametrize("opt", ["-O0", "-O2", "-Os"])
@pytest.mark.parametrize("arch", ARCHES)
def test_the_runtime_and_its_port_need_only_the_linker_set_bounds(tmp_path, arch, opt):
    ld = cross_tool(arch, "ld") if arches.by_name(arch).toolchain.cross_prefix else "ld"
    nm = cross_tool(arch, "nm") if arches.by_name(arch).toolchain.cross_prefix else "nm"
    for name, cc in compilers(arch):
        flags = [*cc, opt, "-ffreestanding", "-fno-pic", "-Wall", "-Wextra", "-Werror", *PLAIN[arch],
                 f"-I{ROOT / 'sdtgen' / 'include'}", "-c"]
        objs = []
        for src in (*runtime_sources(), RUNTIME / "arch" / f"sdt_{arch}.c"):
            obj = tmp_path / f"{name}-{src.stem}.o"
            run([*flags, "-o", str(obj), str(src)])
            objs.append(str(obj))
        both = tmp_path / f"{name}.o"
        run([ld, "-r", "-o", str(both), *objs])
        undefined = {ln.split()[-1] for ln in run([nm, "-u", str(both)]).stdout.splitlines() if ln.strip()}
        assert undefined == BOUNDS, (name, opt, undefined - BOUNDS)
