"""Sites -> stub C and the linker-set table assembly (plus anchors for reloc mode)."""

from __future__ import annotations

import re
from pathlib import Path

from sdtgen.arch.base import GOTO, ISEN, REF
from sdtgen.atomic import check_outputs, write_all_atomic
from sdtgen.elf.reader import STT_SECTION, ElfFile
from sdtgen.elf.symbols import CODE, SymbolIndex
from sdtgen.elf.writer import NewSymbol, add_symbols
from sdtgen.errors import SdtError, printable, warn
from sdtgen.layout import MODULE_TABLE, PROBE, SITE, VALUES, render_asm
from sdtgen.plaindata import record
from sdtgen.probes import ISENABLED_PREFIX, Probe, Site, descriptor_problem, is_c_identifier, probe_key, probe_symbol
from sdtgen.recorder import PROGRAM_PREFIX, RECORDER_PREFIX, render_recorders
from sdtgen.scan import ScanResult, open_relocatable, scan_elf, section_place
from sdtgen.table import FORMS, MODES, MODULE_NAME_SECTION, MODULE_TABLE_SECTION, PROBES_SET, SITES_SET
from sdtgen.tracepoints import probe_word_symbol

ANCHOR_PREFIX = "__sdt_site_"
# Anchors are hidden globals (the table object must reach them) typed STT_SECTION. Measured with
# GNU ld, gold and lld 14: all three resolve the table's references to them like any symbol and
# write them to the image as locals, and objdump, nm and sdtgen's own symbolizer skip section
# symbols, so the image's disassembly names each site vfs_lookup+0x11, not __sdt_site_4+0x11.
ANCHOR_TYPE = STT_SECTION


@record(frozen=True)
class Generated:
    stubs: str
    table: str
    anchors: list[NewSymbol]  # to add to the object (reloc mode)


@record(frozen=True)
class MetadataRequest:
    """`gen --ctf-metadata`: where the CTF metadata goes, and the clock the kernel's sdt_hooks.clock reads."""

    path: str | Path
    clock_hz: int
    clock_name: str = ""  # "" is the architecture's counter (tsc, cntvct_el0, cycle)


def gen_files(obj: str | Path, stubs: str | Path, table: str | Path, mode: str = "reloc",
              strict: bool = False, ctf: MetadataRequest | None = None, module: str | None = None) -> ScanResult:
    """`sdtgen gen`: scan, render, then write the anchored object, the stubs and the table (and the CTF
    metadata describing the packets the kernel's runtime will write: a trace is then its streams as they
    stand beside it, whatever carries them out of the kernel).

    Everything is rendered and checked before the first byte is written, and
    each output goes through a temporary file renamed into place.
    """
    if ctf is not None:
        _check_clock(ctf)
    if module is not None:
        check_module_name(module)
    named = [("stubs", stubs), ("table", table)] + ([("CTF metadata", ctf.path)] if ctf else [])
    check_outputs(named, inputs=[("object", obj)])
    with open_relocatable(str(obj)) as elf:
        result = scan_elf(elf)
        tag = _anchor_tag(elf, result) if mode == "reloc" else ""
        gen = generate(result, mode, tag=tag, module=module)
        report_undefined(result, strict)
        meta = _ctf_metadata(elf, result, ctf, module is None) if ctf else None
        anchored = _anchored_object(elf, gen.anchors) if gen.anchors else None
    outputs = [(stubs, gen.stubs.encode()), (table, gen.table.encode())]
    roles = ["stubs", "table"]
    if meta is not None:
        outputs.append((ctf.path, meta.encode()))
        roles.append("CTF metadata")
    if anchored is not None:
        outputs.append((obj, anchored))
        roles.append("object")
    write_all_atomic(outputs, roles)
    return result


def _check_clock(ctf: MetadataRequest) -> None:
    if not 0 < ctf.clock_hz < 1 << 64:
        raise SdtError("", f"--clock-hz {ctf.clock_hz} is not a clock rate", "give the ticks a second of the "
                       "kernel's sdt_hooks.clock (1000000000 for nanoseconds)")
    if ctf.clock_name and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,63}", ctf.clock_name):
        raise SdtError("", f"--clock-name {printable(ctf.clock_name)!r} is not a C identifier",
                       "use letters, digits and _")


def _ctf_metadata(elf: ElfFile, result: ScanResult, ctf: MetadataRequest, tasks: bool) -> str:
    """The TSDL text for the object's probes, as the runtime's packets will carry their events (a module's: its
    event blocks, appended to the kernel's, which declares the task event already)."""
    from sdtgen import arch as arches
    from sdtgen.trace.ctf import metadata
    from sdtgen.trace.model import TraceMeta, TraceProbe

    arch = arches.for_elf(elf)
    name = ctf.clock_name or arch.clock_name or "clock"
    probes = tuple(TraceProbe(probe_key(p.symbol), p.provider, p.module, p.function, p.name, p.args)
                   for p in sorted(result.probes.values(), key=lambda p: (p.spec, p.symbol)))
    return metadata(TraceMeta(arch.name, name, ctf.clock_hz, 0, probes), arch.bits, recorded_here=False, tasks=tasks)


UNDEFINED_FIX = ("define it with SDT_PROBE_DEFINE in one file of the object (a misspelt probe name makes "
                 "a new probe)")
STRICT_HINT = "; `--strict` or SDT_STRICT=1 makes this an error"


def report_undefined(result: ScanResult, strict: bool = False) -> None:
    """Warn once per probe the object calls but no SDT_PROBE_DEFINE describes; with ``strict``, refuse."""
    first: dict[str, Site] = {}
    for site in result.sites:
        owner = probe_symbol(site.symbol)
        if not result.probes[owner].described:
            first.setdefault(owner, site)
    for symbol, site in first.items():
        what = (f"probe {printable(symbol)} is used without SDT_PROBE_DEFINE, so it gets a name made from "
                f"its symbol, {printable(site.probe)}")
        if strict:
            more = f" (and {len(first) - 1} more undefined probes)" if len(first) > 1 else ""
            raise SdtError(result.object, what + more, UNDEFINED_FIX, where=site.where)
        warn(result.object, what, UNDEFINED_FIX + STRICT_HINT, where=site.where)


def _anchor_tag(elf: ElfFile, result: ScanResult) -> str:
    """What makes this object's anchor names its own, so two generated objects link into one image.

    A hash of the object as the partial link wrote it; an object that already carries anchors
    keeps their tag, so running gen again changes nothing.
    """
    have = elf.symbol_indices_with_prefix(ANCHOR_PREFIX)
    if have:
        tag = next(iter(have.values()))[len(ANCHOR_PREFIX):].rpartition("_")[0]
        if tag:
            return tag
    import hashlib

    return hashlib.blake2b(elf.data, digest_size=8).hexdigest()


def anchor_name(tag: str, index: int) -> str:
    return f"{ANCHOR_PREFIX}{tag}_{index}"


def target_anchor_name(tag: str, index: int) -> str:
    """The anchor of goto site ``index``'s out-of-line target."""
    return f"{ANCHOR_PREFIX}{tag}_t{index}"


def _anchored_object(elf: ElfFile, anchors: list[NewSymbol]) -> bytearray | None:
    """The object with anchor symbols added, or None when it already carries exactly these."""
    have = {}
    for i in elf.symbol_indices_with_prefix(ANCHOR_PREFIX):
        s = elf.symbol(i)
        have[s.name] = (s.shndx, s.value, s.type)
    want = {a.name: (a.shndx, a.value, a.type) for a in anchors}
    if have == want:
        return None
    if have:
        # ld -r carried them over from an input that `gen` was given (and rewrote): name where.
        shndx, value, _ = min(have.values())
        where = section_place(SymbolIndex(elf, CODE, {shndx}), elf.section_at(shndx), value)
        raise elf.fail(f"already carries {len(have)} sdtgen site anchors (the first at {where}) but has "
                       f"{len(want)} sites: an object linked into it went through `sdtgen gen`, which adds "
                       "anchors to the object it is given", "rebuild the objects `sdtgen gen` was run on, "
                       "rerun the partial link (ld -r), and run gen only on its output")
    return add_symbols(elf, anchors)


MODULE_TABLE_SYMBOL = "__sdt_module_table"  # hidden: every module (a shared object too) finds its own


def check_module_name(name: str) -> None:
    """A module's name goes into its table as a string and into specs as their module field: a C identifier."""
    if not is_c_identifier(name) or len(name) > 64:
        raise SdtError("", f"--module {printable(name)!r} is not a module name",
                       "give a C identifier of at most 64 characters (it is the module field of its probes' specs)")


def generate(result: ScanResult, mode: str = "reloc", source: str = "", tag: str = "0",
             module: str | None = None) -> Generated:
    """Check everything is safe to write, then render both files; raises SdtError otherwise."""
    if mode not in MODES:
        raise SdtError("", f"unknown table mode {mode!r}", "use reloc or offset")
    source = source or result.object
    for site in result.sites:
        # An address load is how a call through a register starts: -mcmodel=large calls every function so,
        # SDT_PROBE_ENABLED()'s too, and the fix is then the code model, not the use of the macros.
        through_register = ("the code loads the function's address to call it through a register, as "
                            "-mcmodel=large and -fno-plt do for every call: build with a code model that calls "
                            "directly, and use probes only through sdt.h's macros")
        loads = "address load" in site.detail or "GOT load" in site.detail
        if site.form == REF and site.detail.startswith("asm goto"):
            raise SdtError(result.object, f"{site.detail}, so arming cannot write a jump over it",
                           "build with sdtgen's sdt.h (-DSDT_ASM_GOTO): its asm goto emits one NOP and calls the "
                           "recorder gen writes", where=site.where)
        if site.form == REF and site.symbol.startswith(ISENABLED_PREFIX):
            raise SdtError(result.object, f"{site.detail} of {site.symbol} is not a plain call, so it cannot be "
                           "patched to a constant",
                           through_register if loads else "use it only through SDT_PROBE_ENABLED()", where=site.where)
        if site.form == REF:
            raise SdtError(result.object, f"{site.detail} of {site.symbol} is not a call or jump, so it cannot "
                           "be patched", through_register if loads else "use the probe only through SDT_PROBEn()",
                           where=site.where)
        if mode == "offset" and (site.text_offset is None or (site.form == GOTO and site.target_text_offset is None)):
            what = "site" if site.text_offset is None else f"asm goto target ({site.target_section}+{site.target:#x})"
            raise SdtError(result.object, f"{what} is outside .text, so it has no offset from btext",
                           "partial-link with `sdtgen linker-script partial` (without --keep for its section), or use "
                           "--mode reloc", where=site.where)
    probes = sorted(result.probes.values(), key=lambda p: (p.spec, p.symbol))
    for p in probes:
        problem = descriptor_problem(p)
        if problem:
            raise SdtError(result.object, f"refusing to generate code: {problem}",
                           "rename the probe or the function; names must be C identifiers")
    anchors = []
    if mode == "reloc":
        for i, site in enumerate(result.sites):
            anchors.append(NewSymbol(anchor_name(tag, i), result.section_index[site.section], site.offset,
                                     ANCHOR_TYPE))
            if site.form == GOTO:  # its out-of-line target, which arming jumps to, is located the same way
                anchors.append(NewSymbol(target_anchor_name(tag, i), result.section_index[site.target_section],
                                         site.target, ANCHOR_TYPE))
    return Generated(render_stubs(probes, result, source, module),
                     render_table(probes, result, mode, source, tag, module), anchors)


# A module's own registration when it is a shared object a process loads: its constructor gives its table to the
# hosted platform (sdt_linux.h), which finds its code and calls sdt_module_load; its destructor unloads it.
MODULE_DLOPEN = """
#ifdef SDT_MODULE_DLOPEN
#include <sdt_runtime.h>
extern const struct sdt_module_table {table};
int sdt_linux_module_open(struct sdt_module *m, const struct sdt_module_table *table);
int sdt_linux_module_close(struct sdt_module *m);
static struct sdt_module sdt_this_module;
__attribute__((constructor(101))) static void sdt_module_loaded(void)
{{
	sdt_linux_module_open(&sdt_this_module, &{table});
}}
__attribute__((destructor(101))) static void sdt_module_unloading(void)
{{
	sdt_linux_module_close(&sdt_this_module);
}}
#endif
"""


def render_stubs(probes: list[Probe], result: ScanResult, source: str, module: str | None = None) -> str:
    lines = [
        f"/* Generated by sdtgen from {_comment(source)}: do not edit. */",
        "/*",
        " * One empty function per probe. All share one input section, so identical",
        " * code folding (--icf) cannot merge them and every stub keeps its own",
        " * address; compile this file without LTO so they are never inlined away.",
        " * Weak, so that two generated objects calling one probe link into one image.",
        " */",
        "#if defined(__clang__)",
        '#define SDT_STUB __attribute__((weak, used, noinline, no_instrument_function, section(".text.sdt_stubs")))',
        "#else",
        '#define SDT_STUB __attribute__((weak, used, noipa, no_instrument_function, section(".text.sdt_stubs")))',
        "#endif",
        "",
    ]
    if module is not None:  # the module's own stubs, recorders and slots: a shared object never exports them
        lines += [f"/* Module {module}: its symbols are its own (hidden), whoever else defines the same; the runtime's",
                  " * (declared first) are the kernel's, or the program's. */",
                  "#include <sdt_runtime.h>", '#pragma GCC visibility push(hidden)', ""]
    checked = _checked(result)
    for p in probes:
        if p.symbol in result.defined:
            continue  # the object defines it itself
        lines.append(f"void {p.symbol}(void);")
        lines.append(f'SDT_STUB void {p.symbol}(void) {{ __asm__ __volatile__(""); }}')
        if p.symbol in checked:  # SDT_PROBE_ENABLED(): reads 0 until the runtime rewrites the call
            lines.append(f"int {p.isenabled_symbol}(void);")
            lines.append(f"SDT_STUB int {p.isenabled_symbol}(void) {{ return 0; }}")
    lines.append(render_recorders([(p.symbol, p.args) for p in probes], result.arch.bits))
    if module is not None:
        lines += ["#pragma GCC visibility pop", MODULE_DLOPEN.format(table=MODULE_TABLE_SYMBOL)]
    return "\n".join(lines) + "\n"


def _checked(result: ScanResult) -> set[str]:
    """The probes some SDT_PROBE_ENABLED() asks about, by probe symbol."""
    return {probe_symbol(s.symbol) for s in result.sites if s.form == ISEN}


def render_table(probes: list[Probe], result: ScanResult, mode: str, source: str, tag: str = "0",
                 module: str | None = None) -> str:
    strings: dict[str, str] = {}

    def ref(text: str) -> str:
        """A string of the table (each one once), as a field relative to itself; 0 for none."""
        return f"{strings.setdefault(text, f'.Lsdt_str{len(strings)}')} - ." if text else "0"

    index = {p.symbol: i for i, p in enumerate(probes)}
    bits = result.arch.bits  # the two layouts gen writes have no pointers: the same on every architecture
    checked = _checked(result)
    gotos = {probe_symbol(s.symbol) for s in result.sites if s.form == GOTO}
    out = [f"/* Generated by sdtgen from {_comment(source)} (table mode {mode}): do not edit. */", ""]
    out += [f'\t.section {PROBES_SET},"a"', "\t.balign 4", ".Lsdt_probes_start:"]
    for i, p in enumerate(probes):
        if p.symbol in gotos:  # what the asm goto records' probe word names (weak: two objects may call it)
            word = probe_word_symbol(p.symbol)
            out += [f"\t.weak {word}", f"\t.hidden {word}", f"{word}:"]
        out.append(f".Lsdt_probe{i}:\t/* {p.spec} */")
        out += render_asm(PROBE, bits, {
            "stub": f"{p.symbol} - .", "provider": ref(p.provider), "module": ref(p.module),
            "function": ref(p.function), "name": ref(p.name), "nargs": str(len(p.args)), "id": str(i),
            "argtype": [ref(p.args[k] if k < len(p.args) else "") for k in range(6)],
            "isenabled": f"{p.isenabled_symbol} - ." if p.symbol in checked else "0",
            "xargtype": [ref(p.xargs[k] if k < len(p.xargs) else "") for k in range(6)],
            "recorder": f"{RECORDER_PREFIX}{p.symbol} - .", "key": f"{probe_key(p.symbol):#x}",
            "program": f"{PROGRAM_PREFIX}{p.symbol} - ."})
    # Writable: the runtime keeps each site's state in its entry (sdtgen/layout.py, SITE).
    out += [".Lsdt_probes_end:", "", f'\t.section {SITES_SET},"aw"', "\t.balign 4", ".Lsdt_sites_start:"]
    for i, s in enumerate(result.sites):
        where = anchor_name(tag, i) if mode == "reloc" else f"btext + {s.text_offset:#x}"
        values = {"site": f"{where} - .", "probe": f".Lsdt_probe{index[probe_symbol(s.symbol)]} - .",
                  "form": str(FORMS[s.form]), "length": str(s.length), "mode": str(MODES[mode])}
        if s.form == GOTO:
            target = target_anchor_name(tag, i) if mode == "reloc" else f"btext + {s.target_text_offset:#x}"
            values["target"] = f"{target} - ."
        out.append(f"\t/* {s.probe} at {_comment(s.where)} */")
        out += render_asm(SITE, bits, values)
    out.append(".Lsdt_sites_end:")
    if module is not None:  # what the module's loader finds its tables by (docs/runtime.md, "Modules")
        out += ["", f'\t.section {MODULE_TABLE_SECTION},"a"', "\t.balign 4", f"\t.globl {MODULE_TABLE_SYMBOL}",
                f"\t.hidden {MODULE_TABLE_SYMBOL}", f"\t.type {MODULE_TABLE_SYMBOL}, %object",
                f"{MODULE_TABLE_SYMBOL}:"]
        out += render_asm(MODULE_TABLE, bits, {
            "magic": f"{VALUES['SDT_MODULE_TABLE_MAGIC']:#x}", "sites": ".Lsdt_sites_start - .",
            "sites_end": ".Lsdt_sites_end - .", "probes": ".Lsdt_probes_start - .",
            "probes_end": ".Lsdt_probes_end - .", "name": ref(module)})
        out.append(f"\t.size {MODULE_TABLE_SYMBOL}, . - {MODULE_TABLE_SYMBOL}")
        # the name again where a tool reads it without relocating anything (`sdtgen probes` of the module)
        out += ["", f'\t.section {MODULE_NAME_SECTION},"",%progbits', f'\t.asciz "{module}"']
    out += ["", '\t.section .rodata.sdt_strings,"a"']
    for text, lab in strings.items():  # every name and type validated (probes.py) before it gets here
        out.append(f'{lab}:\t.asciz "{text}"')
    out += ["", '\t.section .note.GNU-stack,""']  # no executable stack wanted
    return "\n".join(out) + "\n"


def _comment(text: str) -> str:
    """Paths and section names are not validated like probe names: keep them inert in a comment."""
    safe = "".join(c if " " <= c <= "~" else "?" for c in text)
    return safe.replace("*/", "*?/")
