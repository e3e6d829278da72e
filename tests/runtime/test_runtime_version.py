"""SDT_RUNTIME_VERSION, the installed header's interface version: every structure a kernel allocates or fills
has, measured by each architecture's compiler, the size this version promises. A structure that grows without
the version moving fails here, as it would break a port that asserts its size."""

from __future__ import annotations

import re

import pytest
from helpers import ROOT, cross_tool, readelf_symbols, run

INCLUDE = ROOT / "sdtgen" / "include"

VERSION = 2  # what the header says; a new one gets its own row in SIZES

# The structures a kernel sizes (it allocates them, or fills them and passes them in), by (version, pointer bits).
KERNEL_SIZED = ("sdt_cpu", "sdt_agg", "sdt_module", "sdt_control_cpu", "sdt_hooks", "sdt_control_ops", "sdt_frame",
                "sdt_range", "sdt_control_fault")
SIZES = {
    (1, 64): {"sdt_cpu": 136, "sdt_agg": 152, "sdt_module": 96, "sdt_control_cpu": 192, "sdt_hooks": 104,
              "sdt_control_ops": 120, "sdt_frame": 88, "sdt_range": 16, "sdt_control_fault": 24},
    (1, 32): {"sdt_cpu": 136, "sdt_agg": 152, "sdt_module": 64, "sdt_control_cpu": 192, "sdt_hooks": 64,
              "sdt_control_ops": 60, "sdt_frame": 88, "sdt_range": 16, "sdt_control_fault": 24},
    # 2: sessions (docs/sessions.md): struct sdt_cpu's next_area, session and visit; sdt_control_ops's session_memory
    # and drain_area; task context (docs/runtime.md): sdt_cpu's task and task_context, sdt_hooks's task
    (2, 64): {"sdt_cpu": 176, "sdt_agg": 152, "sdt_module": 96, "sdt_control_cpu": 192, "sdt_hooks": 112,
              "sdt_control_ops": 136, "sdt_frame": 88, "sdt_range": 16, "sdt_control_fault": 24},
    (2, 32): {"sdt_cpu": 176, "sdt_agg": 152, "sdt_module": 64, "sdt_control_cpu": 192, "sdt_hooks": 72,
              "sdt_control_ops": 68, "sdt_frame": 88, "sdt_range": 16, "sdt_control_fault": 24},
}
BITS = {"x86_64": 64, "i386": 32, "aarch64": 64, "riscv64": 64}


def gcc(arch: str) -> str:
    return "gcc" if arch == "x86_64" else cross_tool(arch, "gcc")


def test_the_installed_header_defines_the_version_for_the_preprocessor():
    """A port compares it in #if: an integer constant the preprocessor sees (gcc -dM), this version."""
    defines = run(["gcc", "-dM", "-E", f"-I{INCLUDE}", "-"], input="#include <sdt_runtime.h>\n").stdout
    (value,) = re.findall(r"^#define SDT_RUNTIME_VERSION (\S+)$", defines, re.M)
    assert int(value) == VERSION
    probe = f"#include <sdt_runtime.h>\n#if SDT_RUNTIME_VERSION != {VERSION}\n#error wrong\n#endif\nint x;\n"
    run(["gcc", "-fsyntax-only", f"-I{INCLUDE}", "-x", "c", "-"], input=probe)


@pytest.mark.parametrize("arch", list(BITS))
def test_every_structure_a_kernel_sizes_has_the_size_its_version_promises(arch, tmp_path):
    """Measured by the compiler (a symbol of each size, read back with readelf): a structure that grew or shrank
    without SDT_RUNTIME_VERSION moving is named, with what to do."""
    src = tmp_path / "sizes.c"
    src.write_text("#include <sdt_runtime.h>\n" + "".join(f"char size__{s}[sizeof(struct {s})];\n"
                                                          for s in KERNEL_SIZED))
    obj = tmp_path / "sizes.o"
    run([gcc(arch), "-c", f"-I{INCLUDE}", "-o", str(obj), str(src)])
    measured = {name[len("size__"):]: size for _, size, _, _, _, name in readelf_symbols(obj)
                if name.startswith("size__")}
    promised = SIZES[(VERSION, BITS[arch])]
    changed = {s: (promised[s], measured[s]) for s in KERNEL_SIZED if measured[s] != promised[s]}
    assert not changed, (f"{arch}: (promised, measured) sizes {changed}: a kernel-sized structure changed; raise "
                         "SDT_RUNTIME_VERSION in sdt_runtime.h and give the new version its row here")
