"""Every layout the guest and the host share, described once.

The site table and probe descriptors `gen` writes, the runtime's per-CPU
control structure, the packets and events of its rings, the trap frame and
the hooks a kernel supplies. Python reads them through ``Layout.struct``; the
C declarations in the installed header ``sdt_runtime.h`` are rendered from
here (``render_c``), and tests/runtime/test_layouts.py compiles that header for every
architecture and compares each ``offsetof`` with these offsets.

Fields are naturally aligned; ``u64`` is 8-byte aligned on every
architecture (i386 included: the header declares it so), and ``ptr`` is
a pointer, 4 or 8 bytes. Byte order is the architecture's.

Regenerate the header's block after editing: ``python -m sdtgen.layout --write``.
"""

from __future__ import annotations

import struct
from functools import cache

from sdtgen.plaindata import record

SIZES = {"u8": 1, "u16": 2, "u32": 4, "s32": 4, "u64": 8}
CODES = {"u8": "B", "u16": "H", "u32": "I", "s32": "i", "u64": "Q"}
C_TYPES = {"u8": "sdt_u8", "u16": "sdt_u16", "u32": "sdt_u32", "s32": "sdt_s32", "u64": "sdt_u64"}


@record(frozen=True)
class Field:
    name: str
    kind: str  # u8 u16 u32 s32 u64, ptr (a data pointer), fn (a function pointer: its C type in ``c``)
    doc: str
    count: int = 1
    c: str = ""  # the C type of a ptr or fn field

    def size(self, bits: int) -> int:
        return (bits // 8 if self.kind in ("ptr", "fn") else SIZES[self.kind])


@record(frozen=True)
class Layout:
    name: str  # the C struct: struct <name>
    doc: str
    fields: tuple[Field, ...]

    def offsets(self, bits: int) -> dict[str, int]:
        return _offsets(self, bits)[0]

    def size(self, bits: int) -> int:
        return _offsets(self, bits)[1]

    def offset(self, name: str, bits: int) -> int:
        return self.offsets(bits)[name]

    def struct(self, bits: int, little: bool = True) -> struct.Struct:
        """A ``struct.Struct`` of the whole layout: one value per field (arrays flattened), padding skipped."""
        return _struct(self, bits, little)

    def names(self) -> list[str]:
        """The values ``struct`` unpacks, in order (``arg[3]`` for array elements)."""
        out = []
        for f in self.fields:
            out += [f.name] if f.count == 1 else [f"{f.name}[{i}]" for i in range(f.count)]
        return out


ASM_DIRECTIVES = {1: ".byte", 2: ".2byte", 4: ".4byte", 8: ".8byte"}


def render_asm(layout: Layout, bits: int, values: dict[str, str | list[str]]) -> list[str]:
    """One entry of ``layout`` as GNU as directives, a field (an element) a line, in the layout's order and with
    its padding: ``values`` gives an expression for each field it names (a list for an array; an expression
    may use ``.``, the field's own address), every other field is 0. What gen writes into its tables comes
    from here, so a field added to the layout is in the table too."""
    unknown = set(values) - {f.name for f in layout.fields}
    if unknown:
        raise ValueError(f"{layout.name} has no field {', '.join(sorted(unknown))}")
    out, at = [], 0
    for f in layout.fields:
        start = layout.offset(f.name, bits)
        if start > at:
            out.append(f"\t.zero {start - at}")
        given = values.get(f.name, "0")
        items = [given] * f.count if isinstance(given, str) else list(given)
        if len(items) != f.count:
            raise ValueError(f"{layout.name}.{f.name} has {f.count} elements, not {len(items)}")
        out += [f"\t{ASM_DIRECTIVES[f.size(bits)]} {x}" for x in items]
        at = start + f.size(bits) * f.count
    if layout.size(bits) > at:
        out.append(f"\t.zero {layout.size(bits) - at}")
    return out


@cache
def _offsets(layout: Layout, bits: int) -> tuple[dict[str, int], int]:
    at, out, align = 0, {}, 1
    for f in layout.fields:
        size = f.size(bits)
        at = (at + size - 1) // size * size
        out[f.name] = at
        at += size * f.count
        align = max(align, size)
    return out, (at + align - 1) // align * align


@cache
def _struct(layout: Layout, bits: int, little: bool) -> struct.Struct:
    fmt, at = ["<" if little else ">"], 0
    offsets = layout.offsets(bits)
    for f in layout.fields:
        if offsets[f.name] > at:
            fmt.append(f"{offsets[f.name] - at}x")
        code = {"ptr": "I", "fn": "I"}.get(f.kind, CODES.get(f.kind)) if bits == 32 else \
            {"ptr": "Q", "fn": "Q"}.get(f.kind, CODES.get(f.kind))
        fmt.append(f"{f.count}{code}" if f.count > 1 else code)
        at = offsets[f.name] + f.size(bits) * f.count
    if layout.size(bits) > at:
        fmt.append(f"{layout.size(bits) - at}x")
    return struct.Struct("".join(fmt))


# -- what gen writes ------------------------------------------------------------------------
SITE = Layout("sdt_site", "One probe site: an entry of the linker set set_sdt_sites_set (writable: the runtime "
              "keeps the site's state in it).", (
    Field("site", "s32", "the instruction, relative to this field (site - &site)"),
    Field("probe", "s32", "its probe's descriptor, relative to this field"),
    Field("form", "u8", "SDT_FORM_*: what the instruction is"),
    Field("length", "u8", "its length in bytes after the partial link"),
    Field("mode", "u8", "SDT_TABLE_RELOC or SDT_TABLE_OFFSET: how gen located it"),
    Field("keep", "u8", "0 from gen; sdt_init keeps what the encoders need of the original (x86: a jcc's "
          "condition)"),
    Field("state", "u8", "SDT_SITE_*, kept by the runtime (0 until sdt_init looked at it)"),
    Field("size", "u8", "the length sdt_init verified (a relaxed RISC-V call is shorter), kept by the runtime"),
    Field("next", "u8", "0 from gen; kept by the runtime while a change of the site is in flight: the state it "
          "goes to, then from the change's commit the state it left (sdt_patch.c)"),
    Field("pad", "u8", "0"),
    Field("target", "s32", "a goto site's out-of-line target (what arming jumps to), relative to this field; 0 for "
          "other forms"),
))

PROBE = Layout("sdt_probe", "One probe: an entry of the linker set set_sdt_probes_set (read-only).", (
    Field("stub", "s32", "the probe's stub function, relative to this field"),
    Field("provider", "s32", "NUL-terminated names, each relative to its field"),
    Field("module", "s32", ""),
    Field("function", "s32", ""),
    Field("name", "s32", ""),
    Field("nargs", "u16", "arguments, 0 to 6"),
    Field("id", "u16", "the probe's index in the object gen read"),
    Field("argtype", "s32", "argument types (strings); 0 past nargs", count=6),
    Field("isenabled", "s32", "the is-enabled stub; 0 when no SDT_PROBE_ENABLED() asks"),
    Field("xargtype", "s32", "translated types (the _XLATE forms); 0 where there is none", count=6),
    Field("recorder", "s32", "the recorder gen wrote for the probe (what branch arming calls)"),
    Field("key", "u32", "the event id of its records: FNV-1a of the stub's symbol, never 0"),
    Field("program", "s32", "the probe's struct sdt_slot, which gen defines beside its recorder (who takes its "
          "firings, each session's program), relative to this field"),
))

# -- the runtime's transport ------------------------------------------------------------------
CPU = Layout("sdt_cpu", "One CPU's recording state and ring of packets (sdt_cpu_attach fills it; one writer: its "
             "CPU; the consumer writes only read_seq).", (
    Field("self", "u64", "this structure's address"),
    Field("cpu", "u64", "the CPU's number"),
    Field("ring", "u64", "address of the ring: packets * packet_size bytes"),
    Field("packets", "u64", "packets in the ring, a power of two"),
    Field("packet_size", "u64", "bytes of one packet, a power of two"),
    Field("policy", "u64", "SDT_DISCARD or SDT_OVERWRITE when the ring is full"),
    Field("write_seq", "u64", "packets opened so far: the open packet is write_seq - 1"),
    Field("commit_seq", "u64", "packets closed so far (stored with release after the packet is complete)"),
    Field("read_seq", "u64", "packets read or overwritten: the consumer or the writer claims the oldest unread "
          "by compare-and-swap (the consumer's only field)"),
    Field("current", "u64", "address of the open packet; 0 when none is open"),
    Field("offset", "u64", "bytes used in the open packet (the end of its last event); past packet_size when none "
          "is open"),
    Field("events", "u64", "events in the open packet"),
    Field("discarded", "u64", "events not recorded since attach: ring full (discard), nested, too big"),
    Field("overwritten", "u64", "events lost with packets the writer overwrote unread (overwrite)"),
    Field("nesting", "u64", "1 while a recorder runs on this CPU: a firing inside it is discarded"),
    Field("clock_last", "u64", "the clock at the last event"),
    Field("agg", "u64", "address of this CPU's struct sdt_agg (sdt_agg_attach, after sdt_cpu_attach); 0: probes "
          "with a program are not recorded here"),
    Field("next_area", "u64", "the default session's next CPU area (sdt_cpu_attach links them; the registry holds "
          "the first); 0 at the end, and in the areas of other sessions"),
    Field("session", "u64", "the id of the session this area records for (its packets' stream_id)"),
    Field("visit", "u64", "odd while this CPU's recorder serves the sessions of a probe's slot (the slow path): "
          "closing a session or detaching a program waits for it to move"),
))

PACKET = Layout("sdt_packet", "The header of every packet: CTF 1.8's packet header and context, as they stand.", (
    Field("magic", "u32", "SDT_PACKET_MAGIC (0xC1FC1FC1)"),
    Field("stream_id", "u32", "the session whose ring holds it (0: the default session)"),
    Field("timestamp_begin", "u64", "the clock when the packet opened"),
    Field("timestamp_end", "u64", "the clock when it closed"),
    Field("content_size", "u64", "bits of the packet holding data (header included)"),
    Field("packet_size", "u64", "bits of the packet"),
    Field("packet_seq_num", "u64", "the packet's number on its CPU, from 1 (a gap: packets overwritten unread)"),
    Field("events_discarded", "u64", "the CPU's discarded count when the packet closed (a running count)"),
    Field("cpu_id", "u32", "the CPU"),
    Field("events", "u32", "events in the packet"),
))

EVENT = Layout("sdt_event", "The header of every event in a packet, 8-byte aligned; the arguments follow. "
               "CTF's event header (timestamp, id), then its event context (size, unreadable).", (
    Field("timestamp", "u64", "the clock when the probe fired"),
    Field("id", "u32", "the probe's key (sdt_probe.key)"),
    Field("size", "u16", "bytes of the event, header included (the next one starts at the next multiple of 8)"),
    Field("unreadable", "u16", "bit k: string argument k was NULL or not in readable memory"),
))

RANGE = Layout("sdt_range", "Memory a recorder may copy a string from.", (
    Field("start", "u64", ""),
    Field("size", "u64", ""),
))

# -- the kernel's side ------------------------------------------------------------------------
FRAME = Layout("sdt_frame", "What the kernel's breakpoint handler passes to sdt_trap, and copies back (pc, sp, "
               "ret, link).", (
    Field("pc", "u64", "in: the pc the breakpoint left (x86: after the int3); out: where to resume"),
    Field("sp", "u64", "the stack pointer (x86 pushes and pops the return address through it)"),
    Field("flags", "u64", "x86: EFLAGS (a conditional tail site tests them); 0 elsewhere"),
    Field("ret", "u64", "the return-value register (rax/eax, x0, a0): an is-enabled check sets it"),
    Field("link", "u64", "the link register (AArch64 x30, RISC-V ra); unused on x86"),
    Field("arg", "u64", "the argument registers (x86-64 rdi..r9, x0..x5, a0..a5); i386 reads the stack", count=6),
))

HOOKS = Layout("sdt_hooks", "What the kernel supplies, once, to sdt_init (copied). A NULL function is a no-op.", (
    Field("text_open", "fn", "a writable alias of [addr, addr+len) of text (or addr itself); NULL: text is writable",
          c="void *(*%s)(void *addr, unsigned long len)"),
    Field("text_close", "fn", "done writing through that alias", c="void (*%s)(void *alias, unsigned long len)"),
    Field("sync_cores", "fn", "serialize instruction fetch on every CPU (IPI + sync_core; membarrier SYNC_CORE)",
          c="void (*%s)(void)"),
    Field("icache_flush", "fn", "make [addr, addr+len) of text coherent for instruction fetch (AArch64 dc/ic)",
          c="void (*%s)(void *addr, unsigned long len)"),
    Field("cpu_area", "fn", "this CPU's struct sdt_cpu (given to sdt_cpu_attach), or NULL; from it until "
          "cpu_release the caller must stay on this CPU (Linux's get_cpu: preemption off)",
          c="struct sdt_cpu *(*%s)(void)"),
    Field("cpu_release", "fn", "called once after every cpu_area, with what it returned, when the caller is done "
          "with the area (Linux's put_cpu: preemption back on); NULL: the caller cannot move meanwhile",
          c="void (*%s)(struct sdt_cpu *cpu)"),
    Field("clock", "fn", "the clock events are stamped with", c="sdt_u64 (*%s)(void)"),
    Field("notify", "fn", "a packet of this CPU was closed: a consumer may read it",
          c="void (*%s)(struct sdt_cpu *cpu)"),
    Field("report", "fn", "a line for the kernel's log; site: the site it is about, or NULL",
          c="void (*%s)(const struct sdt_site *site, const char *line)"),
    Field("readable", "ptr", "the memory strings may be copied from; with nreadable 0, all of it",
          c="const struct sdt_range *%s"),
    Field("text", "ptr", "the kernel's code: a site outside it is refused; with ntext 0, no check",
          c="const struct sdt_range *%s"),
    Field("nreadable", "u32", "entries of readable"),
    Field("ntext", "u32", "entries of text"),
    Field("clock_hz", "u64", "ticks a second of clock (for trace metadata)"),
))

# -- loadable modules (docs/runtime.md, "Modules") ---------------------------------------------
MODULE_TABLE = Layout("sdt_module_table", "A module's tables, as `sdtgen gen --module NAME` writes them into the "
                      "section sdt_module_table of the module: what its loader gives sdt_module_load.", (
    Field("magic", "u32", "SDT_MODULE_TABLE_MAGIC"),
    Field("sites", "s32", "the module's first site entry, relative to this field"),
    Field("sites_end", "s32", "one past its last site entry, relative to this field"),
    Field("probes", "s32", "its first probe descriptor, relative to this field"),
    Field("probes_end", "s32", "one past its last probe descriptor, relative to this field"),
    Field("name", "s32", "the module's name (NUL-terminated; a probe with an empty module field takes it), "
          "relative to this field"),
))

MODULE = Layout("sdt_module", "What the runtime keeps for one loaded module, in memory the kernel gives: "
                "sdt_module_load fills it, and the kernel leaves it alone until sdt_module_unload returned.", (
    Field("magic", "u32", "SDT_MODULE_MAGIC once sdt_module_load took it"),
    Field("state", "u32", "SDT_MODULE_LOADED or SDT_MODULE_UNLOADED"),
    Field("sites", "ptr", "the module's site entries (sorted by sdt_module_load)", c="struct sdt_site *%s"),
    Field("sites_end", "ptr", "", c="struct sdt_site *%s"),
    Field("probes", "ptr", "its probe descriptors", c="const struct sdt_probe *%s"),
    Field("probes_end", "ptr", "", c="const struct sdt_probe *%s"),
    Field("name", "ptr", "its name, from its table", c="const char *%s"),
    Field("next", "ptr", "the next loaded module (the runtime's list)", c="struct sdt_module *%s"),
    Field("mark_lo", "ptr", "the first of its sites marked for a run of the patch protocol", c="struct sdt_site *%s"),
    Field("mark_hi", "ptr", "one past the last", c="struct sdt_site *%s"),
    Field("text", "u64", "where its code is: its sites must lie in [text, text + text_size)"),
    Field("text_size", "u64", ""),
    Field("patched", "u32", "its sites sdt_module_load verified and disabled"),
    Field("refused", "u32", "its sites it refused (reported one by one)"),
))

ENTRIES = Layout("sdt_entries", "The runtime's entry points, in the section sdt_entries: what a host booting the "
                 "image finds them by when its symbols are gone (strip keeps allocated sections).", (
    Field("magic", "u64", "SDT_ENTRIES_MAGIC"),
    Field("init", "fn", "sdt_init", c="int (*%s)(const struct sdt_hooks *hooks)"),
    Field("cpu_attach", "fn", "sdt_cpu_attach", c="int (*%s)(struct sdt_cpu *c, unsigned cpu, void *ring, "
          "unsigned long ring_bytes, unsigned long packet_size, int policy)"),
    Field("enable", "fn", "sdt_enable", c="int (*%s)(const char *spec, int mode)"),
    Field("disable", "fn", "sdt_disable", c="int (*%s)(const char *spec)"),
    Field("set_mode", "fn", "sdt_set_mode", c="int (*%s)(int mode)"),
    Field("trap", "fn", "sdt_trap", c="int (*%s)(struct sdt_frame *frame)"),
    Field("flush", "fn", "sdt_flush", c="void (*%s)(void)"),
    Field("protocol", "ptr", "the patch protocol it was built with: \"safe\" or \"naive\"", c="const char *%s"),
    Field("enable_program", "fn", "sdt_enable_program", c="int (*%s)(const char *spec, int mode, const void *program, "
          "unsigned long bytes)"),
    Field("disable_program", "fn", "sdt_disable_program", c="int (*%s)(const char *spec)"),
    Field("agg_attach", "fn", "sdt_agg_attach", c="int (*%s)(struct sdt_cpu *c, struct sdt_agg *g, void *mem, "
          "unsigned long bytes)"),
    Field("agg_switch", "fn", "sdt_agg_switch", c="int (*%s)(void)"),
    Field("module_load", "fn", "sdt_module_load", c="int (*%s)(struct sdt_module *m, const struct sdt_module_table "
          "*table, const void *text, unsigned long text_size)"),
    Field("module_unload", "fn", "sdt_module_unload", c="int (*%s)(struct sdt_module *m)"),
    # Sessions (docs/sessions.md): what a host booting the image opens one of its own with, in memory it maps.
    Field("session_open", "fn", "sdt_session_open", c="int (*%s)(struct sdt_session *s, const char *name, "
          "const struct sdt_session_config *cfg, void *memory, unsigned long bytes)"),
    Field("session_close", "fn", "sdt_session_close", c="int (*%s)(struct sdt_session *s)"),
    Field("session_enable", "fn", "sdt_session_enable", c="int (*%s)(struct sdt_session *s, const char *spec, "
          "int mode)"),
    Field("session_disable", "fn", "sdt_session_disable", c="int (*%s)(struct sdt_session *s, const char *spec)"),
    Field("session_enable_program", "fn", "sdt_session_enable_program", c="int (*%s)(struct sdt_session *s, "
          "const char *spec, int mode, const void *program, unsigned long bytes)"),
    Field("session_disable_program", "fn", "sdt_session_disable_program", c="int (*%s)(struct sdt_session *s, "
          "const char *spec)"),
    Field("session_switch", "fn", "sdt_session_switch", c="int (*%s)(struct sdt_session *s)"),
    Field("session_flush", "fn", "sdt_session_flush", c="int (*%s)(struct sdt_session *s)"),
    Field("session_bytes", "fn", "sdt_session_bytes", c="unsigned long (*%s)(const struct sdt_session_config *cfg)"),
    Field("snapshot", "fn", "sdt_snapshot", c="int (*%s)(struct sdt_session *s)"),
))

# -- the serial transport's frames (sdt_serial.c writes them, sdtgen's frame reader reads them) -------------
FRAME_HEADER = Layout("sdt_frame_header", "The header of every frame on a serial line; the payload and a CRC-32 "
                      "(zlib's, of bytes 4..11 and the payload) follow.", (
    Field("sync", "u32", "SDT_FRAME_SYNC: the bytes A5 5A 53 44"),
    Field("type", "u8", "SDT_FRAME_PACKET, _VERDICT, _TEXT, _INFO or _TABLES"),
    Field("zero", "u8", "0"),
    Field("check", "u16", "the low 16 bits of CRC-32 of type, zero and length: a reader believes a header only "
          "when it holds"),
    Field("length", "u32", "bytes of payload"),
))

VERDICT = Layout("sdt_frame_verdict", "The payload of a verdict frame, after every packet frame.", (
    Field("seq", "u64", "the packet's packet_seq_num"),
    Field("cpu", "u32", "its CPU"),
    Field("keep", "u32", "0: its writer reused the slot while it was sent (SDT_OVERWRITE), drop it"),
))

INFO = Layout("sdt_frame_info", "The payload of the info frame, sent once before the first packet.", (
    Field("clock_hz", "u64", "ticks a second of sdt_hooks.clock"),
    Field("bits", "u32", "bits of a word (an integer argument)"),
    Field("zero", "u32", "0"),
))

# -- the control core ---------------------------------------------------------------------------------
CONTROL_INFO = Layout("sdt_control_info", "What an image says of its control core (SDT_CONTROL_SERIAL, section "
                      "sdt_control): the serial port a host drives it on.", (
    Field("magic", "u32", "SDT_CONTROL_MAGIC"),
    Field("serial", "u32", "the UART the control core listens on: 0 the first"),
    Field("zero", "u64", "0"),
))

# -- programs: predicates and aggregations (sdt_program.c, sdt_aggregate.c; docs/aggregations.md) ----------
PROGRAM = Layout("sdt_program", "A program's header: what sdt_enable_program verifies and attaches to probes. After "
                 "it: ninsns instructions, naggs aggregation descriptors, nconsts 64-bit constants, nprobes probe "
                 "keys (u32, ascending), then the string table.", (
    Field("magic", "u32", "SDT_PROGRAM_MAGIC"),
    Field("version", "u16", "SDT_PROGRAM_VERSION"),
    Field("ninsns", "u16", "instructions (struct sdt_insn), at most SDT_PROG_MAX_INSNS"),
    Field("size", "u32", "bytes of the whole program, header included: exactly what is given"),
    Field("nconsts", "u16", "64-bit constants (LDC, PIN sets)"),
    Field("naggs", "u8", "aggregation descriptors (struct sdt_agg_desc), at most SDT_PROG_MAX_AGGS"),
    Field("nargs", "u8", "arguments the program reads: 1 + the highest LDARG/STRCMP index (a probe with fewer "
          "is refused)"),
    Field("strings", "u32", "bytes of the string table (NUL-terminated constants STRCMP compares with)"),
    Field("nprobes", "u16", "the probes (by key) it attaches to among those a spec matches; 0: all of them"),
    Field("flags", "u16", "0"),
    Field("guard_arg", "u8", "the guard: a firing whose argument guard_arg fails it does nothing here, so the "
          "recorder turns it away before anything else (the first test of the predicate, which the program makes "
          "too). The test: y = (argument << guard_shift) ^ (guard_flip << 63); (y - guard_lo) <= guard_span, "
          "unsigned; a span of ~0 passes every firing"),
    Field("guard_shift", "u8", "64 - the bits the argument is compared in"),
    Field("guard_flip", "u8", "1: a signed comparison (bit 63 flipped)"),
    Field("guard_pad", "u8", "0", count=5),
    Field("guard_lo", "u64", ""),
    Field("guard_span", "u64", ""),
))

SLOT = Layout("sdt_slot", "A probe's slot (writable; gen defines one, {0}, beside each recorder): who takes its "
              "firings (docs/sessions.md). The recorder reads route alone: 0, only the default session takes the "
              "probe, with no program (the fast path: one compare); else it makes the guard and serves every session "
              "in sessions, each through its own program.", (
    Field("route", "ptr", "0: only session 0 takes this probe, with no program; else the recorder's slow path",
          c="sdt_word %s"),
    Field("guard_lo", "u64", "session 0's program's guard_lo (while session 0 is the only taker)"),
    Field("guard_span", "u64", "its guard_span; ~0 (no guard) whenever another session takes the probe, so a "
          "guard never hides an event from another session"),
    Field("guard_arg", "u8", "its guard_arg"),
    Field("guard_shift", "u8", "its guard_shift"),
    Field("guard_flip", "u8", "its guard_flip"),
    Field("pad", "u8", "0"),
    Field("sessions", "u32", "the sessions that enable the probe, a bit each (bit 0: the default session): its "
          "sites are armed while this is not 0"),
    Field("program", "ptr", "each session's program (SDT_MAX_SESSIONS of them); NULL: every firing is recorded in "
          "that session", c="const struct sdt_program *%s", count=8),
))

INSN = Layout("sdt_insn", "One instruction: dst = a OP b (b: a register, or imm with SDT_OP_IMM). Jumps go "
              "forward only, so a program runs at most ninsns steps.", (
    Field("op", "u8", "SDT_OP_*, with SDT_OP_IMM for a binary operation whose right operand is imm"),
    Field("dst", "u8", "the register written (AGG: the first key register)"),
    Field("a", "u8", "the left operand's register (LDARG: the argument; STRCMP: the string argument)"),
    Field("b", "u8", "the right operand's register (LDARG: SDT_EXT_*; AGG: the aggregation)"),
    Field("imm", "s32", "an immediate: a constant, a jump target, an offset into the constants or strings"),
))

AGG_DESC = Layout("sdt_agg_desc", "One aggregation a program's AGG instructions update.", (
    Field("id", "u32", "the consumer's aggregation id: entries of one id across programs have one shape"),
    Field("func", "u8", "SDT_AGG_*"),
    Field("nkeys", "u8", "64-bit keys of an entry, at most SDT_AGG_MAX_KEYS"),
    Field("nvals", "u16", "64-bit values of an entry: what func takes (quantize SDT_AGG_QUANTIZE_BUCKETS, "
          "lquantize levels + 2)"),
    Field("low", "u64", "lquantize: the lower bound (signed); 0 otherwise"),
    Field("step", "u64", "lquantize: the width of a bucket; 0 otherwise"),
    Field("levels", "u32", "lquantize: buckets between the bounds; 0 otherwise"),
    Field("pad", "u32", "0"),
))

AGG = Layout("sdt_agg", "One CPU's aggregation tables and program state (sdt_agg_attach). Two halves, each an "
             "open-addressing index of u32 (an entry's offset in the arena + 1; 0: empty) and an arena of entries; "
             "the writer (its CPU) adds to half want, the consumer reads the other (sdt_agg_switch).", (
    Field("self", "u64", "this structure's address"),
    Field("cpu", "u64", "the CPU's number"),
    Field("next", "u64", "the next attached CPU's struct sdt_agg (the runtime's list); 0 at the end"),
    Field("seq", "u64", "odd while the CPU runs a program; the consumer and sdt_disable_program wait for it to move"),
    Field("want", "u64", "the half the writer adds to (0 or 1); only sdt_agg_switch changes it"),
    Field("nindex", "u64", "slots of each half's index, a power of two"),
    Field("arena_size", "u64", "bytes of each half's arena"),
    Field("index", "u64", "address of each half's index", count=2),
    Field("arena", "u64", "address of each half's arena", count=2),
    Field("used", "u64", "bytes of each half's arena holding entries (they lie one after the other)", count=2),
    Field("entries", "u64", "entries in each half", count=2),
    Field("dropped", "u64", "updates each half could not take: its index or arena full", count=2),
    Field("errors", "u64", "firings a program stopped: a division by zero, a string it could not read"),
    Field("nested", "u64", "firings on this CPU while it ran a program: not evaluated, not recorded"),
))

AGG_ENTRY = Layout("sdt_agg_entry", "An entry in an arena, 8-byte aligned; nkeys keys, then nvals values, follow "
                   "(u64 each).", (
    Field("hash", "u32", "of id and keys"),
    Field("id", "u32", "the aggregation (sdt_agg_desc.id)"),
    Field("nkeys", "u16", ""),
    Field("nvals", "u16", ""),
    Field("pad", "u32", "0"),
))

# -- task context (docs/runtime.md): who a firing ran for ------------------------------------------------
# A kernel that knows its tasks gives the hook; the writer notes on each CPU the task its open packet last said
# and writes a task event (key SDT_TASK_KEY: id, context, name) before the first event of every packet, so a
# packet (or a ring's tail) decodes alone, and before the first event after the kernel said its CPU changed task
# (sdt_task_switch). The writer asks the hook only then: its one test reads the area's task_context (UNSAID's top
# bit), so a kernel with or without the hook pays one load on the fast path.
HOOKS = Layout(HOOKS.name, HOOKS.doc, (
    *HOOKS.fields,
    Field("task", "fn", "the current task: its id (0: none, e.g. an interrupt or the kernel's own thread), its "
          "SDT_CONTEXT_* in *context and, when name is not NULL (the runtime asks only when it says the task "
          "anew), its name in *name (NULL: it has none); asked at each packet's first event and after "
          "sdt_task_switch, with the CPU held (cpu_area), a probe in it discarded; NULL: events carry no task",
          c="sdt_u64 (*%s)(sdt_u32 *context, const char **name)"),
))
CPU = Layout(CPU.name, CPU.doc, (
    *CPU.fields,
    Field("task", "u64", "the task id the open packet's last task event said"),
    Field("task_context", "u64", "its SDT_CONTEXT_*; SDT_CONTEXT_UNSAID when the packet said none yet (a packet "
          "opened, with the hook, or sdt_task_switch)"),
))

LAYOUTS = (SITE, PROBE, CPU, PACKET, EVENT, RANGE, FRAME, HOOKS, PROGRAM, SLOT, INSN, AGG_DESC, AGG, AGG_ENTRY,
           MODULE_TABLE, MODULE, ENTRIES, FRAME_HEADER, VERDICT, INFO, CONTROL_INFO)

# -- constants ---------------------------------------------------------------------------------
CONSTANTS: tuple[tuple[str, int, str], ...] = (
    ("SDT_FORM_CALL", 1, "a call to the probe's stub"),
    ("SDT_FORM_TAIL", 2, "a tail jump to it"),
    ("SDT_FORM_COND", 3, "a conditional tail jump to it (x86 jcc)"),
    ("SDT_FORM_ISEN", 4, "a call to its is-enabled stub (SDT_PROBE_ENABLED)"),
    ("SDT_FORM_GOTO", 5, "the NOP of an asm goto (SDT_ASM_GOTO), armed by a jump to its out-of-line target"),
    ("SDT_TABLE_RELOC", 0, "the entry is a relocation the final link resolved"),
    ("SDT_TABLE_OFFSET", 1, "the entry is btext + an offset measured after the partial link"),
    ("SDT_SITE_UNSEEN", 0, "sdt_init has not looked at it"),
    ("SDT_SITE_REFUSED", 1, "not the expected instruction: never written"),
    ("SDT_SITE_OFF", 2, "disabled: a NOP, a return, result 0, or (cond) the jump as it was"),
    ("SDT_SITE_TRAP", 3, "armed with the breakpoint"),
    ("SDT_SITE_BRANCH", 4, "armed with a branch to the probe's recorder (an is-enabled check: result 1)"),
    ("SDT_SITE_CHANGED", 5, "its bytes were not what the runtime last wrote: left alone for good"),
    ("SDT_SITE_FOLDED", 6, "another entry names the same instruction (identical code folding)"),
    ("SDT_TRAP", 1, "arming mode: a breakpoint, resolved by sdt_trap"),
    ("SDT_BRANCH", 2, "arming mode: a branch to the recorder, falling back to the breakpoint out of range"),
    ("SDT_DISCARD", 0, "ring policy: a full ring discards new events (counted)"),
    ("SDT_OVERWRITE", 1, "ring policy: a full ring overwrites its oldest packet (flight recorder)"),
    ("SDT_TRAP_NOT_OURS", 0, "sdt_trap: not a breakpoint of the runtime's"),
    ("SDT_TRAP_FIRED", 1, "a probe fired; resume at frame->pc"),
    ("SDT_TRAP_EMULATED", 2, "a change was in flight: the site's state (the old one until the change commits) "
     "was emulated; resume at frame->pc"),
    ("SDT_TRAP_RETRY", 3, "the breakpoint is gone (disarmed meanwhile): resume at frame->pc to run what is there"),
    ("SDT_PACKET_MAGIC", 0xC1FC1FC1, "CTF 1.8's packet magic"),
    ("SDT_MAX_ARGS", 6, "arguments a probe has at most"),
    ("SDT_ENTRIES_MAGIC", 0x5952544E45544453, "\"SDTENTRY\" in a little-endian word"),
    ("SDT_MAX_STRING", 127, "bytes of a string argument a recorder copies (then a NUL)"),
    ("SDT_MIN_PACKET", 1024, "bytes of the smallest packet: a 6-argument event with six full strings fits"),
    # the entry points' negative results; the host says them to users as they are
    ("SDT_ERR_SPEC", -1, "the probe spec is empty, or not provider:module:function:name (at most four fields "
     "and 1024 bytes)"),
    ("SDT_ERR_INIT", -2, "the runtime is not initialized (sdt_init has not run, or found the tables corrupt)"),
    ("SDT_ERR_MODE", -3, "not an arming mode the runtime knows (SDT_TRAP or SDT_BRANCH)"),
    ("SDT_ERR_ARG", -4, "an argument the runtime cannot use: a NULL pointer, or a size, count or sequence number "
     "out of range"),
    # programs (docs/aggregations.md)
    ("SDT_PROGRAM_MAGIC", 0x50544453, "\"SDTP\" in a little-endian word"),
    ("SDT_PROGRAM_VERSION", 1, "the program form this runtime runs"),
    ("SDT_PROG_MAX_BYTES", 65536, "bytes of a program at most"),
    ("SDT_PROG_MAX_INSNS", 256, "instructions of a program at most (so steps of one run)"),
    ("SDT_PROG_MAX_AGGS", 16, "aggregation descriptors of a program at most"),
    ("SDT_PROG_REGS", 8, "registers of the evaluator: the bound of an expression's depth"),
    ("SDT_OP_EXIT", 0, "stop: the firing is recorded when REC ran"),
    ("SDT_OP_REC", 1, "record the firing (when the program exits)"),
    ("SDT_OP_RECNZ", 2, "record the firing when a is not 0"),
    ("SDT_OP_CATCH", 3, "an error from here on goes on at imm (a later instruction) instead of stopping"),
    ("SDT_OP_JA", 4, "go to imm (a later instruction)"),
    ("SDT_OP_JZ", 5, "go to imm when a is 0"),
    ("SDT_OP_JNZ", 6, "go to imm when a is not 0"),
    ("SDT_OP_LDI", 7, "dst = imm, sign-extended"),
    ("SDT_OP_LDC", 8, "dst = constant imm"),
    ("SDT_OP_LDARG", 9, "dst = argument a, extended as b says (SDT_EXT_*)"),
    ("SDT_OP_LDCPU", 10, "dst = the CPU's number"),
    ("SDT_OP_LDPROBE", 11, "dst = the firing probe's key"),
    ("SDT_OP_MOV", 12, "dst = a"),
    ("SDT_OP_NEG", 13, "dst = -a"),
    ("SDT_OP_NOT", 14, "dst = ~a"),
    ("SDT_OP_LNOT", 15, "dst = !a"),
    ("SDT_OP_STRCMP", 16, "dst = -1, 0 or 1: string argument a against the string at imm (unreadable: an error)"),
    ("SDT_OP_PIN", 17, "dst = the probe's key is among constants imm & 0xffff, count imm >> 16 (ascending)"),
    ("SDT_OP_AGG", 18, "update aggregation b: keys in dst.., the value in a"),
    ("SDT_OP_ADD", 19, "dst = a + b (mod 2^64, as every operation)"),
    ("SDT_OP_SUB", 20, "dst = a - b"),
    ("SDT_OP_MUL", 21, "dst = a * b"),
    ("SDT_OP_SDIV", 22, "dst = a / b, signed, toward zero (b 0: an error)"),
    ("SDT_OP_UDIV", 23, "dst = a / b, unsigned (b 0: an error)"),
    ("SDT_OP_SMOD", 24, "dst = a % b, signed (b 0: an error)"),
    ("SDT_OP_UMOD", 25, "dst = a % b, unsigned (b 0: an error)"),
    ("SDT_OP_AND", 26, "dst = a & b"),
    ("SDT_OP_OR", 27, "dst = a | b"),
    ("SDT_OP_XOR", 28, "dst = a ^ b"),
    ("SDT_OP_SHL", 29, "dst = a << (b & 63)"),
    ("SDT_OP_SHR", 30, "dst = a >> (b & 63), unsigned"),
    ("SDT_OP_SAR", 31, "dst = a >> (b & 63), signed"),
    ("SDT_OP_EQ", 32, "dst = a == b"),
    ("SDT_OP_NE", 33, "dst = a != b"),
    ("SDT_OP_SLT", 34, "dst = a < b, signed"),
    ("SDT_OP_SLE", 35, "dst = a <= b, signed"),
    ("SDT_OP_SGT", 36, "dst = a > b, signed"),
    ("SDT_OP_SGE", 37, "dst = a >= b, signed"),
    ("SDT_OP_ULT", 38, "dst = a < b, unsigned"),
    ("SDT_OP_ULE", 39, "dst = a <= b, unsigned"),
    ("SDT_OP_UGT", 40, "dst = a > b, unsigned"),
    ("SDT_OP_UGE", 41, "dst = a >= b, unsigned"),
    ("SDT_OP_LDTASK", 42, "dst = the current task's id (b SDT_TASK_ID) or its SDT_CONTEXT_* (b SDT_TASK_CONTEXT), "
     "from sdt_hooks.task (a kernel without it: an error)"),
    ("SDT_OP_TASKCMP", 43, "dst = -1, 0 or 1: the current task's name (none: \"\") against the string at imm (no "
     "sdt_hooks.task, a name it cannot read: an error)"),
    ("SDT_OP_SNAPSHOT", 44, "snapshot the session the program runs in when it exits (sdt_snapshot: D's snapshot(); "
     "a session without a snapshot area counts an error)"),
    ("SDT_OP_IMM", 0x80, "with a binary operation (SDT_OP_ADD to SDT_OP_UGE): its right operand is imm, not "
     "register b"),
    ("SDT_TASK_ID", 0, "LDTASK: the task's id"),
    ("SDT_TASK_CONTEXT", 1, "LDTASK: the task's SDT_CONTEXT_*"),
    ("SDT_EXT_WORD", 0, "LDARG: the register as it is (zero-extended to 64 bits)"),
    ("SDT_EXT_S8", 1, "LDARG: the low 8 bits, sign-extended"),
    ("SDT_EXT_S16", 2, "LDARG: the low 16 bits, sign-extended"),
    ("SDT_EXT_S32", 3, "LDARG: the low 32 bits, sign-extended"),
    ("SDT_EXT_U8", 4, "LDARG: the low 8 bits"),
    ("SDT_EXT_U16", 5, "LDARG: the low 16 bits"),
    ("SDT_EXT_U32", 6, "LDARG: the low 32 bits"),
    ("SDT_AGG_COUNT", 1, "count(): one value, the firings"),
    ("SDT_AGG_SUM", 2, "sum(x): one value"),
    ("SDT_AGG_MIN", 3, "min(x): one value, signed, from INT64_MAX"),
    ("SDT_AGG_MAX", 4, "max(x): one value, signed, from INT64_MIN"),
    ("SDT_AGG_AVG", 5, "avg(x): the count, then the sum"),
    ("SDT_AGG_QUANTIZE", 6, "quantize(x): DTrace's power-of-two buckets"),
    ("SDT_AGG_LQUANTIZE", 7, "lquantize(x, low, high, step): below low, levels steps, at or above the top"),
    ("SDT_AGG_MAX_KEYS", 4, "keys of an aggregation at most"),
    ("SDT_AGG_MAX_VALS", 1024, "values of an entry at most"),
    ("SDT_AGG_QUANTIZE_BUCKETS", 127, "quantize's buckets: -2^62 .. -1, 0, 1 .. 2^62"),
    ("SDT_AGG_ZERO_BUCKET", 63, "quantize's bucket of 0"),
    ("SDT_AGG_MIN_BYTES", 1024, "bytes of a CPU's aggregation memory at least"),
    ("SDT_ERR_PROG_FORM", -16, "the program's header, size or tables are not a program's"),
    ("SDT_ERR_PROG_INSN", -17, "an instruction the verifier refuses (operation, register, operand, a register "
     "read before any path wrote it)"),
    ("SDT_ERR_PROG_FLOW", -18, "a jump that is not forward within the program, or a path that does not end in EXIT"),
    ("SDT_ERR_PROG_AGG", -19, "an aggregation descriptor the verifier refuses"),
    ("SDT_ERR_PROG_ARGS", -20, "a matched probe has fewer arguments than the program reads"),
    ("SDT_ERR_PROG_BUSY", -21, "a matched probe runs another program: disable it first"),
    ("SDT_ERR_PROG_SLOT", -22, "a matched probe has no program slot (tables from an older gen)"),
)
CONSTANTS += (
    ("SDT_FRAME_SYNC", 0x44535AA5, "a frame's first four bytes, A5 5A 53 44, as a little-endian word"),
    ("SDT_FRAME_PACKET", ord("P"), "a frame carrying a packet as it stands in its ring (content_size bytes)"),
    ("SDT_FRAME_VERDICT", ord("V"), "a frame after each packet: struct sdt_frame_verdict"),
    ("SDT_FRAME_TEXT", ord("T"), "a frame carrying one line of the kernel's text: a reply, a log line"),
    ("SDT_FRAME_INFO", ord("I"), "the frame a reader needs first: struct sdt_frame_info"),
    ("SDT_CONTROL_MAGIC", 0x4C544353, "\"SCTL\" in a little-endian word"),
    ("SDT_CONTROL_LINE", 1024, "bytes of the longest command line the control core takes"),
    ("SDT_CONTROL_VERSION", 5, "the control protocol's version, the last word of the hello: raised whenever a "
     "command, a reply or a frame changes (2: replies name their command, lines start with SDT_CONTROL_ESCAPE; 3: "
     "sessions, `@NAME`; 4: snapshots, `snapshot NAME`; 5: `clock`)"),
    ("SDT_CONTROL_ESCAPE", 0x1E, "the byte (ASCII RS) a host sends before every command line: a console shared "
     "with a shell gives the bytes from it to the end of its line to the control core (sdt_control_claims)"),
    # the control core's own errors: a reply `error CODE COMMAND: TEXT` carries any SDT_ERR_*
    ("SDT_ERR_USAGE", -5, "the command's words are not what it takes"),
    ("SDT_ERR_UNKNOWN", -6, "not a command the control core knows"),
    ("SDT_ERR_UNSUPPORTED", -7, "the kernel gave the control core no means for it"),
    ("SDT_ERR_CPU", -8, "no such CPU, or a command that needs more CPUs than there are"),
    ("SDT_ERR_LONG", -9, "a command line longer than SDT_CONTROL_LINE"),
    ("SDT_ERR_STATE", -10, "not in this state (the rings are attached already, none are)"),
)
CONSTANTS += (  # loadable modules (docs/runtime.md, "Modules")
    ("SDT_MODULE_TABLE_MAGIC", 0x4D544453, "\"SDTM\" in a little-endian word: a module's struct sdt_module_table"),
    ("SDT_MODULE_MAGIC", 0x444F4D53, "\"SMOD\" in a little-endian word: a struct sdt_module the runtime took"),
    ("SDT_MODULE_LOADED", 1, "the module's sites are the runtime's (sdt_module_load)"),
    ("SDT_MODULE_UNLOADED", 2, "sdt_module_unload returned: the runtime no longer knows the module"),
    ("SDT_MODULE_SPECS", 16, "enabled specs the runtime remembers for modules loaded later"),
    ("SDT_MODULE_SPEC_BYTES", 256, "bytes of a remembered spec at most (its NUL included)"),
    ("SDT_MODULE_GONE", 8, "text ranges of unloaded modules kept, so a breakpoint taken there before the unload "
     "is resumed, not called foreign"),
    ("SDT_ERR_MODULE_LOADED", -23, "the module is loaded already: its struct sdt_module, its table or its text is "
     "in use (it meets the kernel's sites or a loaded module's table, text or sites)"),
    ("SDT_ERR_MODULE_UNLOADED", -24, "the module was unloaded already"),
    ("SDT_ERR_MODULE_UNKNOWN", -25, "not a module sdt_module_load took (never loaded)"),
    ("SDT_ERR_MODULE_TABLE", -26, "the module's table is not one gen wrote (magic, bounds, an entry that is not "
     "valid, outside the module's text, or overlapping another): the module is refused whole"),
)
# Programs and their tables over the control core (docs/control.md, "Aggregations"): a CPU's frozen half.
CONSTANTS += (
    ("SDT_FRAME_TABLES", ord("A"), "a frame carrying a CPU's frozen aggregation half (`take`): its struct sdt_agg as "
     "it stood, then the half's arena, used[1 - want] bytes"),
)

# -- what a host hands a kernel besides the control line ------------------------------------------------
# The QEMU module file (`sdtgen qemu --module FILE`, fixtures/qemu/platform.c's loader): a header, then the
# module as the host relocated it for the loader's area. On AArch64 and x86 QEMU gives it as the fw_cfg file
# SDT_MODULE_FILE_NAME; on RISC-V (QEMU 7's virt machine makes its fw_cfg after -fw_cfg files are taken) its
# loader device puts it at the image's end (_end) rounded up to SDT_MODULE_FILE_ALIGN, where the kernel takes
# it before anything else uses that memory.
MODULE_FILE = Layout("sdt_module_file", "The header of the module file a host gives a kernel's loader: the "
                     "module follows at SDT_MODULE_FILE_HEADER, relocated for the loader's area + "
                     "SDT_MODULE_FILE_HEADER (every address below is one there).", (
    Field("magic", "u64", "SDT_MODULE_FILE_MAGIC"),
    Field("table", "u64", "the module's struct sdt_module_table"),
    Field("text", "u64", "its code: what sdt_module_load is given"),
    Field("text_size", "u64", ""),
    Field("size", "u64", "bytes of the module after the header"),
))
LAYOUTS += (MODULE_FILE,)
CONSTANTS += (
    ("SDT_MODULE_FILE_MAGIC", 0x4C55444F4D544453, "\"SDTMODUL\" in a little-endian word: a struct sdt_module_file, "
     "the module file a host gives a kernel's loader (not SDT_MODULE_MAGIC, which marks a struct sdt_module the "
     "runtime took, nor SDT_MODULE_TABLE_MAGIC, a module's own tables)"),
    ("SDT_MODULE_FILE_HEADER", 4096, "bytes of the module file's header (struct sdt_module_file, then zeros): "
     "where the module starts, in the file and in the loader's area"),
    ("SDT_MODULE_FILE_ALIGN", 4096, "RISC-V: QEMU's loader device puts the module file at the image's end rounded "
     "up to this"),
)
# Strings both sides spell: the names of QEMU's fw_cfg files.
STRINGS: tuple[tuple[str, str, str], ...] = (
    ("SDT_MODULE_FILE_NAME", "opt/sdtgen/module", "the fw_cfg file carrying the module file (-fw_cfg name=...)"),
    ("SDT_COMMANDS_FILE_NAME", "opt/sdtgen/commands", "the fw_cfg file of control lines a kernel runs at boot, "
     "one a line (a recording nobody commands: sdtgen record)"),
)
# The process target's command line (sdtgen/targets/process.py starts the program with these; the hosted
# platform's main, sdtgen/runtime/hosted/sdt_linux_main.c, takes them): `PROGRAM --cpus N --buffer BYTES
# --packet BYTES --overflow discard|overwrite --control`.
STRINGS += (
    ("SDT_PROCESS_CPUS", "--cpus", "--cpus N: the process's CPUs, N threads (the main thread CPU 0, the others "
     "started at once)"),
    ("SDT_PROCESS_BUFFER", "--buffer", "--buffer BYTES: each CPU's ring"),
    ("SDT_PROCESS_PACKET", "--packet", "--packet BYTES: a packet of the rings, a power of two"),
    ("SDT_PROCESS_OVERFLOW", "--overflow", "--overflow discard|overwrite: what a full ring does (SDT_DISCARD, "
     "SDT_OVERWRITE)"),
    ("SDT_PROCESS_DISCARD", "discard", "--overflow's value for SDT_DISCARD"),
    ("SDT_PROCESS_OVERWRITE", "overwrite", "--overflow's value for SDT_OVERWRITE"),
    ("SDT_PROCESS_CONTROL", "--control", "--control: the control protocol itself, command lines on standard input "
     "and the serial transport's frames on standard output, until standard input ends"),
)
# How many CPUs: one bound of the protocol, and the hosted platform's own (a kernel says its own in its hello).
CONSTANTS += (
    ("SDT_MAX_CPUS", 4096, "CPUs a kernel may have: the most its hello may say, the CPU numbers a recording "
     "takes (0 to SDT_MAX_CPUS - 1), the most CPUs a host asks a target for"),
    ("SDT_LINUX_MAX_CPUS", 64, "the hosted platform's CPUs (threads with a CPU at once, sdt_linux.c), at most "
     "SDT_MAX_CPUS: its main refuses --cpus past it, and so does the process target before it starts one"),
)
CONSTANTS += (  # task context (docs/runtime.md)
    ("SDT_TASK_KEY", 0, "the key of a task event (no probe's: a probe's key is never 0); its arguments: the task "
     "id and context (words), its name (a string; unreadable: no name)"),
    ("SDT_CONTEXT_KERNEL", 1, "the kernel's own context: a kernel thread, its boot, its idle loop"),
    ("SDT_CONTEXT_TASK", 2, "on behalf of a task: a user task's system call or fault, or the user task itself"),
    ("SDT_CONTEXT_INTERRUPT", 3, "an interrupt (or exception) handler, whatever it interrupted"),
    ("SDT_CONTEXT_UNSAID", 0xFFFFFFFF, "sdt_cpu.task_context when the writer says the task before the next event "
     "(its open packet said none yet, or sdt_task_switch): the writer's one test reads its top bit"),
    ("SDT_TASK_EVENT_MAX", 160, "bytes a task event takes at most (header, two words, a name of SDT_MAX_STRING "
     "bytes and its NUL, to 8 bytes): an event fits a packet with one before it"),
)
STRING = {name: text for name, text, _ in STRINGS}
PROCESS_ARG = {name[len("SDT_PROCESS_"):].lower(): text for name, text, _ in STRINGS
               if name.startswith("SDT_PROCESS_")}  # cpus, buffer, packet, overflow, discard, overwrite, control

# The control protocol's words: commands, what their replies start with, and the arming modes they name.
WORDS: tuple[tuple[str, str, str], ...] = (
    ("SDT_CTL_HELLO", "hello", "hello: `hello ARCH CPUS CLOCK HZ PATCHED REFUSED FOLDED PROTOCOL ENTRIES VERSION`, "
     "also said unasked at boot (ENTRIES: where sdt_runtime_entries is, which says how far a relocated image moved; "
     "VERSION: SDT_CONTROL_VERSION)"),
    ("SDT_CTL_RING", "ring", "ring BYTES PACKET POLICY MEMORY: attach every CPU's ring"),
    ("SDT_CTL_ENABLE", "enable", "enable trap|branch SPEC: `ok enable N`, N sites armed"),
    ("SDT_CTL_DISABLE", "disable", "disable SPEC: `ok disable N`"),
    ("SDT_CTL_MODE", "mode", "mode trap|branch: rearm what is armed, `ok mode N`"),
    ("SDT_CTL_RUN", "run", "run CPU|all ADDR NARGS ARG...: a `return` or `fault` line per CPU, then `ok run N`"),
    ("SDT_CTL_READ", "read", "read ADDR LEN: `bytes HEX` or `fault`"),
    ("SDT_CTL_DRAIN", "drain", "drain: every CPU's closed packets sent now"),
    ("SDT_CTL_FLUSH", "flush", "flush: every CPU's open packet closed on that CPU (then drained); `unflushed K EVENTS` "
     "per CPU whose packet stays open, `ok flush N`, N the CPUs flushed"),
    ("SDT_CTL_UNFLUSHED", "unflushed", "a CPU whose open packet `flush` could not close: `unflushed K EVENTS`"),
    ("SDT_CTL_STATS", "stats", "stats: `cpu K DISCARDED OVERWRITTEN` per CPU"),
    ("SDT_CTL_LIST", "list", "list [SPEC]: `probe KEY SITES ARMED PROVIDER:MODULE:FUNCTION:NAME` per probe"),
    ("SDT_CTL_TORTURE", "torture", "torture ADDR NARGS ARG... TOGGLES trap|branch|cycle|module SPEC: `torture "
     "PROTOCOL CPUS TOGGLES CALLS FAULTS TORN WRONG LEAKED WINDOWS` (WINDOWS: a calling CPU's disarmed windows "
     "checked, LEAKED: those in which it recorded)"),
    ("SDT_CTL_EXIT", "exit", "exit CODE: power off"),
    ("SDT_CTL_SHARED", "shared", "shared on|off: on, the host reads the rings in the machine's memory (packets stay "
     "off the line): `area K AREA RING` per CPU, physical addresses of its struct sdt_cpu and its ring"),
    ("SDT_CTL_AREA", "area", "a CPU's ring in memory: `area K AREA RING`"),
    ("SDT_CTL_OK", "ok", "the last line of a reply that succeeded: `ok COMMAND N`, COMMAND the word of the "
     "command it answers, N its count (never negative: a command that fails says `error`)"),
    ("SDT_CTL_ERROR", "error", "the last line of a reply that did not: `error CODE COMMAND: TEXT`, COMMAND the first "
     "word of the line it answers (at most 32 bytes; `?` for none)"),
    ("SDT_CTL_RETURN", "return", "a call returned: `return CPU VALUE`"),
    ("SDT_CTL_FAULT", "fault", "a call faulted: `fault CPU CAUSE PC ADDR`"),
    ("SDT_CTL_BYTES", "bytes", "memory read: `bytes HEX`"),
    ("SDT_CTL_CPU", "cpu", "a CPU's counts: `cpu K DISCARDED OVERWRITTEN`"),
    ("SDT_CTL_PROBE", "probe", "a probe: `probe KEY SITES ARMED SPEC`"),
    ("SDT_CTL_REPORT", "report", "a line of the runtime's log, said unasked at any time: `report TEXT`"),
    ("SDT_CTL_PANIC", "panic", "a CPU stopped on an exception outside any guarded call, said unasked: `panic CPU CAUSE "
     "PC ADDR [torn]` (torn: PC is inside a probe site)"),
    ("SDT_CTL_TRAP", "trap", "arming mode: the breakpoint"),
    ("SDT_CTL_BRANCH", "branch", "arming mode: a branch to the recorder"),
    ("SDT_CTL_CYCLE", "cycle", "torture: off, branch, trap, off... in turn"),
    ("SDT_CTL_MODULE", "module", "module load|unload: the kernel's loader loads its module again, or unloads it "
     "(`ok module N`: sites patched, or disarmed); torture's mode `module`: unload and load it in turn while SPEC "
     "stays enabled"),
    ("SDT_CTL_ALL", "all", "every CPU (run)"),
    ("SDT_CTL_ON", "on", "shared: the host reads the rings"),
    ("SDT_CTL_OFF", "off", "shared: packets go on the line again"),
    # programs and their tables (docs/aggregations.md)
    ("SDT_CTL_PROGRAM", "program", "program BYTES: reserve BYTES of the kernel's program memory, `ok program ADDR`"),
    ("SDT_CTL_PBYTES", "pbytes", "pbytes ADDR HEX: write bytes into reserved program memory no program uses yet"),
    ("SDT_CTL_PENABLE", "penable", "penable trap|branch ADDR BYTES SPEC: sdt_enable_program, `ok penable N`"),
    ("SDT_CTL_PDISABLE", "pdisable", "pdisable SPEC: sdt_disable_program, `ok pdisable N`"),
    ("SDT_CTL_TABLES", "tables", "tables: attach every CPU's aggregation tables (once); `table K AGG BYTES` per CPU"),
    ("SDT_CTL_TABLE", "table", "a CPU's tables: `table K AGG BYTES` (its struct sdt_agg, the bytes of its halves)"),
    ("SDT_CTL_SWITCH", "switch", "switch: sdt_agg_switch, `ok switch N`"),
    ("SDT_CTL_TAKE", "take", "take CPU: its frozen half in an SDT_FRAME_TABLES frame, `ok take USED`"),
    # the machine's clock against the host's (docs/trace.md, "Machines")
    ("SDT_CTL_CLOCK", "clock", "clock: `ok clock TICKS`, the clock events are stamped with (sdt_hooks.clock) read "
     "now: a host reads its real-time clock before and after, and places the kernel's clock between"),
)

# -- the control protocol's replies: the lines a command answers with, beside its words ---------------------------
# Each line a reply holds: the command (its WORD key; "" for the last line of every command's reply; a line said
# unasked at any time, `report` and `panic`, has its own word), the line's word (a WORD key), and its fields in
# order, each NAME:KIND (REPLY_KINDS). The control core writes its lines by this table (sdt_runtime.h: SDT_REPLY_*,
# the word then the kinds, which sdt_control.c's say() follows; SDT_FIELD_* where each field sits); platforms write
# `report` and `panic` by it; the host reads every line by it (parse_reply; the hosted main's reply_field in C).
REPLIES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("", "ok", ("command:w", "count:x")),
    ("", "error", ("code:d", "command:c", "text:r")),
    ("report", "report", ("text:r",)),
    ("panic", "panic", ("cpu:x", "cause:x", "pc:x", "addr:x", "torn:f")),
    ("hello", "hello", ("arch:w", "cpus:x", "clock:w", "clock_hz:x", "patched:x", "refused:x", "folded:x",
                        "protocol:w", "entries:x", "version:x")),
    ("run", "return", ("cpu:x", "value:x")),
    ("run", "fault", ("cpu:x", "cause:x", "pc:x", "addr:x")),
    ("read", "bytes", ("hex:w",)),
    ("read", "fault", ()),
    ("flush", "unflushed", ("cpu:x", "events:x")),
    ("stats", "cpu", ("cpu:x", "discarded:x", "overwritten:x")),
    ("list", "probe", ("key:x", "sites:x", "armed:x", "spec:r")),
    ("torture", "torture", ("protocol:w", "cpus:x", "toggles:x", "calls:x", "faults:x", "torn:x", "wrong:x",
                            "leaked:x", "windows:x")),
    ("shared", "area", ("cpu:x", "area:x", "ring:x")),
    ("tables", "table", ("cpu:x", "agg:x", "bytes:x")),
)
REPLY_KINDS = {"x": "a number in lowercase hexadecimal", "d": "a number in decimal, maybe negative", "w": "a word",
               "c": "a word and a colon (the colon no part of it)", "r": "the rest of the line, not empty",
               "f": "a flag: the field's name as a word, or nothing (then 0), last but for the rest"}
MAX_HEX = 16  # digits of an x field at most: a 64-bit number

# -- sessions (docs/sessions.md): several tracers at once, and the registry a host finds them by -------------------
SESSION_CONFIG = Layout("sdt_session_config", "What sdt_session_open carves from the memory it is given.", (
    Field("ncpus", "u32", "CPUs 0 .. ncpus-1 record in the session (at most SDT_MAX_CPUS); a firing on a CPU "
          "numbered higher is counted in misplaced"),
    Field("policy", "u32", "SDT_DISCARD or SDT_OVERWRITE when a ring is full"),
    Field("ring_bytes", "u64", "each CPU's ring (as sdt_cpu_attach takes it)"),
    Field("packet_size", "u64", "bytes of a packet, a power of two, at least SDT_MIN_PACKET"),
    Field("agg_bytes", "u64", "each CPU's aggregation memory (0: none; else at least SDT_AGG_MIN_BYTES): a probe "
          "with a program records nothing in a session without it"),
    Field("snapshot_packets", "u64", "closed packets a snapshot keeps of each CPU, 0 .. SDT_SNAPSHOT_MAX (0: no "
          "snapshot area); each CPU's block holds one more, the open packet's complete events"),
))

SESSION = Layout("sdt_session", "One session, in memory the kernel gives sdt_session_open (the default session is "
                 "the runtime's own): what the registry lists and a host reads after a crash.", (
    Field("magic", "u32", "SDT_SESSION_MAGIC while it is open"),
    Field("id", "u32", "its number: 0 the default session, 1 .. SDT_MAX_SESSIONS-1 the others (stream_id)"),
    Field("name", "u8", "1..15 bytes of [A-Za-z0-9_-], NUL-padded", count=16),
    Field("state", "u32", "SDT_SESSION_OPEN or SDT_SESSION_CLOSING (SDT_SESSION_CLOSED once closed)"),
    Field("ncpus", "u32", "entries of cpus (the default session: 0, its areas are the registry's list)"),
    Field("policy", "u32", "SDT_DISCARD or SDT_OVERWRITE"),
    Field("pad", "u32", "0"),
    Field("cpus", "u64", "address of its struct sdt_cpu array, indexed by CPU number"),
    Field("ring_bytes", "u64", "each CPU's ring"),
    Field("packet_size", "u64", "bytes of a packet"),
    Field("agg_bytes", "u64", "each CPU's aggregation memory after its struct sdt_agg (0: none)"),
    Field("memory", "u64", "address of the memory the kernel gave"),
    Field("bytes", "u64", "bytes of it"),
    Field("used", "u64", "bytes of it the session uses"),
    Field("misplaced", "u64", "firings on a CPU numbered ncpus or higher: not recorded"),
    Field("snapshot", "u64", "address of the snapshot area (0: none): ncpus blocks of snapshot_bytes, CPU k's at "
          "snapshot + k * snapshot_bytes, each a struct sdt_snapshot then snapshot_packets + 1 packets"),
    Field("snapshot_packets", "u64", "closed packets a snapshot keeps of each CPU (its open packet's complete events "
          "are one more)"),
    Field("snapshot_bytes", "u64", "bytes of one CPU's block of the snapshot area"),
    Field("snapshots", "u64", "snapshots taken: every sdt_snapshot call not refused (whatever it kept)"),
    Field("snapshot_busy", "u64", "sdt_snapshot calls refused because a snapshot of the session was under way (or "
          "the session closing): SDT_ERR_BUSY"),
    Field("snapshot_lapped", "u64", "packets a snapshot dropped because the writer reused their slots while they "
          "were copied, over all snapshots"),
    Field("snapshot_lock", "u64", "1 while a snapshot is taken or the session closes (taken by compare-and-swap, "
          "never waited for by sdt_snapshot)"),
))

SNAPSHOT = Layout("sdt_snapshot", "The head of one CPU's block of a session's snapshot area (sdt_snapshot writes it; "
                  "its packets follow at SDT_SNAPSHOT_HEAD bytes from its start, each packet_size bytes).", (
    Field("magic", "u32", "SDT_SNAPSHOT_MAGIC once a snapshot was taken"),
    Field("cpu", "u32", "the CPU whose packets these are"),
    Field("seq", "u64", "odd while sdt_snapshot writes the block, even when it is whole (2 per snapshot)"),
    Field("clock", "u64", "the clock when the CPU's packets were copied"),
    Field("first_seq", "u64", "the number (from 0) of the first packet kept; the others follow it one by one"),
    Field("packets", "u64", "packets kept: closed ones, then the open packet's complete events closed as one when "
          "open is 1"),
    Field("open", "u64", "1 when the last packet kept is the open packet, closed in the copy"),
    Field("cut", "u64", "events of the open packet left out: the one a recorder was writing (nesting)"),
    Field("lapped", "u64", "packets dropped in this snapshot: the writer reused their slots while they were copied"),
    Field("discarded", "u64", "the CPU's discarded count when its packets were copied"),
    Field("overwritten", "u64", "the CPU's overwritten count then"),
))

REGISTRY = Layout("sdt_registry", "The runtime's list of sessions, the variable sdt_session_table: what a host finds "
                  "by symbol in a machine's memory, a kernel running or dead.", (
    Field("magic", "u32", "SDT_REGISTRY_MAGIC once sdt_init ran"),
    Field("version", "u32", "SDT_REGISTRY_VERSION"),
    Field("max", "u32", "SDT_MAX_SESSIONS: entries of sessions"),
    Field("pad", "u32", "0"),
    Field("sessions", "u64", "address of each open struct sdt_session by id (0: free); 0 is the default session",
          count=8),
    Field("areas", "u64", "the default session's first CPU area (struct sdt_cpu, then next_area)"),
))
LAYOUTS += (SESSION_CONFIG, SESSION, SNAPSHOT, REGISTRY)
CONSTANTS += (
    ("SDT_MAX_SESSIONS", 8, "sessions at once, the default one included (a probe's sessions are a 32-bit mask)"),
    ("SDT_SESSION_NAME", 16, "bytes of a session's name field: 1..15 bytes of [A-Za-z0-9_-], then NULs"),
    ("SDT_SESSION_MAGIC", 0x53455353, "\"SSES\" in a little-endian word: an open struct sdt_session"),
    ("SDT_SESSION_OPEN", 1, "the session records"),
    ("SDT_SESSION_CLOSING", 2, "sdt_session_close is taking it apart"),
    ("SDT_SESSION_CLOSED", 3, "closed: its memory is the kernel's again"),
    ("SDT_REGISTRY_MAGIC", 0x47455253, "\"SREG\" in a little-endian word: struct sdt_registry"),
    ("SDT_REGISTRY_VERSION", 2, "the registry's layout (2: struct sdt_session says its snapshot area)"),
    ("SDT_SNAPSHOT_MAGIC", 0x50414e53, "\"SNAP\" in a little-endian word: a struct sdt_snapshot written"),
    ("SDT_SNAPSHOT_HEAD", 128, "bytes from a CPU's snapshot block to its first packet (struct sdt_snapshot, padded)"),
    ("SDT_SNAPSHOT_MAX", 4096, "the most packets a snapshot keeps of a CPU (snapshot_packets)"),
    ("SDT_ERR_BUSY", -32, "a snapshot of the session is under way (on another CPU, or this one was stopped in it) "
     "or the session is closing: nothing was copied, the refusal counted in snapshot_busy"),
    ("SDT_ERR_MEMORY", -27, "the memory given is short of what the session's configuration needs (or beyond the "
     "kernel's budget): nothing was set up"),
    ("SDT_ERR_FULL", -28, "SDT_MAX_SESSIONS sessions are open already"),
    ("SDT_ERR_EXISTS", -29, "a session of that name is open already"),
    ("SDT_LINUX_SESSION_MEMORY", 64 << 20, "the hosted platform's budget for each session a host opens "
     "(session_memory: reserved, not touched until used)"),
    ("SDT_ERR_NAME", -30, "not a session name: 1..15 bytes of [A-Za-z0-9_-]"),
    ("SDT_ERR_SESSION", -31, "no such session: not open (never opened, or closed), or the default session where "
     "only another can be meant"),
    ("SDT_CTL_AT", ord("@"), "`@NAME COMMAND...`: the session-scoped commands (enable disable penable pdisable "
     "drain stats tables switch take flush) act on session NAME; without it, on the default session"),
)
WORDS += (
    ("SDT_CTL_SESSION", "session", "session open NAME BYTES PACKET POLICY [AGGBYTES [SNAPSHOT_PACKETS]] (memory "
     "from the kernel's session_memory): `ok session ID`; session close NAME (one the control core opened): `ok "
     "session N`, N the sites it disarmed; a line of `sessions`"),
    ("SDT_CTL_SESSIONS", "sessions", "sessions: `session ID NAME POLICY CPUS RING PACKET PACKETS DISCARDED "
     "OVERWRITTEN MISPLACED PROBES` per open session, the default one first (PACKETS opened, DISCARDED and "
     "OVERWRITTEN summed over its CPUs; PROBES it takes)"),
    ("SDT_CTL_SNAPSHOT", "snapshot", "snapshot NAME: sdt_snapshot of session NAME (a host's trigger), then `snapshot "
     "ID AREA BYTES PACKETS TAKEN LAPPED BUSY` (where its snapshot area is, each CPU's block's bytes, the closed "
     "packets a block keeps, the session's snapshot counters) and `ok snapshot KEPT`, the packets it kept"),
    ("SDT_CTL_OPEN", "open", "session open"),
    ("SDT_CTL_CLOSE", "close", "session close"),
)
REPLIES += (
    ("sessions", "session", ("id:x", "name:w", "policy:x", "cpus:x", "ring:x", "packet:x", "packets:x",
                             "discarded:x", "overwritten:x", "misplaced:x", "probes:x")),
    ("snapshot", "snapshot", ("id:x", "area:x", "bytes:x", "packets:x", "taken:x", "lapped:x", "busy:x")),
)
# Every constant and word, the sessions' included, by name.
VALUES = {name: value for name, value, _ in CONSTANTS}
WORD = {name[len("SDT_CTL_"):].lower(): text for name, text, _ in WORDS}


def reply_name(command: str, word: str) -> str:
    """The C name of a reply line: SDT_REPLY_WORD when the line is its command's own word (or every command's),
    else SDT_REPLY_COMMAND_WORD."""
    return f"SDT_REPLY_{word.upper()}" if command in ("", word) else f"SDT_REPLY_{command.upper()}_{word.upper()}"


def _shape(word: str, fields: tuple[str, ...]) -> str:
    def one(field: str) -> str:
        name, kind = field.split(":")
        return f"[{name}]" if kind == "f" else name.upper() + (":" if kind == "c" else "")

    return "`" + " ".join((WORD[word], *map(one, fields))) + "`"


def reply_shapes(command: str) -> str:
    """The lines ``command`` answers with, as a person reads them: `return CPU VALUE` or `fault CPU CAUSE PC ADDR`."""
    return " or ".join(_shape(word, fields) for cmd, word, fields in REPLIES if cmd == command)


def _field(kind: str, name: str, item: str) -> int | str | None:
    """One word of a reply line as its field's kind reads it; None when it is not one."""
    if kind == "x":
        return int(item, 16) if 0 < len(item) <= MAX_HEX and all(c in "0123456789abcdef" for c in item) else None
    if kind == "d":
        digits = item.removeprefix("-")
        return int(item) if 0 < len(digits) <= 20 and digits.isascii() and digits.isdigit() else None
    if kind == "c":
        return item[:-1] if len(item) > 1 and item.endswith(":") else None
    return item or None  # w


def parse_reply(command: str, line: str) -> tuple[str, dict[str, int | str]] | None:
    """A line of ``command``'s reply read by REPLIES: its word (a WORD key) and its fields by name, numbers as ints
    (a flag 1 or 0); None when it is none of the lines ``command`` answers with."""
    head, _, rest = line.partition(" ")
    for cmd, word, fields in REPLIES:
        if cmd != command or head != WORD[word]:
            continue
        values: dict[str, int | str] = {}
        for field in fields:
            name, kind = field.split(":")
            if kind == "r":
                if not rest:
                    break
                values[name], rest = rest, ""
                continue
            item, _, after = rest.partition(" ")
            if kind == "f":
                values[name] = int(item == name)
                rest = after if item == name else rest
                continue
            value = _field(kind, name, item)
            if value is None:
                break
            values[name], rest = value, after
        else:
            if not rest:
                return word, values
    return None


def field_name(command: str, word: str, field: str) -> str:
    """The C name of where a field sits in its line (SDT_FIELD_*): its number among the line's fields, from 0."""
    return f"SDT_FIELD_{reply_name(command, word)[len('SDT_REPLY_'):]}_{field.split(':')[0].upper()}"


FORMS = {"call": VALUES["SDT_FORM_CALL"], "tail": VALUES["SDT_FORM_TAIL"], "cond": VALUES["SDT_FORM_COND"],
         "isen": VALUES["SDT_FORM_ISEN"], "goto": VALUES["SDT_FORM_GOTO"]}
SITE_STATES = {v: n[len("SDT_SITE_"):].lower() for n, v, _ in CONSTANTS if n.startswith("SDT_SITE_")}
ERRORS = {v: doc for n, v, doc in CONSTANTS if n.startswith("SDT_ERR_")}  # what each negative result means


# -- C --------------------------------------------------------------------------------------
BEGIN = "/* BEGIN LAYOUTS: rendered from sdtgen/layout.py by `python -m sdtgen.layout --write`; do not edit */"
END = "/* END LAYOUTS */"


def _c_field(f: Field) -> str:
    if f.kind == "fn":
        return f.c % f.name + ";"
    decl = (f.c % f.name) if f.kind == "ptr" else f"{C_TYPES[f.kind]} {f.name}"
    return decl + (f"[{f.count}]" if f.count > 1 else "") + ";"


def _asserts(lay: Layout, bits: int) -> list[str]:
    out = [f"_SDT_LAYOUT(sizeof(struct {lay.name}) == {lay.size(bits)});"]
    return out + [f"_SDT_LAYOUT(__builtin_offsetof(struct {lay.name}, {f.name}) == {lay.offset(f.name, bits)});"
                  for f in lay.fields]


def render_c() -> str:
    """The block of sdt_runtime.h between BEGIN and END: constants, structs and their static assertions."""
    out = [BEGIN]
    width = max(len(n) for n, _, _ in CONSTANTS)
    for name, value, doc in CONSTANTS:
        text = f"{value:#x}{'u' if value > 0x7FFFFFFF else ''}" if value > 255 else f"({value})" if value < 0 \
            else str(value)
        out.append(f"#define {name.ljust(width)} {text}\t/* {doc} */")
    for name, text, doc in WORDS + STRINGS:
        out.append(f'#define {name.ljust(width)} "{text}"\t/* {doc} */')
    for command, word, fields in REPLIES:  # the word, a space, the kinds of its fields (sdt_control.c's say())
        kinds = "".join(f.split(":")[1] for f in fields)
        name = reply_name(command, word)
        out.append(f'#define {name.ljust(width)} SDT_CTL_{word.upper()} " {kinds}"\t/* '
                   f'{command or "every command"}: {_shape(word, fields)} */')
        out.append(f"#define {('SDT_FIELDS_' + name[len('SDT_REPLY_'):]).ljust(width)} {len(fields)}\t/* its fields */")
        for k, field in enumerate(fields):
            out.append(f"#define {field_name(command, word, field).ljust(width)} {k}")
            if field.endswith(":f"):  # a flag is its name as a word
                flag = field.split(":")[0]
                out.append(f'#define {("SDT_FLAG_" + name[len("SDT_REPLY_"):] + "_" + flag.upper()).ljust(width)} '
                           f'"{flag}"')
    out.append("")
    for lay in LAYOUTS:
        out.append(f"/* {lay.doc} */")
        out.append(f"struct {lay.name} {{")
        for f in lay.fields:
            out.append(f"\t{_c_field(f)}" + (f"\t/* {f.doc} */" if f.doc else ""))
        out.append("};")
        variants = [_asserts(lay, bits) for bits in (64, 32)]
        if variants[0] == variants[1]:
            out += variants[0]
        else:
            out += ["#if __SIZEOF_POINTER__ == 8", *variants[0], "#else", *variants[1], "#endif"]
        out.append("")
    out.append(END)
    return "\n".join(out)


def header_path() -> str:
    import os

    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "include", "sdt_runtime.h")


def current_block(text: str) -> str:
    start, end = text.index(BEGIN), text.index(END) + len(END)
    return text[start:end]


def main(argv: list[str] | None = None) -> int:
    import sys

    argv = sys.argv[1:] if argv is None else argv
    path = header_path()
    with open(path) as f:
        text = f.read()
    new = text.replace(current_block(text), render_c())
    if argv == ["--write"]:
        if new != text:
            with open(path, "w") as f:
                f.write(new)
        return 0
    sys.stdout.write(render_c() + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
