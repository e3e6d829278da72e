"""Firings: exactly what the C source passes, in order, only for armed probes; results unchanged."""

from __future__ import annotations

import fnmatch

import pytest
from native_oracle import PROTOTYPES, Call, data_symbolizer

CALLS = [
    Call("kmain", (1,)),
    Call("kmain", (2,)),
    Call("vfs_lookup_id", (2,)),
    Call("sched_run", (4,)),
    Call("sched_run", (0,)),
    Call("sched_switch", (7, 8, 3, 1, 5000, 0x40)),
    Call("kmem_alloc", (100,)),
    Call("kmem_alloc", (1 << 20,)),
    Call("proc_exec", (1,)),
    Call("proc_exec", (5,)),
    Call("proc_exit", (42,)),
    Call("kmain", (3,)),
]


POINTER_ARGS = {"hk:lib:ref:acquire": 0}  # probe -> index of its struct pointer argument


def firings(events: list[dict], symbolize=None) -> list[tuple[str, list]]:
    out = [(e["probe"], e["args"]) for e in events if e.get("event") == "fire" or ("event" not in e and "probe" in e)]
    return [(p, _symbolized(p, a, symbolize)) for p, a in out] if symbolize else out


def _symbolized(probe: str, args: list, symbolize) -> list:
    """Pointers differ between two builds; the objects they point at must not."""
    if probe in POINTER_ARGS:
        i = POINTER_ARGS[probe]
        args = [*args[:i], symbolize(args[i]), *args[i + 1:]]
    return args


def native_firings(events: list[dict], *specs: str) -> list[tuple[str, list]]:
    def wanted(probe: str) -> bool:
        return any(all(not p or fnmatch.fnmatchcase(v, p) for p, v in zip(spec.split(":"), probe.split(":"),
                                                                           strict=True)) for spec in specs)
    return [(e["probe"], e["args"]) for e in events if "probe" in e and wanted(e["probe"])]


FORMS = ("call", "goto")  # sdt.h's probe forms: calls NOP'd at boot, and FreeBSD 15's asm goto (SDT_ASM_GOTO)


@pytest.fixture(params=FORMS)
def formed(request, kernel, arch_kernel):
    """A boot of the fixture kernel built with each probe form (the goto build's only direct call is lib.c's)."""
    from booted import Booted

    image = kernel.image if request.param == "call" else arch_kernel("x86_64", FORM="goto").image
    b = Booted(image)
    b.events()  # drop the boot's own events
    yield b
    b.session.close()


class Same:
    """Compare emulated and native firings with pointers resolved to the object they point at: in the fixture
    kernel's image, or (``of``) another build's."""

    def __init__(self, image, theirs) -> None:
        self.image, self.theirs = image, theirs

    def of(self, image) -> Same:
        return Same(image, self.theirs)

    def __call__(self, emulated: list[dict], native_events: list[dict], *specs: str) -> None:
        expected = [(p, _symbolized(p, a, self.theirs)) for p, a in native_firings(native_events, *specs)]
        assert firings(emulated, data_symbolizer(self.image)) == expected
        assert len(expected) > 0


@pytest.fixture
def same(kernel, native_exe):
    return Same(kernel.image, data_symbolizer(native_exe))


def returns(events: list[dict]) -> list[int | None]:
    out = []
    for e in events:
        if e.get("event") == "return" or ("return" in e and "event" not in e):
            out.append(e.get("value", e.get("return")))
    return out


def comparable(values: list, calls: list[Call]) -> list:
    """Void functions return nothing to compare."""
    return [v for v, c in zip(values, calls, strict=True) if PROTOTYPES[c.function][0] != "void"]


def test_all_armed_firings_equal_the_native_run(formed, native, same):
    booted = formed
    booted.session.enable(":::")
    emulated = booted.run(CALLS)
    expected = native(CALLS)
    same.of(booted.session.image.path)(emulated, expected, ":::")
    assert comparable(returns(emulated), CALLS) == comparable(returns(expected), CALLS)
    fired = {p for p, _ in firings(emulated)}
    assert {"hk:sched:switch:six", "hk:vfs:lookup:entry", "hk:proc:exit:done", "hk:mem:alloc:fail"} <= fired


def test_six_argument_and_string_probes_carry_the_c_values(formed):
    booted = formed
    booted.session.enable("hk:sched:switch:six")
    booted.session.enable("hk:vfs:lookup:entry")
    booted.session.enable("exec-success")
    events = booted.run([Call("sched_switch", (7, 8, 3, 1, 5000, 0x40)), Call("vfs_lookup_id", (0,)),
                         Call("proc_exec", (0,))])
    assert firings(events) == [
        ("hk:sched:switch:six", [7, 8, 3, 1, 5000, 0x40]),
        ("hk:vfs:lookup:entry", ["/etc"]),
        ("hk:proc:exec:exec-success", ["/sbin/init", 100]),
    ]
    assert returns(events) == [7 * 1000 + 8 * 100 + 3 * 10 + 1 + 5000 + 0x40, 1, 100]


def test_negative_int_arguments_are_signed(formed):
    booted = formed
    booted.session.enable("hk:proc:exec:exec-failure")
    assert firings(booted.run([Call("proc_exec", (9,))])) == [("hk:proc:exec:exec-failure", [9, -2])]


@pytest.mark.parametrize("specs", [["hk:vfs::"], ["hk:lib:ref:acquire"], ["hk:mem:alloc:*", "hk:::boot"],
                                   ["*:*:*:*"], ["raw:::"], ["hk:sched:run:tick"]])
def test_enable_sets_give_exactly_their_firings(formed, native, same, specs):
    booted = formed
    for spec in specs:
        booted.session.enable(spec)
    emulated = booted.run(CALLS)
    expected = native(CALLS)
    same.of(booted.session.image.path)(emulated, expected, *specs)
    assert comparable(returns(emulated), CALLS) == comparable(returns(expected), CALLS)


def test_results_are_the_same_unpatched_disarmed_and_armed(formed, native):
    from booted import Booted

    booted = formed
    disarmed = booted.run(CALLS)
    assert firings(disarmed) == []
    booted.session.enable(":::")
    armed = booted.run(CALLS)
    unpatched = Booted(booted.session.image.path, patch=False)
    try:
        assert unpatched.events() == [{"event": "patched", "sites": 0, "refused": 0, "folded": 0}]
        plain = unpatched.run(CALLS)
    finally:
        unpatched.session.close()
    expected = comparable(returns(native(CALLS)), CALLS)
    # The kernel keeps state between calls (its allocator), so each session starts from boot.
    assert comparable(returns(plain), CALLS) == expected
    assert comparable(returns(disarmed), CALLS) == expected
    assert comparable(returns(armed), CALLS)[1:] != [] and firings(armed)


def test_enable_disable_enable_between_runs(formed, native):
    booted = formed
    calls = [Call("sched_run", (3,))]
    expected = native_firings(native(calls), "hk:sched:run:tick")
    assert len(expected) == 3
    booted.session.enable("hk:sched:run:tick")
    assert firings(booted.run(calls)) == expected
    booted.session.disable("hk:sched:run:tick")
    assert firings(booted.run(calls)) == []  # no stale translated int3
    booted.session.enable("hk:sched:run:tick")
    assert firings(booted.run(calls)) == expected
    booted.session.stats()
    assert booted.events() == [{"event": "stats", "hits": {"hk:sched:run:tick": 6}, "lost": 0}]


def test_tail_jump_site_returns_disarmed_and_fires_armed(booted):
    # proc_exit's probe is its last statement: a jmp to the stub, patched to a return.
    (site,) = [s for s in booted.session.target.runtime.sites if s.probe.spec == "hk:proc:exit:done"]
    assert site.form == "tail" and booted.session.target.machine.read(site.addr, 1) == b"\xc3"
    events = booted.run([Call("proc_exit", (42,)), Call("kmain", (1,))])
    assert firings(events) == []
    booted.session.enable("hk:proc:exit:done")
    events = booted.run([Call("proc_exit", (42,)), Call("kmain", (1,))])
    assert firings(events)[0] == ("hk:proc:exit:done", [42])
    assert len(firings(events)) == 2
