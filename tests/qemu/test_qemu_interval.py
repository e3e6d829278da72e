"""`sdtgen qemu --interval` with the console: while the kernel waits for the next command the merged aggregations
are printed again and again, each time what fired so far; `aggregate`, `clear` and `printa` from the console."""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import threading
import time

from helpers import SDTGEN

CPUS = 2
PATIENCE = 120  # seconds a step may take on a loaded machine before the test gives up (not a measurement)


class Console:
    """`sdtgen qemu ... -i --json` with its standard input a pipe (without -i: no console); its JSON events as they
    come."""

    def __init__(self, *argv: str, console: bool = True) -> None:
        self.proc = subprocess.Popen([SDTGEN, "qemu", *argv, *(["-i"] if console else []), "--json"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.events: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.events.put(json.loads(line))
        self.events.put(None)

    def send(self, line: str) -> None:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def until(self, want) -> list[dict]:
        """Events up to the first for which ``want`` holds (given up on after PATIENCE, however many come)."""
        seen, deadline = [], time.monotonic() + PATIENCE
        while True:
            e = self.events.get(timeout=max(deadline - time.monotonic(), 0.01))
            assert e is not None, f"sdtgen ended first: {self.proc.stderr.read()}"
            seen.append(e)
            if want(e):
                return seen


def ticks(e: dict) -> list | None:
    if e["event"] != "aggregations":
        return None
    return {a["name"]: a["rows"] for a in e["aggregations"]}.get("ticks")


def test_interval_prints_what_fired_so_far_again_and_again(qemu_kernel):
    c = Console(str(qemu_kernel("riscv64")), "--cpus", str(CPUS), "--interval", "0.2", "-q",
                "--aggregate", "hk:sched:run:tick @ticks = count()")
    try:
        c.send("run sched_run 5")
        c.until(lambda e: ticks(e) == [{"keys": [], "value": CPUS * 5}])
        c.until(lambda e: ticks(e) == [{"keys": [], "value": CPUS * 5}])  # again, with nothing new
        c.send("run sched_run 3")
        c.until(lambda e: ticks(e) == [{"keys": [], "value": CPUS * 8}])
        c.send("clear")
        c.until(lambda e: ticks(e) == [])
        c.send("aggregate hk:mem:alloc:entry @most = max(arg0)")
        c.send("run sched_run 2")
        c.send("run kmem_alloc 300")
        c.send("printa")
        last = c.until(lambda e: e["event"] == "aggregations" and len(e["aggregations"]) == 2
                       and ticks(e) == [{"keys": [], "value": CPUS * 2}]
                       and e["aggregations"][1]["rows"] == [{"keys": [], "value": 300}])
        assert last
        c.proc.stdin.close()
        assert c.proc.wait(PATIENCE) == 0, c.proc.stderr.read()
    finally:
        if c.proc.poll() is None:
            c.proc.kill()
            c.proc.wait()


def test_interval_needs_something_to_print(qemu_kernel):
    proc = subprocess.run([SDTGEN, "qemu", str(qemu_kernel("riscv64")), "--interval", "1", "--run", "sched_run"],
                          capture_output=True, text=True)
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr.splitlines() == ["sdtgen: error: --interval prints the aggregations, and none is given; "
                                        "add --aggregate CLAUSES (or -i)"]


def test_ctrl_c_ends_an_interval_session_as_dtrace_does_the_last_printa_and_exit_0(qemu_kernel):
    c = Console(str(qemu_kernel("riscv64")), "--cpus", str(CPUS), "--interval", "0.2", "-q", "--aggregate",
                "hk:sched:run:tick @ticks = count()", "--run", "sched_run", "--arg", "5", console=False)
    try:  # no console: the session runs until Ctrl-C
        c.until(lambda e: ticks(e) == [{"keys": [], "value": CPUS * 5}])
        c.proc.send_signal(signal.SIGINT)
        assert c.proc.wait(PATIENCE) == 0
        assert "interrupted" not in c.proc.stderr.read()
        after = []
        while (e := c.events.get(timeout=PATIENCE)) is not None:
            after.append(e)
        assert [ticks(e) for e in after if e["event"] == "aggregations"][-1] == [{"keys": [], "value": CPUS * 5}]
        assert after[-1]["event"] == "stats", "then the stats, as a session that ends does"
    finally:
        if c.proc.poll() is None:
            c.proc.kill()
            c.proc.wait()
