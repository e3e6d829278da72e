"""Shared fixtures: real builds of the fixture kernel with gcc and binutils, booted in Unicorn."""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
from pathlib import Path

import pytest
from booted import Booted
from helpers import (
    CCACHE_FRONT,
    CROSS,
    FIXTURE,
    FREEBSD,
    ROOT,
    SDTGEN,
    Build,
    build_fixture,
    built_once,
    fixture_build,
    need_tool,
    run,
    run_dir,
)
from native_oracle import build_fixture_native, run_native
from qemu_helpers import PLATFORM, need_qemu

from sdtgen import arch as arches

os.environ["SDTGEN"] = SDTGEN  # what tools/ drive, and make: this interpreter's sdtgen


@pytest.fixture(scope="session", autouse=True)
def compiler_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Every C compiler the tests run goes through ccache, one cache for the whole run: the runtime's sources
    are compiled with the same flags in most builds, and gcc does each such compile once (ccache hands back
    what it wrote). Each ccache in the front directory stands for the compiler of its name further on PATH."""
    ccache = Path(sys.executable).with_name("ccache")
    if not ccache.exists():  # a checkout run without the test extras: every compile is gcc's own
        return
    front = run_dir(tmp_path_factory, CCACHE_FRONT)
    for name in ("cc", "gcc", "clang", *(f"{a.toolchain.cross_prefix}gcc" for a in arches.all_arches())):
        if shutil.which(name) and not (front / name).exists():
            with contextlib.suppress(FileExistsError):  # the other worker made it first
                (front / name).symlink_to(ccache)
    os.environ["CCACHE_DIR"] = str(run_dir(tmp_path_factory, "ccache"))
    os.environ["PATH"] = f"{front}{os.pathsep}{os.environ['PATH']}"


@pytest.fixture(scope="session")
def fixture_builds(tmp_path_factory: pytest.TempPathFactory):
    """``build(root, arch, **make_vars)``: a fixture kernel (fixtures/kernel, fixtures/freebsd) built once for
    the whole run."""
    built: dict[tuple, Build] = {}

    def build(root: Path, arch: str = "x86_64", **make_vars: str) -> Build:
        key = (root.name, arch, *sorted(make_vars.items()))
        if key not in built:
            if arch in CROSS:
                need_tool(*CROSS[arch])
            name = "-".join(key[:2] + tuple(f"{k}={v}" for k, v in key[2:]))
            built[key] = fixture_build(
                built_once(tmp_path_factory, name, lambda out: build_fixture(out, root, ARCH=arch, **make_vars)))
        return built[key]

    return build


@pytest.fixture(scope="session")
def kernel(fixture_builds) -> Build:
    """The fixture kernel, reloc mode (the default)."""
    return fixture_builds(FIXTURE)


@pytest.fixture(scope="session")
def arch_kernel(fixture_builds):
    """Build the fixture kernel for an architecture (cached per arch and make variables)."""
    return lambda arch, **make_vars: fixture_builds(FIXTURE, arch, **make_vars)


@pytest.fixture(scope="session")
def kernel_offset(fixture_builds) -> Build:
    """The fixture kernel with the 2015 design's offset-mode table."""
    return fixture_builds(FIXTURE, SDT_MODE="offset")


@pytest.fixture
def booted(kernel):
    b = Booted(kernel.image)
    b.events()  # drop the boot's own events
    yield b
    b.session.close()


@pytest.fixture(scope="session")
def native_exe(kernel, tmp_path_factory):
    """The fixture's C built for this machine, every probe a function that prints its call."""
    return build_fixture_native(tmp_path_factory.mktemp("native"))


@pytest.fixture(scope="session")
def native(native_exe):
    return lambda calls: run_native(native_exe, calls)


@pytest.fixture(scope="session")
def freebsd_kernel(fixture_builds):
    """fixtures/freebsd (the rest of FreeBSD's macros, is-enabled checks) built for an architecture (and make
    variables: FORM=goto), once."""
    return lambda arch, **make_vars: fixture_builds(FREEBSD, arch, **make_vars)


@pytest.fixture(scope="session")
def qemu_kernel(tmp_path_factory):
    """The fixture kernel linked with its QEMU platform (fixtures/qemu): ``build(arch, naive=False, **make_vars)``,
    the image's path (built once for each)."""
    built: dict[tuple, Path] = {}

    def build(arch: str, naive: bool = False, **make_vars: str) -> Path:
        key = (arch, naive, *sorted(make_vars.items()))
        if key not in built:
            need_qemu(arch)
            name = "-".join((f"qemu-{arch}", f"naive={int(naive)}", *(f"{k}={v}" for k, v in key[2:])))
            out = built_once(tmp_path_factory, name, lambda out: run(
                ["make", "-C", str(PLATFORM), f"ARCH={arch}", f"O={out}", f"SDTGEN={SDTGEN}", f"NAIVE={int(naive)}",
                 *(f"{k}={v}" for k, v in make_vars.items())]))
            built[key] = out / "kernel.elf"
        return built[key]

    return build


@pytest.fixture(scope="session")
def kernel_proc(tmp_path_factory):
    """fixtures/process's kernel-proc: the fixture kernel on the hosted platform."""
    out = tmp_path_factory.mktemp("process")
    run(["make", "-C", str(ROOT / "fixtures" / "process"), f"O={out}", f"SDTGEN={SDTGEN}"])
    return out / "kernel-proc"
