"""On QEMU, every probe of the fixture kernel armed gives exactly the firings of the native run of
its C source, in both arming modes, on one vCPU and on four: the kernel's own sdt_init NOP'd the
sites at boot, its sdt_trap or the recorders it branches to record on every vCPU, and the packets
cross the serial line whole."""

from __future__ import annotations

from collections import Counter

import pytest
from native_oracle import PROTOTYPES, Call, data_symbolizer, run_native
from qemu_helpers import ARCHES, Qemu, qemu_json

CALLS = [Call("kmain", (1,)), Call("kmain", (2,)), Call("vfs_lookup_id", (2,)), Call("sched_run", (4,)),
         Call("sched_switch", (7, 8, 3, 1, 5000, 0x40)), Call("kmem_alloc", (1 << 20,)), Call("proc_exec", (1,)),
         Call("proc_exit", (42,)), Call("sched_run", (0,)), Call("proc_exec", (5,)), Call("kmain", (3,))]
# Calls whose firings and results do not depend on memory the CPUs share: all four may run them at once.
PURE = [Call("sched_run", (6,)), Call("proc_exit", (-7,)), Call("sched_run", (0,))]
POINTER_ARGS = {"hk:lib:ref:acquire": 0}  # a struct pointer: compared as the object it points at



def run_args(calls: list[Call]) -> list[str]:
    out = []
    for c in calls:
        out += ["--run", f"{c.function}:{PROTOTYPES[c.function][0]}"]
        for a in c.args:
            out += ["--arg", str(a)]
    return out


def symbolized(firings: list[tuple[str, list]], name) -> list[tuple[str, list]]:
    out = []
    for probe, args in firings:
        if probe in POINTER_ARGS:
            i = POINTER_ARGS[probe]
            args = [*args[:i], name(args[i]), *args[i + 1:]]
        out.append((probe, args))
    return out


def native(exe, calls: list[Call]) -> tuple[list[tuple[str, list]], list]:
    """The native run's firings (pointers symbolized) and non-void results."""
    events = run_native(exe, calls)
    fired = symbolized([(e["probe"], e["args"]) for e in events if "probe" in e], data_symbolizer(exe))
    return fired, [e["return"] for e in events if "return" in e and e["return"] is not None]


def native_by_call(exe, calls: list[Call]) -> list[list[tuple[str, list]]]:
    """The native run's firings, call by call (each call's end is its return line)."""
    name, chunks, current = data_symbolizer(exe), [], []
    for e in run_native(exe, calls):
        if "probe" in e:
            current.append((e["probe"], e["args"]))
        else:
            chunks.append(symbolized(current, name))
            current = []
    return chunks


def ours(image, events: list[dict], cpu: int | None = None) -> tuple[list[tuple[str, list]], list]:
    def on(e: dict) -> bool:
        return cpu is None or e.get("cpu", 0) == cpu

    fired = [(e["probe"], e["args"]) for e in events if e["event"] == "fire" and on(e)]
    returns = [e["value"] for e in events if e["event"] == "return" and on(e) and e["value"] is not None]
    return symbolized(fired, data_symbolizer(image)), returns


FORMS = ("call", "goto")  # sdt.h's probe forms: calls NOP'd at boot, and FreeBSD 15's asm goto (SDT_ASM_GOTO)


def built(qemu_kernel, arch: str, form: str):
    return qemu_kernel(arch, **({"FORM": "goto"} if form == "goto" else {}))


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("mode", ["trap", "branch"])
def test_every_probe_armed_fires_as_the_native_run_on_one_vcpu(qemu_kernel, native_exe, arch, mode, form):
    image = built(qemu_kernel, arch, form)
    events = qemu_json(image, "--arm", mode, "--enable", ":::", *run_args(CALLS))
    expected = native(native_exe, CALLS)
    assert ours(image, events) == expected
    assert len(expected[0]) > 40 and {p for p, _ in expected[0]} >= {"hk:proc:exit:done", "raw:::checksum"}
    assert events[-1] == {"event": "stats", "hits": dict(sorted(Counter(p for p, _ in expected[0]).items())),
                          "lost": 0}


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("mode", ["trap", "branch"])
def test_on_four_vcpus_each_fires_the_calls_it_ran(qemu_kernel, native_exe, arch, mode, form):
    image = built(qemu_kernel, arch, form)
    q = Qemu(image, cpus=4, arm=mode)
    try:
        q.session.enable(":::")
        q.events()
        for i, c in enumerate(CALLS):  # in turn on every vCPU: the calls' shared state evolves as natively
            q.session.run(f"{c.function}:{PROTOTYPES[c.function][0]}", list(c.args), cpu=i % 4)
        events = q.events()
    finally:
        q.close()
    assert ours(image, events) == native(native_exe, CALLS)
    chunks = native_by_call(native_exe, CALLS)
    for cpu in range(4):
        assert ours(image, events, cpu)[0] == [f for i, c in enumerate(chunks) if i % 4 == cpu for f in c]


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("mode", ["trap", "branch"])
def test_four_vcpus_running_at_once_each_fire_the_native_run(qemu_kernel, native_exe, arch, mode, form):
    image = built(qemu_kernel, arch, form)
    events = qemu_json(image, "--cpus", "4", "--arm", mode, "--enable", ":::", *run_args(PURE))
    expected = native(native_exe, PURE)
    for cpu in range(4):
        assert ours(image, events, cpu) == expected, f"CPU {cpu}"
    assert len(expected[0]) == 6 + 1 + 1
