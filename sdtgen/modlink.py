"""A module object placed at an address: what a kernel's loader does with one, done by GNU ld.

A module is a relocatable object (`ld -r` of its code and of what `sdtgen gen --module NAME` wrote). Placing
it is relocating it: the architecture's own ld links it at ``base`` with sdtgen's module script (one run of
sections from the base, code first; no __global_pointer$, so RISC-V's data accesses are never relaxed to gp,
a register only the kernel's own start-up sets). Against a kernel image (``-R``: the module calls the kernel's
runtime), as the emulated boot loads it; or alone, what it uses of the kernel at 0, as `check` proves its table.
"""

from __future__ import annotations

import os
import subprocess
from contextlib import contextmanager

from sdtgen.elf.reader import ElfFile
from sdtgen.errors import SdtError, printable
from sdtgen.probes import is_c_identifier
from sdtgen.table import MODULE_TABLE_SECTION, PROBES_SET, SITES_SET

ET_REL = 1

SCRIPT = """SECTIONS {{
  . = {base:#x};
  .text : {{ *(.text .text.*) }}
  .rodata : {{ *(.rodata .rodata.* .srodata .srodata.*) }}
  .data : {{ *(.data .data.* .sdata .sdata.*) }}
{sets}  .bss : {{ *(.bss .bss.* .sbss .sbss.* COMMON) }}
}}
"""
# The table's two sets with their bounds, as a kernel's final script gives them (what check reads).
SETS = "".join(f"  {name} : {{ __start_{name} = .; *({name}) __stop_{name} = .; }}\n" for name in (PROBES_SET,
                                                                                                  SITES_SET))


def _undefined(path: str) -> list[str]:
    """The global symbols ``path`` uses and does not define (the kernel's: placed alone, they are 0)."""
    with ElfFile(path) as obj:
        return sorted({s.name for s in obj.symbols if s.name and not s.defined and s.bind in (1, 2)
                       and is_c_identifier(s.name)})


def check_module_object(path: str, machine: int | None = None, arch_name: str = "") -> None:
    """``path`` is a module object: relocatable, of the kernel's machine, with a module table."""
    if not os.path.isfile(path):
        raise SdtError(path, "no such module file", "give the module object `sdtgen gen --module` built")
    with ElfFile(path) as obj:
        if obj.type != ET_REL:
            raise obj.fail("is not a relocatable object (a module is its ld -r output)",
                           "give the module object before any final link")
        if machine is not None and obj.machine != machine:
            raise obj.fail(f"is not built for {arch_name}", "build the module for the kernel's architecture")
        if obj.section(MODULE_TABLE_SECTION) is None:
            raise obj.fail("has no module table (section sdt_module_table)",
                           "run `sdtgen gen --module NAME` on it and link the generated table in")


@contextmanager
def placed(path: str, arch, base: int, tmp: str, kernel: str | None = None, relax: bool = True,
           define: dict[str, int] | None = None):
    """The path of ``path`` linked at ``base`` in directory ``tmp``: against ``kernel``'s symbols, or alone with
    the sets' bounds and what it uses of the kernel at address 0 (``relax`` False: as a kernel's loader, which
    never relaxes, leaves every instruction); ``define``: symbols given values, as a loader resolves them."""
    out, script = os.path.join(tmp, "module.elf"), os.path.join(tmp, "module.ld")
    with open(script, "w") as f:
        f.write(SCRIPT.format(base=base, sets="" if kernel else SETS))
    ld = f"{arch.toolchain.cross_prefix}ld"
    cmd = [ld, "-N", "-e", "0", "-T", script, "--no-warn-rwx-segments", "-o", out, path]
    cmd += ["-R", kernel] if kernel else [f"--defsym={name}=0" for name in _undefined(path)]
    cmd += [] if relax or arch.name != "riscv64" else ["--no-relax"]
    cmd += [f"--defsym={name}={value:#x}" for name, value in (define or {}).items()]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    except FileNotFoundError:
        raise SdtError(path, f"{ld} is not installed: placing a module uses it",
                       f"install {arch.toolchain.binutils_package}") from None
    if done.returncode:
        first = (done.stderr.strip().splitlines() or ["(no message)"])[0]
        raise SdtError(path, f"cannot be relocated{' against the kernel' if kernel else ''}: {printable(first)}",
                       "build the module with the kernel's flags, calling only functions the kernel has")
    yield out
