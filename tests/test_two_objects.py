"""Two generated objects (a core and a library) link into one image, check, and boot like the C source."""

from __future__ import annotations

import re

import pytest
from booted import Booted
from helpers import compile_runtime, final_script, need_tool, readelf_probe_relocs, run, sdtgen
from native_oracle import PROTOTYPES, Call, data_symbolizer

from sdtgen.table import SITE_SIZE

# Each half carries the descriptors of the probes it calls: lib.c defines the probe kern.h's
# inline functions fire all over the subsystems, so it goes with them.
HALVES = {"core": ["main.o"], "subsystems": ["vfs.o", "sched.o", "mem.o", "proc.o", "lib.o"]}
CALLS = [Call("kmain", (2,)), Call("vfs_lookup_id", (2,)), Call("sched_run", (4,)), Call("kmem_alloc", (1 << 20,)),
         Call("proc_exec", (5,)), Call("proc_exit", (42,))]
LINKERS = {"ld": ("ld", "binutils"), "gold": ("ld.gold", "binutils"), "lld": ("ld.lld", "lld")}


@pytest.fixture(scope="module")
def halves(kernel, tmp_path_factory):
    """Each half partial-linked and run through `sdtgen gen`, its stubs and table compiled."""
    out = tmp_path_factory.mktemp("halves")
    partial = sdtgen("linker-script", "partial", "--path", check=True).stdout.strip()
    built = {}
    for name, objs in HALVES.items():
        obj = out / f"{name}.o"
        run(["ld", "-r", "-T", partial, "-o", str(obj), *(str(kernel.dir / o) for o in objs)])
        stubs, table = out / f"{name}_stubs.c", out / f"{name}_table.S"
        sdtgen("gen", obj, "--stubs", stubs, "--table", table, check=True)
        stubs_o, table_o, *runtime = compile_runtime(out, name, stubs, table)
        built[name] = (obj, stubs_o, table_o)
    return out, built, runtime  # the runtime once, whatever number of generated objects


def link(halves, linker: str):
    out, built, runtime = halves
    tool = need_tool(*LINKERS[linker])
    script = final_script(out / f"final-{linker}.ld")
    image = out / f"image-{linker}.elf"
    objs = [str(p) for name in HALVES for p in built[name]] + [str(p) for p in runtime]
    run([tool, "-T", script, "-o", str(image), *objs])
    return image, [built[name][0] for name in HALVES]


@pytest.mark.parametrize("linker", list(LINKERS))
def test_two_generated_objects_link_and_every_site_checks_stable(halves, linker):
    image, objects = link(halves, linker)
    proc = sdtgen("check", *objects, image)
    assert proc.returncode == 0, proc.stderr
    sites = sum(len(readelf_probe_relocs(o)) for o in objects)
    assert f"{sites} sites" in proc.stdout and f"{sites} stable" in proc.stdout and sites == 21
    # The image's one site table covers both halves: one entry a site, per readelf.
    sections = run(["readelf", "-SW", str(image)]).stdout
    size = re.search(r"set_sdt_sites_set\s+PROGBITS\s+\S+\s+\S+\s+(\S+)", sections).group(1)
    assert int(size, 16) == SITE_SIZE * sites


@pytest.mark.parametrize("linker", list(LINKERS))
def test_no_code_label_in_the_image_is_an_anchor(halves, linker):
    image, _ = link(halves, linker)
    disasm = run(["objdump", "-d", str(image)]).stdout
    labels = re.findall(r"^[0-9a-f]+ <([^>]+)>:$", disasm, re.M)
    assert "vfs_lookup" in labels and not [name for name in labels if name.startswith("__sdt_site_")]
    assert "__sdt_site_" not in disasm  # nor in any call target
    # Each probe call is named by its function, the way a reader of the disassembly expects.
    call = re.search(r"call\s+[0-9a-f]+ <__dtrace_sdt_hk_vfs_lookup_entry>", disasm)
    assert call is not None


def _firings(events: list[dict], symbolize) -> list[tuple[str, list]]:
    """(probe, args) in order, from boot events or native lines; pointers named by the object they point at."""
    out = []
    for e in events:
        if e.get("event") == "fire" or ("event" not in e and "probe" in e):
            args = list(e["args"])
            if e["probe"] == "hk:lib:ref:acquire":
                args[0] = symbolize(args[0])
            out.append((e["probe"], args))
    return out


def test_the_image_fires_exactly_as_the_native_run(halves, native, native_exe):
    image, _ = link(halves, "ld")
    booted = Booted(image)
    try:
        booted.events()
        booted.session.enable(":::")
        emulated = booted.run(CALLS)
    finally:
        booted.session.close()
    expected = native(CALLS)
    fired = _firings(emulated, data_symbolizer(image))
    assert fired == _firings(expected, data_symbolizer(native_exe))
    assert {p for p, _ in fired} >= {"hk:kern:main:step", "hk:vfs:lookup:entry", "hk:mem:alloc:fail",
                                      "hk:proc:exit:done", "hk:lib:ref:acquire"}
    returned = [e["value"] for e in emulated if e.get("event") == "return"]
    native_returns = [e["return"] for e in expected if "return" in e]
    keep = [PROTOTYPES[c.function][0] != "void" for c in CALLS]
    assert [v for v, k in zip(returned, keep, strict=True) if k] == \
        [v for v, k in zip(native_returns, keep, strict=True) if k]


EXTRA = """#include <sdt.h>
SDT_PROBE_DEFINE2(hk, lib, ref, acquire, "struct kobj *", "int");
void driver_ref(void *o) { SDT_PROBE2(hk, lib, ref, acquire, o, 7); }
"""


def test_a_probe_two_objects_call_links_once_and_lists_once(halves, tmp_path):
    """A driver object calls a probe the subsystems also call: both stubs files define it, both tables list it."""
    from helpers import compile_c

    _, built, runtime = halves
    driver = tmp_path / "driver.o"
    partial = sdtgen("linker-script", "partial", "--path", check=True).stdout.strip()
    run(["ld", "-r", "-T", partial, "-o", str(driver), str(compile_c(tmp_path, "drv", EXTRA))])
    sdtgen("gen", driver, "--stubs", tmp_path / "d.c", "--table", tmp_path / "d.S", check=True)
    d_stubs, d_table, *_ = compile_runtime(tmp_path, "d", tmp_path / "d.c", tmp_path / "d.S")
    script = final_script(tmp_path / "final.ld")
    image = tmp_path / "three.elf"
    objs = [str(p) for name in HALVES for p in built[name]] + [str(driver), str(d_stubs), str(d_table)]
    objs += [str(p) for p in runtime]
    run(["ld", "-T", script, "-o", str(image), *objs])
    objects = [built[name][0] for name in HALVES] + [driver]
    assert sdtgen("check", *objects, image).returncode == 0
    relocs = [r for o in objects for r in readelf_probe_relocs(o)]
    rows = [ln.split() for ln in sdtgen("probes", image, check=True).stdout.splitlines()[1:]]
    assert [int(r[0]) for r in rows] == list(range(1, len(rows) + 1))  # one numbering across the three tables
    assert len(rows) == len({sym for _, _, _, sym in relocs})  # each probe once
    (acquire,) = [r for r in rows if r[1:5] == ["hk", "lib", "ref", "acquire"]]
    assert int(acquire[5]) == sum(sym == "__dtrace_sdt_hk_lib_ref_acquire" for _, _, _, sym in relocs) == 5
