"""sdtgen probes: a dtrace -l style listing from an object or from an image's own tables."""

from __future__ import annotations

import json

from helpers import FIXTURE, sdtgen
from probe_source import defined_probes


def listed(path) -> list[dict]:
    return json.loads(sdtgen("probes", path, "--json", check=True).stdout)["probes"]


def test_image_lists_every_defined_probe_with_real_names_and_types(kernel):
    got = {(p["provider"], p["module"], p["function"], p["name"]): tuple(p["args"]) for p in listed(kernel.image)}
    for src in defined_probes(FIXTURE):
        assert got[(src.provider, src.module, src.function, src.name)] == src.args
    assert got[("raw", "", "", "checksum")] == ()  # called without the macros: named from its symbol
    assert len(got) == len(defined_probes(FIXTURE)) + 1


def test_object_and_image_list_the_same_probes_ids_and_site_counts(kernel):
    def without_addresses(probes):  # section+offset in the object, link-time addresses in the image
        return [{k: v for k, v in p.items() if k != "addresses"} for p in probes]

    assert without_addresses(listed(kernel.partial)) == without_addresses(listed(kernel.image))
    by_name = {p["name"]: p for p in listed(kernel.image)}
    assert by_name["acquire"]["sites"] == 4 and by_name["exec-success"]["sites"] == 1
    assert [p["id"] for p in listed(kernel.image)] == list(range(1, 19))


def test_human_listing_follows_dtrace_l(kernel):
    lines = sdtgen("probes", kernel.image, check=True).stdout.splitlines()
    assert lines[0].split() == ["ID", "PROVIDER", "MODULE", "FUNCTION", "NAME", "SITES", "ARGS"]
    row = next(ln for ln in lines if "six" in ln)
    assert row.split(None, 6)[1:] == ["hk", "sched", "switch", "six", "1", "int, int, int, int, long, unsigned long"]


def test_a_spec_lists_what_dtrace_l_n_lists_with_the_same_ids(kernel):
    """`sdtgen probes FILE SPEC` is `dtrace -l -n SPEC`: provider:module:function:name filled from the right, each
    field a glob; the rows keep the whole listing's IDs. The truth is the fixture's C source."""
    whole = {(p["provider"], p["module"], p["function"], p["name"]): p["id"] for p in listed(kernel.image)}
    source = [(s.provider, s.module, s.function, s.name) for s in defined_probes(FIXTURE)]

    def chosen(*specs: str) -> dict:
        got = json.loads(sdtgen("probes", kernel.image, *specs, "--json", check=True).stdout)["probes"]
        return {(p["provider"], p["module"], p["function"], p["name"]): p["id"] for p in got}

    vfs = {k for k in source if k[0] == "hk" and k[1] == "vfs"}
    assert vfs and chosen("hk:vfs::") == {k: whole[k] for k in vfs}
    lookup_entry = {k for k in source if k[2] == "lookup" and k[3] == "entry"}
    assert len(lookup_entry) == 1 and chosen("lookup:entry") == {k: whole[k] for k in lookup_entry}
    globbed = {k for k in source if k[0] == "hk" and k[3].startswith("exec")}
    assert len(globbed) >= 2 and chosen("hk:::exec*") == {k: whole[k] for k in globbed}
    assert chosen("hk:vfs::", "hk:::exec*") == {k: whole[k] for k in vfs | globbed}  # several: any of them
    after = json.loads(sdtgen("probes", kernel.image, "--json", "--kind", "sdt", "hk:vfs::", check=True).stdout)
    assert {(p["provider"], p["module"], p["function"], p["name"]) for p in after["probes"]} == vfs  # after options


def test_a_spec_that_matches_nothing_is_one_line_and_exit_2(kernel):
    r = sdtgen("probes", kernel.image, "nosuch:::")
    assert r.returncode == 2 and r.stdout == ""
    assert len(r.stderr.splitlines()) == 1 and "'nosuch:::'" in r.stderr and "matches no probe" in r.stderr
    r = sdtgen("probes", kernel.image, "a:b:c:d:e")
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1 and "more than four fields" in r.stderr


def test_a_stray_option_names_the_subcommands_help(kernel):
    for argv in (["--bogus"], ["--json", "hk:::", "--bogus"]):
        r = sdtgen("probes", kernel.image, *argv)
        assert r.returncode == 2 and r.stderr.splitlines() == [
            "sdtgen probes: unrecognized arguments: --bogus (see sdtgen probes --help)"]
