"""What a session aggregates (--aggregate, the console's `aggregate`): the scripts compiled against the image's
probes before anything is armed, their programs loaded and enabled through the target, and the consumer's totals,
every CPU's frozen half merged at each snapshot as DTrace merges its per-CPU buffers (docs/aggregations.md).

The same for every target: a target only carries the programs' bytes and the tables' (sdtgen/targets/base.py).
"""

from __future__ import annotations

from sdtgen.dscript import Compiled, compile_script
from sdtgen.dscript.merge import Totals
from sdtgen.errors import SdtError, printable
from sdtgen.plaindata import factory, record
from sdtgen.targets.base import DamagedTables, Refused


@record
class Prepared:
    """An --aggregate of the command line: compiled (and its ids and probes reserved) before the kernel starts."""

    compiled: Compiled | None = None


@record
class Aggregations:
    session: object
    next_id: int = 1
    names: dict[str, str] = factory(dict)  # @name -> the script that has it
    programs: dict[int, str] = factory(dict)  # probe key -> the script whose program it runs
    totals: Totals | None = None
    attached: bool = False
    damaged: int = 0  # CPUs' tables left out of a snapshot: what they claimed could not be believed

    def compile(self, text: str, source: str) -> Compiled:
        """``text`` compiled for the image; refused (one line) when it names an aggregation or a probe an earlier
        script has, as the runtime takes one program a probe. Its ids and probes are reserved."""
        s = self.session
        compiled = compile_script(text, s.probes, s.image.arch.bits, source=source, first_id=self.next_id)
        shown = printable(text if len(text) <= 60 else text[:57] + "...")
        for a in compiled.aggregations:
            name = f"@{a.name}"
            if name in self.names:
                raise SdtError(source, f"{name} of {shown!r} is an aggregation of an earlier script too "
                               f"({printable(self.names[name])!r})",
                               "give it another name, or put the clauses in one script to aggregate into one")
        for p in compiled.programs:
            for key, probe in zip(p.keys, p.probes, strict=True):
                if key in self.programs:
                    raise SdtError(source, f"{printable(probe)} already runs the program of an earlier script "
                                   f"({printable(self.programs[key])!r}); a probe runs one",
                                   "put the clauses for it in one script")
        for a in compiled.aggregations:
            self.names[f"@{a.name}"] = text
        for p in compiled.programs:
            self.programs.update(dict.fromkeys(p.keys, text))
        self.next_id = max([a.id for a in compiled.aggregations], default=self.next_id - 1) + 1
        return compiled

    def arm(self, compiled: Compiled) -> int:
        """Every program of ``compiled`` loaded and enabled in the session's arming mode: the sites armed."""
        s = self.session
        t = s.target
        if not self.attached:
            try:
                s._guard(t.attach_tables, "attach the aggregation tables")
            except Refused as e:
                raise SdtError(s.image.path, f"the kernel cannot attach aggregation tables: {printable(e.text)}",
                               "give every CPU aggregation memory (sdt_control_ops.agg_memory; docs/control.md)") \
                    from None
            self.attached = True
        self.totals = (Totals(compiled.aggregations, compiled.names) if self.totals is None
                       else self.totals.extended(compiled.aggregations, compiled.names))
        armed = 0
        for p in compiled.programs:
            try:
                at = s._guard(lambda p=p: t.load_program(p.code), "load a program")
            except Refused as e:
                raise SdtError(s.image.path, f"the kernel cannot hold a program of {len(p.code)} bytes: "
                               f"{printable(e.text)}", "give the kernel's control core program memory "
                               "(sdt_control_ops.program_memory)") from None
            for spec in p.specs:
                try:
                    armed += s._guard(lambda spec=spec, at=at, p=p: t.enable_program(spec, s.mode, at, len(p.code)),
                                      f"enable {printable(spec)}")
                except Refused as e:
                    raise SdtError(s.image.path, f"the runtime refused the program for {printable(spec)!r}: "
                                   f"{printable(e.text)}") from None
        return armed

    def snapshot(self) -> Totals | None:
        """Every CPU's frozen half (the target switches them) merged into the totals; a CPU whose tables cannot be
        believed is said once and left out of this snapshot."""
        s = self.session
        if self.totals is None:
            return None
        try:
            taken = s._guard(s.target.take_tables, "read the aggregations")
        except Refused as e:
            raise SdtError(s.image.path, f"the kernel cannot send its aggregation tables: {printable(e.text)}",
                           "give the control core a way to send a frame (sdt_control_ops.frame; docs/control.md)") \
                from None
        for t in taken:
            if isinstance(t, DamagedTables):
                self._damaged(t.cpu, t.what)
                continue
            try:
                self.totals.add(t)
            except ValueError as e:  # AggTableError: an entry no program made
                self._damaged(t.cpu, str(e))
        return self.totals

    def _damaged(self, cpu: int, what: str) -> None:
        self.damaged += 1
        self.session.reporter.warning(f"CPU {cpu}'s aggregation tables left out: {what}")

    def clear(self) -> None:
        """DTrace's clear(): the totals start again from now (what the kernel held until now is taken and dropped)."""
        if self.totals is not None:
            self.snapshot()
            self.totals.clear()
