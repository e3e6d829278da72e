"""sdtgen boot from the command line, a script, and the console."""

from __future__ import annotations

import json
import subprocess

from helpers import SDTGEN, sdtgen


def test_human_output_one_line_per_firing(kernel):
    proc = sdtgen("boot", kernel.image, "--enable", "hk:vfs:lookup:entry", "--run", "vfs_lookup_id:int",
                  "--arg", "0", "--enable", "hk:sched:switch:six", "--run", "sched_switch", "--arg", "1", "--arg",
                  "2", "--arg", "3", "--arg", "4", "--arg", "5", "--arg", "0x10")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "patched 21 sites (0 refused)",
        'hk:vfs:lookup:entry  arg0="/etc"',
        "vfs_lookup_id(0) = 1",
        "hk:sched:switch:six  arg0=1 arg1=2 arg2=3 arg3=4 arg4=5 arg5=16",
        "sched_switch(1, 2, 3, 4, 5, 16) = 1255",
    ]


def test_actions_apply_in_command_line_order_json(kernel):
    proc = sdtgen("boot", kernel.image, "--json", "--run", "sched_run", "--arg", "2",
                  "--enable", "hk:sched:run:tick", "--run", "sched_run", "--arg", "2",
                  "--disable", "hk:sched:run:tick", "--run", "sched_run", "--arg", "2")
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [e["event"] for e in events] == ["patched", "return", "fire", "fire", "return", "return", "stats"]
    fires = [e for e in events if e["event"] == "fire"]
    assert [f["args"] for f in fires] == [[0, 1], [1, 3]] and all(f["probe"] == "hk:sched:run:tick" for f in fires)
    assert events[-1] == {"event": "stats", "hits": {"hk:sched:run:tick": 2}}
    assert {e["value"] for e in events if e["event"] == "return"} == {3}


def test_script_file_runs_the_same_actions(kernel, tmp_path):
    script = tmp_path / "probes.sdt"
    script.write_text("# arm the allocator's probes\nenable hk:mem::\nrun kmem_alloc 64\n\ndisable hk:mem::\n"
                      "run kmem_alloc 64\nstats\n")
    proc = sdtgen("boot", kernel.image, "--script", script)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[1:3] == ["hk:mem:alloc:entry  arg0=64", "hk:mem:alloc:done  arg0=4096"]
    assert lines[3] == "kmem_alloc(64) = 4096" and lines[4] == "kmem_alloc(64) = 4160"
    assert lines[5:] == ["       1  hk:mem:alloc:done", "       1  hk:mem:alloc:entry"]


def test_script_error_names_file_and_line(kernel, tmp_path):
    script = tmp_path / "bad.sdt"
    script.write_text("enable hk:mem::\nfrobnicate\n")
    proc = sdtgen("boot", kernel.image, "--script", script)
    assert proc.returncode == 2 and f"{script}:2: error: unknown command 'frobnicate'" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_interactive_console_reads_commands(kernel):
    commands = "list hk:proc::\nenable hk:proc:exit:done\nrun proc_exit 7\nrun nosuch\nstats\nquit\n"
    proc = subprocess.run([SDTGEN, "boot", str(kernel.image), "-i"], input=commands, capture_output=True,
                          text=True)
    assert proc.returncode == 0
    out = proc.stdout.splitlines()
    assert any(ln.split()[1:] == ["hk:proc:exit:done", "1", "site(s)", "-"] for ln in out)
    assert "armed 1 site(s)" in out and "hk:proc:exit:done  arg0=7" in out
    assert "       1  hk:proc:exit:done" in out
    assert "no function 'nosuch' in the image" in proc.stderr  # an error, and the console goes on


def test_console_completes_probe_names(kernel):
    from booted import Booted

    from sdtgen.boot.console import Console

    b = Booted(kernel.image)
    try:
        console = Console(b.session, stdin=None)
        assert console.complete_enable("hk:vfs:lookup:e", "enable hk:vfs:lookup:e", 7, 22) == ["hk:vfs:lookup:entry"]
        assert set(console.complete_disable("hk:proc:", "", 0, 0)) == {
            "hk:proc:exec:exec-success", "hk:proc:exec:exec-failure", "hk:proc:exit:done"}
        assert "kmain" in console.complete_run("km", "run km", 4, 6)
    finally:
        b.session.close()


def test_a_guest_fault_is_one_line_and_the_boot_goes_on(kernel):
    proc = sdtgen("boot", kernel.image, "--enable", "hk:vfs:lookup:entry", "--run", "vfs_lookup", "--arg", "0",
                  "--run", "sched_run", "--arg", "3")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[1:] == ["hk:vfs:lookup:entry  arg0=<unreadable>", "sched_run(3) = 8"]
    # The fault is a diagnostic: FILE: error: section:function+0xoff: message.
    (fault,) = proc.stderr.splitlines()
    assert fault.startswith(f"{kernel.image}: error: .text:vfs_lookup+0x")
    assert fault.endswith(": fault in vfs_lookup: page fault: read from unmapped address 0x0 "
                          "(last probe fired: hk:vfs:lookup:entry)")


def test_bad_specs_and_symbols_are_usage_errors(kernel):
    proc = sdtgen("boot", kernel.image, "--enable", "nosuch:::")
    assert proc.returncode == 2 and "matches no patched probe site" in proc.stderr
    proc = sdtgen("boot", kernel.image, "--enable", "a:b:c:d:e")
    assert proc.returncode == 2 and "more than four fields" in proc.stderr
    proc = sdtgen("boot", kernel.image, "--arg", "1")
    assert proc.returncode == 2 and "--arg must follow a --run" in proc.stderr
    proc = sdtgen("boot", kernel.image, "--run", "kmain", "--arg", "x")
    assert proc.returncode == 2 and "'x' is not an integer" in proc.stderr
    proc = sdtgen("boot", kernel.partial)
    assert proc.returncode == 2 and "is a relocatable object" in proc.stderr
