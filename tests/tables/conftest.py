"""Small real programs carrying each kind of probe table, built once per session with gcc."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from builders import Builder
from helpers import unavailable

SDT_H = Path("/usr/include/x86_64-linux-gnu/sys/sdt.h")


@pytest.fixture(scope="session")
def sdt_include(tmp_path_factory) -> Path:
    """sys/sdt.h (systemtap-sdt-dev) in a directory of its own: the header is the same on every
    architecture, and the cross compilers do not search the host's multiarch include directory."""
    if not SDT_H.exists():
        unavailable("sys/sdt.h not found: apt-get install systemtap-sdt-dev")
    inc = tmp_path_factory.mktemp("sdt-include")
    (inc / "sys").mkdir()
    for h in SDT_H.parent.glob("sdt*.h"):
        shutil.copy(h, inc / "sys" / h.name)
    return inc


@pytest.fixture(scope="session")
def builder(tmp_path_factory):
    root = tmp_path_factory.mktemp("tables")
    made: dict[str, Builder] = {}

    def get(arch: str) -> Builder:
        if arch not in made:
            made[arch] = Builder(arch, root)
        return made[arch]

    return get
