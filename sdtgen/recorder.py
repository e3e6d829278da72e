"""The guest half of the data path: C that records a firing into this CPU's ring buffer.

`gen` appends it to the stubs file, so it is compiled with the stubs' flags
and runs as guest instructions. One recorder per probe (``__sdt_rec_<stub>``)
with the probe's key, argument count and string arguments compiled in, all
calling one small writer. The record layout and the per-CPU control
structure are shared with the host's reader (sdtgen/boot/buffers.py) and
described in docs/boot.md.
"""

from __future__ import annotations

from sdtgen.arch.base import Arch

RECORDER_PREFIX = "__sdt_rec_"
CONTROL = 1024  # bytes per CPU of control structure (80) and scratch slots for a dropped record (13 * 64)
SLOT = 64  # bytes of one ring slot: a record is one slot, plus STRING_SLOTS per copied string
STRING_SLOTS = 2
MAX_COPIED_STRING = STRING_SLOTS * SLOT - 1  # bytes of a string copied at fire time (a NUL ends it)
STRING_TYPES = frozenset({"char*", "constchar*", "charconst*"})


def probe_key(symbol: str) -> int:
    """The 32-bit key a probe's records carry: FNV-1a of its stub's symbol, never 0 (0 marks padding)."""
    h = 0x811C9DC5
    for b in symbol.encode():
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return h or 1


def is_string(ctype: str) -> bool:
    return ctype.replace(" ", "") in STRING_TYPES


COMMON = r"""
/*
 * The data path (docs/boot.md): recorders write one record into this CPU's
 * ring of 64-byte slots. The host fills in the control structure the per-CPU
 * register points to and reads the ring only while the guest is stopped, so
 * the writer is the only one on its CPU and takes no lock.
 */
struct sdt_cpu {			/* CONTROL bytes apart; the rest is scratch for dropped records */
	unsigned long long self;	/* this structure's address */
	unsigned long long base;	/* the ring: slots * 64 bytes */
	unsigned long long slots;	/* a power of two */
	unsigned long long head;	/* slots ever written */
	unsigned long long tail;	/* first slot not yet read or overwritten */
	unsigned long long lost;	/* records not kept */
	unsigned long long policy;	/* SDT_DROP, SDT_OVERWRITE, or SDT_FULL: drop mode that dropped */
	unsigned long long cpu;
	unsigned long long ranges;	/* what the guest may read: nranges (start, size) pairs */
	unsigned long long nranges;
};

struct sdt_slot {
	unsigned long long ts;
	union {
		struct {
			unsigned int key;	/* the probe; 0 in padding that skips the ring's end */
			unsigned short n;	/* slots in this record */
			unsigned short nulls;	/* bit k: string argument k was a null pointer */
		};
		unsigned long long key_n;	/* all three in one store (little-endian) */
	};
	unsigned long long a[6];
};

#define SDT_DROP 0
#define SDT_OVERWRITE 1
#define SDT_FULL 2

#define SDT_RECORD __attribute__((weak, used, noinline, no_instrument_function, section(".text.sdt_record")))
#define SDT_WRITER __attribute__((noinline, no_instrument_function, section(".text.sdt_record")))

%(arch)s

/* Make room for n slots in overwrite mode: drop whole old records, counting each. */
static SDT_WRITER void sdt_make_room(struct sdt_cpu *c, struct sdt_slot *ring, unsigned long long upto)
{
	while (c->tail < upto) {
		struct sdt_slot *old = &ring[c->tail & (c->slots - 1)];
		unsigned long long n = old->n ? old->n : 1;
		if (old->key)
			c->lost++;
		c->tail += n;
	}
}

/* A record that does not fit as it is: padding past the ring's end, a full ring, or a dropped record. */
static SDT_WRITER struct sdt_slot *sdt_reserve_slow(struct sdt_cpu *c, unsigned long long key_n)
{
	struct sdt_slot *ring = (struct sdt_slot *)(unsigned long)c->base;
	unsigned long long head = c->head, size = c->slots, pos = head & (size - 1);
	unsigned long long n = key_n >> 32;
	unsigned long long pad = pos + n > size ? size - pos : 0;
	struct sdt_slot *s;

	if (c->policy == SDT_FULL)
		goto lose;
	if (head + pad + n - c->tail > size) {
		if (c->policy == SDT_DROP) {
			c->policy = SDT_FULL;	/* the oldest stay: drop the rest until the host reads the ring */
			goto lose;
		}
		if (n > size)
			goto lose;
		if (pad + n > size) {	/* only an empty ring holds it: drop every old record, skip the padding */
			sdt_make_room(c, ring, head);
			c->tail = head + pad;
		} else
			sdt_make_room(c, ring, head + pad + n - size);
	}
	if (pad) {
		ring[pos].key = 0;
		ring[pos].n = (unsigned short)pad;
		pos = 0;
	}
	s = &ring[pos];
	s->ts = sdt_clock();
	s->key_n = key_n;
	c->head = head + pad + n;
	return s;
lose:
	c->lost++;
	return (struct sdt_slot *)(c + 1);	/* the CPU's scratch record: written, never read */
}

/*
 * Reserve n contiguous slots stamped with the clock, the probe's key and n (key_n: key | n << 32).
 * A dropped record goes to the CPU's scratch slots after its control structure, so recorders need
 * no test. The common case stays short: it fits, no padding, nothing dropped.
 */
static SDT_WRITER struct sdt_slot *sdt_reserve(unsigned long long key_n)
{
	struct sdt_cpu *c = sdt_this_cpu();
	unsigned long long head = c->head, size = c->slots, next = head + (key_n >> 32);
	struct sdt_slot *s;

	/* One branch, not three: each branch ends a translation block in the emulator. */
	if (((head & (size - 1)) + (key_n >> 32) > size) | (next - c->tail > size) | (c->policy == SDT_FULL))
		return sdt_reserve_slow(c, key_n);
	s = (struct sdt_slot *)(unsigned long)c->base + (head & (size - 1));
	s->ts = sdt_clock();
	s->key_n = key_n;
	c->head = next;
	return s;
}

/*
 * How many bytes from p on the guest can read: 0 when p is in no mapped range. A probe must never
 * fault the kernel it traces, so a string is copied only as far as memory is there to read, as
 * Linux's copy_from_kernel_nofault checks its range first.
 */
static SDT_WRITER unsigned long long sdt_readable(const struct sdt_cpu *c, unsigned long long p)
{
	const unsigned long long *r = (const unsigned long long *)(unsigned long)c->ranges;
	unsigned long long i;

	for (i = 0; i < c->nranges; i++)
		if (p - r[2 * i] < r[2 * i + 1])
			return r[2 * i + 1] - (p - r[2 * i]);
	return 0;
}

/* Copy a string argument into the record's string slots, up to %(max)d bytes and never past
 * readable memory; a null or unreadable pointer sets the argument's bit in nulls instead. */
static SDT_WRITER void sdt_string(struct sdt_slot *s, unsigned int k, unsigned int j, const char *p)
{
	char *to = (char *)(s + 1 + %(per)d * j);
	unsigned long long room = p ? sdt_readable(sdt_this_cpu(), (unsigned long)p) : 0;
	unsigned int i = 0;

	if (!room) {
		s->nulls |= (unsigned short)(1u << k);
		to[0] = 0;
		return;
	}
	while (i < %(max)d && i < room && p[i]) {
		to[i] = p[i];
		i++;
	}
	to[i] = 0;
}
"""


def render_recorders(arch: Arch, probes: list[tuple[str, tuple[str, ...]]]) -> str:
    """The common writer, then one recorder per (stub symbol, argument types)."""
    out = [COMMON % {"arch": arch.recorder_c.strip("\n"), "max": MAX_COPIED_STRING, "per": STRING_SLOTS}]
    for symbol, types in probes:
        strings = [k for k, t in enumerate(types) if is_string(t)]
        params = ", ".join(f"unsigned long a{k}" for k in range(len(types))) or "void"
        out.append(f"SDT_RECORD void {RECORDER_PREFIX}{symbol}({params});")
        out.append(f"SDT_RECORD void {RECORDER_PREFIX}{symbol}({params})")
        out.append("{")
        key_n = probe_key(symbol) | (1 + STRING_SLOTS * len(strings)) << 32  # nulls: 0
        if types:
            out.append(f"\tstruct sdt_slot *s = sdt_reserve({key_n:#x}ull);")
            out.append("")
        else:
            out.append(f"\tsdt_reserve({key_n:#x}ull);")
        for k in range(len(types)):
            out.append(f"\ts->a[{k}] = a{k};")
        for j, k in enumerate(strings):
            out.append(f"\tsdt_string(s, {k}, {j}, (const char *)a{k});")
        out.append("}")
        out.append("")
    return "\n".join(out)
