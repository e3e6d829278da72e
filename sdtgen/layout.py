"""Every layout the guest and the host share, described once.

The site table and probe descriptors `gen` writes, the runtime's per-CPU
control structure, the packets and events of its rings, the trap frame and
the hooks a kernel supplies. Python reads them through ``Layout.struct``; the
C declarations in the installed header ``sdt_runtime.h`` are rendered from
here (``render_c``), and tests/test_layout.py compiles that header for every
architecture and compares each ``offsetof`` with these offsets.

Fields are naturally aligned; ``u64`` is 8-byte aligned on every
architecture (i386 included: the header declares it so), and ``ptr`` is
a pointer, 4 or 8 bytes. Byte order is the architecture's.

Regenerate the header's block after editing: ``python -m sdtgen.layout --write``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from functools import cache

SIZES = {"u8": 1, "u16": 2, "u32": 4, "s32": 4, "u64": 8}
CODES = {"u8": "B", "u16": "H", "u32": "I", "s32": "i", "u64": "Q"}
C_TYPES = {"u8": "sdt_u8", "u16": "sdt_u16", "u32": "sdt_u32", "s32": "sdt_s32", "u64": "sdt_u64"}


@dataclass(frozen=True)
class Field:
    name: str
    kind: str  # u8 u16 u32 s32 u64, ptr (a data pointer), fn (a function pointer: its C type in ``c``)
    doc: str
    count: int = 1
    c: str = ""  # the C type of a ptr or fn field

    def size(self, bits: int) -> int:
        return (bits // 8 if self.kind in ("ptr", "fn") else SIZES[self.kind])


@dataclass(frozen=True)
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
))

PACKET = Layout("sdt_packet", "The header of every packet: CTF 1.8's packet header and context, as they stand.", (
    Field("magic", "u32", "SDT_PACKET_MAGIC (0xC1FC1FC1)"),
    Field("stream_id", "u32", "0: one stream class"),
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
))

LAYOUTS = (SITE, PROBE, CPU, PACKET, EVENT, RANGE, FRAME, HOOKS, ENTRIES)

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
)
VALUES = {name: value for name, value, _ in CONSTANTS}
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
