"""Several CPUs at once on this machine's cores (program_threads.c): every thread fires one probe's program into
its own table with no lock, a consumer switches the tables all the while and merges the halves it takes, and
signals fire the probe again inside the firings they interrupt. What the consumer merged is exactly what
fired, less the nested firings each CPU counted."""

from __future__ import annotations

import struct
import subprocess
from pathlib import Path

from programs import FakeProbe, compile_for

from sdtgen.dscript.merge import Totals
from sdtgen.dscript.tables import read_cpu
from sdtgen.layout import AGG

HERE = Path(__file__).resolve().parent
HANDLER_VALUE = 1000003
KEY = 0xC0FFEE


def snapshots(data: bytes, ncpus: int):
    """(per snapshot, per CPU: a reader of the memory written, the struct's address, the frozen half), and the
    firings each CPU's signal handler made."""
    at, out, size = 0, [], AGG.size(64)
    while True:
        (n,) = struct.unpack_from("<Q", data, at)
        at += 8
        if n == 0:
            break
        assert n == ncpus
        snap = []
        for _ in range(n):
            (addr,) = struct.unpack_from("<Q", data, at)
            raw = data[at + 8:at + 8 + size]
            arena, used = struct.unpack_from("<QQ", data, at + 8 + size)
            body = data[at + 24 + size:at + 24 + size + used]
            at += 24 + size + used
            memory = {addr: raw, arena: body}
            want = dict(zip(AGG.names(), AGG.struct(64).unpack(raw), strict=True))["want"]
            snap.append((lambda a, k, memory=memory: memory[a][:k], addr, 1 - want))
        out.append(snap)
    handled = struct.unpack_from(f"<{ncpus}Q", data, at)
    return out, handled


def test_cpus_aggregating_at_once_while_the_consumer_switches_lose_nothing_but_what_nested(tmp_path):
    from helpers import need_tool, run, sdtgen

    rt = Path(sdtgen("runtime-dir", check=True).stdout.strip())
    inc = Path(sdtgen("include-dir", check=True).stdout.strip())
    exe = tmp_path / "program_threads"
    run([need_tool("gcc", "gcc"), "-O2", "-pthread", "-Wall", "-Wextra", "-Werror", f"-I{inc}", f"-I{rt}", "-o",
         str(exe), str(HERE / "program_threads.c"), str(rt / "sdt_runtime.c"), str(rt / "arch" / "sdt_x86_64.c")])
    probe = FakeProbe("t", "m", "f", "n", ("long", "long", "int"), KEY)
    compiled = compile_for("t:m:f:n { @n[arg2] = count(); @s[arg2] = sum(arg0); @q = quantize(arg1) }", [probe])
    [program] = compiled.programs
    (tmp_path / "program").write_bytes(program.code)
    threads, firings = 2, 200_000
    proc = subprocess.run([str(exe), str(tmp_path / "program"), str(threads), str(firings), str(KEY)],
                          capture_output=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    snaps, handled = snapshots(proc.stdout, threads)
    assert len(snaps) > 3, "the consumer switched while the CPUs fired"
    totals = Totals(compiled.aggregations, compiled.names)
    for snap in snaps:
        for read, addr, frozen in snap:
            totals.add(read_cpu(read, addr, 64, halves=(frozen,), given=1 << 20))
    nested = [totals.nested[k] for k in range(threads)]
    assert sum(handled) > 0 and sum(nested) > 0, "signals fired the probe, inside firings too"
    assert all(totals.dropped[k] == 0 and totals.errors[k] == 0 for k in range(threads))
    by = {a.name: totals.rows[a.id] for a in compiled.aggregations}
    counts = {keys[0].shown: v[0] for keys, v in by["n"].items()}
    sums = {keys[0].shown: v[0] for keys, v in by["s"].items()}
    kept = [handled[k] - nested[k] for k in range(threads)]  # a handler's firing inside the worker's: dropped
    assert counts == {k: firings + kept[k] for k in range(threads)}
    assert sums == {k: firings * (firings - 1) // 2 + HANDLER_VALUE * kept[k] for k in range(threads)}
    quantized = [0] * 127
    for i in range(firings):
        v = 3 * i
        quantized[63 if v == 0 else 64 + v.bit_length() - 1] += threads
    quantized[64 + 7 .bit_length() - 1] += sum(kept)
    assert list(by["q"][()]) == quantized
