"""Guest actions on firings, and a probe that would fire itself again from its own action."""

from __future__ import annotations

from booted import Booted
from helpers import sdtgen


def test_an_action_runs_with_the_probe_arguments(kernel):
    proc = sdtgen("boot", kernel.image, "--json", "--enable", "hk:sched:switch:six",
                  "--action", "hk:sched:switch:six=sched_run", "--run", "sched_switch", "--arg", "3", "--arg", "1",
                  "--arg", "0", "--arg", "0", "--arg", "0", "--arg", "0")
    assert proc.returncode == 0, proc.stderr
    import json

    events = [json.loads(x) for x in proc.stdout.splitlines()]
    # sched_run(3): the action got the probe's first argument in its first register.
    assert {"event": "action", "symbol": "sched_run", "value": 1 + 2 + 5} in events
    assert [e["event"] for e in events] == ["patched", "fire", "action", "return", "stats"]


def test_recursion_disarms_the_probe_with_a_warning_and_the_run_goes_on(kernel):
    proc = sdtgen("boot", kernel.image, "--enable", "hk:vfs:lookup:entry",
                  "--action", "hk:vfs:lookup:entry=vfs_lookup",
                  "--run", "vfs_lookup_id:int", "--arg", "2", "--run", "vfs_lookup_id:int", "--arg", "1")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == f"{kernel.image}: warning: hk:vfs:lookup:entry fired again from its own action; " \
                          "disarmed it\n"
    assert proc.stdout.splitlines()[1:] == [
        'hk:vfs:lookup:entry  arg0="/var/log/messages"',
        "action vfs_lookup returned 3",  # the action itself completed, with the site disarmed
        "vfs_lookup_id(2) = 3",
        "vfs_lookup_id(1) = 2",  # no longer armed: no firing
    ]


def test_action_errors_are_usage_errors(kernel):
    proc = sdtgen("boot", kernel.image, "--action", "hk:::boot")
    assert proc.returncode == 2 and "needs SPEC=FUNCTION" in proc.stderr
    proc = sdtgen("boot", kernel.image, "--action", "hk:::boot=nosuch")
    assert proc.returncode == 2 and "no function 'nosuch'" in proc.stderr


def test_in_branch_mode_a_probe_with_an_action_is_trapped_and_the_others_branch(kernel):
    import json

    proc = sdtgen("boot", kernel.image, "--json", "--arm", "branch", "--enable", "hk:sched::",
                  "--action", "hk:sched:switch:six=sched_run", "--run", "sched_switch", "--arg", "3", "--arg", "1",
                  "--arg", "0", "--arg", "0", "--arg", "0", "--arg", "0")
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(x) for x in proc.stdout.splitlines()]
    shown = [(e["event"], e.get("probe") or e.get("symbol")) for e in events]
    # The action's sched_run(3) ticks three times through branches; the six-argument probe traps, is
    # recorded first, and its action runs after it.
    assert shown == [("patched", None), ("fire", "hk:sched:switch:six"), ("fire", "hk:sched:run:tick"),
                     ("fire", "hk:sched:run:tick"), ("fire", "hk:sched:run:tick"), ("action", "sched_run"),
                     ("return", "sched_switch"), ("stats", None)]
    ticks = [e for e in events if e.get("probe") == "hk:sched:run:tick"]
    six = next(e for e in events if e.get("probe") == "hk:sched:switch:six")
    assert [t["args"] for t in ticks] == [[0, 1], [1, 3], [2, 8]] and all(t["ts"] > six["ts"] for t in ticks)


def test_on_four_cpus_firings_and_actions_are_in_time_order(kernel):
    """Each CPU's action result follows what that CPU recorded before it; every firing in timestamp order."""
    import json

    proc = sdtgen("boot", kernel.image, "--json", "--cpus", "4", "--arm", "branch", "--enable", "hk:sched::",
                  "--action", "hk:sched:switch:six=sched_run", "--run", "sched_switch", "--arg", "3", "--arg", "1",
                  "--arg", "0", "--arg", "0", "--arg", "0", "--arg", "0")
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(x) for x in proc.stdout.splitlines()]
    fires = [e for e in events if e["event"] == "fire"]
    assert [e["ts"] for e in fires] == sorted(e["ts"] for e in fires) and len(fires) == 4 * 4
    for cpu in range(4):
        mine = [(e["event"], e.get("probe") or e.get("symbol")) for e in events
                if e.get("cpu") == cpu and e["event"] in ("fire", "action")]
        assert mine == [("fire", "hk:sched:switch:six")] + [("fire", "hk:sched:run:tick")] * 3 + [
            ("action", "sched_run")]
    before_return = events[:events.index(next(e for e in events if e["event"] == "return"))]
    assert sum(e["event"] == "action" for e in before_return) == 4  # shown before the run's returns


# The action is a rendezvous: each CPU's call of it waits until the other CPU is in it too; CPU 1 fires the
# probe only once CPU 0 is in its action.
MEETING = r"""
#include <sdt.h>
#include <sdt_runtime.h>
SDT_PROVIDER_DEFINE(ag);
SDT_PROBE_DEFINE1(ag, guard, , hit, "long");

static volatile long inside[64];

long meet(long cpus)
{
	long me = (long)sdt_hooks.cpu_area()->cpu;
	inside[me] = 1;
	while (!inside[(me + 1) % cpus])
		;
	return me;
}

long kmain(long cpus)
{
	if (sdt_hooks.cpu_area()->cpu != 0)
		while (!inside[0])	/* the other CPUs fire once CPU 0's action runs */
			;
	SDT_PROBE1(ag, guard, , hit, cpus);
	return cpus;
}
"""


def test_a_probe_firing_on_one_cpu_while_its_action_runs_on_another_is_a_firing_not_a_recursion(tmp_path):
    """The guard against an action reaching its own probe is per CPU: CPU 1 fires the probe while CPU 0's action
    for it runs, and both actions run to the end (they wait for each other inside it). A guard per probe alone
    would disarm it at CPU 1's firing, and CPU 0's action would wait forever."""
    import json

    from helpers import build_c_kernel

    image = build_c_kernel(tmp_path, "x86_64", MEETING, "meet")
    proc = sdtgen("boot", image, "--json", "--cpus", "2", "--timeout", "30", "--action", "ag:guard::hit=meet",
                  "--run", "kmain", "--arg", "2")
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    events = [json.loads(x) for x in proc.stdout.splitlines()]
    assert sorted((e["cpu"], e["args"]) for e in events if e["event"] == "fire") == [(0, [2]), (1, [2])]
    assert sorted((e["cpu"], e["value"]) for e in events if e["event"] == "action") == [(0, 0), (1, 1)]
    assert not [e for e in events if e["event"] == "warning"]
    assert [e["value"] for e in events if e["event"] == "return"] == [2, 2]


# -- each action added once is called once, and taking one back takes back that one ------------------------------
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
