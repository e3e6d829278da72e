"""Traces that crossed the serial line: `sdtgen qemu --trace` opens in babeltrace2 with every event it
printed, and `sdtgen record` collects the packets a kernel streams by itself (its boot commands from
QEMU's -fw_cfg) over TCP or a FIFO, each CPU's events those of the native run, in the trace and as it
shows them."""

from __future__ import annotations

import os
import re
import socket
import subprocess

import pytest
from helpers import SDTGEN, need_tool, run
from native_oracle import Call, build_fixture_native, data_symbolizer, run_native
from qemu_helpers import qemu_json

from sdtgen.event_format import event_format
from sdtgen.image import Image
from sdtgen.trace.packets import Decoder, split

ARCH = "x86_64"  # fw_cfg files reach the kernel on x86 and AArch64 (QEMU 7.2's RISC-V virt adds fw_cfg too late)
CPUS = 2
KMAIN = Call("kmain", (1,))
BT2_LINE = re.compile(r"^\[[^]]*\] \(\+[^)]*\) \S+ (?P<name>\S+): \{ cpu_id = (?P<cpu>\d+)[,}]")


def babeltrace2_events(trace) -> list[tuple[int, str]]:
    out = run([need_tool("babeltrace2", "babeltrace2"), str(trace)]).stdout.splitlines()
    rows = [BT2_LINE.match(line) for line in out]
    assert all(rows), out[:3]
    return [(int(m["cpu"]), m["name"]) for m in rows]


def test_a_trace_streamed_over_the_serial_line_opens_in_babeltrace2(qemu_kernel, tmp_path):
    trace = tmp_path / "trace"
    events = qemu_json(qemu_kernel(ARCH), "--cpus", CPUS, "--enable", ":::", "--run", "kmain", "--arg", 1,
                       "--trace", trace)
    fired = [(e["cpu"], e["probe"]) for e in events if e["event"] == "fire"]
    assert len(fired) > 30
    assert sorted(babeltrace2_events(trace)) == sorted(fired)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def boot_by_itself(image, serial: str, tmp_path) -> subprocess.Popen:
    """QEMU with the kernel's boot commands in fw_cfg: rings, every probe armed, kmain(1) on each CPU, off."""
    from sdtgen import arch as arches

    with Image(str(image)) as im:
        kmain = im.symbols["kmain"].value
    commands = tmp_path / "commands"
    runs = "".join(f"run {cpu} {kmain:x} 1 1\n" for cpu in range(CPUS))  # in turn: kmain's state is shared
    commands.write_text(f"ring 100000 1000 1 10000000\nenable trap :::\n{runs}exit 0\n")
    a = arches.by_name(ARCH)
    argv = [need_tool(a.qemu.binary, a.qemu.package), "-machine", a.qemu.machine, "-smp", str(CPUS), "-m", "256M",
            *a.qemu.args, "-nodefaults", "-display", "none", "-monitor", "none", "-serial", serial,
            "-fw_cfg", f"name=opt/sdtgen/commands,file={commands}", "-kernel", str(image)]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def recorded_events(image, trace) -> dict[int, list[tuple[str, list]]]:
    """Each CPU's events in its stream file, decoded by the image's probe descriptors."""
    with Image(str(image)) as im:
        probes = im.probes()
        bits = im.arch.bits
    # as sdtgen's traces hold them: each event's arguments in its probe's order (sdtgen/trace/ctf.py)
    decoder = Decoder([event_format(p.key, p.spec, p.args, bits) for p in probes], bits)
    out = {}
    for cpu in range(CPUS):
        data = (trace / f"stream_{cpu}").read_bytes()
        out[cpu] = [(e.probe, list(e.args)) for pk in split(data, decoder) for e in decoder.events(pk)[1]]
    return out


def native_firings(tmp_path) -> list[tuple[str, list]]:
    exe = build_fixture_native(tmp_path)
    return [(e["probe"], e["args"]) for e in run_native(exe, [KMAIN]) if "probe" in e], data_symbolizer(exe)


def symbolized(firings, name) -> list:
    return [(p, [name(a[0]), *a[1:]] if p == "hk:lib:ref:acquire" else a) for p, a in firings]


@pytest.mark.parametrize("line", ["tcp", "fifo"])
def test_record_collects_every_packet_a_kernel_streams_by_itself(qemu_kernel, tmp_path, line):
    image = qemu_kernel(ARCH)
    trace = tmp_path / "trace"
    if line == "tcp":
        port = free_port()
        qemu = boot_by_itself(image, f"tcp:127.0.0.1:{port},server=on,wait=on", tmp_path)
        serial = f"tcp:127.0.0.1:{port}"
    else:
        serial = str(tmp_path / "line")
        os.mkfifo(serial)
        qemu = boot_by_itself(image, f"file:{serial}", tmp_path)  # QEMU waits for the reader to open it
    try:
        rec = run([SDTGEN, "record", str(image), "--serial", serial, "--trace", str(trace)], timeout=120)
    finally:
        qemu.wait(60)
    out = rec.stdout.splitlines()
    assert out[0].startswith(f"hello {ARCH} {CPUS} tsc ") and f"return 1 {36185:x}" in out
    assert out[-1].startswith("recorded 2 packets (42 events) of 2 CPUs into")  # one packet a run, drained after it
    expected, theirs = native_firings(tmp_path)
    ours = data_symbolizer(image)
    for cpu, events in recorded_events(image, trace).items():
        assert symbolized(events, ours) == symbolized(expected, theirs), f"CPU {cpu}"
        shown = [line.split()[1] for line in out if line.startswith(f"cpu{cpu} ")]  # each event as it came
        assert shown == [p for p, _ in expected], f"CPU {cpu}"


def test_a_recorded_trace_opens_in_babeltrace2(qemu_kernel, tmp_path):
    image = qemu_kernel(ARCH)
    port = free_port()
    qemu = boot_by_itself(image, f"tcp:127.0.0.1:{port},server=on,wait=on", tmp_path)
    try:
        run([SDTGEN, "record", str(image), "--serial", f"tcp:127.0.0.1:{port}", "--trace", str(tmp_path / "t")],
            timeout=120)
    finally:
        qemu.wait(60)
    native = tmp_path / "native"
    native.mkdir()
    assert sorted(babeltrace2_events(tmp_path / "t")) == sorted((cpu, p) for cpu in range(CPUS) for p, _ in
                                                                native_firings(native)[0])


def test_an_i386_trace_of_many_full_packets_opens_in_babeltrace2(qemu_kernel, tmp_path):
    """i386's events of an odd number of words end 4 bytes short of a multiple of 8: each packet's content ends
    at its last event's last byte, so babeltrace2 reads every packet to its end and the next from its header."""
    trace = tmp_path / "trace"
    runs = [a for n in range(1, 41) for a in ("--run", "kmain", "--arg", n)]
    events = qemu_json(qemu_kernel("i386"), "--buffer-size", 8192, "--enable", "hk:kern::", "--enable",
                       "hk:mem::", "--enable", "hk:sched::", *runs, "--trace", trace)
    fired = [(e["cpu"], e["probe"]) for e in events if e["event"] == "fire"]
    assert len(fired) > 200 and (trace / "stream_0").read_bytes().count(b"\xc1\x1f\xfc\xc1") > 8
    assert babeltrace2_events(trace) == fired
