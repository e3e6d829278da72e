"""A peer on a TCP line that answers `sdtgen attach` as the test says, the kernel's control core forged: what
arrives at the host is bytes on a socket, framed as docs/runtime.md ("The serial transport") says, so the test
is of the host's reading alone. The image the host is given is a real one (the fixture kernel): its hello names
the image's architecture and where readelf puts its sdt_runtime_entries."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from helpers import run

from sdtgen.layout import VALUES

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "qemu"))
from serial_line import T, encode


def text(line: str) -> bytes:
    return encode(T, line.encode())


def entries(image: Path) -> int:
    """Where the image links sdt_runtime_entries: readelf's section sdt_entries (or its symbol)."""
    for line in run(["readelf", "-SW", str(image)]).stdout.splitlines():
        w = line.replace("[ ", "[").split()
        if len(w) > 3 and w[1] == "sdt_entries":
            return int(w[3], 16)
    for line in run(["readelf", "-sW", str(image)]).stdout.splitlines():
        if line.split()[-1:] == ["sdt_runtime_entries"]:
            return int(line.split()[1], 16)
    raise AssertionError("no sdt_runtime_entries in the image")


def hello(image: Path, cpus: int = 1, arch: str = "x86_64", version: int = VALUES["SDT_CONTROL_VERSION"]) -> bytes:
    return (text(f"hello {arch} {cpus:x} clock 3b9aca00 1 0 0 safe {entries(image):x} {version:x}")
            + text("ok hello 0"))


def usual(image: Path, cpus: int = 1) -> dict[str, bytes]:
    """What a kernel answers to the commands every attach sends: its hello, its own rings, nothing armed."""
    return {"hello": hello(image, cpus), "ring": text("error -7 ring: the kernel attaches its own rings"),
            "stats": b"".join(text(f"cpu {k:x} 0 0") for k in range(cpus)) + text(f"ok stats {cpus:x}"),
            "drain": text("ok drain 0"), "flush": text(f"ok flush {cpus:x}"),
            "disable": text("ok disable 1"), "enable": text("ok enable 1")}


@dataclass(frozen=True)
class Flood:
    """Bytes from a program of their own (``yes``), written straight to the socket as fast as it takes them: the
    line is never quiet, however slowly the host reads."""

    argv: tuple[str, ...]


Chunks = bytes | Iterable[bytes] | Flood  # what the peer sends: bytes, chunks, or a flood


ESCAPE = bytes([VALUES["SDT_CONTROL_ESCAPE"]])  # the byte that starts each command line the host sends


class Peer:
    """Listens on 127.0.0.1; each command line the host sends is answered by ``answer(line)``, whose bytes go back
    as they are (None: the command's usual answer from ``usual_answers``, else `ok COMMAND 0`). ``before``: sent as
    the host connects; ``partial``: what the kernel's input held before the host's first byte (a stray line start).
    ``seen``: every line the host sent, as the kernel's input split it."""

    def __init__(self, answer: Callable[[str], Chunks | None], usual_answers: dict[str, bytes],
                 before: Chunks = b"", partial: bytes = b"") -> None:
        self.answer, self.usual, self.before, self.partial = answer, usual_answers, before, partial
        self.seen: list[str] = []
        self.floods: list[subprocess.Popen] = []
        self.server = socket.create_server(("127.0.0.1", 0))
        self.line = f"tcp:127.0.0.1:{self.server.getsockname()[1]}"
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        conn, _ = self.server.accept()
        with conn:
            try:
                self._send(conn, self.before)
                held = self.partial
                while data := conn.recv(4096):
                    held += data
                    *lines, held = held.split(b"\n")
                    for raw in lines:
                        line = raw.rsplit(ESCAPE, 1)[-1].decode()  # as sdt_control_input: the escape drops a partial
                        self.seen.append(line)
                        if not line:
                            continue
                        out = self.answer(line)
                        word = line.split()[0]
                        self._send(conn, self.usual.get(word, text(f"ok {word} 0")) if out is None else out)
            except OSError:  # the host went away
                pass

    def _send(self, conn: socket.socket, out: Chunks) -> None:
        if isinstance(out, Flood):
            self.floods.append(subprocess.Popen(out.argv, stdout=conn.fileno(), stderr=subprocess.DEVNULL))
            return
        for chunk in [out] if isinstance(out, bytes) else out:
            conn.sendall(chunk)

    def close(self) -> None:
        self.server.close()
        for p in self.floods:
            p.kill()
            p.wait()
