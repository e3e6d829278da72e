"""Stopping a runaway guest: Ctrl-C (a real SIGINT to a real sdtgen), --timeout, and a guest that halts."""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import time

from helpers import SDTGEN, sdtgen

BOUND = 15  # seconds a stopped run may take at most before the test calls it hung (the guest never ends)


def cpu_seconds(pid: int) -> float:
    """User and system time the process has used, from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_spinning(pid: int, since: float) -> None:
    """Wait until the process has burnt 0.3 s of CPU since ``since``: only a spinning guest does that."""
    deadline = time.monotonic() + BOUND
    while cpu_seconds(pid) - since < 0.3:
        assert time.monotonic() < deadline, "the guest never started spinning"
        time.sleep(0.05)


def wait_reading(pid: int) -> None:
    """Wait until the process is blocked waiting for input, done with what it was sent.

    Python's readline sees a signal only while it waits in select(): one that arrives while it
    is still echoing a keystroke is taken with the next keystroke (as a user would never notice).
    """
    deadline = time.monotonic() + BOUND
    from pathlib import Path

    while "poll" not in (wchan := Path(f"/proc/{pid}/wchan").read_text()) and "select" not in wchan:
        assert time.monotonic() < deadline, f"the console never waited for input ({wchan})"
        time.sleep(0.02)


def start(*args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([SDTGEN, "boot", *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, **kw)


def interrupt_after_boot(proc: subprocess.Popen) -> tuple[str, str]:
    """SIGINT once the boot has patched and the guest is spinning; what the process printed."""
    first = proc.stdout.readline()  # the boot's first line: the guest is about to run
    assert first.startswith(("patched", '{"event": "patched"')), first
    wait_spinning(proc.pid, cpu_seconds(proc.pid))
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=BOUND)
    return first + out, err


def test_ctrl_c_stops_a_run_and_says_where(tricks):
    proc = start(tricks, "--timeout", "600", "--run", "spin", "--arg", "0", "--run", "probed")
    out, err = interrupt_after_boot(proc)
    assert proc.returncode == 130
    (line,) = err.splitlines()
    assert line.startswith(f"{tricks}: error: .text:spin+0x") and ": interrupted in spin: interrupted (Ctrl-C)" in line
    assert "probed(" not in out  # the runs after it do not happen


def test_ctrl_c_stops_a_script_and_json_says_where(tricks, tmp_path):
    script = tmp_path / "spin.sdt"
    script.write_text("run spin 0\nrun probed 1\n")
    proc = start(tricks, "--json", "--script", script)
    out, err = interrupt_after_boot(proc)
    assert proc.returncode == 130 and err == ""
    events = [json.loads(line) for line in out.splitlines()]
    assert [e["event"] for e in events] == ["patched", "interrupted"]
    assert events[1]["symbol"] == "spin" and events[1]["where"].startswith(".text:spin+0x")


def test_a_run_longer_than_its_timeout_stops(tricks):
    proc = sdtgen("boot", tricks, "--timeout", "0.5", "--run", "spin", "--arg", "0", "--run", "probed", "--arg", "1")
    assert proc.returncode == 1
    assert "fault in spin: did not return within 0.5 s" in proc.stderr
    assert proc.stdout.splitlines()[-1] == "probed(1) = 42"  # the boot goes on


def test_the_timeout_holds_for_each_run_of_a_script_and_the_console(tricks, tmp_path):
    script = tmp_path / "spin.sdt"
    script.write_text("run spin 0\nrun spin 0\nrun probed 2\n")
    proc = sdtgen("boot", tricks, "--timeout", "0.3", "--script", script)
    assert proc.returncode == 1 and proc.stdout.splitlines()[-1] == "probed(2) = 42"
    assert proc.stderr.count("fault in spin: did not return within 0.3 s") == 2
    proc = subprocess.run([SDTGEN, "boot", str(tricks), "--timeout", "0.3", "-i"], input="run spin 0\nrun probed 3\n",
                          capture_output=True, text=True, timeout=BOUND)
    assert "fault in spin: did not return within 0.3 s" in proc.stderr and "probed(3) = 42" in proc.stdout


def test_a_bad_timeout_is_a_usage_error(tricks):
    proc = sdtgen("boot", tricks, "--timeout", "0", "--run", "probed")
    assert proc.returncode == 2 and "--timeout 0 is not a positive number" in proc.stderr


def test_a_guest_halt_is_not_reported_as_a_timeout(tricks):
    proc = sdtgen("boot", tricks, "--run", "halt", "--run", "probed", "--arg", "1")
    assert proc.returncode == 1
    assert ": .text:halt+0x1: fault in halt: the CPU halted" in proc.stderr and "within" not in proc.stderr


class Console:
    """sdtgen boot -i on a pseudo-terminal, as a user at a terminal has it."""

    def __init__(self, image) -> None:
        self.master, slave = pty.openpty()
        self.proc = subprocess.Popen([SDTGEN, "boot", str(image), "-i"], stdin=slave, stdout=slave, stderr=slave,
                                     start_new_session=True)
        os.close(slave)
        self.seen = b""
        self.pos = 0  # where the next expect() starts looking

    def expect(self, text: str) -> str:
        """Read until ``text`` appears (or fail after BOUND seconds); what was read."""
        deadline = time.monotonic() + BOUND
        while (found := self.seen.find(text.encode(), self.pos)) < 0:
            left = deadline - time.monotonic()
            assert left > 0, f"no {text!r} in {self.seen[self.pos:]!r}"
            ready, _, _ = select.select([self.master], [], [], left)
            if ready:
                self.seen += os.read(self.master, 4096)
        start, self.pos = self.pos, found + len(text)
        return self.seen[start:self.pos].decode()

    def send(self, text: str) -> None:
        os.write(self.master, text.encode())

    def interrupt(self) -> None:
        os.killpg(self.proc.pid, signal.SIGINT)  # what the terminal does on Ctrl-C

    def close(self) -> int:
        self.send("quit\n")
        code = self.proc.wait(timeout=BOUND)
        os.close(self.master)
        return code


def test_ctrl_c_in_the_console_returns_to_the_prompt_keeping_state(tricks):
    c = Console(tricks)
    try:
        c.expect("sdt> ")
        c.send("enable tk:::\n")
        c.expect("armed 1 site(s)")
        c.expect("sdt> ")
        since = cpu_seconds(c.proc.pid)
        c.send("run spin 0\n")
        wait_spinning(c.proc.pid, since)
        c.interrupt()
        shown = c.expect("sdt> ")
        assert ": .text:spin+0x" in shown and "interrupted in spin" in shown
        c.send("run probed 5\n")  # the probe enabled before Ctrl-C is still armed
        shown = c.expect("sdt> ")
        assert "tk:code:probed:entry  arg0=5" in shown and "probed(5) = 42" in shown
        # Ctrl-C at the prompt drops the half-typed line, as a shell does, and the console stays.
        c.send("run nosuch")
        c.expect("run nosuch")
        wait_reading(c.proc.pid)
        c.interrupt()
        c.expect("sdt> ")
        c.send("stats\n")
        shown = c.expect("sdt> ")
        assert "1  tk:code:probed:entry" in shown and "nosuch" not in shown
    finally:
        assert c.close() == 0  # stopping a run is the user's choice, not a guest fault
