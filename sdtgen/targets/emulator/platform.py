"""The emulated platform: what a kernel gives the sdtgen runtime it links, given by the emulator.

The runtime in the image (sdtgen/runtime/) needs hooks, an area and a ring per CPU, and someone to
call its entry points. The emulator maps, below the CPUs' stacks:

- the firmware page: the hooks' own code (read-only): ``cpu_area`` loads a word from the per-CPU page,
  ``clock`` reads the architecture's clock, and ``sync_cores``, ``notify`` and ``report`` trap to the
  host, which does their work (flush every CPU's translations; consume the CPU's closed packets; take
  a report line) and returns through the function's return instruction;
- the per-CPU page: one virtual page each CPU maps to a page of its own (as a kernel's per-CPU area
  is reached), holding that CPU's struct sdt_cpu address: no register of the kernel's is used;
- the data area: the hooks struct, the readable ranges, each CPU's struct sdt_cpu, scratch for the
  host's calls (a trap frame, a probe spec), the per-CPU pages, the rings, and what a kernel gives its
  programs (docs/aggregations.md): each CPU's struct sdt_agg and table memory, and room for programs;
  and what a kernel gives the sessions it opens (docs/sessions.md): each session id's struct sdt_session,
  its configuration and name, and a pool of memory the sessions' areas, tables and rings are carved from.

Every layout comes from sdtgen/layout.py; the runtime's entry points from the image's symbols.
"""

from __future__ import annotations

import contextlib

from sdtgen.errors import SdtError
from sdtgen.layout import AGG, CPU, ENTRIES, FRAME, HOOKS, RANGE, SESSION, SESSION_CONFIG, VALUES
from sdtgen.plaindata import record
from sdtgen.targets.emulator.machine import PAGE, Machine, Region
from sdtgen.transport.geometry import packet_size_for

SCRATCH = 4096  # bytes of host-call scratch per CPU: a trap frame, a probe spec, a call's string arguments
SPEC_AT = 256  # where in the scratch a spec goes (after the frame)
STRINGS_AT = 2048  # where a call's string arguments go, each in a slot of its own
STRING_SLOT = 256
MAX_SPEC_BYTES = STRINGS_AT - SPEC_AT - 1
HOOK_TRAPS = ("sync_cores", "notify", "report")
AGG_TABLE_BYTES = 256 * 1024  # a CPU's aggregation tables (two halves): about a hundred quantize rows a half
PROGRAM_AREA = 4 * VALUES["SDT_PROG_MAX_BYTES"]  # programs the host writes before sdt_enable_program
SESSION_SLOT = 512  # a session id's struct sdt_session, its struct sdt_session_config and its name
# The sessions' memory: room for two sessions as large as the default one with tables (a kernel's budget; what
# does not fit is the runtime's SDT_ERR_MEMORY), at most SESSION_POOL_MOST, at least SESSION_POOL_LEAST.
SESSION_POOL_LEAST, SESSION_POOL_MOST = 4 << 20, 256 << 20


@record(frozen=True)
class Entries:
    """The runtime's entry points in an image, by name, and the name of its patch protocol."""

    address: dict[str, int]
    protocol: str

    def __getitem__(self, name: str) -> int:
        return self.address[name]


# Each entry point by its C name: an sdt_entries field of kind fn is documented by the function it holds.
FIELDS = {f.name: f.doc for f in ENTRIES.fields if f.kind == "fn"}


def runtime_entries(image) -> Entries:
    """The runtime's functions in ``image``, from its sdt_entries section (symbols or not); an SdtError naming
    what to do when it has none."""
    elf, arch = image.elf, image.arch
    sec = elf.section("sdt_entries")
    sym = image.symbols.get("sdt_runtime_entries")
    where = (sec.addr, sec.size) if sec is not None and sec.is_alloc else (sym.value, sym.size) if sym else None
    st = ENTRIES.struct(arch.bits, arch.little)
    if where is None or where[1] < st.size:
        raise elf.fail("does not link the sdtgen runtime (no sdt_entries: sdt_init and the rest)",
                       "link the runtime: `sdtgen runtime-dir` has its sources; the Makefile fragment "
                       "compiles and links them")
    values = dict(zip(ENTRIES.names(), st.unpack(image.read(where[0], st.size)), strict=True))
    if values["magic"] != VALUES["SDT_ENTRIES_MAGIC"]:
        raise elf.fail(f"its sdt_entries at {where[0]:#x} is not the runtime's (magic {values['magic']:#x})",
                       "relink the image with this sdtgen's runtime")
    protocol = "safe"
    with contextlib.suppress(Exception):
        protocol = image.read(values["protocol"], 6).split(b"\0")[0].decode("ascii") or "safe"
    return Entries({name: values[field] for field, name in FIELDS.items()}, protocol)



class Platform:
    """The emulator's side of the runtime for ``cpus`` CPUs, mapped below their stacks in ``m0``'s memory
    before the other CPUs' engines exist (they map the same memory); ``own_page`` gives each its page."""

    def __init__(self, m0: Machine, cpus: int, buffer_size: int, policy: str, clock_hz: int,
                 packet_size: int | None = None) -> None:
        arch = m0.arch
        self.m0 = m0
        self.bits = arch.bits
        self.word = arch.bits // 8
        self.little = arch.little
        self.cpus = cpus
        self.buffer_size = buffer_size
        self.packet_size = packet_size or packet_size_for(buffer_size)
        self._frame = FRAME.struct(self.bits, self.little)  # every trap packs and unpacks one
        self._frame_names = FRAME.names()
        ncpu = self.cpus
        # The data area: hooks, ranges, areas, scratch; the per-CPU pages and rings page-aligned after them.
        nranges = len(m0.regions) + 4 + len(m0.code)  # readable memory, then the executable segments' bytes
        self.hooks = 0
        self.ranges = _align(HOOKS.size(self.bits), 16)
        self.areas = _align(self.ranges + RANGE.size(self.bits) * nranges, 64)
        self.scratch = _align(self.areas + CPU.size(self.bits) * ncpu, 64)
        self.pages = _align(self.scratch + SCRATCH * ncpu, PAGE)
        self.rings = self.pages + PAGE * ncpu
        self.aggs = self.rings + buffer_size * ncpu  # each CPU's struct sdt_agg, then the tables, page-aligned
        self.tables = _align(self.aggs + AGG.size(self.bits) * ncpu, PAGE)
        self.programs = self.tables + AGG_TABLE_BYTES * ncpu
        self.session_slots = _align(self.programs + PROGRAM_AREA, 64)
        self.pool = _align(self.session_slots + SESSION_SLOT * VALUES["SDT_MAX_SESSIONS"], PAGE)
        self.pool_bytes = session_pool(ncpu, buffer_size)
        size = _align(self.pool + self.pool_bytes, PAGE)
        top = m0.stack_top - m0.stack_size - PAGE
        self.firmware = (top - PAGE) & ~(PAGE - 1)
        self.percpu = self.firmware - PAGE  # the virtual page each CPU sees as its own
        self.base = (self.percpu - PAGE - size) & ~(PAGE - 1)
        below = [r.vaddr + r.size for r in m0.regions if r.vaddr < self.percpu]  # the image, the stacks
        if self.base <= 0 or self.base >= self.percpu or any(end > self.base for end in below):
            raise SdtError(m0.file, f"{ncpu} CPUs with {buffer_size}-byte buffers do not fit the guest's address "
                           "space", "give fewer --cpus or a smaller --buffer-size")
        m0.map_area(self.base, size, "the runtime's areas and rings")
        self.code = self._firmware(m0)
        order = "little" if self.little else "big"
        for k in range(ncpu):
            m0.write(self.base + self.pages + k * PAGE, self.area(k).to_bytes(self.word, order))
        self._write_hooks(clock_hz, notify=policy != "overwrite")

    def own_page(self, m: Machine) -> None:
        """CPU ``m.cpu`` sees its own page at the per-CPU address."""
        m.map_own_page(self.percpu, self.base + self.pages + m.cpu * PAGE)

    # -- where things are --------------------------------------------------------------------
    def area(self, cpu: int) -> int:
        return self.base + self.areas + cpu * CPU.size(self.bits)

    def ring(self, cpu: int) -> int:
        return self.base + self.rings + cpu * self.buffer_size

    def agg(self, cpu: int) -> int:
        """CPU ``cpu``'s struct sdt_agg."""
        return self.base + self.aggs + cpu * AGG.size(self.bits)

    def agg_tables(self, cpu: int) -> tuple[int, int]:
        """(address, bytes) of CPU ``cpu``'s aggregation table memory."""
        return self.base + self.tables + cpu * AGG_TABLE_BYTES, AGG_TABLE_BYTES

    def program_area(self) -> tuple[int, int]:
        """(address, bytes) of the memory programs are written to."""
        return self.base + self.programs, PROGRAM_AREA

    def session_slot(self, sid: int) -> tuple[int, int, int]:
        """(struct sdt_session, struct sdt_session_config, name) of the kernel's storage for session id ``sid``."""
        at = self.base + self.session_slots + sid * SESSION_SLOT
        return at, at + _align(SESSION.size(self.bits), 8), at + SESSION_SLOT - 32

    def session_pool(self) -> tuple[int, int]:
        """(address, bytes) of the memory sessions are carved from."""
        return self.base + self.pool, self.pool_bytes

    def config_bytes(self, values: dict[str, int]) -> bytes:
        return SESSION_CONFIG.struct(self.bits, self.little).pack(*(values[n] for n in SESSION_CONFIG.names()))

    def frame(self, cpu: int) -> int:
        return self.base + self.scratch + cpu * SCRATCH

    def spec_buffer(self, cpu: int) -> int:
        return self.frame(cpu) + SPEC_AT

    def string_buffer(self, k: int, size: int) -> int:
        """Where argument ``k`` of a call goes when it is a string of ``size`` bytes (its NUL included): in CPU 0's
        scratch, which every CPU of a call reads."""
        if not 0 <= k < (SCRATCH - STRINGS_AT) // STRING_SLOT or size > STRING_SLOT:
            raise ValueError(f"string argument {k} of {size} bytes does not fit its slot")
        return self.frame(0) + STRINGS_AT + k * STRING_SLOT

    @property
    def hooks_address(self) -> int:
        return self.base + self.hooks

    def cpu_of_area(self, addr: int) -> int | None:
        k, off = divmod(addr - self.area(0), CPU.size(self.bits))
        return k if off == 0 and 0 <= k < self.cpus else None

    def hook_at(self, addr: int) -> str | None:
        """Which trapping hook's breakpoint is at ``addr``, if any."""
        for name in HOOK_TRAPS:
            if self.code[name] == addr:
                return name
        return None

    # -- setting up ------------------------------------------------------------------------
    def _firmware(self, m: Machine) -> dict[str, int]:
        cpu = m.model
        pieces = [("cpu_area", cpu.firmware_load(self.percpu)), ("clock", cpu.firmware_clock())]
        pieces += [(name, cpu.firmware_trap()) for name in HOOK_TRAPS]
        code, at, blob = {}, 0, bytearray()
        for name, body in pieces:
            at = _align(at, 16)
            blob += bytes(at - len(blob)) + body
            code[name] = self.firmware + at
            at += len(body)
        m.map_area(self.firmware, PAGE, "the platform's hook code", protected=True)
        m.write(self.firmware, bytes(blob))
        return code

    def readable(self) -> list[tuple[int, int]]:
        """(start, size) of the guest memory strings may be copied from: every mapped region, joined."""
        return _joined(self.m0.regions)

    def _write_hooks(self, clock_hz: int, notify: bool) -> None:
        ranges = self.readable()
        m = self.m0
        # Sites may be only in the bytes the executable segments hold in the file (a zero-filled tail is none).
        text = [(c.start, c.end - c.start) for c in m.code]
        pack = RANGE.struct(self.bits, self.little).pack
        m.write(self.base + self.ranges, b"".join(pack(a, n) for a, n in [*ranges, *text]))
        values = {name: 0 for name in HOOKS.names()}
        values.update(sync_cores=self.code["sync_cores"], cpu_area=self.code["cpu_area"], clock=self.code["clock"],
                      notify=self.code["notify"] if notify else 0, report=self.code["report"],
                      readable=self.base + self.ranges, nreadable=len(ranges),
                      text=self.base + self.ranges + RANGE.size(self.bits) * len(ranges), ntext=len(text),
                      clock_hz=clock_hz)
        m.write(self.hooks_address, HOOKS.struct(self.bits, self.little).pack(*(values[n] for n in HOOKS.names())))

    def frame_bytes(self, values: dict[str, int]) -> bytes:
        mask = (1 << 64) - 1
        return self._frame.pack(*((values.get(n, 0) & mask) for n in self._frame_names))

    def read_frame(self, m: Machine, cpu: int) -> dict[str, int]:
        st = self._frame
        return dict(zip(self._frame_names, st.unpack(m.read(self.frame(cpu), st.size)), strict=True))


def session_pool(cpus: int, buffer_size: int) -> int:
    """Bytes of the sessions' pool for ``cpus`` CPUs of ``buffer_size``-byte rings (see SESSION_POOL_LEAST)."""
    return min(max(2 * cpus * (buffer_size + AGG_TABLE_BYTES + 4096), SESSION_POOL_LEAST), SESSION_POOL_MOST)


def _align(n: int, a: int) -> int:
    return (n + a - 1) // a * a


def _joined(regions: list[Region]) -> list[tuple[int, int]]:
    out: list[list[int]] = []
    for r in sorted(regions, key=lambda r: r.vaddr):
        if out and out[-1][0] + out[-1][1] == r.vaddr:
            out[-1][1] += r.size
        else:
            out.append([r.vaddr, r.size])
    return [(a, n) for a, n in out]
