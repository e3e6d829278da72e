"""Helpers for tests: run tools, build the fixture kernel and small objects with gcc and binutils."""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import NoReturn

import pytest
from toolchain import kernel_cflags, runtime_sources

from sdtgen import arch as arches

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "fixtures" / "kernel"
FREEBSD = ROOT / "fixtures" / "freebsd"  # the rest of FreeBSD's macro set and is-enabled checks
SDTGEN = str(Path(sys.executable).with_name("sdtgen"))
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


# Every architecture from sdtgen's registry, and for each one built with cross tools, (its gcc, the package).
ARCHES = arches.names()
CROSS = {a.name: (f"{a.toolchain.cross_prefix}gcc", a.toolchain.gcc_package) for a in arches.all_arches()
         if a.toolchain.cross_prefix}
OTHER_ARCHES = tuple(CROSS)  # the architectures compared with x86-64


def cross_tool(arch: str, tool: str) -> str:
    """A GNU tool for ``arch`` (as, objdump, ld...): its path, or a skip (a failure under CI) naming the package."""
    t = arches.by_name(arch).toolchain
    return need_tool(f"{t.cross_prefix}{tool}", t.gcc_package if tool == "gcc" else t.binutils_package)


def unavailable(message: str) -> NoReturn:
    """Something a test needs is missing from this machine: a skip saying how to get it, a failure under CI
    (in a test, or at a module's top: a collection error)."""
    if IN_CI:
        pytest.fail(message + " (CI installs it in .ci/run)")
    pytest.skip(message, allow_module_level=True)


# The run's directory of ccache's stand-ins for the compilers (conftest.compiler_cache): first on PATH.
CCACHE_FRONT = "ccache-front"


def need_tool(tool: str, package: str) -> str:
    """The tool's path (the installed one, not ccache's stand-in); a skip naming the Debian package, or a
    failure under CI."""
    dirs = [d for d in os.environ.get("PATH", "").split(os.pathsep) if Path(d).name != CCACHE_FRONT]
    path = shutil.which(tool, path=os.pathsep.join(dirs))
    if path is None:
        unavailable(f"{tool} not found: apt-get install {package}")
    return path


def need_module(name: str, install: str) -> ModuleType:
    """The Python module ``name``, imported; a skip saying how to ``install`` it, or a failure under CI."""
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError:
        unavailable(f"Python module {name} not found: {install}")


def run(cmd: list[str], cwd: Path | str | None = None, check: bool = True, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, **kw)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, cmd))} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc


def sdtgen(*args: str, check: bool = False, cwd: Path | str | None = None) -> subprocess.CompletedProcess:
    return run([SDTGEN, *map(str, args)], cwd=cwd, check=check)


@dataclass
class Build:
    dir: Path
    partial: Path
    image: Path
    stubs: Path
    table: Path


def run_dir(factory: pytest.TempPathFactory, name: str) -> Path:
    """A directory of this run that every parallel worker shares (each has a base directory of its own)."""
    base = factory.getbasetemp()
    shared = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / name
    shared.mkdir(exist_ok=True)
    return shared


def built_once(factory: pytest.TempPathFactory, name: str, make: Callable[[Path], object]) -> Path:
    """The directory ``make(directory)`` builds into, made once for the whole run: the first of the parallel
    workers to ask builds it under a lock, the others wait and use it. Tests only read what it holds (a test
    that changes an image copies it first)."""
    shared = run_dir(factory, "built-once")
    # make reads "=" and spaces in O= as its own; the digest keeps names apart that only differed there
    safe = re.sub(r"[^\w.-]", "_", name)[:80]
    out = shared / f"{safe}-{hashlib.sha1(name.encode()).hexdigest()[:10]}"
    with open(shared / f"{out.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (out / ".built").exists():  # a worker that failed half way left no mark
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir()
            make(out)
            (out / ".built").touch()
    return out


def fixture_build(out: Path) -> Build:
    """The outputs of a fixture kernel built into ``out``."""
    return Build(out, out / "kernel.o", out / "kernel.elf", out / "kernel_sdt_stubs.c", out / "kernel_sdt_table.S")


def build_fixture(out: Path, root: Path = FIXTURE, **make_vars: str) -> Build:
    out.mkdir(parents=True, exist_ok=True)
    assigns = [f"{k}={v}" for k, v in make_vars.items()]
    run(["make", "-C", str(root), f"O={out}", f"SDTGEN={SDTGEN}", *assigns])
    readelf_symbols(out / "kernel.o")  # gen rewrote it: readelf reads it back without a warning
    return fixture_build(out)


def include_flag() -> str:
    return "-I" + sdtgen("include-dir", check=True).stdout.strip()


def compile_c(tmp: Path, name: str, source: str, *flags: str) -> Path:
    """Compile one C file with the kernel flags (tools/kernel_flags.mk and the registry's) and sdt.h on the
    include path."""
    src = tmp / f"{name}.c"
    src.write_text(source)
    obj = tmp / f"{name}.o"
    include = sdtgen("include-dir", check=True).stdout.strip()
    run(["gcc", *kernel_cflags("x86_64"), f"-I{include}", *flags, "-c", "-o", str(obj), str(src)])
    return obj


def assemble(tmp: Path, name: str, source: str, *flags: str) -> Path:
    src = tmp / f"{name}.s"
    src.write_text(source)
    obj = tmp / f"{name}.o"
    run(["as", *flags, "-o", str(obj), str(src)])
    return obj


def partial_link(tmp: Path, name: str, *objs: Path) -> Path:
    out = tmp / f"{name}.o"
    script = sdtgen("linker-script", "partial", "--path", check=True).stdout.strip()
    run(["ld", "-r", "-T", script, "-o", str(out), *map(str, objs)])
    return out


def final_script(path: Path, arch: str = "x86_64") -> Path:
    """sdtgen's final linker script for ``arch``, written to ``path`` (it is made from a template)."""
    sdtgen("linker-script", "final", "--arch", arch, "-o", path, check=True)
    return path


def final_link(tmp: Path, partial: Path, mode: str = "reloc", name: str = "image", order: str = "kernel-first") -> Path:
    """gen + compile stubs and table + final link, the way sdtgen.mk does it."""
    stubs, table = tmp / f"{name}_stubs.c", tmp / f"{name}_table.S"
    sdtgen("gen", partial, "--mode", mode, "--stubs", stubs, "--table", table, check=True)
    readelf_symbols(partial)  # gen rewrote it: readelf reads it back without a warning
    sdt_objs = compile_runtime(tmp, name, stubs, table)
    script = final_script(tmp / f"{name}_final.ld")
    image = tmp / f"{name}.elf"
    objs = [partial, *sdt_objs] if order == "kernel-first" else [*sdt_objs, partial]
    run(["ld", "-T", script, "-o", str(image), *map(str, objs)])
    return image


def compile_runtime(tmp: Path, name: str, stubs: Path, table: Path, arch: str = "x86_64",
                    *flags: str) -> list[Path]:
    """gen's stubs and table and the runtime (every source of the fragment's list and the port), compiled with the
    kernel's flags as sdtgen.mk compiles them."""
    runtime = Path(arches.__file__).resolve().parent.parent / "runtime"
    gcc = cross_tool(arch, "gcc")
    cflags = [*kernel_cflags(arch), *flags, include_flag(), "-fno-lto", "-c"]
    out = []
    for src, suffix in ((stubs, "stubs"), (table, "table"), *((s, f"rt_{s.stem}") for s in runtime_sources()),
                        (runtime / "arch" / f"sdt_{arch}.c", "arch")):
        obj = tmp / f"{name}_{suffix}.o"
        run([gcc, *cflags, "-o", str(obj), str(src)])
        out.append(obj)
    return out


def build_c_kernel(tmp: Path, arch: str, source: str, name: str = "k", *flags: str) -> Path:
    """A kernel of one C file for ``arch``, built as sdtgen.mk builds one: compile, partial link, gen, the
    generated code and the runtime with the kernel's flags, the final link with sdtgen's script."""
    gcc, ld = cross_tool(arch, "gcc"), cross_tool(arch, "ld")
    src, obj, partial = tmp / f"{name}.c", tmp / f"{name}.o", tmp / f"{name}_partial.o"
    src.write_text(source)
    run([gcc, *kernel_cflags(arch), *flags, include_flag(), "-c", "-o", str(obj), str(src)])
    run([ld, "-r", "-T", sdtgen("linker-script", "partial", "--path", check=True).stdout.strip(), "-o", str(partial),
         str(obj)])
    stubs, table = tmp / f"{name}_stubs.c", tmp / f"{name}_table.S"
    sdtgen("gen", partial, "--stubs", stubs, "--table", table, check=True)
    sdt_objs = compile_runtime(tmp, name, stubs, table, arch, *flags)
    script = final_script(tmp / f"{name}_final.ld", arch)
    image = tmp / f"{name}.elf"
    run([ld, "-T", str(script), "-o", str(image), str(partial), *map(str, sdt_objs)])
    return image


def corrupt_site_entry(image: Path, out: Path, index: int, delta: int) -> Path:
    """A copy of ``image`` whose site entry ``index`` points ``delta`` bytes off its site."""
    import struct

    from sdtgen.elf.reader import ElfFile
    from sdtgen.table import SITE_SIZE

    with ElfFile(image) as elf:
        offset = elf.section("set_sdt_sites_set").offset + SITE_SIZE * index
    data = bytearray(image.read_bytes())
    (rel,) = struct.unpack_from("<i", data, offset)
    struct.pack_into("<i", data, offset, rel + delta)
    out.write_bytes(data)
    return out


def readelf_probe_relocs(obj) -> list[tuple[str, int, str, str]]:
    """(section, field offset, type, symbol) of every reloc against __dtrace_sdt_*, per readelf -rW."""
    out, section = [], None
    for line in run(["readelf", "-rW", str(obj)]).stdout.splitlines():
        m = re.match(r"Relocation section '\.rela?(\S+)'", line)
        if m:
            section = m.group(1)
            continue
        f = line.split()
        if len(f) >= 5 and f[4].startswith("__dtrace_sdt_"):
            out.append((section, int(f[0], 16), f[2], f[4]))
    return out


# Section type names as readelf prints them (binutils' get_section_type_name), by number; the
# processor-specific ones per e_machine. A type missing here fails the comparison loudly.
READELF_SECTION_TYPES = {
    0: "NULL", 1: "PROGBITS", 2: "SYMTAB", 3: "STRTAB", 4: "RELA", 5: "HASH", 6: "DYNAMIC", 7: "NOTE", 8: "NOBITS",
    9: "REL", 11: "DYNSYM", 14: "INIT_ARRAY", 15: "FINI_ARRAY", 16: "PREINIT_ARRAY", 17: "GROUP",
    18: "SYMTAB SECTION INDICES", 0x6FFFFFF6: "GNU_HASH", 0x6FFF4C03: "LLVM_ADDRSIG", 0x6FFFFFF5: "GNU_ATTRIBUTES",
}
READELF_MACHINE_SECTION_TYPES = {62: {0x70000001: "X86_64_UNWIND"}, 243: {0x70000003: "RISCV_ATTRIBUTES"},
                                 183: {}, 3: {}}


def readelf_sections(path) -> list[tuple[str, str, int, int]]:
    """(name, type, offset, size) of every section header, per `readelf -tW` (names on their own line)."""
    lines = run(["readelf", "-tW", str(path)]).stdout.splitlines()
    rows = []
    for i, line in enumerate(lines):
        m = re.match(r"\s+\[\s*(\d+)\](?!:) ?(.*)$", line)  # not a "[flags]: ..." line
        if m and i + 1 < len(lines) and not m.group(2).startswith("Name"):
            f = lines[i + 1].split()  # Type (maybe several words), Address, Off, Size, ES, Lk, Inf, Al
            rows.append((m.group(2), " ".join(f[:-7]), int(f[-6], 16), int(f[-5], 16)))
    return rows


def readelf_symbols(path) -> list[tuple[int, int, str, str, str, str]]:
    """(value, size, type, bind, section index or UND/ABS/COM, name) of every .symtab entry, per `readelf -sW`."""
    proc = run(["readelf", "-sW", str(path)])
    assert "warning" not in proc.stderr.lower(), proc.stderr
    rows, in_symtab = [], False
    for line in proc.stdout.splitlines():
        if line.startswith("Symbol table"):
            in_symtab = "'.symtab'" in line
            continue
        m = re.match(r"\s*\d+: (\S+)\s+(\S+) (\S+)\s+(\S+)\s+(\S+)\s+(\S+) (.*)$", line)
        if in_symtab and m:  # the name as printed, trailing spaces included (RISC-V's ".L0 ")
            rows.append((int(m[1], 16), int(m[2], 0), m[3], m[4], m[6], m[7]))
    return rows


def readelf_relocs(path, bits: int) -> list[tuple[str, int, int, int, str, int | None]]:
    """(relocation section, offset, symbol index, type, type name, addend or None for REL), per `readelf -rW`.

    The symbol index and type come from the Info column; readelf names section symbols by their section."""
    rows, section = [], None
    for line in run(["readelf", "-rW", str(path)]).stdout.splitlines():
        m = re.match(r"Relocation section '([^']+)'", line)
        if m:
            section = m.group(1)
            continue
        f = line.split()
        if section and len(f) >= 3 and re.fullmatch(r"[0-9a-f]{8,16}", f[0]) and f[2].startswith("R_"):
            info = int(f[1], 16)
            sym, rtype = (info >> 32, info & 0xFFFFFFFF) if bits == 64 else (info >> 8, info & 0xFF)
            addend = None
            if section.startswith(".rela"):
                rest = f[3:]
                addend = int(rest[-1], 16) * (-1 if len(rest) >= 2 and rest[-2] == "-" else 1)
            rows.append((section, int(f[0], 16), sym, rtype, f[2], addend))
    return rows


def assemble_text(arch_name: str, flags: list[str], source: str, tmp: Path, name: str) -> bytes:
    """``source`` assembled by the architecture's GNU as and linked by its GNU ld at the kernel's address
    (ld resolves what as left to it, like RISC-V's jumps): the bytes of .text, from its start."""
    from sdtgen import arch as arches

    gas, ld, objcopy = (cross_tool(arch_name, t) for t in ("as", "ld", "objcopy"))
    src, obj, linked, raw = (tmp / f"{name}.{x}" for x in ("s", "o", "elf", "bin"))
    src.write_text(".text\n" + "\n".join(line.strip() for line in source.splitlines()) + "\n")
    run([gas, *flags, "-o", str(obj), str(src)])
    run([ld, f"-Ttext={arches.by_name(arch_name).kernel_base:#x}", "-e", "stub", "--no-relax", "-o", str(linked),
         str(obj)])
    run([objcopy, "-O", "binary", "-j", ".text", str(linked), str(raw)])
    return raw.read_bytes()


def on_terminal(*args: str) -> tuple[subprocess.CompletedProcess, str]:
    """sdtgen run with its standard error on a terminal (a pty; stdout a pipe): the run, and everything it wrote to
    the terminal, as a user would have seen it arrive."""
    import pty

    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen([SDTGEN, *map(str, args)], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=slave)
    finally:
        os.close(slave)
    seen = bytearray()
    try:
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the last writer closed its side
                break
            if not chunk:
                break
            seen += chunk
    finally:
        os.close(master)
    out = proc.stdout.read().decode()
    proc.stdout.close()
    return subprocess.CompletedProcess(proc.args, proc.wait(), out, ""), seen.decode("utf-8", "replace")
