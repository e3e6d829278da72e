"""Two hosts on two lines at once, each holding its own session (docs/control.md, "Two hosts on two lines"): the
fixture kernel on QEMU's pc machine with a second control line (fixtures/qemu/second_line.c: COM2's lines passed to
sdt_control_line by the kernel's own code) and its own flight recorder of every probe (flight.c), two `sdtgen attach
--serial ... --session A|B` running at once, one on each line, on the same probe with predicates that split its
firings. Each session's firings are its own filter of the native run of every call both hosts made, on each vCPU;
the other host enabling, disabling and closing its session meanwhile takes nothing from it, and the flight recorder's
packets stay in its rings (none comes on either line). x86-64 (`make qemu`, SDTGEN_QEMU_ALL=1: i386 too); QEMU's
virt boards (AArch64, RISC-V) have one UART."""

from __future__ import annotations

import json
import socket
import subprocess
import time

import pytest
from helpers import SDTGEN
from native_oracle import Call
from qemu_helpers import ALL
from session_pair import native
from whole_kernel import whole_kernel

ARCHES = ("x86_64", "i386") if ALL else ("x86_64",)
CPUS = 2
SPEC = "hk:mem:alloc:entry"  # both hosts' probe: one site, each session with its own predicate
HOSTS = {  # the session, its predicate, and the sizes it allocates (each on every vCPU at once)
    "A": ("/arg0 < 1000/", [16, 100, 999] * 8),
    "B": ("/arg0 >= 1000/", [1000, 5000, 1 << 20]),
}
VISITS = 3  # host B comes and goes (opens its session, enables, runs, disables, closes) while host A records


def wants(host: str, probe: str, args: list) -> bool:
    return probe == SPEC and (args[0] < 1000) == (host == "A")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]



@pytest.fixture(scope="module")
def two_lines(qemu_kernel, tmp_path_factory):
    """``boot(arch)``: the fixture kernel with its second line booted by QEMU on CPUS vCPUs, each line a TCP server:
    (the image, the first line, the second); one machine an architecture, shared by this module's tests."""
    from sdtgen import arch as arches
    from sdtgen.targets.qemu import qemu_command

    started: dict[str, tuple] = {}
    machines = []

    def boot(arch: str):
        if arch not in started:
            image = whole_kernel(qemu_kernel, arch)
            lines = [f"tcp:127.0.0.1:{free_port()},server=on,wait=off" for _ in range(2)]
            a = arches.by_name(arch)
            argv = qemu_command(a.qemu.binary, a, str(image), CPUS, 128 << 20, 0, str(tmp_path_factory.mktemp(arch)),
                                ["-serial", lines[1]])
            argv[argv.index("stdio")] = lines[0]
            machines.append(subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            time.sleep(0.5)
            started[arch] = (image, lines[0].split(",")[0], lines[1].split(",")[0])
        return started[arch]

    yield boot
    for q in machines:
        q.kill()
        q.wait()


def host(image, line: str, name: str) -> subprocess.Popen:
    predicate, sizes = HOSTS[name]
    runs = [w for size in sizes for w in ("--run", "kmem_alloc", "--arg", str(size))]
    return subprocess.Popen([SDTGEN, "attach", "--serial", line, str(image), "--json", "--session", name,
                             "--buffer-size", "65536", "--enable", f"{SPEC} {predicate}", *runs, "--sessions"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def events_of(name: str, p: subprocess.Popen) -> list[dict]:
    out, err = p.communicate(timeout=300)
    assert p.returncode == 0 and "Traceback" not in err, f"host {name}: {err[-3000:]}"
    return [json.loads(x) for x in out.splitlines()]


@pytest.mark.parametrize("arch", ARCHES)
def test_two_hosts_on_two_lines_each_hold_their_own_filter_of_the_native_run(two_lines, native_exe, arch):
    image, first, second = two_lines(arch)
    a = host(image, first, "A")
    visits = [events_of("B", host(image, second, "B")) for _ in range(VISITS)]  # while A runs
    got = {"A": [events_of("A", a)], "B": visits}
    every = [Call("kmem_alloc", (size,)) for name in HOSTS for size in HOSTS[name][1]]
    for name, runs in got.items():
        calls = [Call("kmem_alloc", (size,)) for size in HOSTS[name][1]]
        want = [f for f in native(native_exe, calls) if wants(name, *f)]
        assert want and [f for f in native(native_exe, every) if wants(name, *f)] == want  # the other's: none
        for events in runs:
            for cpu in range(CPUS):
                fired = [(e["probe"], e["args"]) for e in events if e["event"] == "fire" and e["cpu"] == cpu]
                assert fired == want, f"host {name}, CPU {cpu}"
            assert not [e for e in events if e["event"] == "warning"]
            listed = [e["name"] for e in events if e["event"] == "session"]
            assert listed[0] == "default" and name in listed


def replies(sock: socket.socket, line: bytes) -> tuple[str, int | None]:
    """``line`` sent on a line as a host sends it (the escape first): (the command the last line of its reply names,
    its error code or None), a reply to another command (the hello the kernel announced at boot) passed over."""
    from sdtgen.layout import VALUES
    from sdtgen.targets.control import answers
    from sdtgen.transport.frames import TEXT, FrameReader

    sock.sendall(bytes([VALUES["SDT_CONTROL_ESCAPE"]]) + line + b"\n")
    reader = FrameReader()
    while True:
        data = sock.recv(4096)
        assert data, "the line closed"
        for f in reader.feed(data):
            text = getattr(f, "payload", b"").decode("ascii", "replace") if getattr(f, "type", None) == TEXT else ""
            if text.startswith(("ok ", "error ")) and answers(text)[0] == line.split(b" ")[0].decode():
                return answers(text)[:2]


def test_the_second_line_refuses_a_line_too_long_as_the_first_does_and_goes_on(two_lines):
    """A line past SDT_CONTROL_LINE on each line: the same refusal (error SDT_ERR_LONG naming the command), the
    first line's by the control core's sdt_control_input, the second's by the kernel's own line (second_line.c);
    each line then answers its next command."""
    from sdtgen.layout import VALUES

    _, *lines = two_lines("x86_64")
    long = b"list " + b"x" * VALUES["SDT_CONTROL_LINE"]
    for line in lines:
        host, port = line.removeprefix("tcp:").rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            assert replies(sock, long) == ("list", VALUES["SDT_ERR_LONG"]), line
            assert replies(sock, b"sessions") == ("sessions", None), line
