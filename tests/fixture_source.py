"""What the fixture kernel's C source itself declares, read from the source (the test oracle)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from helpers import FIXTURE

_DEFINE = re.compile(r"SDT_PROBE_DEFINE(\d?)\(([^;]*)\);")


@dataclass(frozen=True)
class SourceProbe:
    provider: str
    module: str
    function: str
    name: str  # as listed ("__" -> "-")
    args: tuple[str, ...]


def defined_probes() -> list[SourceProbe]:
    out = []
    for path in sorted(FIXTURE.glob("*.[ch]")):
        for m in _DEFINE.finditer(path.read_text()):
            fields = [f.strip() for f in m.group(2).split(",")]
            prov, mod, func, name, *types = fields
            out.append(SourceProbe(prov, mod, func, name.replace("__", "-"), tuple(t.strip('"') for t in types)))
    return out
