"""Chrome trace-event JSON: instant events per CPU thread, microsecond timestamps, every argument."""

from __future__ import annotations

import json

import pytest
from conftest import HZ, LOST, expected

from sdtgen.errors import SdtError
from sdtgen.trace import TraceMeta, write_trace


@pytest.fixture(scope="module")
def doc(recorded, tmp_path_factory) -> dict:
    path = tmp_path_factory.mktemp("chrome") / "trace.json"
    write_trace(path, "chrome", recorded.meta, recorded.events)
    return json.loads(path.read_text(encoding="utf-8"))


def test_metadata_names_the_guest_and_each_cpus_thread(doc, recorded):
    meta = [e for e in doc["traceEvents"] if e["ph"] == "M"]
    (process,) = [e for e in meta if e["name"] == "process_name"]
    threads = {e["tid"]: e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    assert all(e["pid"] == process["pid"] for e in meta)
    assert sorted(threads.values()) == [f"CPU {c}" for c in range(recorded.meta.cpus)]
    assert doc["otherData"]["lost"] == {str(c): LOST.get(c, 0) for c in range(recorded.meta.cpus)}
    assert (doc["otherData"]["clock"], doc["otherData"]["clock_hz"]) == ("tsc", HZ)


def test_every_event_is_a_thread_instant_with_microseconds_and_arguments(doc, recorded):
    threads = {e["tid"]: int(e["args"]["name"].split()[1]) for e in doc["traceEvents"] if e["name"] == "thread_name"}
    got = [(e["ts"], threads[e["tid"]], e["name"], e["cat"], e["s"], e["args"])
           for e in doc["traceEvents"] if e["ph"] == "i"]
    want = []
    for e in recorded.events:
        p = recorded.probe(e)
        args = {f"arg{i}": v for i, v in enumerate(expected(p, e.args, unreadable=None))}
        want.append((e.ts * 1_000_000_000 // HZ / 1000, e.cpu, p.spec, p.provider, "t", args))
    assert got == want


def test_no_events_still_names_the_cpus(tmp_path):
    write_trace(tmp_path / "t.json", "chrome", TraceMeta("i386", "tsc", 1000, 2, (), {}), [])
    doc = json.loads((tmp_path / "t.json").read_text())
    assert [e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"] == ["CPU 0", "CPU 1"]
    assert not [e for e in doc["traceEvents"] if e["ph"] != "M"]


def test_a_directory_in_its_place_is_one_line_and_kept(tmp_path, recorded):
    (tmp_path / "t.json").mkdir()
    with pytest.raises(SdtError) as e:
        write_trace(tmp_path / "t.json", "chrome", recorded.meta, recorded.events)
    assert "\n" not in str(e.value) and "would replace a directory" in str(e.value)
    assert (tmp_path / "t.json").is_dir()
