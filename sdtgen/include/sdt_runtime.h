/*
 * sdt_runtime.h - the sdtgen runtime a kernel links (docs/runtime.md).
 *
 * Freestanding C, no allocation, no libc. The kernel supplies its hooks once
 * (struct sdt_hooks) and gives each CPU an area and a ring (sdt_cpu_attach);
 * the runtime then patches every probe site at boot (sdt_init), arms and
 * disarms them by probe spec (sdt_enable, sdt_disable), resolves breakpoints
 * (sdt_trap, called from the kernel's breakpoint handler), and records
 * firings into per-CPU rings of packets that a consumer reads while the
 * kernel runs (sdt_consume). The recorders `sdtgen gen` writes use the
 * inline writer at the end of this header.
 *
 * LTT's four layers: the hook is the patched site (the per-architecture
 * encoders), the event definition is the probe descriptors and recorders
 * gen writes, the management is sdt_init/sdt_enable/sdt_disable and the
 * patch protocol, the transport is the rings, packets and consumers.
 */
#ifndef SDTGEN_SDT_RUNTIME_H
#define SDTGEN_SDT_RUNTIME_H

#ifdef __cplusplus
extern "C" {
#endif

typedef unsigned char sdt_u8;
typedef unsigned short sdt_u16;
typedef unsigned int sdt_u32;
typedef int sdt_s32;
/* 8-byte aligned on every architecture (i386 aligns long long to 4 in structs), so layouts agree. */
typedef unsigned long long sdt_u64 __attribute__((aligned(8)));
typedef unsigned long sdt_word;	/* a register: what a probe argument is passed as */

#if defined(__cplusplus)
#define _SDT_LAYOUT(e) static_assert(e, "sdtgen layout")
#else
/* __extension__: C11's _Static_assert also under -std=c99 -pedantic, as gcc and clang allow */
#define _SDT_LAYOUT(e) __extension__ _Static_assert(e, "sdtgen layout")
#endif

/* BEGIN LAYOUTS: rendered from sdtgen/layout.py by `python -m sdtgen.layout --write`; do not edit */
#define SDT_FORM_CALL     1	/* a call to the probe's stub */
#define SDT_FORM_TAIL     2	/* a tail jump to it */
#define SDT_FORM_COND     3	/* a conditional tail jump to it (x86 jcc) */
#define SDT_FORM_ISEN     4	/* a call to its is-enabled stub (SDT_PROBE_ENABLED) */
#define SDT_FORM_GOTO     5	/* the NOP of an asm goto (SDT_ASM_GOTO), armed by a jump to its out-of-line target */
#define SDT_TABLE_RELOC   0	/* the entry is a relocation the final link resolved */
#define SDT_TABLE_OFFSET  1	/* the entry is btext + an offset measured after the partial link */
#define SDT_SITE_UNSEEN   0	/* sdt_init has not looked at it */
#define SDT_SITE_REFUSED  1	/* not the expected instruction: never written */
#define SDT_SITE_OFF      2	/* disabled: a NOP, a return, result 0, or (cond) the jump as it was */
#define SDT_SITE_TRAP     3	/* armed with the breakpoint */
#define SDT_SITE_BRANCH   4	/* armed with a branch to the probe's recorder (an is-enabled check: result 1) */
#define SDT_SITE_CHANGED  5	/* its bytes were not what the runtime last wrote: left alone for good */
#define SDT_SITE_FOLDED   6	/* another entry names the same instruction (identical code folding) */
#define SDT_TRAP          1	/* arming mode: a breakpoint, resolved by sdt_trap */
#define SDT_BRANCH        2	/* arming mode: a branch to the recorder, falling back to the breakpoint out of range */
#define SDT_DISCARD       0	/* ring policy: a full ring discards new events (counted) */
#define SDT_OVERWRITE     1	/* ring policy: a full ring overwrites its oldest packet (flight recorder) */
#define SDT_TRAP_NOT_OURS 0	/* sdt_trap: not a breakpoint of the runtime's */
#define SDT_TRAP_FIRED    1	/* a probe fired; resume at frame->pc */
#define SDT_TRAP_EMULATED 2	/* a change was in flight: the site's state (the old one until the change commits) was emulated; resume at frame->pc */
#define SDT_TRAP_RETRY    3	/* the breakpoint is gone (disarmed meanwhile): resume at frame->pc to run what is there */
#define SDT_PACKET_MAGIC  0xc1fc1fc1u	/* CTF 1.8's packet magic */
#define SDT_MAX_ARGS      6	/* arguments a probe has at most */
#define SDT_ENTRIES_MAGIC 0x5952544e45544453u	/* "SDTENTRY" in a little-endian word */
#define SDT_MAX_STRING    127	/* bytes of a string argument a recorder copies (then a NUL) */
#define SDT_MIN_PACKET    0x400	/* bytes of the smallest packet: a 6-argument event with six full strings fits */
#define SDT_ERR_SPEC      (-1)	/* the probe spec is empty, or not provider:module:function:name (at most four fields and 1024 bytes) */
#define SDT_ERR_INIT      (-2)	/* the runtime is not initialized (sdt_init has not run, or found the tables corrupt) */
#define SDT_ERR_MODE      (-3)	/* not an arming mode the runtime knows (SDT_TRAP or SDT_BRANCH) */
#define SDT_ERR_ARG       (-4)	/* an argument the runtime cannot use: a NULL pointer, or a size, count or sequence number out of range */

/* One probe site: an entry of the linker set set_sdt_sites_set (writable: the runtime keeps the site's state in it). */
struct sdt_site {
	sdt_s32 site;	/* the instruction, relative to this field (site - &site) */
	sdt_s32 probe;	/* its probe's descriptor, relative to this field */
	sdt_u8 form;	/* SDT_FORM_*: what the instruction is */
	sdt_u8 length;	/* its length in bytes after the partial link */
	sdt_u8 mode;	/* SDT_TABLE_RELOC or SDT_TABLE_OFFSET: how gen located it */
	sdt_u8 keep;	/* 0 from gen; sdt_init keeps what the encoders need of the original (x86: a jcc's condition) */
	sdt_u8 state;	/* SDT_SITE_*, kept by the runtime (0 until sdt_init looked at it) */
	sdt_u8 size;	/* the length sdt_init verified (a relaxed RISC-V call is shorter), kept by the runtime */
	sdt_u8 next;	/* 0 from gen; kept by the runtime while a change of the site is in flight: the state it goes to, then from the change's commit the state it left (sdt_patch.c) */
	sdt_u8 pad;	/* 0 */
	sdt_s32 target;	/* a goto site's out-of-line target (what arming jumps to), relative to this field; 0 for other forms */
};
_SDT_LAYOUT(sizeof(struct sdt_site) == 20);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_site, site) == 0);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_site, probe) == 4);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_site, form) == 8);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_site, length) == 9);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_site, mode) == 10);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_site, keep) == 11);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_site, state) == 12);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_site, size) == 13);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_site, next) == 14);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_site, pad) == 15);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_site, target) == 16);

/* One probe: an entry of the linker set set_sdt_probes_set (read-only). */
struct sdt_probe {
	sdt_s32 stub;	/* the probe's stub function, relative to this field */
	sdt_s32 provider;	/* NUL-terminated names, each relative to its field */
	sdt_s32 module;
	sdt_s32 function;
	sdt_s32 name;
	sdt_u16 nargs;	/* arguments, 0 to 6 */
	sdt_u16 id;	/* the probe's index in the object gen read */
	sdt_s32 argtype[6];	/* argument types (strings); 0 past nargs */
	sdt_s32 isenabled;	/* the is-enabled stub; 0 when no SDT_PROBE_ENABLED() asks */
	sdt_s32 xargtype[6];	/* translated types (the _XLATE forms); 0 where there is none */
	sdt_s32 recorder;	/* the recorder gen wrote for the probe (what branch arming calls) */
	sdt_u32 key;	/* the event id of its records: FNV-1a of the stub's symbol, never 0 */
};
_SDT_LAYOUT(sizeof(struct sdt_probe) == 84);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_probe, stub) == 0);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_probe, provider) == 4);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_probe, module) == 8);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_probe, function) == 12);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_probe, name) == 16);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_probe, nargs) == 20);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_probe, id) == 22);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_probe, argtype) == 24);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_probe, isenabled) == 48);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_probe, xargtype) == 52);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_probe, recorder) == 76);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_probe, key) == 80);

/* One CPU's recording state and ring of packets (sdt_cpu_attach fills it; one writer: its CPU; the consumer writes only read_seq). */
struct sdt_cpu {
	sdt_u64 self;	/* this structure's address */
	sdt_u64 cpu;	/* the CPU's number */
	sdt_u64 ring;	/* address of the ring: packets * packet_size bytes */
	sdt_u64 packets;	/* packets in the ring, a power of two */
	sdt_u64 packet_size;	/* bytes of one packet, a power of two */
	sdt_u64 policy;	/* SDT_DISCARD or SDT_OVERWRITE when the ring is full */
	sdt_u64 write_seq;	/* packets opened so far: the open packet is write_seq - 1 */
	sdt_u64 commit_seq;	/* packets closed so far (stored with release after the packet is complete) */
	sdt_u64 read_seq;	/* packets read or overwritten: the consumer or the writer claims the oldest unread by compare-and-swap (the consumer's only field) */
	sdt_u64 current;	/* address of the open packet; 0 when none is open */
	sdt_u64 offset;	/* bytes used in the open packet (the end of its last event); past packet_size when none is open */
	sdt_u64 events;	/* events in the open packet */
	sdt_u64 discarded;	/* events not recorded since attach: ring full (discard), nested, too big */
	sdt_u64 overwritten;	/* events lost with packets the writer overwrote unread (overwrite) */
	sdt_u64 nesting;	/* 1 while a recorder runs on this CPU: a firing inside it is discarded */
	sdt_u64 clock_last;	/* the clock at the last event */
};
_SDT_LAYOUT(sizeof(struct sdt_cpu) == 128);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_cpu, self) == 0);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_cpu, cpu) == 8);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_cpu, ring) == 16);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_cpu, packets) == 24);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_cpu, packet_size) == 32);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_cpu, policy) == 40);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_cpu, write_seq) == 48);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_cpu, commit_seq) == 56);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_cpu, read_seq) == 64);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_cpu, current) == 72);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_cpu, offset) == 80);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_cpu, events) == 88);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_cpu, discarded) == 96);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_cpu, overwritten) == 104);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_cpu, nesting) == 112);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_cpu, clock_last) == 120);

/* The header of every packet: CTF 1.8's packet header and context, as they stand. */
struct sdt_packet {
	sdt_u32 magic;	/* SDT_PACKET_MAGIC (0xC1FC1FC1) */
	sdt_u32 stream_id;	/* 0: one stream class */
	sdt_u64 timestamp_begin;	/* the clock when the packet opened */
	sdt_u64 timestamp_end;	/* the clock when it closed */
	sdt_u64 content_size;	/* bits of the packet holding data (header included) */
	sdt_u64 packet_size;	/* bits of the packet */
	sdt_u64 packet_seq_num;	/* the packet's number on its CPU, from 1 (a gap: packets overwritten unread) */
	sdt_u64 events_discarded;	/* the CPU's discarded count when the packet closed (a running count) */
	sdt_u32 cpu_id;	/* the CPU */
	sdt_u32 events;	/* events in the packet */
};
_SDT_LAYOUT(sizeof(struct sdt_packet) == 64);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_packet, magic) == 0);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_packet, stream_id) == 4);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_packet, timestamp_begin) == 8);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_packet, timestamp_end) == 16);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_packet, content_size) == 24);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_packet, packet_size) == 32);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_packet, packet_seq_num) == 40);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_packet, events_discarded) == 48);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_packet, cpu_id) == 56);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_packet, events) == 60);

/* The header of every event in a packet, 8-byte aligned; the arguments follow. CTF's event header (timestamp, id), then its event context (size, unreadable). */
struct sdt_event {
	sdt_u64 timestamp;	/* the clock when the probe fired */
	sdt_u32 id;	/* the probe's key (sdt_probe.key) */
	sdt_u16 size;	/* bytes of the event, header included (the next one starts at the next multiple of 8) */
	sdt_u16 unreadable;	/* bit k: string argument k was NULL or not in readable memory */
};
_SDT_LAYOUT(sizeof(struct sdt_event) == 16);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_event, timestamp) == 0);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_event, id) == 8);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_event, size) == 12);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_event, unreadable) == 14);

/* Memory a recorder may copy a string from. */
struct sdt_range {
	sdt_u64 start;
	sdt_u64 size;
};
_SDT_LAYOUT(sizeof(struct sdt_range) == 16);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_range, start) == 0);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_range, size) == 8);

/* What the kernel's breakpoint handler passes to sdt_trap, and copies back (pc, sp, ret, link). */
struct sdt_frame {
	sdt_u64 pc;	/* in: the pc the breakpoint left (x86: after the int3); out: where to resume */
	sdt_u64 sp;	/* the stack pointer (x86 pushes and pops the return address through it) */
	sdt_u64 flags;	/* x86: EFLAGS (a conditional tail site tests them); 0 elsewhere */
	sdt_u64 ret;	/* the return-value register (rax/eax, x0, a0): an is-enabled check sets it */
	sdt_u64 link;	/* the link register (AArch64 x30, RISC-V ra); unused on x86 */
	sdt_u64 arg[6];	/* the argument registers (x86-64 rdi..r9, x0..x5, a0..a5); i386 reads the stack */
};
_SDT_LAYOUT(sizeof(struct sdt_frame) == 88);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_frame, pc) == 0);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_frame, sp) == 8);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_frame, flags) == 16);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_frame, ret) == 24);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_frame, link) == 32);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_frame, arg) == 40);

/* What the kernel supplies, once, to sdt_init (copied). A NULL function is a no-op. */
struct sdt_hooks {
	void *(*text_open)(void *addr, unsigned long len);	/* a writable alias of [addr, addr+len) of text (or addr itself); NULL: text is writable */
	void (*text_close)(void *alias, unsigned long len);	/* done writing through that alias */
	void (*sync_cores)(void);	/* serialize instruction fetch on every CPU (IPI + sync_core; membarrier SYNC_CORE) */
	void (*icache_flush)(void *addr, unsigned long len);	/* make [addr, addr+len) of text coherent for instruction fetch (AArch64 dc/ic) */
	struct sdt_cpu *(*cpu_area)(void);	/* this CPU's struct sdt_cpu (given to sdt_cpu_attach), or NULL; from it until cpu_release the caller must stay on this CPU (Linux's get_cpu: preemption off) */
	void (*cpu_release)(struct sdt_cpu *cpu);	/* called once after every cpu_area, with what it returned, when the caller is done with the area (Linux's put_cpu: preemption back on); NULL: the caller cannot move meanwhile */
	sdt_u64 (*clock)(void);	/* the clock events are stamped with */
	void (*notify)(struct sdt_cpu *cpu);	/* a packet of this CPU was closed: a consumer may read it */
	void (*report)(const struct sdt_site *site, const char *line);	/* a line for the kernel's log; site: the site it is about, or NULL */
	const struct sdt_range *readable;	/* the memory strings may be copied from; with nreadable 0, all of it */
	const struct sdt_range *text;	/* the kernel's code: a site outside it is refused; with ntext 0, no check */
	sdt_u32 nreadable;	/* entries of readable */
	sdt_u32 ntext;	/* entries of text */
	sdt_u64 clock_hz;	/* ticks a second of clock (for trace metadata) */
};
#if __SIZEOF_POINTER__ == 8
_SDT_LAYOUT(sizeof(struct sdt_hooks) == 104);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_hooks, text_open) == 0);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_hooks, text_close) == 8);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_hooks, sync_cores) == 16);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_hooks, icache_flush) == 24);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_hooks, cpu_area) == 32);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_hooks, cpu_release) == 40);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_hooks, clock) == 48);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_hooks, notify) == 56);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_hooks, report) == 64);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_hooks, readable) == 72);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_hooks, text) == 80);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_hooks, nreadable) == 88);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_hooks, ntext) == 92);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_hooks, clock_hz) == 96);
#else
_SDT_LAYOUT(sizeof(struct sdt_hooks) == 64);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_hooks, text_open) == 0);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_hooks, text_close) == 4);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_hooks, sync_cores) == 8);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_hooks, icache_flush) == 12);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_hooks, cpu_area) == 16);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_hooks, cpu_release) == 20);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_hooks, clock) == 24);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_hooks, notify) == 28);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_hooks, report) == 32);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_hooks, readable) == 36);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_hooks, text) == 40);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_hooks, nreadable) == 44);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_hooks, ntext) == 48);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_hooks, clock_hz) == 56);
#endif

/* The runtime's entry points, in the section sdt_entries: what a host booting the image finds them by when its symbols are gone (strip keeps allocated sections). */
struct sdt_entries {
	sdt_u64 magic;	/* SDT_ENTRIES_MAGIC */
	int (*init)(const struct sdt_hooks *hooks);	/* sdt_init */
	int (*cpu_attach)(struct sdt_cpu *c, unsigned cpu, void *ring, unsigned long ring_bytes, unsigned long packet_size, int policy);	/* sdt_cpu_attach */
	int (*enable)(const char *spec, int mode);	/* sdt_enable */
	int (*disable)(const char *spec);	/* sdt_disable */
	int (*set_mode)(int mode);	/* sdt_set_mode */
	int (*trap)(struct sdt_frame *frame);	/* sdt_trap */
	void (*flush)(void);	/* sdt_flush */
	const char *protocol;	/* the patch protocol it was built with: "safe" or "naive" */
};
#if __SIZEOF_POINTER__ == 8
_SDT_LAYOUT(sizeof(struct sdt_entries) == 72);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_entries, magic) == 0);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_entries, init) == 8);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_entries, cpu_attach) == 16);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_entries, enable) == 24);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_entries, disable) == 32);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_entries, set_mode) == 40);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_entries, trap) == 48);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_entries, flush) == 56);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_entries, protocol) == 64);
#else
_SDT_LAYOUT(sizeof(struct sdt_entries) == 40);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_entries, magic) == 0);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_entries, init) == 8);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_entries, cpu_attach) == 12);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_entries, enable) == 16);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_entries, disable) == 20);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_entries, set_mode) == 24);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_entries, trap) == 28);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_entries, flush) == 32);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_entries, protocol) == 36);
#endif

/* END LAYOUTS */

/*
 * Every entry point returns a negative SDT_ERR_* for an argument it cannot
 * use (a NULL pointer among them) and does nothing else; sdt_consume says
 * so with NULL, sdt_crc32 leaves ``crc`` as it is.
 *
 * Boot: walk the linker sets, verify every site (the expected call or jump
 * to its own stub) and write its disabled form; a site that does not verify
 * is left as it is and reported. Sites are written before any other CPU runs
 * (one sync at the end). Returns the sites patched, SDT_ERR_INIT when the
 * tables are not tables or it already ran, SDT_ERR_ARG for hooks it cannot
 * use (NULL; ranges counted but NULL; cpu_release without cpu_area).
 */
int sdt_init(const struct sdt_hooks *hooks);

/*
 * Give CPU ``cpu`` its area and a ring of ``ring_bytes`` (a power of two,
 * at least two packets) cut into packets of ``packet_size`` (a power of two,
 * at least SDT_MIN_PACKET). ``policy``: SDT_DISCARD or SDT_OVERWRITE.
 */
int sdt_cpu_attach(struct sdt_cpu *c, unsigned cpu, void *ring, unsigned long ring_bytes,
		   unsigned long packet_size, int policy);

/*
 * Arm (disarm) every site of every probe ``spec`` matches: DTrace's
 * provider:module:function:name, fields filled from the right, empty
 * fields and globs (* ? [...]) match; an empty spec is SDT_ERR_SPEC, as
 * DTrace refuses an empty description (":::" matches every probe). Returns
 * the sites armed (matched), or a negative SDT_ERR_*. Callers are serialized
 * by a lock of the runtime's; other CPUs keep running (the patch protocol is
 * safe for them).
 */
int sdt_enable(const char *spec, int mode);
int sdt_disable(const char *spec);
/* Rearm every armed site with ``mode`` from now on. */
int sdt_set_mode(int mode);

/* The kernel's breakpoint handler: SDT_TRAP_NOT_OURS, or resume at frame->pc (see SDT_TRAP_*); SDT_ERR_ARG for NULL. */
int sdt_trap(struct sdt_frame *frame);

/* Close this CPU's open packet (if it holds events), so a consumer can read it. Call it on that CPU. */
void sdt_flush(void);

/*
 * Consumer: the oldest packet ``c`` closed that nobody has consumed (NULL:
 * none, or ``c`` or ``seq`` NULL), and its sequence number. Copy it
 * (packet_size bytes; content_size of them hold data), then call
 * sdt_consume_done: 1 when the copy is good, 0 when the writer overwrote the
 * packet meanwhile (SDT_OVERWRITE) and the copy must be dropped. Either way
 * the packet is released. SDT_ERR_ARG: ``c`` NULL, or ``seq`` not a packet
 * closed and not yet released.
 */
const struct sdt_packet *sdt_consume(struct sdt_cpu *c, sdt_u64 *seq);
int sdt_consume_done(struct sdt_cpu *c, sdt_u64 seq);

/*
 * The serial transport (sdt_serial.c; the frame format is in docs/runtime.md):
 * frames on one byte stream carry the packets and the kernel's own text.
 * ``put`` writes bytes to the line; the caller keeps the line to itself for
 * the whole call (one lock around every frame and drain on that line).
 */
typedef void (*sdt_serial_put)(const void *data, unsigned long len);
#define SDT_FRAME_HEADER 12	/* sync, type, 0, check, length; then the payload and a CRC-32 */
#define SDT_FRAME_PACKET 'P'	/* a packet as it stands in the ring (content_size bytes) */
#define SDT_FRAME_VERDICT 'V'	/* after each packet: u64 packet_seq_num, u32 cpu, u32 keep (0: it was overwritten) */
#define SDT_FRAME_TEXT 'T'	/* the kernel's text: replies to commands, log lines */
#define SDT_FRAME_INFO 'I'	/* u64 clock_hz, u32 bits of a word, u32 0: what a reader needs first */
/* Send every closed packet of ``c``, each followed by its verdict; returns the packets kept (SDT_ERR_ARG: NULL). */
int sdt_serial_drain(struct sdt_cpu *c, sdt_serial_put put);
/* The info frame: send it once after sdt_init, before the first packet. 0, or SDT_ERR_ARG for a NULL put. */
int sdt_serial_info(sdt_serial_put put);
/* One frame of ``type`` (a byte) carrying ``len`` bytes of ``data`` (less than 4 GiB). 0, or SDT_ERR_ARG. */
int sdt_serial_frame(sdt_serial_put put, unsigned type, const void *data, unsigned long len);
/* CRC-32 as zlib computes it, continued from ``crc`` (0 to start); NULL ``data``: ``crc``. */
sdt_u32 sdt_crc32(sdt_u32 crc, const void *data, unsigned long len);

/* SDT_PROBES_ENABLED() reads it: true while any site is armed. */
#ifdef __cplusplus
extern volatile bool sdt_probes_enabled;
#else
extern volatile _Bool sdt_probes_enabled;
#endif

/* The hooks sdt_init was given (the recorders read cpu_area and clock through them). */
extern struct sdt_hooks sdt_hooks;

/* ---- the writer the generated recorders inline ------------------------------------------ */

/*
 * Every use of a CPU's area is bracketed: sdt_hooks.cpu_area() (the kernel keeps the caller on this CPU from
 * then on, as Linux's get_cpu does), the event, then sdt_cpu_put() with what cpu_area returned, NULL or not
 * (the kernel's cpu_release: put_cpu). A recorder, sdt_flush and any caller of sdt_event_begin do so.
 */
static inline __attribute__((always_inline)) void sdt_cpu_put(struct sdt_cpu *c)
{
	if (sdt_hooks.cpu_release)
		sdt_hooks.cpu_release(c);
}

/* A record that does not fit the open packet: open the next one, or discard (NULL). */
void *sdt_event_slow(struct sdt_cpu *c, sdt_u32 key, sdt_u32 size);
/* Copy string argument ``k`` to ``to`` in event ``e``: at most SDT_MAX_STRING bytes and a NUL, never past
 * readable memory (a NULL or unreadable string sets bit k of e->unreadable and reads "<unreadable>"); the bytes
 * used. */
sdt_u32 sdt_event_string(struct sdt_event *e, char *to, unsigned k, const char *s);

/*
 * Reserve ``size`` bytes for an event (at the next 8-byte boundary) in this CPU's open
 * packet, stamped with ``key`` and the clock; NULL when it is discarded (no
 * area, a firing inside a recorder, a full ring, a size below the event's
 * header or past 65535). sdt_event_end() after the arguments are stored;
 * ``c`` is what sdt_hooks.cpu_area() returned, held until sdt_cpu_put().
 */
static inline __attribute__((always_inline)) struct sdt_event *sdt_event_begin(struct sdt_cpu *c, sdt_u32 key,
									     sdt_u32 size)
{
	struct sdt_event *e;
	sdt_u64 off;

	if (__builtin_expect(c == 0, 0))
		return 0;
	off = (c->offset + 7) & ~7ull;	/* events start 8-aligned; the last one's end is the content's */
	if (__builtin_expect((c->nesting | (off + size > c->packet_size) |
			      (size - sizeof(struct sdt_event) > 0xffff - sizeof(struct sdt_event))) != 0, 0))
		return (struct sdt_event *)sdt_event_slow(c, key, size);
	c->nesting = 1;
	__asm__ __volatile__("" ::: "memory");
	c->offset = off + size;
	c->events++;
	e = (struct sdt_event *)(sdt_word)(c->current + off);
	e->timestamp = c->clock_last = sdt_hooks.clock();
	e->id = key;	/* constants in a recorder: the compiler merges the three stores */
	e->size = (sdt_u16)size;
	e->unreadable = 0;
	return e;
}

/* An event with strings reserves room for the longest and gives back what they did not use (``end``). */
static inline __attribute__((always_inline)) void sdt_event_trim(struct sdt_cpu *c, struct sdt_event *e, char *end)
{
	sdt_u32 used = (sdt_u32)(end - (char *)e);

	c->offset -= e->size - used;
	e->size = (sdt_u16)used;
}

static inline __attribute__((always_inline)) void sdt_event_end(struct sdt_cpu *c)
{
	__asm__ __volatile__("" ::: "memory");
	c->nesting = 0;
}

#ifdef __cplusplus
}
#endif

#endif /* SDTGEN_SDT_RUNTIME_H */
