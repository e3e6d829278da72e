"""`sdtgen fleet --trace F.pftrace`: one Perfetto file of every machine (sdtgen/trace/merged.py), read with
Perfetto's own protos: each machine's events carry its machine_id, hang on CPU tracks under a process track named
after it (on its threads' tracks), and are, CPU by CPU, what the fixture's C fires natively."""

from __future__ import annotations

from helpers import need_module, sdtgen
from process_oracle import ACTIONS, POINTER, firing, native
from test_perfetto import parse, tracks

from sdtgen.trace.model import machine_id


def test_one_perfetto_file_holds_each_machines_native_run_under_its_own_machine_id(kernel_proc, native_exe, tmp_path):
    pb = need_module("perfetto.protos.perfetto.trace.perfetto_trace_pb2", "pip install 'sdtgen[perfetto]'")
    firings = native(native_exe)[0]
    path = tmp_path / "fleet.pftrace"
    r = sdtgen("fleet", "--machine", f"one=process:{kernel_proc}", "--machine", f"two=process:{kernel_proc},cpus=2",
               *ACTIONS, "--trace", str(path), "-q")
    assert r.returncode == 0 and r.stderr == "", r.stderr
    packets = parse(path)
    names = {machine_id(n): n for n in ("one", "two")}
    assert {p.machine_id for p in packets} == set(names)
    described = tracks(packets)
    processes = {d.process.process_name: uuid for uuid, d in described.items() if d.HasField("process")}
    assert sorted(processes) == ["one", "two"]
    seen: dict[tuple[str, int], list] = {}
    for p in packets:
        if not p.HasField("track_event") or p.track_event.type != pb.TrackEvent.TYPE_INSTANT:
            continue
        machine = names[p.machine_id]
        assert described[p.track_event.track_uuid].parent_uuid == processes[machine]  # under its machine's process
        said = {a.name: getattr(a, a.WhichOneof("value")) for a in p.track_event.debug_annotations}
        if not p.track_event.name.startswith(POINTER):
            args = [said[f"arg{k}"] for k in range(len(said) - 1)]
            seen.setdefault((machine, said["cpu"]), []).append(firing(p.track_event.name, args))
    assert seen == {("one", 0): firings, ("two", 0): firings, ("two", 1): firings}
