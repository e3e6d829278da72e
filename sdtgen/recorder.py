"""The event definition's guest half: one C recorder per probe, writing its event into this CPU's packet.

`gen` appends the recorders to the stubs file, compiled with the kernel's
flags beside the runtime (sdtgen/runtime/). A recorder takes the probe's
arguments as the site passed them (branch arming calls it in place of the
stub; sdt_trap calls it with the arguments it read from the trap frame),
reserves one event through the runtime's inline writer (sdt_runtime.h) and
stores the arguments in the probe's order where the event format
(sdtgen/event_format.py) puts them: the integers before the first string at
fixed offsets, then from the first string on each where the one before
ended (an integer at the next multiple of its size, the bytes skipped
zeroed). The host's decoder and the trace writers read the same format.
"""

from __future__ import annotations

from sdtgen.event_format import event_format
from sdtgen.probes import probe_key

RECORDER_PREFIX = "__sdt_rec_"
PROGRAM_PREFIX = "__sdt_prog_"  # the probe's slot (sdt_probe.program): its sessions and their programs


def _stores(types: tuple[str, ...], bits: int) -> tuple[int, list[str]]:
    """What a probe's recorder reserves, and the C that stores its arguments in the event ``e`` it reserved."""
    f = event_format(0, "", types, bits)
    out = []
    if f.lead:  # each in a block of its own: a kernel may forbid declarations after statements
        out.append("\t\t{")
        out.append("\t\t\tsdt_word *a = (sdt_word *)(e + 1);")
        out += [f"\t\t\ta[{j}] = a{k};" for j, k in enumerate(f.lead)]
        out.append("\t\t}")
    if f.rest:
        out.append("\t\t{")
        out.append(f"\t\t\tchar *to = (char *)e + {f.size};")
        after_string = False
        for k, read in zip(f.rest, f.later, strict=True):
            if read is None:
                out.append(f"\t\t\tto += sdt_event_string(e, to, {k}, (const char *)a{k});")
            else:
                if after_string:  # to the next word: zeros, not what the ring held there before
                    out.append("\t\t\twhile ((sdt_word)to & (sizeof(sdt_word) - 1))")
                    out.append("\t\t\t\t*to++ = 0;")
                out.append(f"\t\t\t*(sdt_word *)(void *)to = a{k};")
                out.append("\t\t\tto += sizeof(sdt_word);")
            after_string = read is None
        out.append("\t\t\tsdt_event_trim(c, e, to);")
        out.append("\t\t}")
    return f.reserved, out


PREAMBLE = """
/* The recorders: what a firing runs (sdt_runtime.h has the writer they inline). */
#include <sdt_runtime.h>

#define SDT_RECORD __attribute__((weak, used, noinline, no_instrument_function, section(".text.sdt_record")))
/* A probe's slot: weak, so two generated objects calling one probe share one. */
#define SDT_PROGRAM_SLOT __attribute__((weak, used))
/* The recorder's two paths, each a function of its own, so the recorder saves nothing before it branches. */
#define SDT_RECORD_PART __attribute__((noinline, no_instrument_function, section(".text.sdt_record")))
"""


def render_recorders(probes: list[tuple[str, tuple[str, ...]]], bits: int) -> str:
    """One recorder per (stub symbol, argument types).

    The recorder itself only looks at the probe's slot's route: 0 (only the default session takes the probe,
    with no program) jumps to the part that writes the event into this CPU's default area (a compare and a
    branch more than the event alone); else it makes the guard (the default session's program's, while it is
    the only taker) and returns when the firing fails it, with nothing saved or called (its two paths are tail
    calls), else jumps to the part that serves every session of the slot (docs/sessions.md): for each, its
    area of this CPU, its program there if it has one, and the event written into its ring if the program
    says so, all inside a visit of this CPU's area (what a session closing waits on).
    """
    out = [PREAMBLE]
    for symbol, types in probes:
        reserved, stores = _stores(types, bits)
        n = len(types)
        params = ", ".join(f"sdt_word a{k}" for k in range(n)) or "void"
        args = ", ".join(f"a{k}" for k in range(n))
        slot, key = f"{PROGRAM_PREFIX}{symbol}", f"{probe_key(symbol):#x}u"
        passed = ", ".join([f"a{k}" for k in range(n)] + ["0"] * (6 - n))
        event, plain, run = (f"{RECORDER_PREFIX}{part}_{symbol}" for part in ("event", "plain", "program"))
        out.append(f"SDT_PROGRAM_SLOT struct sdt_slot {slot} = {{0}};")
        out.append(f"static inline __attribute__((always_inline)) void {event}(struct sdt_cpu *c"
                   + "".join(f", sdt_word a{k}" for k in range(n)) + ")")
        out.append("{")
        out.append(f"\tstruct sdt_event *e = sdt_event_begin(c, {key}, {reserved});")
        out.append("")
        out.append("\tif (e) {")
        out += stores
        out.append("\t\tsdt_event_end(c);")
        out.append("\t}")
        out.append("}")
        out.append(f"static SDT_RECORD_PART void {plain}({params})")
        out.append("{")
        out.append("\tstruct sdt_cpu *c = sdt_hooks.cpu_area();\t/* this CPU's, until sdt_cpu_put */")
        out.append("")
        out.append(f"\t{event}(c{''.join(f', a{k}' for k in range(n))});")
        out.append("\tsdt_cpu_put(c);")
        out.append("}")
        out.append(f"static SDT_RECORD_PART void {run}({params})")
        out.append("{")
        out.append("\tstruct sdt_cpu *c = sdt_hooks.cpu_area();\t/* this CPU's, until sdt_cpu_put */")
        out.append("")
        out.append("\tif (c) {")
        out.append("\t\tsdt_word visit = sdt_visit_begin(c);")
        out.append(f"\t\tsdt_u32 m = sdt_slot_sessions(&{slot});")
        out.append("\t\tunsigned s;")
        out.append("")
        out.append("\t\tfor (s = 0; m; s++, m >>= 1) {\t/* no ctz: it may be a libgcc call */")
        out.append("\t\t\tconst struct sdt_program *p;")
        out.append("\t\t\tstruct sdt_cpu *to;")
        out.append("\t\t\tif (!(m & 1))")
        out.append("\t\t\t\tcontinue;")
        out.append("\t\t\tto = sdt_session_cpu(c, s);")
        out.append(f"\t\t\tp = __atomic_load_n(&{slot}.program[s & (SDT_MAX_SESSIONS - 1)], __ATOMIC_ACQUIRE);")
        out.append(f"\t\t\tif (to && (!p || sdt_program_fire(to, p, {key}, {passed})))")
        out.append(f"\t\t\t\t{event}(to{''.join(f', a{k}' for k in range(n))});")
        out.append("\t\t}")
        out.append("\t\tsdt_visit_end(c, visit);")
        out.append("\t}")
        out.append("\tsdt_cpu_put(c);")
        out.append("}")
        out.append(f"SDT_RECORD void {RECORDER_PREFIX}{symbol}({params});")
        out.append(f"SDT_RECORD void {RECORDER_PREFIX}{symbol}({params})")
        out.append("{")
        out.append(f"\tif (__builtin_expect({slot}.route != 0, 0)) {{")
        out.append(f"\t\tif (sdt_guard(&{slot}, {passed}))")
        out.append(f"\t\t\t{run}({args});")
        out.append("\t\treturn;")
        out.append("\t}")
        out.append(f"\t{plain}({args});")
        out.append("}")
        out.append("")
    return "\n".join(out)
