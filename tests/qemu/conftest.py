"""The QEMU tests' native run (the fixture kernel linked with its QEMU platform, fixtures/qemu, is tests/conftest.py's
qemu_kernel, which tests/live boots too)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def native_exe(tmp_path_factory):
    """The fixture's C built for this machine (every probe a function that prints its call): the QEMU tests' truth,
    without the emulator's kernel the top-level fixture builds first."""
    from native_oracle import build_fixture_native

    return build_fixture_native(tmp_path_factory.mktemp("native"))
