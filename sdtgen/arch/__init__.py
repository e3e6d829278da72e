"""Architecture registry: one module per architecture behind sdtgen.arch.base.Arch.

Every module in this package except ``base`` defines ``ARCH``; adding an
architecture means adding its module. Everything else (the CLI's choices,
the fixture Makefile, CI's packages, the tests, and through `sdtgen arch
--json` the build farm in tools/) reads the registry. Importing it needs only the standard library: CI runs
`python3 -m sdtgen arch --packages` before any virtual environment exists.
"""

from __future__ import annotations

import os

from sdtgen.arch.base import Arch
from sdtgen.errors import SdtError

# The architecture a command takes when none is given (`sdtgen linker-script final`): the registry's first, named
# here so that the command line need not import every module to learn it.
DEFAULT = "x86_64"

_cache: dict[str, object] = {}  # not functools.cache: functools is an import sdtgen's start-up does without


def module_names() -> tuple[str, ...]:
    """The architectures' names, from the package's directory alone: what the command line offers
    without importing a module it may not need (sdtgen starts in every kernel build)."""
    if "names" not in _cache:
        here = os.path.dirname(__file__)  # a directory listing, not pkgutil
        _cache["names"] = tuple(sorted(f[:-3] for f in os.listdir(here)
                                       if f.endswith(".py") and f not in ("__init__.py", "base.py")))
    return _cache["names"]


def _registry() -> dict[str, Arch]:
    if "registry" not in _cache:
        found = [__import__(f"{__name__}.{m}", fromlist=["ARCH"]).ARCH for m in module_names()]
        _cache["registry"] = {a.name: a for a in sorted(found, key=lambda a: (a.order, a.name))}
    return _cache["registry"]


def all_arches() -> list[Arch]:
    """Every architecture, x86-64 first (the registry's order: each module's ``order``)."""
    return list(_registry().values())


def names() -> tuple[str, ...]:
    return tuple(_registry())


def by_name(name: str) -> Arch:
    arch = _registry().get(name)
    if arch is None:
        raise SdtError("", f"unknown architecture {name!r}", f"choose one of {', '.join(names())}")
    return arch


def for_triple(triple: str) -> Arch:
    """The architecture of a GNU triple, as `$(CC) -dumpmachine` prints it (x86_64-pc-linux-gnu, i686-linux-gnu)."""
    cpu = triple.strip().split("-", 1)[0]
    for arch in _registry().values():
        if cpu in arch.toolchain.triple_cpus:
            return arch
    raise SdtError("", f"target {triple.strip() or '(empty)'!r} is none of sdtgen's architectures",
                   f"set SDT_ARCH to one of {', '.join(names())}, or use a compiler for one of them")


def packages() -> list[str]:
    """The Debian packages that build for every architecture and boot it: compilers, binutils and the
    QEMU that runs its platform (fixtures/qemu), each once."""
    out: list[str] = []
    for arch in _registry().values():
        out.extend(p for p in (arch.toolchain.gcc_package, arch.toolchain.binutils_package,
                               arch.qemu.package if arch.qemu else "") if p and p not in out)
    return out


def for_machine(machine: int) -> Arch | None:
    """The architecture of an ELF e_machine, or None when sdtgen has none for it."""
    return next((a for a in _registry().values() if a.machine == machine), None)


def for_elf(elf) -> Arch:
    arch = next((a for a in _registry().values() if a.machine == elf.machine), None)
    if arch is None:
        raise elf.fail(f"unsupported machine type {elf.machine}", f"sdtgen supports {', '.join(names())}")
    if arch.bits != elf.bits or arch.little != elf.little:
        raise elf.fail(
            f"{elf.bits}-bit {'little' if elf.little else 'big'}-endian file for machine {arch.name}",
            f"expected {arch.bits}-bit {'little' if arch.little else 'big'}-endian",
        )
    return arch
