"""Chrome trace-event JSON: an instant event per firing on its CPU's thread, the arguments as C typed them,
metadata naming the process and each CPU, the clock and each CPU's losses in otherData."""

from __future__ import annotations

import json

from tracing import CPUS, boot_with_trace, expected, fired_values


def test_every_firing_on_its_cpus_thread_with_its_arguments(trace_kernel, tmp_path):
    t = boot_with_trace(trace_kernel, tmp_path / "t.json", "chrome")
    doc = json.loads(t.path.read_text())
    events = [e for e in doc["traceEvents"] if e["ph"] == "i"]
    names = {e["tid"]: e["args"]["name"] for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}
    assert names == {cpu + 1: f"CPU {cpu}" for cpu in range(CPUS)}
    for cpu in range(CPUS):
        mine = [e for e in events if e["tid"] == cpu + 1]
        assert [(e["name"], list(e["args"].values())) for e in mine] == [
            (p, expected(p, v, unreadable=None)) for p, v in fired_values()]
        assert [e["ts"] for e in mine] == sorted(e["ts"] for e in mine)
    assert len(events) == len(t.fires) and all(e["s"] == "t" and e["pid"] == 1 for e in events)
    other = doc["otherData"]
    assert other["clock"] == "tsc" and other["clock_hz"] > 0 and other["lost"] == {str(c): 0 for c in range(CPUS)}


def test_the_format_follows_the_extension_and_losses_are_counted(trace_kernel, tmp_path):
    from helpers import sdtgen

    proc = sdtgen("boot", trace_kernel, "--arm", "branch", "--enable", ":::", "--buffer-size", "2048", "--no-stream",
                  "--run", "burst", "--arg", "200", "--trace", tmp_path / "guessed.json", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((tmp_path / "guessed.json").read_text())  # no --trace-format: .json is Chrome's
    (stats,) = [json.loads(x) for x in proc.stdout.splitlines() if '"stats"' in x]
    assert stats["lost"] > 0 and doc["otherData"]["lost"] == {"0": stats["lost"]}
    assert len([e for e in doc["traceEvents"] if e["ph"] == "i"]) + stats["lost"] == 200
