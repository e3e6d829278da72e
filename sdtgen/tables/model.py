"""One site of a probe table, whichever table it came from."""

from __future__ import annotations

from sdtgen.plaindata import record
from sdtgen.tables.fields import Place


@record(frozen=True)
class ArgSpec:
    """A USDT argument: ``-4@%edi`` is a signed 4-byte value in %edi; size None when the spec has none."""

    spec: str
    size: int | None
    signed: bool
    location: str
    float: bool = False

    def to_json(self) -> dict:
        return {"spec": self.spec, "size": self.size, "signed": self.signed, "float": self.float,
                "location": self.location}


@record(frozen=True)
class TableSite:
    kind: str  # stapsdt, mcount, patchable, jump
    provider: str
    function: str  # the symbol holding the site
    name: str  # as listed
    place: Place
    raw_name: str = ""  # the table's own name, when it differs from the listed one
    args: tuple[ArgSpec, ...] = ()
    semaphore: Place | None = None

    def named(self, function: str) -> TableSite:
        """The same site, its function named."""
        return TableSite(self.kind, self.provider, function, self.name, self.place, self.raw_name, self.args,
                         self.semaphore)
