"""Two sessions at once on QEMU (x86-64 and AArch64): the fixture kernel's own session of every probe, opened first on
its line as its boot code would open a flight recorder, and the host's `sdtgen qemu --session` with a predicate on
one provider. Each holds exactly its own filter of the native run's firings, and the host's session closing at
power-off's eve leaves the kernel's recording, nothing lost from it (docs/sessions.md; tests/session_pair.py)."""

from __future__ import annotations

import pytest
from native_oracle import build_fixture_native
from qemu_helpers import Qemu
from session_pair import Firings, both_sessions, check_both, own

ARCHES = ("x86_64", "aarch64")


@pytest.fixture(scope="module")
def native_exe(tmp_path_factory):
    return build_fixture_native(tmp_path_factory.mktemp("native"))


@pytest.mark.parametrize("arch", ARCHES)
def test_each_session_on_qemu_holds_its_own_filter_of_the_native_run(qemu_kernel, native_exe, arch):
    image = qemu_kernel(arch)
    q = Qemu(image, own=own())
    try:
        mine, theirs, lost = both_sessions(q.session, q.buffer, Firings(image))
    finally:
        q.close()
    check_both(native_exe, mine, theirs, lost)
