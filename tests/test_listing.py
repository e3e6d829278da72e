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
