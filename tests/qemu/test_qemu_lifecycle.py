"""`sdtgen qemu` never leaves QEMU running: a function that does not return within --timeout, Ctrl-C
(SIGINT to sdtgen's process group, as a terminal sends it), SIGTERM, and even SIGKILL of sdtgen
itself all end QEMU. Real signals, real processes."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest
from helpers import SDTGEN, run

HANG = ["--run", "sched_run", "--arg", "2000000000"]  # billions of loop iterations: far longer than any test


def children(pid: int) -> list[int]:
    out = run(["pgrep", "-P", str(pid)], check=False).stdout
    return [int(p) for p in out.split()]


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def gone_within(pid: int, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if not alive(pid):
            return True
        time.sleep(0.05)
    return False


def _as_from_a_terminal() -> None:
    """SIGINT as a terminal's foreground job has it (a background job of a script inherits it ignored)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def started(image, *args: str) -> tuple[subprocess.Popen, int]:
    """sdtgen qemu in a session of its own, once the kernel has booted; and QEMU's pid."""
    proc = subprocess.Popen([SDTGEN, "qemu", str(image), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True, preexec_fn=_as_from_a_terminal)
    assert proc.stdout.readline().startswith("patched"), proc.stderr.read()
    (qemu,) = children(proc.pid)
    assert alive(qemu)
    time.sleep(0.3)  # well inside the call
    return proc, qemu


@pytest.fixture
def image(qemu_kernel):
    return qemu_kernel("riscv64")


def test_a_call_past_its_timeout_is_one_line_and_stops_qemu(image):
    proc, qemu = started(image, "--timeout", "1", *HANG)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 1
    assert err.splitlines() == [f"{image}: error: fault in sched_run: did not return within 1 s "
                                "(last probe fired: none)"]
    assert gone_within(qemu, 1)


@pytest.mark.parametrize(("sig", "name"), [(signal.SIGINT, "Ctrl-C"), (signal.SIGTERM, "SIGTERM")])
def test_ctrl_c_and_sigterm_stop_the_call_and_qemu(image, sig, name):
    proc, qemu = started(image, *HANG)
    os.killpg(proc.pid, sig)  # the terminal's way: the whole foreground group, which QEMU is not in
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130
    assert err.splitlines() == [f"{image}: error: interrupted in sched_run: interrupted ({name}) "
                                "(last probe fired: none)"]
    assert gone_within(qemu, 1)


def test_qemu_dies_with_sdtgen_even_by_sigkill(image):
    proc, qemu = started(image, *HANG)
    proc.kill()
    proc.wait()
    assert gone_within(qemu, 5)


@pytest.mark.parametrize("argv, what", [
    (["--enable", "nosuch:::probe"], "matches no probe of the image"),
    (["--run", "no_such_function"], "no function 'no_such_function' in the image"),
    (["--enable", "hk:vfs::", "--run", "kmain:float"], "unknown return type 'float'"),
    (["--enable", ""], "an empty probe spec names no probe"),
    (["--disable", ""], "an empty probe spec names no probe"),
])
def test_every_action_is_checked_before_qemu_starts(image, argv, what):
    """One line, exit 2, and nothing booted: no `patched` line, no QEMU started."""
    proc = run([SDTGEN, "qemu", str(image), *argv], check=False)
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout
    (line,) = proc.stderr.splitlines()
    assert what in line


def at_physical(image, out, phys: int, data: bytes):
    """A copy of ``image`` with ``data`` at physical address ``phys``, placed by readelf's program headers."""
    for line in run(["readelf", "-lW", str(image)]).stdout.splitlines():
        w = line.split()
        if w[:1] == ["LOAD"] and int(w[3], 16) <= phys < int(w[3], 16) + int(w[4], 16):
            raw = bytearray(image.read_bytes())
            at = int(w[1], 16) + phys - int(w[3], 16)
            raw[at:at + len(data)] = data
            out.write_bytes(raw)
            return out
    raise AssertionError(f"no segment holds {phys:#x}")


def pvh_entry(image) -> int:
    """The PVH entry point QEMU starts an x86-64 image at: readelf's Xen note, type 0x12 (PHYS32_ENTRY)."""
    out = run(["readelf", "-nW", str(image)]).stdout
    (line,) = [x for x in out.splitlines() if "(0x00000012)" in x]
    return int.from_bytes(bytes.fromhex("".join(line.split("description data:")[1].split())), "little")


@pytest.mark.parametrize("broken", ["exits at once", "never answers"])
def test_a_kernel_qemu_cannot_boot_is_one_error_line_saying_what_to_do(qemu_kernel, tmp_path, broken):
    image = qemu_kernel("x86_64")
    if broken == "exits at once":  # the entry note's type changed: QEMU finds no PVH entry and refuses the image
        raw = bytearray(image.read_bytes())
        at = raw.index((4).to_bytes(4, "little") * 2 + (0x12).to_bytes(4, "little") + b"Xen\0")
        raw[at + 8:at + 12] = (0x7FFF).to_bytes(4, "little")
        (bad := tmp_path / "k.elf").write_bytes(raw)
        said = "QEMU exited with status 1 (qemu-system-x86_64: "
        fix = "; give QEMU what the kernel needs with --qemu-arg"
    else:  # its first instruction a jump to itself: QEMU runs, the kernel never says hello
        bad = at_physical(image, tmp_path / "k.elf", pvh_entry(image), b"\xeb\xfe")
        said, fix = "the kernel said no hello in time", "; link sdt_control.c, call sdt_control_init"
    proc = run([SDTGEN, "qemu", str(bad), "--timeout", "3", "--run", "kmain", "--arg", "1"], check=False)
    assert proc.returncode == 1 and proc.stdout == "", proc.stdout
    (line,) = proc.stderr.splitlines()
    assert line.startswith(f"{bad}: error: {said}"), line
    assert fix in line, line
