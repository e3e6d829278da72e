"""A shared object is a module of the Linux process: fixtures/module's mod.c built as a shared object with
`sdtgen gen --module hkm` (DLOPEN=1) registers its sites from its constructor when kernel-proc dlopens it, and
its destructor unregisters them at dlclose. A spec enabled before the dlopen arms it; its firings, decoded
from the packets the process streamed, equal the same C run natively, in both arming modes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import run
from module_native import MODULE, module_firings
from probe_source import called_probes

from sdtgen.event_format import event_format
from sdtgen.probes import probe_key
from sdtgen.trace.packets import Decoder, split

CALLS = [3, 0, 5]
MASK = (1 << 64) - 1



@pytest.fixture(scope="module")
def native(tmp_path_factory):
    return module_firings(tmp_path_factory.mktemp("native-hkm"), CALLS)


def decoded(trace: Path) -> list[tuple[str, list]]:
    """The module's events in the streams, decoded by the probes mod.c's source declares."""
    dec = Decoder([event_format(probe_key(p.symbol), p.spec, p.args, 64) for p in called_probes(MODULE)], 64)
    out = []
    for path in sorted(trace.glob("stream_*"), key=lambda p: int(p.name.split("_")[1])):
        for data in split(path.read_bytes(), dec, f"{path}: "):
            _, events = dec.events(data)  # an id no probe of the module has is refused
            out += [(e.probe, [a & MASK if isinstance(a, int) else a for a in e.args]) for e in events]
    return out


def lines(exe: Path, trace: Path, *argv: str) -> list[dict]:
    trace.mkdir()
    proc = run([str(exe), "--trace", str(trace), *argv], timeout=300)
    return [json.loads(x) for x in proc.stdout.splitlines()]


def test_a_dlopened_module_fires_as_its_c_runs_natively_and_dlclose_forgets_it(tmp_path, process, library, native):
    calls = [f"hkm_work,{n}" for n in CALLS]
    argv = ["enable", "hkm:::", "trap", "dlopen", str(library), "list"]
    argv += [w for c in calls for w in ("run", c)]
    argv += ["mode", "branch"] + [w for c in calls for w in ("run", c)] + ["dlclose", "list"]
    out = lines(process, tmp_path / "trace", *argv)
    want = [(e["probe"], [a & MASK if isinstance(a, int) else a for a in e["args"]]) for e in native if "probe" in e]
    assert decoded(tmp_path / "trace") == want + want  # trap, then branch
    returns = [x["value"] for x in out if x["event"] == "return"]
    assert returns == [e["return"] for e in native if "return" in e] * 2
    listed = [x["line"].split() for x in out if x["event"] == "probe" and "hkm:" in x["line"]]
    # loaded: three probes, each one site, armed by the spec enabled before the dlopen; the empty module field
    # is the module's name; after dlclose none is listed
    assert sorted((w[4], w[2], w[3]) for w in listed) == [("hkm:drv:work:dev", "1", "1"),
                                                          ("hkm:drv:work:done", "1", "1"),
                                                          ("hkm:hkm:work:step", "1", "1")]


def test_a_thousand_unload_load_cycles_under_two_calling_cpus_tear_nothing(process, library):
    """The control core's torture in mode `module`: CPUs 1 and 2 call the module's function without pause while
    CPU 0 unloads the module (its sites disarmed while they run and trap) and loads it again (the spec enabled
    throughout arms it on every load), 2,000 times: 1,000 cycles."""
    proc = run([str(process), "--cpus", "3", "--arm", "module", "--consumer", "none", "dlopen", str(library),
                "torture", "hkm_work,3", "hkm:::", "2000", "enable", "hkm:::", "branch", "list"], timeout=600)
    out = [json.loads(x) for x in proc.stdout.splitlines()]
    (t,) = [x for x in out if x["event"] == "torture"]
    assert (t["toggles"], t["torn"], t["faults"]) == (2000, 0, 0)
    assert t["calls"] > 2000 and t["firings"] > 0  # the callers ran, and the armed module recorded
    # loaded at the end, every site verified again on each load and armed by the spec: none refused or left
    listed = sorted(x["line"].split()[2:] for x in out if x["event"] == "probe" and "hkm:" in x["line"])
    assert listed == [["1", "1", "hkm:drv:work:dev"], ["1", "1", "hkm:drv:work:done"], ["1", "1", "hkm:hkm:work:step"]]
    assert "sdt:" not in proc.stderr  # the runtime reported nothing (a refused site, a changed one)
