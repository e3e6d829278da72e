"""Linker sets in stripped images: strip and objcopy --strip-all drop __start_/__stop_, the sections stay."""

from __future__ import annotations

import json

import pytest
from helpers import run, sdtgen
from tables import readelf


def listed(path) -> list[dict]:
    return json.loads(sdtgen("probes", path, "--json", check=True).stdout)["probes"]


@pytest.fixture(scope="module", params=[["strip", "-o"], ["objcopy", "--strip-all"]], ids=["strip", "objcopy"])
def stripped(request, kernel, tmp_path_factory):
    out = tmp_path_factory.mktemp("stripped") / "kernel.elf"
    *tool, last = request.param
    run([*tool, last, str(out), str(kernel.image)] if last == "-o" else [*tool, last, str(kernel.image), str(out)])
    assert not readelf.symbols(out), "the tool left a symbol table"
    return out


def test_probes_of_a_stripped_image_lists_what_the_image_lists(kernel, stripped):
    got = listed(stripped)
    assert got and got == listed(kernel.image)
    # Each site address lies in the image's text, as readelf places it.
    text = readelf.section(stripped, ".text")
    assert all(text.addr <= a < text.addr + text.size for p in got for a in p["addresses"])


def test_boot_of_a_stripped_image_patches_every_site(kernel, stripped):
    proc = sdtgen("boot", stripped)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == sdtgen("boot", kernel.image).stdout.splitlines()[0] == \
        "patched 21 sites (0 refused)"


def test_check_of_a_stripped_image_says_it_is_stripped(kernel, stripped):
    proc = sdtgen("check", kernel.partial, stripped)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == (f"{stripped}: error: is stripped (no symbol table): check finds each site's stub and "
                           "function by their symbols; give the image before it was stripped, or keep the table "
                           "sections when stripping (strip only debug information: strip --strip-debug)\n")


def test_a_stripped_image_without_the_set_sections_says_so(kernel, tmp_path):
    out = tmp_path / "bare.elf"
    run(["objcopy", "--strip-all", "--remove-section", "set_sdt_sites_set", str(kernel.image), str(out)])
    for cmd in (["probes", "--kind", "sdt", out], ["boot", out]):
        proc = sdtgen(*cmd)
        assert proc.returncode == 2 and proc.stdout == ""
        assert proc.stderr.startswith(f"{out}: error: is stripped (no symbol table) and has no set_sdt_sites_set "
                                      "section either, so its probe table cannot be found; give the image before")
