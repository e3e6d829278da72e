"""The fixture kernel linked with its QEMU platform (fixtures/qemu), built once per architecture and
runtime build."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import SDTGEN, built_once, run
from qemu_helpers import PLATFORM, need_qemu


@pytest.fixture(scope="session")
def qemu_kernel(tmp_path_factory):
    """``build(arch, naive=False, **make_vars)``: the image's path (built once for each)."""
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
def native_exe(tmp_path_factory):
    """The fixture's C built for this machine (every probe a function that prints its call): the QEMU tests' truth,
    without the emulator's kernel the top-level fixture builds first."""
    from native_oracle import build_fixture_native

    return build_fixture_native(tmp_path_factory.mktemp("native"))
