"""Guest actions on firings, and a probe that would fire itself again from its own action."""

from __future__ import annotations

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
