"""--action on the emulator target (sdtgen/targets/emulator/target.py): a guest function called with a probe's
arguments whenever it fires, each action added once called once, and taking one back takes back that one."""

from __future__ import annotations

from booted import Booted

SPEC = "hk:sched:switch:six"  # fires once in sched_switch(3, 1, 0, 0, 0, 0)


def actions_per_firing(kernel, added: int, removed: int) -> tuple[int, int]:
    """(firings, action calls) of one sched_switch with ``added`` sched_run actions on SPEC, ``removed`` of them
    taken back one remove_action at a time (as the session does when an action's enabling is refused)."""
    b = Booted(kernel.image)
    try:
        for _ in range(added):
            b.session.add_action(SPEC, "sched_run")
        func = b.session.check_function("sched_run")
        for _ in range(removed):
            b.session.target.remove_action(SPEC, func)
        b.events()
        b.session.run("sched_switch", [3, 1, 0, 0, 0, 0])
        kinds = [e["event"] for e in b.events()]
    finally:
        b.session.close()
    return kinds.count("fire"), kinds.count("action")


def test_an_action_given_twice_is_called_twice_a_firing(kernel):
    assert actions_per_firing(kernel, 2, 0) == (1, 2)


def test_taking_one_action_back_leaves_its_twin(kernel):
    """DTrace's dtrace_disable of one enabling leaves another of the same probes and actions: so here, where the
    session takes back the action whose enabling was refused, the same action added before stays."""
    assert actions_per_firing(kernel, 2, 1) == (1, 1)
    assert actions_per_firing(kernel, 1, 1) == (1, 0)
