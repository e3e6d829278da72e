"""Architecture registry: one module per architecture behind sdtgen.arch.base.Arch."""

from __future__ import annotations

from sdtgen.arch.base import Arch
from sdtgen.errors import SdtError

# e_machine -> module name; modules are imported only when asked for.
_MACHINES = {62: "x86_64", 3: "i386", 183: "aarch64", 243: "riscv64"}
NAMES = tuple(sorted(set(_MACHINES.values())))


def by_name(name: str) -> Arch:
    if name not in NAMES:
        raise SdtError("", f"unknown architecture {name!r}", f"choose one of {', '.join(NAMES)}")
    module = __import__(f"sdtgen.arch.{name}", fromlist=["ARCH"])
    return module.ARCH


def for_elf(elf) -> Arch:
    name = _MACHINES.get(elf.machine)
    if name is None:
        raise elf.fail(f"unsupported machine type {elf.machine}", f"sdtgen supports {', '.join(NAMES)}")
    arch = by_name(name)
    if arch.bits != elf.bits or arch.little != elf.little:
        raise elf.fail(
            f"{elf.bits}-bit {'little' if elf.little else 'big'}-endian file for machine {name}",
            f"expected {arch.bits}-bit {'little' if arch.little else 'big'}-endian",
        )
    return arch
