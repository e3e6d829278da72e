"""fixtures/module/Makefile for a module of another kernel: INCLUDES gives the compiler its kernel's header
directories (with real make, the module built against two of them and run in the emulated boot), and CLOCK_HZ
has gen write the CTF declarations of the module's probes."""

from __future__ import annotations

import json

import pytest
from helpers import SDTGEN, run, sdtgen
from test_modules_build import MODULE, build

DRIVER = r"""
#include <sdt.h>
#include <drv_api.h>		/* the kernel's own headers: INCLUDES */
#include <drv_arch.h>

SDT_PROVIDER_DEFINE(xdrv);
SDT_PROBE_DEFINE2(xdrv, , io, start, "int", "long");

long xdrv_io(int n)
{
	long v = drv_scale(n) + DRV_ARCH_BIAS;

	SDT_PROBE2(xdrv, , io, start, n, v);
	return v;
}
"""


@pytest.fixture
def foreign(tmp_path):
    """A module's source and the two header directories of its kernel."""
    (tmp_path / "include").mkdir()
    (tmp_path / "include" / "drv_api.h").write_text("static inline long drv_scale(int n) { return 7L * n; }\n")
    (tmp_path / "arch").mkdir()
    (tmp_path / "arch" / "drv_arch.h").write_text("#define DRV_ARCH_BIAS 100\n")
    (tmp_path / "xdrv.c").write_text(DRIVER)
    return tmp_path


def test_without_its_kernels_headers_the_module_does_not_build(foreign):
    proc = run(["make", "-C", str(MODULE), f"O={foreign / 'out'}", f"SDTGEN={SDTGEN}", f"SRCS={foreign / 'xdrv.c'}",
                "MODULE=xdrv"], check=False)
    assert proc.returncode != 0 and "drv_api.h" in proc.stderr


def test_includes_names_the_kernels_header_directories_and_the_module_runs_with_them(foreign, kernel):
    out = build(foreign / "out", SRCS=str(foreign / "xdrv.c"), MODULE="xdrv",
                INCLUDES=f"{foreign / 'include'} {foreign / 'arch'}")
    assert sdtgen("check", out / "mod.o", out / "xdrv.ko").returncode == 0
    r = sdtgen("boot", kernel.image, "--json", "--enable", "xdrv:::", "--module", out / "xdrv.ko", "--run", "xdrv_io",
               "--arg", "3")
    assert r.returncode == 0, r.stderr
    events = [json.loads(line) for line in r.stdout.splitlines()]
    fired = [(e["probe"], e["args"]) for e in events if e["event"] == "fire"]
    assert fired == [("xdrv:xdrv:io:start", [3, 121])]  # 7 * 3 + 100: the two headers' definitions
    assert [e["value"] for e in events if e["event"] == "return"] == [121]


def test_clock_hz_writes_the_modules_event_declarations(tmp_path):
    out = build(tmp_path / "so", DLOPEN="1", CLOCK_HZ="1000000000", CLOCK_NAME="tsc_ns")
    text = (out / "hkm_metadata").read_text()
    assert text.startswith("/* CTF 1.8 */") and "\tname = tsc_ns;" in text and "\tfreq = 1000000000;" in text
    assert text.count("\nevent {") == 3  # the module's three probes
