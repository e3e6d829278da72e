"""Two sessions at once on the fixture kernel as a Linux process (fixtures/process's kernel-proc, its control core on
standard input and output): a kernel-side session of every probe, opened first on the kernel's line as a kernel opens
its own, and the host's `--session` with a predicate on one provider. Each holds exactly its own filter of the
native run's firings, and the host's session closing leaves the other recording, nothing lost from it
(docs/sessions.md; tests/session_pair.py)."""

from __future__ import annotations

import io
import json

import pytest
from native_oracle import Call, build_fixture_native
from session_pair import RING, Firings, KernelSession, both_sessions, check_both, own, run_calls

from sdtgen.session.reporter import Reporter
from sdtgen.session.starts import open_session
from sdtgen.transport.geometry import packet_size_for


@pytest.fixture(scope="module")
def native_exe(tmp_path_factory):
    return build_fixture_native(tmp_path_factory.mktemp("native"))


def opened(kernel_proc, out: io.StringIO):
    return open_session("process", str(kernel_proc), Reporter(as_json=True, out=out), own=own(), timeout=60)


def test_each_session_holds_its_own_filter_of_the_native_run_and_closing_one_loses_nothing_of_the_other(
        kernel_proc, native_exe):
    out = io.StringIO()
    s = opened(kernel_proc, out)
    try:
        firings = Firings(kernel_proc, s.target.bias)
        mine, theirs, lost = both_sessions(s, out, firings)
    finally:
        s.close()
    check_both(native_exe, mine, theirs, lost)


def test_the_sessions_listing_names_both_and_the_hosts_is_gone_once_closed(kernel_proc):
    out = io.StringIO()
    s = opened(kernel_proc, out)
    try:
        KernelSession(s, "kern", "hk:kern::")
        run_calls(s, [Call("kmain", (1,))])
        before = {x.name: x for x in s.sessions()}
        s.target.close_own()
        after = [x.name for x in s.sessions()]
    finally:
        s.close()
    assert sorted(before) == ["default", "host", "kern"] and next(iter(before)) == "default"
    assert before["kern"].packets > 0 and before["host"].packets == 0 and before["host"].policy == "drop"
    assert (before["host"].ring, before["host"].packet) == (RING, packet_size_for(RING))
    assert after == ["default", "kern"]


def test_the_hosts_aggregation_counts_in_its_own_session_and_its_printout_says_so(kernel_proc, native_exe):
    """`@n = count()` per probe in the host's session while the kernel's session takes the same probes: the counts
    are the native run's, and the printout's heading names the session they come from."""
    from session_pair import CALLS, native

    out = io.StringIO()
    s = opened(kernel_proc, out)
    try:
        KernelSession(s, "kern", "hk:sched::")
        s.aggregate("hk:sched:: { @n[probename] = count(); }\nhk:mem:: { @n[probename] = count(); }")
        run_calls(s, CALLS)
        s.printa()
    finally:
        s.close()
    [printed] = [e for e in map(json.loads, out.getvalue().splitlines()) if e["event"] == "aggregations"]
    assert printed["session"] == "host"
    want: dict[str, int] = {}
    for probe, _ in native(native_exe, CALLS):
        if probe.startswith(("hk:sched:", "hk:mem:")):
            want[probe.rsplit(":", 1)[1]] = want.get(probe.rsplit(":", 1)[1], 0) + 1
    rows = {r["keys"][0]: r["value"] for r in printed["aggregations"][0]["rows"]}
    assert rows == want


def test_on_two_cpus_at_once_each_session_holds_each_cpus_own_filter(kernel_proc, native_exe):
    """Both threads run sched_run at once while the kernel's session takes every probe and the host's its predicate:
    each CPU's part of each session is its own filter of the native run."""
    from session_pair import HOST_SPEC, host_wants, native

    out = io.StringIO()
    s = open_session("process", str(kernel_proc), Reporter(as_json=True, out=out), own=own(), cpus=2, timeout=60)
    try:
        firings = Firings(kernel_proc, s.target.bias)
        kern = KernelSession(s, "kern", ":::")
        s.enable(HOST_SPEC)
        s.run("sched_run", [5])  # on every CPU at once
        s.drain()
        theirs = kern.read(firings)
        cpus = [e.cpu for e in sorted(kern.events, key=lambda e: (e.ts, e.cpu))]
        lost = kern.lost()
    finally:
        s.close()
    every = native(native_exe, [Call("sched_run", (5,))])
    for cpu in (0, 1):
        assert [f for f, c in zip(theirs, cpus, strict=True) if c == cpu] == every
        assert [firings(e["probe"], e["args"]) for e in map(json.loads, out.getvalue().splitlines())
                if e.get("event") == "fire" and e["cpu"] == cpu] == [f for f in every if host_wants(*f)]
    assert lost == [(0, 0), (0, 0)]
