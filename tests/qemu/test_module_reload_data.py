"""What a module's data holds across an unload and a load (docs/runtime.md): the emulated boot plays a loader
that relocates and copies the module afresh at every `--module`, so its data starts again from the object file;
QEMU's platform loader keeps the module's memory and `module load` patches it in place, so its data is what the
last run left. A module counting its own calls shows each."""

from __future__ import annotations

import json

import pytest
from helpers import SDTGEN, run, sdtgen
from module_native import MODULE

COUNTER = r"""
#include <sdt.h>

SDT_PROVIDER_DEFINE(cnt);
SDT_PROBE_DEFINE1(cnt, , work, call, "long");

static long calls;	/* .bss: the module's own data */

long cnt_work(int n)
{
	calls += n;
	SDT_PROBE1(cnt, , work, call, calls);
	return calls;
}
"""

RUNS = ("--enable", "cnt:::", "--module", "{ko}", "--run", "cnt_work", "--arg", "1", "--run", "cnt_work", "--arg",
        "1", "--unload", "cnt", "--module", "{ko}", "--run", "cnt_work", "--arg", "1")


def counter_module(tmp_path, arch: str = "x86_64"):
    (tmp_path / "cnt.c").write_text(COUNTER)
    run(["make", "-C", str(MODULE), f"ARCH={arch}", f"O={tmp_path / 'out'}", f"SDTGEN={SDTGEN}",
         f"SRCS={tmp_path / 'cnt.c'}", "MODULE=cnt"])
    return tmp_path / "out" / "cnt.ko"


def returns_and_firings(r) -> tuple[list[int], list[list[int]]]:
    assert r.returncode == 0, r.stderr
    events = [json.loads(line) for line in r.stdout.splitlines()]
    return ([e["value"] for e in events if e["event"] == "return"],
            [e["args"] for e in events if e["event"] == "fire"])


def test_the_emulator_loads_a_fresh_copy_so_the_modules_data_starts_again(tmp_path, kernel):
    ko = counter_module(tmp_path)
    r = sdtgen("boot", kernel.image, "--json", *(a.format(ko=ko) for a in RUNS))
    assert returns_and_firings(r) == ([1, 2, 1], [[1], [2], [1]])


@pytest.mark.parametrize("arch", ["x86_64"])
def test_qemu_loads_the_module_again_in_place_so_its_data_is_kept(tmp_path, qemu_kernel, arch):
    ko = counter_module(tmp_path, arch)
    r = sdtgen("qemu", str(qemu_kernel(arch)), "--json", *(a.format(ko=ko) for a in RUNS), "--timeout", "120")
    assert returns_and_firings(r) == ([1, 2, 3], [[1], [2], [3]])
