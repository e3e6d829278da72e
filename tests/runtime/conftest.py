"""Test images of the runtime's C, built by each architecture's gcc and binutils and run in Unicorn."""

from __future__ import annotations

import pytest
from helpers import run
from runtime_support import (
    HERE,
    ArchImage,
    build_image,
    include_dir,
    runtime_dir,
)


@pytest.fixture(scope="session")
def arch_image(tmp_path_factory):
    """arch -> its test image (with the sites the verify tests assemble), built once."""
    from site_forms import site_sources

    built: dict[str, ArchImage] = {}

    def get(arch_name: str) -> ArchImage:
        if arch_name not in built:
            sources, ld_flags = site_sources(arch_name)
            built[arch_name] = build_image(tmp_path_factory.mktemp(f"rt-{arch_name}"), arch_name, sources, ld_flags)
        return built[arch_name]

    return get




@pytest.fixture(scope="session")
def host_runtime(tmp_path_factory):
    """arch -> the runtime built for this machine with that architecture's encoders (64-bit ones: the host's
    word), loaded with ctypes: host_harness.c's entry points."""
    import ctypes

    from helpers import need_tool

    built: dict[str, ctypes.CDLL] = {}

    def get(arch_name: str) -> ctypes.CDLL:
        if arch_name not in built:
            out = tmp_path_factory.mktemp(f"host-{arch_name}") / "runtime.so"
            rt = runtime_dir()
            run([need_tool("gcc", "gcc"), "-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror",
                 f"-I{include_dir()}", f"-I{rt}", "-o", str(out), str(HERE / "host_harness.c"),
                 str(rt / "arch" / f"sdt_{arch_name}.c")])
            built[arch_name] = ctypes.CDLL(str(out))
        return built[arch_name]

    return get


@pytest.fixture(scope="session")
def harness_lib(tmp_path_factory):
    """The runtime built for this machine with program_harness.c (programs fired through sdt_program_fire)."""
    from programs import build_harness

    return build_harness(tmp_path_factory.mktemp("program-harness")).lib


@pytest.fixture
def harness(harness_lib):
    """A fresh CPU area and aggregation memory on the harness (tests/runtime/programs.py)."""
    from programs import Harness

    h = Harness(harness_lib)
    h.attach()
    return h


@pytest.fixture(scope="session")
def process(tmp_path_factory):
    """The control core in a Linux process: fixtures/process's kernel-proc (test_process.py builds its own)."""
    from test_process import build_process

    return build_process(tmp_path_factory.mktemp("process"))


@pytest.fixture(scope="session")
def library(tmp_path_factory):
    """fixtures/module's mod.c as a shared object the process loads as a module (DLOPEN=1)."""
    from helpers import SDTGEN
    from module_native import MODULE

    out = tmp_path_factory.mktemp("libhkm")
    run(["make", "-C", str(MODULE), "DLOPEN=1", f"O={out}", f"SDTGEN={SDTGEN}"])
    return out / "libhkm.so"
