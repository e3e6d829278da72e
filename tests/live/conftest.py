"""The live tests' native run: the fixture's C built for this machine, the truth of every machine they stream (the
QEMU guests', the process's and the attached kernel's are all the fixture kernel)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def native_exe(tmp_path_factory):
    from native_oracle import build_fixture_native

    return build_fixture_native(tmp_path_factory.mktemp("native"))
