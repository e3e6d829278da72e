"""A fleet of two different machines at once (sdtgen/session/fleet.py): a QEMU guest with two vCPUs and the fixture
kernel as a Linux process, the same actions on each. Each fires, on each of its CPUs, what the fixture's C fires
natively, and its own CTF trace (DIR/NAME/) holds the same for babeltrace2."""

from __future__ import annotations

import json

from helpers import sdtgen
from process_oracle import ACTIONS, fired, native, read_back
from qemu_helpers import ARCHES


def test_a_qemu_guest_and_a_process_traced_at_once_each_fire_their_native_run(qemu_kernel, kernel_proc, native_exe,
                                                                               tmp_path):
    firings, returns, total = native(native_exe)
    image, trace = qemu_kernel(ARCHES[0]), tmp_path / "trace"
    r = sdtgen("fleet", "--machine", f"guest=qemu:{image},cpus=2", "--machine", f"proc=process:{kernel_proc}",
               *ACTIONS, "--json", "--trace", str(trace), "--timeout", "120")
    assert r.returncode == 0 and r.stderr == "", r.stderr
    events = [json.loads(line) for line in r.stdout.splitlines()]
    assert fired(events, 0, "guest") == fired(events, 1, "guest") == fired(events, 0, "proc") == firings
    for name, cpu in (("guest", 1), ("proc", 0)):
        assert [e["value"] for e in events if e["machine"] == name and e["event"] == "return"
                and e.get("cpu", 0) == cpu] == returns
    ends = {e["machine"]: e for e in events if e["event"] == "machine"}
    assert (ends["guest"]["ok"], ends["guest"]["events"], ends["guest"]["lost"]) == (True, 2 * total, 0)
    assert (ends["proc"]["ok"], ends["proc"]["events"], ends["proc"]["lost"]) == (True, total, 0)
    assert read_back(trace / "guest") == {0: firings, 1: firings}
    assert read_back(trace / "proc") == {0: firings}
