"""`sdtgen attach` keeps its limits whatever the kernel at the other end sends: a deadline on every read, a bound on
what a reply may hold, replies that must answer the command sent and fit the hello, damaged frames said. The peer
is a TCP server that forges the kernel's side (tests/targets/forged_peer.py); the image is the fixture kernel."""

from __future__ import annotations

import io
import json
import subprocess
import time

import pytest
from forged_peer import Flood, Peer, entries, hello, text, usual
from helpers import SDTGEN, need_tool, run
from serial_line import P, encode

from sdtgen.layout import VALUES

sys_timeout = 60  # seconds a run of sdtgen may take here (--timeout 2 or 5) before the test says it never ends


@pytest.fixture
def image(kernel):
    return kernel.image


def attach(peer: Peer, image, *args: str) -> subprocess.CompletedProcess:
    try:
        return subprocess.run([SDTGEN, "attach", "--serial", peer.line, str(image), *args], capture_output=True,
                              text=True, timeout=sys_timeout)
    finally:
        peer.close()


def console_flood() -> Flood:
    """Console lines from `yes`, faster than the host reads them: the line is never quiet."""
    return Flood((need_tool("yes", "coreutils"), "console bytes, never a frame"))


def line_flood():
    """Reply lines that are neither ok nor error, faster than the host reads them."""
    k = 0
    while True:
        yield b"".join(text(f"probe {k + n:x} 1 0 hk:flood:lines:{k + n}") for n in range(1000))
        k += 1000


def test_console_bytes_that_never_stop_do_not_hold_the_hello_past_the_timeout(image):
    peer = Peer(lambda line: b"", usual(image), before=console_flood())  # and no hello ever
    r = attach(peer, image, "--timeout", "2")
    assert r.returncode == 1
    assert r.stderr.splitlines()[-1].startswith(f"{image}: error: the kernel said no hello in time"), r.stderr


def test_console_bytes_that_never_stop_do_not_hold_a_command_past_the_timeout(image):
    peer = Peer(lambda line: console_flood() if line.startswith("enable") else None, usual(image))
    r = attach(peer, image, "--timeout", "2", "--enable", "hk:::")
    assert r.returncode == 1
    assert "the kernel did not answer `enable` in time" in r.stderr, r.stderr


def test_a_reply_is_bounded_in_bytes_whatever_the_timeout(image):
    peer = Peer(lambda line: line_flood() if line.startswith("enable") else None, usual(image))
    r = attach(peer, image, "--timeout", "600", "--enable", "hk:::")
    assert r.returncode == 1
    assert "the kernel's reply to `enable` passed 16,777,216 bytes in" in r.stderr, r.stderr


def test_a_reply_that_names_another_command_is_not_taken_for_this_ones(image):
    """`ok run 1` is no answer to `enable`: said, and the enable's own reply waited for (here: none comes)."""
    peer = Peer(lambda line: text("ok run 1") if line.startswith("enable") else None, usual(image))
    r = attach(peer, image, "--timeout", "2", "--enable", "hk:::")
    assert r.returncode == 1
    lines = r.stderr.splitlines()
    assert lines[0] == (f"{image}: warning: the kernel's reply 'ok run 1' answers `run`, not `enable`, which sdtgen "
                        "sent: left out, and the reply to `enable` waited for"), r.stderr
    assert "the kernel did not answer `enable` in time" in lines[-1]


def test_replies_that_answer_no_command_sent_fill_no_terminal(image):
    """A peer that answers `enable` with a thousand `ok run 1`: the first eight are said, the eighth saying that the
    rest are left out unsaid, and the command's deadline ends the wait as before."""
    peer = Peer(lambda line: text("ok run 1") * 1000 if line.startswith("enable") else None, usual(image))
    r = attach(peer, image, "--timeout", "2", "--enable", "hk:::")
    assert r.returncode == 1
    said = [ln for ln in r.stderr.splitlines() if "answers `run`, not `enable`" in ln]
    assert len(said) == 8 and said[-1].endswith("(further such replies are left out unsaid)"), r.stderr
    assert "the kernel did not answer `enable` in time" in r.stderr.splitlines()[-1]


def test_a_kernel_that_refuses_hello_is_said_at_once_not_waited_for(image):
    """The core not started yet answers `error -2 hello: ...`: the hello is refused in its words, before the
    timeout, instead of being taken for a reply to a line sdtgen did not send."""
    peer = Peer(lambda line: text("error -2 hello: the control core is not started") if line == "hello" else None,
                usual(image))
    r = attach(peer, image, "--timeout", "10", "--run", "kmain", "--arg", "1")
    assert r.returncode == 1
    assert r.stderr.splitlines() == [f"{image}: error: the kernel's control core refused hello: the control core is "
                                     "not started; call sdt_control_init before the kernel takes lines for the "
                                     "control core"], r.stderr


@pytest.mark.parametrize("version", [None, 1, VALUES["SDT_CONTROL_VERSION"] - 1, VALUES["SDT_CONTROL_VERSION"] + 1])
def test_a_kernel_of_another_protocol_is_said_before_any_reply_is_misread(image, version):
    """A kernel built with another sdtgen's runtime: its hello says its protocol (or, before version 2, says
    none), and attach stops there in one line saying what to rebuild, instead of misreading every reply."""
    said = hello(image, version=version or 0)
    if version is None:  # the hello of a runtime from before the version word
        said = text(f"hello x86_64 1 clock 3b9aca00 1 0 0 safe {entries(image):x}") + text("ok hello 0")
    peer = Peer(lambda line: said if line == "hello" else None, usual(image))
    r = attach(peer, image, "--timeout", "10", "--run", "kmain", "--arg", "1")
    assert r.returncode == 1
    [line] = r.stderr.splitlines()
    assert line.startswith(f"{image}: error: the kernel's control core speaks protocol {version or 1}, this sdtgen "
                           f"{VALUES['SDT_CONTROL_VERSION']}: "), line
    assert line.endswith("rebuild the kernel with this sdtgen's runtime (`sdtgen runtime-dir`), or drive it with "
                         "the sdtgen it was built with"), line


def test_a_hello_said_at_boot_besides_the_one_asked_for_puts_no_reply_out_of_step(image):
    """A kernel that announced itself at boot and is then asked for its hello says it twice: the second is not taken
    for the next command's reply (which put every reply one late: `enable` answered by `ring`'s refusal)."""
    peer = Peer(lambda line: None, usual(image), before=hello(image))
    r = attach(peer, image, "--timeout", "5", "--arm", "branch", "--enable", "hk:::", "--json")
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    assert [w for w in peer.seen if w.startswith("enable")] == ["enable branch hk:::"]


@pytest.mark.parametrize("cpus", [0, (1 << 32) - 1, 4097])
def test_a_hello_with_no_cpus_or_more_than_a_kernel_has_is_refused(image, cpus):
    peer = Peer(lambda line: hello(image, cpus) if line == "hello" else None, usual(image))
    r = attach(peer, image, "--timeout", "5", "--run", "kmain", "--arg", "1")
    assert r.returncode == 1
    [line] = r.stderr.splitlines()
    assert line.startswith(f"{image}: error: the kernel's hello says it has {cpus} CPUs, not 1 to 4096: "), line
    assert "kmain" not in r.stdout


@pytest.mark.parametrize("result", ["return 7 2a", "fault 1 d 0 0", "retorn 0 2a", ""])
def test_a_run_result_of_a_cpu_the_kernel_has_not_or_of_no_form_is_refused(image, result):
    """`return 7 2a` from a one-CPU kernel is no result of `run 0`: it is not printed as kmain's value."""
    answer = (text(result) if result else b"") + text("ok run 1")
    peer = Peer(lambda line: answer if line.startswith("run") else None, usual(image))
    r = attach(peer, image, "--timeout", "5", "--run", "kmain", "--arg", "1")
    assert r.returncode == 1
    assert "= 42" not in r.stdout and "kmain" not in r.stdout
    assert "the kernel's reply to `run`" in r.stderr and "CPU 0" in r.stderr, r.stderr


def test_a_frame_of_no_type_the_transport_has_is_said_in_one_line_and_counted(image):
    peer = Peer(lambda line: encode(ord("Z"), b"junk") + text("ok enable 1") if line.startswith("enable") else None,
                usual(image))
    r = attach(peer, image, "--timeout", "5", "--enable", "hk:::")
    assert r.returncode == 1
    assert r.stderr.splitlines() == [f"{image}: warning: the kernel's line carried a frame of type 0x5a, which no "
                                     "frame of the serial transport has (4 bytes): left out (further damaged frames "
                                     "are only counted)"], r.stderr


def test_a_mebibyte_packet_frame_of_garbage_is_said_in_one_line_and_counted(image):
    garbage = bytes((k * 7 + 3) & 0xFF for k in range(1 << 20))
    peer = Peer(lambda line: encode(P, garbage) + text("ok enable 1") if line.startswith("enable") else None,
                usual(image))
    r = attach(peer, image, "--timeout", "5", "--enable", "hk:::")
    assert r.returncode == 1
    [line] = r.stderr.splitlines()
    assert line.startswith(f"{image}: warning: the kernel's line carried a packet frame of 1048576 bytes (CPU "), line
    assert "whose verdict never came" in line


def test_a_partial_line_the_kernels_input_held_is_dropped_by_the_escape(image):
    """A stray `lis` in the kernel's input would make `lishello` of the host's hello: the escape byte that starts
    every line the host sends drops it (as sdt_control_input does), so the kernel sees `hello` and answers it."""
    peer = Peer(lambda line: text("error -3 lis: unknown command") if "lis" in line else None, usual(image),
                partial=b"lis")
    r = attach(peer, image, "--timeout", "5", "--enable", "hk:::")
    assert (r.returncode, r.stderr) == (0, "")
    assert peer.seen[0] == "hello"


def test_the_kernels_log_framed_before_its_announced_hello_is_shown_not_fatal(image):
    """A kernel that frames a boot message as text before sdt_control_announce (docs/control.md): shown as its console,
    and the hello after it taken."""
    from sdtgen.session.reporter import Reporter
    from sdtgen.session.starts import open_session
    from sdtgen.targets.serial import open_line

    peer = Peer(lambda line: None, usual(image), before=text("boot: 2 CPUs up, mounting root") + hello(image))
    line = open_line(peer.line, duplex=True)
    out = io.StringIO()
    try:
        session = open_session("attach", str(image), Reporter(as_json=True, out=out), line=line, announced=True,
                               timeout=5)
        assert session.target.booted.cpus == 1
        session.close()
    finally:
        line.close()
        peer.close()
    shown = [json.loads(x) for x in out.getvalue().splitlines()]
    assert {"event": "console", "text": "boot: 2 CPUs up, mounting root"} in shown


def test_a_damaged_take_frame_is_said_and_counted_and_the_session_goes_on(image):
    """`take 0` answered by a tables frame shorter than a struct sdt_agg: CPU 0's tables left out, said in one line,
    counted damaged (exit 1); the aggregation still printed, of what could be believed (nothing)."""
    def answer(line: str):
        word = line.split()[0]
        if word == "tables":
            return text(f"table 0 {0x200000:x} {0x10000:x}") + text("ok tables 1")
        if word == "program":
            return text(f"ok program {0x300000:x}")
        if word == "take":
            return encode(ord("A"), b"abc") + text("ok take 0")
        return None

    peer = Peer(answer, usual(image))
    r = attach(peer, image, "--timeout", "5", "--aggregate", "hk:sched:run:tick { @n = count(); }")
    assert r.returncode == 1
    assert r.stderr.splitlines()[-1:] == [f"{image}: warning: CPU 0's aggregation tables left out: its table frame "
                                          "of 3 bytes is shorter than a struct sdt_agg"], r.stderr
    assert all("comes after the last --run" in ln for ln in r.stderr.splitlines()[:-1]), r.stderr  # no --run
    assert "take 0" in peer.seen


def test_with_the_console_waiting_what_the_kernel_sends_is_shown_as_it_arrives(image):
    """`attach -i`: the kernel prints a line and logs a report while the console waits for its user; both are shown
    then, not at the next command (docs/cli.md: "shown as they arrive")."""
    import select

    def after_ring():
        yield usual(image)["ring"]
        time.sleep(1)
        yield b"kernel: eth0 link up\n" + text("report sdt: a line the runtime logged")

    peer = Peer(lambda line: after_ring() if line.startswith("ring") else None, usual(image))
    proc = subprocess.Popen([SDTGEN, "attach", "--serial", peer.line, str(image), "-i", "--timeout", "5"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        shown, end = "", time.monotonic() + 30
        while "eth0 link up" not in shown and time.monotonic() < end:
            if select.select([proc.stdout], [], [], 1)[0]:
                shown += proc.stdout.readline()
        assert "eth0 link up" in shown, "nothing shown while the console waited"
        assert not any(line.startswith(("stats", "drain", "disable")) for line in peer.seen), peer.seen
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)
        peer.close()
    assert proc.returncode == 0, proc.stderr.read()


def test_attach_closes_every_cpus_open_packet_before_it_leaves_and_says_what_it_could_not(image):
    """A kernel that records on its own CPUs leaves events in their open packets: before the last drain attach asks
    for `flush`, and a CPU whose packet stays open is said with the events it holds (not `lost 0` in silence)."""
    peer = Peer(lambda line: (text("unflushed 1 5") + text("ok flush 1")) if line == "flush" else
                hello(image, 2) if line == "hello" else None, usual(image, 2))
    r = attach(peer, image, "--timeout", "5", "--enable", "hk:::")
    assert r.returncode == 0, r.stderr
    assert r.stderr.splitlines() == [f"{image}: warning: CPU 1's open packet could not be closed (the kernel runs no "
                                     "call on that CPU, or it was recording): the 5 events in it are not read"]
    sent = [w for w in peer.seen if w]
    assert "flush" in sent and sent.index("flush") < len(sent) - 1 - sent[::-1].index("drain"), sent


def symbol(image, name: str) -> int:
    """Where readelf says the image's function ``name`` is."""
    for line in run(["readelf", "-sW", str(image)]).stdout.splitlines():
        w = line.split()
        if w[-1:] == [name] and "FUNC" in w:
            return int(w[1], 16)
    raise AssertionError(f"no {name} in the image")


@pytest.mark.parametrize("torn", ["", " torn"])
def test_a_panic_line_is_said_as_the_cpu_the_exception_and_the_function_it_stopped_in(image, torn):
    """`panic CPU CAUSE PC ADDR [torn]` (REPLIES), as a platform says it in the middle of a command's reply."""
    pc = symbol(image, "kmain") + 4
    peer = Peer(lambda line: text(f"panic 1 e {pc:x} 0{torn}") if line.startswith("enable") else None, usual(image))
    r = attach(peer, image, "--timeout", "5", "--enable", "hk:::")
    assert r.returncode == 1
    assert (f"CPU 1 stopped on an exception outside any call: exception e at {pc:#x}"
            f"{' inside a probe site' if torn else ''} (kmain+0x4)") in r.stderr, r.stderr


@pytest.mark.parametrize(("flush", "whole"), [("ok flush 2", True), ("unflushed 1 5\nok flush 2", False),
                                               ("error -7 flush: no", False)])
def test_a_drain_says_whether_every_cpus_open_packet_was_closed(image, flush, whole):
    """Target.flushed_all after a drain: only when the kernel's `flush` closed every CPU's open packet may a live
    stream say a CPU has nothing before it (docs/live.md, "Quiet CPUs"); a CPU it left open, or a kernel that
    refuses `flush`, keeps every stream where it was."""
    from sdtgen.session.reporter import Reporter
    from sdtgen.session.starts import open_session
    from sdtgen.targets.serial import open_line

    reply = b"".join(text(line) for line in flush.split("\n"))
    peer = Peer(lambda line: reply if line == "flush" else hello(image, 2) if line == "hello" else None,
                usual(image, 2))
    line = open_line(peer.line, duplex=True)
    try:
        s = open_session("attach", str(image), Reporter(as_json=True, out=io.StringIO(), err=io.StringIO()),
                         timeout=5, line=line)
        try:
            s.drain()
            assert s.target.flushed_all is whole
        finally:
            s.close()
    finally:
        line.close()
        peer.close()
