"""Shared fixtures: real builds of the fixture kernel with gcc and binutils, booted in Unicorn."""

from __future__ import annotations

import os

import pytest
from booted import Booted
from helpers import CROSS, FREEBSD, SDTGEN, Build, build_fixture, need_tool
from native_oracle import build_fixture_native, run_native

os.environ["SDTGEN"] = SDTGEN  # what tools/ drive, and make: this interpreter's sdtgen


@pytest.fixture(scope="session")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> Build:
    """The fixture kernel, reloc mode (the default)."""
    return build_fixture(tmp_path_factory.mktemp("kernel"))


@pytest.fixture(scope="session")
def arch_kernel(tmp_path_factory):
    """Build the fixture kernel for an architecture (cached per arch and make variables)."""
    built: dict[tuple, Build] = {}

    def build(arch: str, **make_vars: str) -> Build:
        key = (arch, *sorted(make_vars.items()))
        if key not in built:
            if arch in CROSS:
                need_tool(*CROSS[arch])
            built[key] = build_fixture(tmp_path_factory.mktemp(f"kernel-{arch}"), ARCH=arch, **make_vars)
        return built[key]

    return build


@pytest.fixture(scope="session")
def kernel_offset(tmp_path_factory: pytest.TempPathFactory) -> Build:
    """The fixture kernel with the 2015 design's offset-mode table."""
    return build_fixture(tmp_path_factory.mktemp("kernel-offset"), SDT_MODE="offset")


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
def freebsd_kernel(tmp_path_factory):
    """fixtures/freebsd (the rest of FreeBSD's macros, is-enabled checks) built for an architecture (and make
    variables: FORM=goto), once."""
    built: dict[tuple, Build] = {}

    def build(arch: str, **make_vars: str) -> Build:
        key = (arch, *sorted(make_vars.items()))
        if key not in built:
            if arch in CROSS:
                need_tool(*CROSS[arch])
            built[key] = build_fixture(tmp_path_factory.mktemp(f"freebsd-{arch}"), FREEBSD, ARCH=arch, **make_vars)
        return built[key]

    return build
