"""A module loaded by `--module FILE`, by a script's `module FILE` line or by the console's is one behaviour
(Session.load_module_or_say): a spec given with --enable before it is applied at the load, the boot maps its
module area for either, and a load refused leaves the kernel as it was, is said, and the session goes on (exit 1).
The firings are the module's C run natively (tests/module_native.py); a refusal is the runtime's documented code."""

from __future__ import annotations

import json
import subprocess

import pytest
from helpers import SDTGEN, sdtgen
from module_native import module_firings
from native_oracle import Call
from test_modules import build_module

from sdtgen.layout import ERRORS, VALUES

CALLS = [3, 0, 2]


@pytest.fixture(scope="module")
def native_module(tmp_path_factory):
    return module_firings(tmp_path_factory.mktemp("native-module"), CALLS)


def shown(stdout: str) -> list[dict]:
    """The firings and returns of a --json boot, as the native harness prints them."""
    out = []
    for e in map(json.loads, stdout.splitlines()):
        if e["event"] == "fire":
            out.append({"probe": e["probe"], "args": e["args"]})
        elif e["event"] == "return":
            out.append({"return": e["value"]})
    return out


def test_a_scripts_module_line_is_the_module_option(tmp_path, kernel, native_module):
    """--enable hkm::: then the module from a script, with no --module: as with --module, as the native run."""
    ko = build_module(tmp_path, "x86_64")
    want = [{**e, "probe": e["probe"].replace("hkm::", "hkm:hkm:")} if "probe" in e else e for e in native_module]
    runs = [w for n in CALLS for w in ("--run", "hkm_work", "--arg", str(n))]
    option = sdtgen("boot", kernel.image, "--json", "--enable", "hkm:::", "--module", ko, *runs)
    assert option.returncode == 0, option.stderr
    script = tmp_path / "load.sdt"
    script.write_text(f"module {ko}\n" + "".join(f"run hkm_work {n}\n" for n in CALLS))
    line = sdtgen("boot", kernel.image, "--json", "--enable", "hkm:::", "--script", script)
    assert line.returncode == 0, line.stderr
    assert shown(option.stdout) == shown(line.stdout) == want


@pytest.fixture
def refused_ko(tmp_path):
    """The module with its table's magic spoiled: sdt_module_load refuses it (SDT_ERR_MODULE_TABLE)."""
    data = build_module(tmp_path, "x86_64").read_bytes()
    magic = VALUES["SDT_MODULE_TABLE_MAGIC"].to_bytes(4, "little")
    assert data.count(magic) == 1
    bad = tmp_path / "bad.ko"
    bad.write_bytes(data.replace(magic, b"XDTM"))
    return bad


def test_a_refused_load_is_said_and_the_session_goes_on_whoever_asked(tmp_path, kernel, native, refused_ko):
    ticks = [{"probe": f["probe"], "args": f["args"]} for f in native([Call("sched_run", (2,))])
             if f.get("probe") == "hk:sched:run:tick"]
    said = (f"{kernel.image}: error: module {refused_ko} not loaded: the runtime refused to load module hkm: "
            f"{ERRORS[VALUES['SDT_ERR_MODULE_TABLE']]}")
    script = tmp_path / "s.sdt"
    script.write_text(f"module {refused_ko}\nrun sched_run 2\n")
    ways = {
        "option": [SDTGEN, "boot", kernel.image, "--enable", "hk:sched:run:tick", "--module", refused_ko,
                   "--run", "sched_run", "--arg", "2"],
        "script": [SDTGEN, "boot", kernel.image, "--enable", "hk:sched:run:tick", "--script", script],
        "console": [SDTGEN, "boot", kernel.image, "--enable", "hk:sched:run:tick", "-i"],
    }
    for way, argv in ways.items():
        proc = subprocess.run([str(a) for a in argv] + ["--json"], input=script.read_text() if way == "console"
                              else None, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 1, (way, proc.stderr)
        errors = [e for e in map(json.loads, proc.stdout.splitlines()) if e["event"] == "error"]
        assert [f"{kernel.image}: error: {e['text']}" for e in errors] == [said], way
        assert [e for e in shown(proc.stdout) if "probe" in e] == ticks, f"{way}: the run after it happened"

