"""sdtgen boot from the command line, a script, and the console."""

from __future__ import annotations

import json
import subprocess

import pytest
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
    assert events[-1] == {"event": "stats", "hits": {"hk:sched:run:tick": 2}, "lost": 0}
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

    from sdtgen.session.console import Console

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
    assert proc.returncode == 2 and "matches no probe of the image" in proc.stderr
    proc = sdtgen("boot", kernel.image, "--enable", "a:b:c:d:e")
    assert proc.returncode == 2 and "more than four fields" in proc.stderr
    proc = sdtgen("boot", kernel.image, "--arg", "1")
    assert proc.returncode == 2 and "--arg must follow a --run" in proc.stderr
    proc = sdtgen("boot", kernel.image, "--run", "kmain", "--arg", "x")
    assert proc.returncode == 2 and "'x' is not an integer" in proc.stderr
    proc = sdtgen("boot", kernel.partial)
    assert proc.returncode == 2 and "is a relocatable object" in proc.stderr


# -- bad input: one line, exit 2 ------------------------------------------------------------


def one_line(proc) -> str:
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    (line,) = proc.stderr.splitlines()
    assert "Traceback" not in line
    return line


def test_a_script_that_is_not_utf8_is_one_line(kernel, tmp_path):
    script = tmp_path / "latin1.sdt"
    script.write_bytes("enable hk:mem::\nrun kmem_alloc 64 # caf\xe9\n".encode("latin-1"))
    line = one_line(sdtgen("boot", kernel.image, "--script", script))
    assert line == f"{script}:2: error: is not UTF-8 text (byte 0xe9 at offset 39); save the script as UTF-8"


def test_script_dash_reads_standard_input(kernel):
    proc = subprocess.run([SDTGEN, "boot", str(kernel.image), "--script", "-"], input="run kmem_alloc 64\n",
                          capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.splitlines()[1:] == ["kmem_alloc(64) = 4096"]


def test_a_script_must_be_a_regular_file_of_bounded_size(kernel, tmp_path):
    import os

    from sdtgen.limits import MAX_SCRIPT

    assert one_line(sdtgen("boot", kernel.image, "--script", "/dev/zero")) == (
        "/dev/zero: error: is not a regular file; give a script file, or - for standard input")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    proc = subprocess.run([SDTGEN, "boot", str(kernel.image), "--script", str(fifo)], capture_output=True,
                          text=True, timeout=60)  # a FIFO with no writer: refused, not waited on
    assert "is not a regular file" in one_line(proc)
    big = tmp_path / "big.sdt"
    big.write_text("stats\n" * (MAX_SCRIPT // 6 + 1))
    assert f"is longer than the {MAX_SCRIPT} bytes a script may have" in one_line(
        sdtgen("boot", kernel.image, "--script", big))


def test_script_syntax_errors_are_one_line_naming_the_line(kernel, tmp_path):
    script = tmp_path / "quote.sdt"
    script.write_text('stats\nrun kmain "1\n')
    assert one_line(sdtgen("boot", kernel.image, "--script", script)) == (
        f"{script}:2: error: cannot split the run command: No closing quotation; close the quotation")
    script.write_text("list a:b:c:d:e\n")
    assert one_line(sdtgen("boot", kernel.image, "--script", script)) == (
        f"{script}:1: error: probe spec 'a:b:c:d:e' has more than four fields (provider:module:function:name)")


def test_long_lines_and_specs_are_refused_with_the_limit(kernel, tmp_path):
    from sdtgen.limits import MAX_LINE, MAX_SPEC

    script = tmp_path / "long.sdt"
    script.write_text("run kmain " + "1" * MAX_LINE + "\n")
    assert one_line(sdtgen("boot", kernel.image, "--script", script)) == (
        f"{script}:1: error: a command of {MAX_LINE + 10} characters is longer than the {MAX_LINE} allowed; "
        "split it into shorter commands")
    spec = "hk:" + "*" * MAX_SPEC
    assert f"a probe spec of {len(spec)} characters is longer than the {MAX_SPEC} allowed" in one_line(
        sdtgen("boot", kernel.image, "--enable", spec))


def test_the_console_stays_after_bad_lines(kernel):
    commands = 'run kmain "1\nlist a:b:c:d:e\nfrob\nrun kmem_alloc 64\nquit\n'
    proc = subprocess.run([SDTGEN, "boot", str(kernel.image), "-i"], input=commands, capture_output=True,
                          text=True)
    assert proc.returncode == 0 and proc.stdout.splitlines()[1:] == ["kmem_alloc(64) = 4096"]
    errors = proc.stderr.splitlines()
    assert errors[0] == "sdtgen: error: cannot split the run command: No closing quotation; close the quotation"
    assert "more than four fields" in errors[1]
    # Every command the console has, help and action among them.
    assert errors[2] == ("sdtgen: error: unknown command 'frob'; use one of: action, aggregate, arm, clear, disable, "
                         "enable, exit, help, list, module, printa, quit, run, sessions, stats, unload")


# -- --json is JSON Lines only ----------------------------------------------------------------


def test_json_output_is_json_lines_only(kernel, tmp_path):
    script = tmp_path / "all.sdt"
    script.write_text("list hk:proc::\nhelp\nenable hk:proc:exit:done\nrun proc_exit 7\nstats\n")
    proc = sdtgen("boot", kernel.image, "--json", "--script", script)
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]  # every line parses
    probes = [e for e in events if e["event"] == "probe"]
    assert {p["probe"] for p in probes} == {"hk:proc:exec:exec-success", "hk:proc:exec:exec-failure",
                                            "hk:proc:exit:done"}
    assert all(p["sites"] == 1 and p["armed"] is False for p in probes)
    assert [e["event"] for e in events if e["event"] != "probe"] == ["patched", "help", "fire", "return", "stats",
                                                                    "stats"]
    commands = "list hk:proc:exit:\nenable hk:proc:exit:done\nhelp\nfrob\nquit\n"
    proc = subprocess.run([SDTGEN, "boot", str(kernel.image), "--json", "-i"], input=commands,
                          capture_output=True, text=True)
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [e["event"] for e in events] == ["patched", "probe", "armed", "help", "stats"]
    assert "unknown command 'frob'" in proc.stderr  # errors stay on stderr


# -- arguments ---------------------------------------------------------------------------------


def test_arguments_out_of_range_are_refused_before_anything_runs(kernel):
    line = one_line(sdtgen("boot", kernel.image, "--run", "kmain", "--arg", "1", "--run", "kmain", "--arg",
                           str(1 << 64)))
    assert line == (f"sdtgen: error: argument {1 << 64} of kmain does not fit in a 64-bit register; "
                    f"give a value from {-(1 << 63)} to {(1 << 64) - 1}")
    proc = sdtgen("boot", kernel.image, "--run", "kmain", "--arg", "1", "--run", "kmain", "--arg", "abc")
    assert one_line(proc) == ("sdtgen: error: 'abc' is not an integer; give decimal, 0x hex or negative numbers, "
                              "or str:TEXT for a string")
    assert proc.stdout == ""  # not even the boot: the arguments are checked first
    proc = sdtgen("boot", kernel.image, "--run", "kmain", "--arg", "1", "--run", "kmain:float")
    assert "unknown return type 'float'" in one_line(proc) and "kmain(1)" not in proc.stdout


def test_negative_hex_arguments_are_accepted(kernel):
    proc = sdtgen("boot", kernel.image, "--enable", "hk:proc:exit:done", "--run", "proc_exit", "--arg", "-0x10",
                  "--run", "proc_exit", "--arg", "-7")
    assert proc.returncode == 0, proc.stderr
    assert [ln for ln in proc.stdout.splitlines() if ln.startswith("hk:")] == [
        f"hk:proc:exit:done  arg0={-0x10}", "hk:proc:exit:done  arg0=-7"]


# -- the command line ---------------------------------------------------------------------------


def test_version_is_the_package_version():
    import tomllib

    from helpers import ROOT

    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    proc = sdtgen("--version")
    assert proc.returncode == 0 and proc.stdout == f"sdtgen {version}\n"


def test_every_positional_and_json_option_has_help():
    import argparse

    from sdtgen.cli import build_parser

    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    missing = []
    for name, p in sub.choices.items():
        for a in p._actions:
            if (not a.option_strings or "--json" in a.option_strings) and not a.help:
                missing.append(f"{name} {a.dest}")
    assert missing == []
    assert "the linked kernel image" in sdtgen("boot", "--help").stdout


@pytest.mark.parametrize("option", ["--enable", "--disable"])
def test_an_empty_spec_is_refused_and_three_colons_match_every_probe(kernel, option):
    """An empty spec (usually an unset shell variable) names no probe, as dtrace refuses an empty description;
    ':::' asks for every probe explicitly."""
    assert one_line(sdtgen("boot", kernel.image, option, "")) == (
        "sdtgen: error: an empty probe spec names no probe (an unset shell variable?); give ':::' to match every "
        "probe")
    events = [json.loads(x) for x in sdtgen("boot", kernel.image, "--json", "--enable", ":::", option, ":::",
                                            "--run", "kmain", "--arg", "1", check=True).stdout.splitlines()]
    fired = {e["probe"] for e in events if e["event"] == "fire"}
    assert len(fired) > 5 if option == "--enable" else fired == set()


def test_wording_of_spec_errors(kernel):
    assert one_line(sdtgen("boot", kernel.image, "--enable", "a:b:c:d:e")) == (
        "sdtgen: error: probe spec 'a:b:c:d:e' has more than four fields (provider:module:function:name)")
    line = one_line(sdtgen("boot", kernel.image, "--enable", "my:net"))
    assert line.startswith("sdtgen: error: probe spec 'my:net' reads as function 'my', name 'net' and matches no "
                           "probe of the image; ")
    line = one_line(sdtgen("boot", kernel.image, "--no-patch", "--enable", "hk:::"))
    assert "nothing is patched (--no-patch)" in line and "matches no" not in line


def test_an_action_enables_its_probes(kernel):
    proc = sdtgen("boot", kernel.image, "--json", "--action", "hk:sched:switch:six=sched_run",
                  "--run", "sched_switch", "--arg", "3", "--arg", "1", "--arg", "0", "--arg", "0", "--arg", "0",
                  "--arg", "0")
    events = [json.loads(x) for x in proc.stdout.splitlines()]
    assert [e["event"] for e in events] == ["patched", "fire", "action", "return", "stats"]


def test_a_shared_object_is_named_with_the_right_article(tmp_path):
    from helpers import run

    so = tmp_path / "lib.so"
    src = tmp_path / "lib.c"
    src.write_text("int f(void) { return 1; }\n")
    run(["gcc", "-shared", "-fpic", "-o", str(so), str(src)])
    assert "is a shared object or PIE, not a relocatable object" in one_line(sdtgen("scan", so))




@pytest.mark.parametrize("argv", [
    ["--enable", "hk:vfs::", "--run", "nosuch"],
    ["--run", "kmain:float"],
    ["--run", "kmain", "--arg", str(1 << 64)],
    ["--run", "kmain", "--enable", "nosuch:::"],
    ["--run", "kmain", "--disable", "a:b:c:d:e"],
    ["--action", "hk:vfs::=nosuch"],
    ["--action", "nosuch:::=kmain"],
    ["--run", "kmain", "--script", "/nonexistent/script"],
], ids=["unknown function", "unknown type", "argument too wide", "spec matching nothing", "malformed spec",
        "unknown action function", "action spec matching nothing", "unreadable script"])
def test_every_action_is_checked_before_anything_is_patched_or_run(kernel, argv):
    """One line and exit 2, and not a line on standard output: no `patched`, no firing, no return."""
    proc = sdtgen("boot", kernel.image, *argv)
    one_line(proc)
    assert proc.stdout == ""


def test_boot_prints_the_aggregations_every_interval_until_ctrl_c(kernel, native):
    """`boot --interval SECONDS`, as `qemu` and `attach` take it: after the actions the session goes on, the merged
    aggregations printed again and again (each time what fired so far, the native run's count of ticks), until
    Ctrl-C ends it as dtrace's ends: the last printa, exit 0."""
    import signal

    from native_oracle import Call

    want = sum(e.get("probe") == "hk:sched:run:tick" for e in native([Call("sched_run", (5,))]))
    proc = subprocess.Popen([SDTGEN, "boot", str(kernel.image), "--aggregate", "hk:sched:run:tick @ticks = count()",
                             "--run", "sched_run", "--arg", "5", "--interval", "0.05", "-q", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        printed = []
        while len(printed) < 2:  # two printings before any Ctrl-C: the interval's, not the end's
            line = proc.stdout.readline()
            assert line, f"sdtgen ended first: {proc.stderr.read()}"
            event = json.loads(line)
            if event["event"] == "aggregations":
                printed.append(event)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    printed += [e for e in map(json.loads, out.splitlines()) if e["event"] == "aggregations"]
    assert len(printed) >= 3 and want > 0
    assert all(e["aggregations"] == [{**e["aggregations"][0], "name": "ticks", "rows": [{"keys": [], "value": want}]}]
               for e in printed)
