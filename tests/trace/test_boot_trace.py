"""End to end: `sdtgen boot --arm branch --trace` writes what the guest recorded; each format read back by its
real reader equals the run's JSON `fire` events (probe, CPU, timestamp, every argument), lost records included."""

from __future__ import annotations

import json

import pytest
from conftest import expected
from helpers import sdtgen
from test_ctf import read_bt2

from sdtgen.trace import TraceProbe

CALLS = ["--run", "kmain", "--arg", "1", "--run", "sched_switch", "--arg", "7", "--arg", "-8", "--arg", "3",
         "--arg", "1", "--arg", "-5000", "--arg", "0x40", "--run", "proc_exec:int", "--arg", "9",
         "--run", "sched_run", "--arg", "40"]


def boot_with_trace(image, path, fmt: str, *extra: str) -> tuple[list[dict], dict, dict[str, TraceProbe]]:
    proc = sdtgen("boot", image, "--arm", "branch", "--enable", ":::", *CALLS, "--json", "--trace", path,
                  "--trace-format", fmt, *extra)
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(x) for x in proc.stdout.splitlines()]
    fires = [e for e in events if e["event"] == "fire"]
    (stats,) = [e for e in events if e["event"] == "stats"]
    assert fires and all(isinstance(f["ts"], int) and f["cpu"] == 0 for f in fires)
    listed = json.loads(sdtgen("probes", image, "--json", check=True).stdout)
    probes = [TraceProbe(0, p["provider"], p["module"], p["function"], p["name"], tuple(p["args"]))
              for p in listed["probes"]]
    types = {p.spec: p for p in probes}
    return fires, stats, types


@pytest.mark.parametrize("extra", [(), ("--buffer-size", "512", "--overflow", "drop")])
def test_ctf_read_by_babeltrace2_equals_the_json_events(kernel, tmp_path, extra):
    fires, stats, types = boot_with_trace(kernel.image, tmp_path / "trace", "ctf", *extra)
    rows = read_bt2(tmp_path / "trace")
    got = [(r["name"], r["cpu"], r["ts"], list(r["fields"].values())) for r in rows if "name" in r]
    assert got == [(f["probe"], f["cpu"], f["ts"], expected(types[f["probe"]], f["args"])) for f in fires]
    discarded = sum(r["discarded"] for r in rows if "discarded" in r)
    assert discarded == stats["lost"] and (stats["lost"] > 0) == bool(extra)


def test_perfetto_read_by_its_protos_equals_the_json_events(kernel, tmp_path):
    pb = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")
    fires, _, types = boot_with_trace(kernel.image, tmp_path / "t.pftrace", "perfetto")
    trace = pb.Trace()
    trace.ParseFromString((tmp_path / "t.pftrace").read_bytes())
    got = [(p.track_event.name, [getattr(a, a.WhichOneof("value")) for a in p.track_event.debug_annotations])
           for p in trace.packet if p.HasField("track_event") and p.track_event.type == pb.TrackEvent.TYPE_INSTANT]
    assert got == [(f["probe"], expected(types[f["probe"]], f["args"])) for f in fires]
    stamps = [p.timestamp for p in trace.packet if p.HasField("track_event")
              and p.track_event.type == pb.TrackEvent.TYPE_INSTANT]
    assert stamps == sorted(stamps) and len(set(stamps)) > 1


def test_chrome_read_by_json_equals_the_json_events(kernel, tmp_path):
    fires, _, types = boot_with_trace(kernel.image, tmp_path / "t.json", "chrome")
    doc = json.loads((tmp_path / "t.json").read_text())
    got = [(e["name"], list(e["args"].values())) for e in doc["traceEvents"] if e["ph"] == "i"]
    assert got == [(f["probe"], expected(types[f["probe"]], f["args"], unreadable=None)) for f in fires]
    assert doc["otherData"]["clock"] == "tsc" and doc["otherData"]["clock_hz"] > 0
