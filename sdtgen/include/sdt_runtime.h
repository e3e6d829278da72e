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

/*
 * The runtime's interface version: one more whenever a structure the kernel allocates or fills changes its
 * size or layout (struct sdt_cpu, sdt_agg, sdt_module, sdt_control_cpu, sdt_hooks, sdt_control_ops, sdt_frame,
 * sdt_range, sdt_control_fault) or an entry point changes what it takes. These structures grow: size them with
 * sizeof, never a number; a port that asserts a size keys the assertion on this version
 * (#if SDT_RUNTIME_VERSION == 1 ... #endif), so an update says "look here" instead of breaking the build
 * somewhere else. tests/runtime/test_runtime_version.py holds every size this version promises.
 */
#define SDT_RUNTIME_VERSION 2

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

/* Declared before the layouts, whose entry points (struct sdt_entries) take them. */
struct sdt_session;
struct sdt_session_config;

/* BEGIN LAYOUTS: rendered from sdtgen/layout.py by `python -m sdtgen.layout --write`; do not edit */
#define SDT_FORM_CALL            1	/* a call to the probe's stub */
#define SDT_FORM_TAIL            2	/* a tail jump to it */
#define SDT_FORM_COND            3	/* a conditional tail jump to it (x86 jcc) */
#define SDT_FORM_ISEN            4	/* a call to its is-enabled stub (SDT_PROBE_ENABLED) */
#define SDT_FORM_GOTO            5	/* the NOP of an asm goto (SDT_ASM_GOTO), armed by a jump to its out-of-line target */
#define SDT_TABLE_RELOC          0	/* the entry is a relocation the final link resolved */
#define SDT_TABLE_OFFSET         1	/* the entry is btext + an offset measured after the partial link */
#define SDT_SITE_UNSEEN          0	/* sdt_init has not looked at it */
#define SDT_SITE_REFUSED         1	/* not the expected instruction: never written */
#define SDT_SITE_OFF             2	/* disabled: a NOP, a return, result 0, or (cond) the jump as it was */
#define SDT_SITE_TRAP            3	/* armed with the breakpoint */
#define SDT_SITE_BRANCH          4	/* armed with a branch to the probe's recorder (an is-enabled check: result 1) */
#define SDT_SITE_CHANGED         5	/* its bytes were not what the runtime last wrote: left alone for good */
#define SDT_SITE_FOLDED          6	/* another entry names the same instruction (identical code folding) */
#define SDT_TRAP                 1	/* arming mode: a breakpoint, resolved by sdt_trap */
#define SDT_BRANCH               2	/* arming mode: a branch to the recorder, falling back to the breakpoint out of range */
#define SDT_DISCARD              0	/* ring policy: a full ring discards new events (counted) */
#define SDT_OVERWRITE            1	/* ring policy: a full ring overwrites its oldest packet (flight recorder) */
#define SDT_TRAP_NOT_OURS        0	/* sdt_trap: not a breakpoint of the runtime's */
#define SDT_TRAP_FIRED           1	/* a probe fired; resume at frame->pc */
#define SDT_TRAP_EMULATED        2	/* a change was in flight: the site's state (the old one until the change commits) was emulated; resume at frame->pc */
#define SDT_TRAP_RETRY           3	/* the breakpoint is gone (disarmed meanwhile): resume at frame->pc to run what is there */
#define SDT_PACKET_MAGIC         0xc1fc1fc1u	/* CTF 1.8's packet magic */
#define SDT_MAX_ARGS             6	/* arguments a probe has at most */
#define SDT_ENTRIES_MAGIC        0x5952544e45544453u	/* "SDTENTRY" in a little-endian word */
#define SDT_MAX_STRING           127	/* bytes of a string argument a recorder copies (then a NUL) */
#define SDT_MIN_PACKET           0x400	/* bytes of the smallest packet: a 6-argument event with six full strings fits */
#define SDT_ERR_SPEC             (-1)	/* the probe spec is empty, or not provider:module:function:name (at most four fields and 1024 bytes) */
#define SDT_ERR_INIT             (-2)	/* the runtime is not initialized (sdt_init has not run, or found the tables corrupt) */
#define SDT_ERR_MODE             (-3)	/* not an arming mode the runtime knows (SDT_TRAP or SDT_BRANCH) */
#define SDT_ERR_ARG              (-4)	/* an argument the runtime cannot use: a NULL pointer, or a size, count or sequence number out of range */
#define SDT_PROGRAM_MAGIC        0x50544453	/* "SDTP" in a little-endian word */
#define SDT_PROGRAM_VERSION      1	/* the program form this runtime runs */
#define SDT_PROG_MAX_BYTES       0x10000	/* bytes of a program at most */
#define SDT_PROG_MAX_INSNS       0x100	/* instructions of a program at most (so steps of one run) */
#define SDT_PROG_MAX_AGGS        16	/* aggregation descriptors of a program at most */
#define SDT_PROG_REGS            8	/* registers of the evaluator: the bound of an expression's depth */
#define SDT_OP_EXIT              0	/* stop: the firing is recorded when REC ran */
#define SDT_OP_REC               1	/* record the firing (when the program exits) */
#define SDT_OP_RECNZ             2	/* record the firing when a is not 0 */
#define SDT_OP_CATCH             3	/* an error from here on goes on at imm (a later instruction) instead of stopping */
#define SDT_OP_JA                4	/* go to imm (a later instruction) */
#define SDT_OP_JZ                5	/* go to imm when a is 0 */
#define SDT_OP_JNZ               6	/* go to imm when a is not 0 */
#define SDT_OP_LDI               7	/* dst = imm, sign-extended */
#define SDT_OP_LDC               8	/* dst = constant imm */
#define SDT_OP_LDARG             9	/* dst = argument a, extended as b says (SDT_EXT_*) */
#define SDT_OP_LDCPU             10	/* dst = the CPU's number */
#define SDT_OP_LDPROBE           11	/* dst = the firing probe's key */
#define SDT_OP_MOV               12	/* dst = a */
#define SDT_OP_NEG               13	/* dst = -a */
#define SDT_OP_NOT               14	/* dst = ~a */
#define SDT_OP_LNOT              15	/* dst = !a */
#define SDT_OP_STRCMP            16	/* dst = -1, 0 or 1: string argument a against the string at imm (unreadable: an error) */
#define SDT_OP_PIN               17	/* dst = the probe's key is among constants imm & 0xffff, count imm >> 16 (ascending) */
#define SDT_OP_AGG               18	/* update aggregation b: keys in dst.., the value in a */
#define SDT_OP_ADD               19	/* dst = a + b (mod 2^64, as every operation) */
#define SDT_OP_SUB               20	/* dst = a - b */
#define SDT_OP_MUL               21	/* dst = a * b */
#define SDT_OP_SDIV              22	/* dst = a / b, signed, toward zero (b 0: an error) */
#define SDT_OP_UDIV              23	/* dst = a / b, unsigned (b 0: an error) */
#define SDT_OP_SMOD              24	/* dst = a % b, signed (b 0: an error) */
#define SDT_OP_UMOD              25	/* dst = a % b, unsigned (b 0: an error) */
#define SDT_OP_AND               26	/* dst = a & b */
#define SDT_OP_OR                27	/* dst = a | b */
#define SDT_OP_XOR               28	/* dst = a ^ b */
#define SDT_OP_SHL               29	/* dst = a << (b & 63) */
#define SDT_OP_SHR               30	/* dst = a >> (b & 63), unsigned */
#define SDT_OP_SAR               31	/* dst = a >> (b & 63), signed */
#define SDT_OP_EQ                32	/* dst = a == b */
#define SDT_OP_NE                33	/* dst = a != b */
#define SDT_OP_SLT               34	/* dst = a < b, signed */
#define SDT_OP_SLE               35	/* dst = a <= b, signed */
#define SDT_OP_SGT               36	/* dst = a > b, signed */
#define SDT_OP_SGE               37	/* dst = a >= b, signed */
#define SDT_OP_ULT               38	/* dst = a < b, unsigned */
#define SDT_OP_ULE               39	/* dst = a <= b, unsigned */
#define SDT_OP_UGT               40	/* dst = a > b, unsigned */
#define SDT_OP_UGE               41	/* dst = a >= b, unsigned */
#define SDT_OP_LDTASK            42	/* dst = the current task's id (b SDT_TASK_ID) or its SDT_CONTEXT_* (b SDT_TASK_CONTEXT), from sdt_hooks.task (a kernel without it: an error) */
#define SDT_OP_TASKCMP           43	/* dst = -1, 0 or 1: the current task's name (none: "") against the string at imm (no sdt_hooks.task, a name it cannot read: an error) */
#define SDT_OP_SNAPSHOT          44	/* snapshot the session the program runs in when it exits (sdt_snapshot: D's snapshot(); a session without a snapshot area counts an error) */
#define SDT_OP_IMM               128	/* with a binary operation (SDT_OP_ADD to SDT_OP_UGE): its right operand is imm, not register b */
#define SDT_TASK_ID              0	/* LDTASK: the task's id */
#define SDT_TASK_CONTEXT         1	/* LDTASK: the task's SDT_CONTEXT_* */
#define SDT_EXT_WORD             0	/* LDARG: the register as it is (zero-extended to 64 bits) */
#define SDT_EXT_S8               1	/* LDARG: the low 8 bits, sign-extended */
#define SDT_EXT_S16              2	/* LDARG: the low 16 bits, sign-extended */
#define SDT_EXT_S32              3	/* LDARG: the low 32 bits, sign-extended */
#define SDT_EXT_U8               4	/* LDARG: the low 8 bits */
#define SDT_EXT_U16              5	/* LDARG: the low 16 bits */
#define SDT_EXT_U32              6	/* LDARG: the low 32 bits */
#define SDT_AGG_COUNT            1	/* count(): one value, the firings */
#define SDT_AGG_SUM              2	/* sum(x): one value */
#define SDT_AGG_MIN              3	/* min(x): one value, signed, from INT64_MAX */
#define SDT_AGG_MAX              4	/* max(x): one value, signed, from INT64_MIN */
#define SDT_AGG_AVG              5	/* avg(x): the count, then the sum */
#define SDT_AGG_QUANTIZE         6	/* quantize(x): DTrace's power-of-two buckets */
#define SDT_AGG_LQUANTIZE        7	/* lquantize(x, low, high, step): below low, levels steps, at or above the top */
#define SDT_AGG_MAX_KEYS         4	/* keys of an aggregation at most */
#define SDT_AGG_MAX_VALS         0x400	/* values of an entry at most */
#define SDT_AGG_QUANTIZE_BUCKETS 127	/* quantize's buckets: -2^62 .. -1, 0, 1 .. 2^62 */
#define SDT_AGG_ZERO_BUCKET      63	/* quantize's bucket of 0 */
#define SDT_AGG_MIN_BYTES        0x400	/* bytes of a CPU's aggregation memory at least */
#define SDT_ERR_PROG_FORM        (-16)	/* the program's header, size or tables are not a program's */
#define SDT_ERR_PROG_INSN        (-17)	/* an instruction the verifier refuses (operation, register, operand, a register read before any path wrote it) */
#define SDT_ERR_PROG_FLOW        (-18)	/* a jump that is not forward within the program, or a path that does not end in EXIT */
#define SDT_ERR_PROG_AGG         (-19)	/* an aggregation descriptor the verifier refuses */
#define SDT_ERR_PROG_ARGS        (-20)	/* a matched probe has fewer arguments than the program reads */
#define SDT_ERR_PROG_BUSY        (-21)	/* a matched probe runs another program: disable it first */
#define SDT_ERR_PROG_SLOT        (-22)	/* a matched probe has no program slot (tables from an older gen) */
#define SDT_FRAME_SYNC           0x44535aa5	/* a frame's first four bytes, A5 5A 53 44, as a little-endian word */
#define SDT_FRAME_PACKET         80	/* a frame carrying a packet as it stands in its ring (content_size bytes) */
#define SDT_FRAME_VERDICT        86	/* a frame after each packet: struct sdt_frame_verdict */
#define SDT_FRAME_TEXT           84	/* a frame carrying one line of the kernel's text: a reply, a log line */
#define SDT_FRAME_INFO           73	/* the frame a reader needs first: struct sdt_frame_info */
#define SDT_CONTROL_MAGIC        0x4c544353	/* "SCTL" in a little-endian word */
#define SDT_CONTROL_LINE         0x400	/* bytes of the longest command line the control core takes */
#define SDT_CONTROL_VERSION      5	/* the control protocol's version, the last word of the hello: raised whenever a command, a reply or a frame changes (2: replies name their command, lines start with SDT_CONTROL_ESCAPE; 3: sessions, `@NAME`; 4: snapshots, `snapshot NAME`; 5: `clock`) */
#define SDT_CONTROL_ESCAPE       30	/* the byte (ASCII RS) a host sends before every command line: a console shared with a shell gives the bytes from it to the end of its line to the control core (sdt_control_claims) */
#define SDT_ERR_USAGE            (-5)	/* the command's words are not what it takes */
#define SDT_ERR_UNKNOWN          (-6)	/* not a command the control core knows */
#define SDT_ERR_UNSUPPORTED      (-7)	/* the kernel gave the control core no means for it */
#define SDT_ERR_CPU              (-8)	/* no such CPU, or a command that needs more CPUs than there are */
#define SDT_ERR_LONG             (-9)	/* a command line longer than SDT_CONTROL_LINE */
#define SDT_ERR_STATE            (-10)	/* not in this state (the rings are attached already, none are) */
#define SDT_MODULE_TABLE_MAGIC   0x4d544453	/* "SDTM" in a little-endian word: a module's struct sdt_module_table */
#define SDT_MODULE_MAGIC         0x444f4d53	/* "SMOD" in a little-endian word: a struct sdt_module the runtime took */
#define SDT_MODULE_LOADED        1	/* the module's sites are the runtime's (sdt_module_load) */
#define SDT_MODULE_UNLOADED      2	/* sdt_module_unload returned: the runtime no longer knows the module */
#define SDT_MODULE_SPECS         16	/* enabled specs the runtime remembers for modules loaded later */
#define SDT_MODULE_SPEC_BYTES    0x100	/* bytes of a remembered spec at most (its NUL included) */
#define SDT_MODULE_GONE          8	/* text ranges of unloaded modules kept, so a breakpoint taken there before the unload is resumed, not called foreign */
#define SDT_ERR_MODULE_LOADED    (-23)	/* the module is loaded already: its struct sdt_module, its table or its text is in use (it meets the kernel's sites or a loaded module's table, text or sites) */
#define SDT_ERR_MODULE_UNLOADED  (-24)	/* the module was unloaded already */
#define SDT_ERR_MODULE_UNKNOWN   (-25)	/* not a module sdt_module_load took (never loaded) */
#define SDT_ERR_MODULE_TABLE     (-26)	/* the module's table is not one gen wrote (magic, bounds, an entry that is not valid, outside the module's text, or overlapping another): the module is refused whole */
#define SDT_FRAME_TABLES         65	/* a frame carrying a CPU's frozen aggregation half (`take`): its struct sdt_agg as it stood, then the half's arena, used[1 - want] bytes */
#define SDT_MODULE_FILE_MAGIC    0x4c55444f4d544453u	/* "SDTMODUL" in a little-endian word: a struct sdt_module_file, the module file a host gives a kernel's loader (not SDT_MODULE_MAGIC, which marks a struct sdt_module the runtime took, nor SDT_MODULE_TABLE_MAGIC, a module's own tables) */
#define SDT_MODULE_FILE_HEADER   0x1000	/* bytes of the module file's header (struct sdt_module_file, then zeros): where the module starts, in the file and in the loader's area */
#define SDT_MODULE_FILE_ALIGN    0x1000	/* RISC-V: QEMU's loader device puts the module file at the image's end rounded up to this */
#define SDT_MAX_CPUS             0x1000	/* CPUs a kernel may have: the most its hello may say, the CPU numbers a recording takes (0 to SDT_MAX_CPUS - 1), the most CPUs a host asks a target for */
#define SDT_LINUX_MAX_CPUS       64	/* the hosted platform's CPUs (threads with a CPU at once, sdt_linux.c), at most SDT_MAX_CPUS: its main refuses --cpus past it, and so does the process target before it starts one */
#define SDT_TASK_KEY             0	/* the key of a task event (no probe's: a probe's key is never 0); its arguments: the task id and context (words), its name (a string; unreadable: no name) */
#define SDT_CONTEXT_KERNEL       1	/* the kernel's own context: a kernel thread, its boot, its idle loop */
#define SDT_CONTEXT_TASK         2	/* on behalf of a task: a user task's system call or fault, or the user task itself */
#define SDT_CONTEXT_INTERRUPT    3	/* an interrupt (or exception) handler, whatever it interrupted */
#define SDT_CONTEXT_UNSAID       0xffffffffu	/* sdt_cpu.task_context when the writer says the task before the next event (its open packet said none yet, or sdt_task_switch): the writer's one test reads its top bit */
#define SDT_TASK_EVENT_MAX       160	/* bytes a task event takes at most (header, two words, a name of SDT_MAX_STRING bytes and its NUL, to 8 bytes): an event fits a packet with one before it */
#define SDT_MAX_SESSIONS         8	/* sessions at once, the default one included (a probe's sessions are a 32-bit mask) */
#define SDT_SESSION_NAME         16	/* bytes of a session's name field: 1..15 bytes of [A-Za-z0-9_-], then NULs */
#define SDT_SESSION_MAGIC        0x53455353	/* "SSES" in a little-endian word: an open struct sdt_session */
#define SDT_SESSION_OPEN         1	/* the session records */
#define SDT_SESSION_CLOSING      2	/* sdt_session_close is taking it apart */
#define SDT_SESSION_CLOSED       3	/* closed: its memory is the kernel's again */
#define SDT_REGISTRY_MAGIC       0x47455253	/* "SREG" in a little-endian word: struct sdt_registry */
#define SDT_REGISTRY_VERSION     2	/* the registry's layout (2: struct sdt_session says its snapshot area) */
#define SDT_SNAPSHOT_MAGIC       0x50414e53	/* "SNAP" in a little-endian word: a struct sdt_snapshot written */
#define SDT_SNAPSHOT_HEAD        128	/* bytes from a CPU's snapshot block to its first packet (struct sdt_snapshot, padded) */
#define SDT_SNAPSHOT_MAX         0x1000	/* the most packets a snapshot keeps of a CPU (snapshot_packets) */
#define SDT_ERR_BUSY             (-32)	/* a snapshot of the session is under way (on another CPU, or this one was stopped in it) or the session is closing: nothing was copied, the refusal counted in snapshot_busy */
#define SDT_ERR_MEMORY           (-27)	/* the memory given is short of what the session's configuration needs (or beyond the kernel's budget): nothing was set up */
#define SDT_ERR_FULL             (-28)	/* SDT_MAX_SESSIONS sessions are open already */
#define SDT_ERR_EXISTS           (-29)	/* a session of that name is open already */
#define SDT_LINUX_SESSION_MEMORY 0x4000000	/* the hosted platform's budget for each session a host opens (session_memory: reserved, not touched until used) */
#define SDT_ERR_NAME             (-30)	/* not a session name: 1..15 bytes of [A-Za-z0-9_-] */
#define SDT_ERR_SESSION          (-31)	/* no such session: not open (never opened, or closed), or the default session where only another can be meant */
#define SDT_CTL_AT               64	/* `@NAME COMMAND...`: the session-scoped commands (enable disable penable pdisable drain stats tables switch take flush) act on session NAME; without it, on the default session */
#define SDT_CTL_HELLO            "hello"	/* hello: `hello ARCH CPUS CLOCK HZ PATCHED REFUSED FOLDED PROTOCOL ENTRIES VERSION`, also said unasked at boot (ENTRIES: where sdt_runtime_entries is, which says how far a relocated image moved; VERSION: SDT_CONTROL_VERSION) */
#define SDT_CTL_RING             "ring"	/* ring BYTES PACKET POLICY MEMORY: attach every CPU's ring */
#define SDT_CTL_ENABLE           "enable"	/* enable trap|branch SPEC: `ok enable N`, N sites armed */
#define SDT_CTL_DISABLE          "disable"	/* disable SPEC: `ok disable N` */
#define SDT_CTL_MODE             "mode"	/* mode trap|branch: rearm what is armed, `ok mode N` */
#define SDT_CTL_RUN              "run"	/* run CPU|all ADDR NARGS ARG...: a `return` or `fault` line per CPU, then `ok run N` */
#define SDT_CTL_READ             "read"	/* read ADDR LEN: `bytes HEX` or `fault` */
#define SDT_CTL_DRAIN            "drain"	/* drain: every CPU's closed packets sent now */
#define SDT_CTL_FLUSH            "flush"	/* flush: every CPU's open packet closed on that CPU (then drained); `unflushed K EVENTS` per CPU whose packet stays open, `ok flush N`, N the CPUs flushed */
#define SDT_CTL_UNFLUSHED        "unflushed"	/* a CPU whose open packet `flush` could not close: `unflushed K EVENTS` */
#define SDT_CTL_STATS            "stats"	/* stats: `cpu K DISCARDED OVERWRITTEN` per CPU */
#define SDT_CTL_LIST             "list"	/* list [SPEC]: `probe KEY SITES ARMED PROVIDER:MODULE:FUNCTION:NAME` per probe */
#define SDT_CTL_TORTURE          "torture"	/* torture ADDR NARGS ARG... TOGGLES trap|branch|cycle|module SPEC: `torture PROTOCOL CPUS TOGGLES CALLS FAULTS TORN WRONG LEAKED WINDOWS` (WINDOWS: a calling CPU's disarmed windows checked, LEAKED: those in which it recorded) */
#define SDT_CTL_EXIT             "exit"	/* exit CODE: power off */
#define SDT_CTL_SHARED           "shared"	/* shared on|off: on, the host reads the rings in the machine's memory (packets stay off the line): `area K AREA RING` per CPU, physical addresses of its struct sdt_cpu and its ring */
#define SDT_CTL_AREA             "area"	/* a CPU's ring in memory: `area K AREA RING` */
#define SDT_CTL_OK               "ok"	/* the last line of a reply that succeeded: `ok COMMAND N`, COMMAND the word of the command it answers, N its count (never negative: a command that fails says `error`) */
#define SDT_CTL_ERROR            "error"	/* the last line of a reply that did not: `error CODE COMMAND: TEXT`, COMMAND the first word of the line it answers (at most 32 bytes; `?` for none) */
#define SDT_CTL_RETURN           "return"	/* a call returned: `return CPU VALUE` */
#define SDT_CTL_FAULT            "fault"	/* a call faulted: `fault CPU CAUSE PC ADDR` */
#define SDT_CTL_BYTES            "bytes"	/* memory read: `bytes HEX` */
#define SDT_CTL_CPU              "cpu"	/* a CPU's counts: `cpu K DISCARDED OVERWRITTEN` */
#define SDT_CTL_PROBE            "probe"	/* a probe: `probe KEY SITES ARMED SPEC` */
#define SDT_CTL_REPORT           "report"	/* a line of the runtime's log, said unasked at any time: `report TEXT` */
#define SDT_CTL_PANIC            "panic"	/* a CPU stopped on an exception outside any guarded call, said unasked: `panic CPU CAUSE PC ADDR [torn]` (torn: PC is inside a probe site) */
#define SDT_CTL_TRAP             "trap"	/* arming mode: the breakpoint */
#define SDT_CTL_BRANCH           "branch"	/* arming mode: a branch to the recorder */
#define SDT_CTL_CYCLE            "cycle"	/* torture: off, branch, trap, off... in turn */
#define SDT_CTL_MODULE           "module"	/* module load|unload: the kernel's loader loads its module again, or unloads it (`ok module N`: sites patched, or disarmed); torture's mode `module`: unload and load it in turn while SPEC stays enabled */
#define SDT_CTL_ALL              "all"	/* every CPU (run) */
#define SDT_CTL_ON               "on"	/* shared: the host reads the rings */
#define SDT_CTL_OFF              "off"	/* shared: packets go on the line again */
#define SDT_CTL_PROGRAM          "program"	/* program BYTES: reserve BYTES of the kernel's program memory, `ok program ADDR` */
#define SDT_CTL_PBYTES           "pbytes"	/* pbytes ADDR HEX: write bytes into reserved program memory no program uses yet */
#define SDT_CTL_PENABLE          "penable"	/* penable trap|branch ADDR BYTES SPEC: sdt_enable_program, `ok penable N` */
#define SDT_CTL_PDISABLE         "pdisable"	/* pdisable SPEC: sdt_disable_program, `ok pdisable N` */
#define SDT_CTL_TABLES           "tables"	/* tables: attach every CPU's aggregation tables (once); `table K AGG BYTES` per CPU */
#define SDT_CTL_TABLE            "table"	/* a CPU's tables: `table K AGG BYTES` (its struct sdt_agg, the bytes of its halves) */
#define SDT_CTL_SWITCH           "switch"	/* switch: sdt_agg_switch, `ok switch N` */
#define SDT_CTL_TAKE             "take"	/* take CPU: its frozen half in an SDT_FRAME_TABLES frame, `ok take USED` */
#define SDT_CTL_CLOCK            "clock"	/* clock: `ok clock TICKS`, the clock events are stamped with (sdt_hooks.clock) read now: a host reads its real-time clock before and after, and places the kernel's clock between */
#define SDT_CTL_SESSION          "session"	/* session open NAME BYTES PACKET POLICY [AGGBYTES [SNAPSHOT_PACKETS]] (memory from the kernel's session_memory): `ok session ID`; session close NAME (one the control core opened): `ok session N`, N the sites it disarmed; a line of `sessions` */
#define SDT_CTL_SESSIONS         "sessions"	/* sessions: `session ID NAME POLICY CPUS RING PACKET PACKETS DISCARDED OVERWRITTEN MISPLACED PROBES` per open session, the default one first (PACKETS opened, DISCARDED and OVERWRITTEN summed over its CPUs; PROBES it takes) */
#define SDT_CTL_SNAPSHOT         "snapshot"	/* snapshot NAME: sdt_snapshot of session NAME (a host's trigger), then `snapshot ID AREA BYTES PACKETS TAKEN LAPPED BUSY` (where its snapshot area is, each CPU's block's bytes, the closed packets a block keeps, the session's snapshot counters) and `ok snapshot KEPT`, the packets it kept */
#define SDT_CTL_OPEN             "open"	/* session open */
#define SDT_CTL_CLOSE            "close"	/* session close */
#define SDT_MODULE_FILE_NAME     "opt/sdtgen/module"	/* the fw_cfg file carrying the module file (-fw_cfg name=...) */
#define SDT_COMMANDS_FILE_NAME   "opt/sdtgen/commands"	/* the fw_cfg file of control lines a kernel runs at boot, one a line (a recording nobody commands: sdtgen record) */
#define SDT_PROCESS_CPUS         "--cpus"	/* --cpus N: the process's CPUs, N threads (the main thread CPU 0, the others started at once) */
#define SDT_PROCESS_BUFFER       "--buffer"	/* --buffer BYTES: each CPU's ring */
#define SDT_PROCESS_PACKET       "--packet"	/* --packet BYTES: a packet of the rings, a power of two */
#define SDT_PROCESS_OVERFLOW     "--overflow"	/* --overflow discard|overwrite: what a full ring does (SDT_DISCARD, SDT_OVERWRITE) */
#define SDT_PROCESS_DISCARD      "discard"	/* --overflow's value for SDT_DISCARD */
#define SDT_PROCESS_OVERWRITE    "overwrite"	/* --overflow's value for SDT_OVERWRITE */
#define SDT_PROCESS_CONTROL      "--control"	/* --control: the control protocol itself, command lines on standard input and the serial transport's frames on standard output, until standard input ends */
#define SDT_REPLY_OK             SDT_CTL_OK " wx"	/* every command: `ok COMMAND COUNT` */
#define SDT_FIELDS_OK            2	/* its fields */
#define SDT_FIELD_OK_COMMAND     0
#define SDT_FIELD_OK_COUNT       1
#define SDT_REPLY_ERROR          SDT_CTL_ERROR " dcr"	/* every command: `error CODE COMMAND: TEXT` */
#define SDT_FIELDS_ERROR         3	/* its fields */
#define SDT_FIELD_ERROR_CODE     0
#define SDT_FIELD_ERROR_COMMAND  1
#define SDT_FIELD_ERROR_TEXT     2
#define SDT_REPLY_REPORT         SDT_CTL_REPORT " r"	/* report: `report TEXT` */
#define SDT_FIELDS_REPORT        1	/* its fields */
#define SDT_FIELD_REPORT_TEXT    0
#define SDT_REPLY_PANIC          SDT_CTL_PANIC " xxxxf"	/* panic: `panic CPU CAUSE PC ADDR [torn]` */
#define SDT_FIELDS_PANIC         5	/* its fields */
#define SDT_FIELD_PANIC_CPU      0
#define SDT_FIELD_PANIC_CAUSE    1
#define SDT_FIELD_PANIC_PC       2
#define SDT_FIELD_PANIC_ADDR     3
#define SDT_FIELD_PANIC_TORN     4
#define SDT_FLAG_PANIC_TORN      "torn"
#define SDT_REPLY_HELLO          SDT_CTL_HELLO " wxwxxxxwxx"	/* hello: `hello ARCH CPUS CLOCK CLOCK_HZ PATCHED REFUSED FOLDED PROTOCOL ENTRIES VERSION` */
#define SDT_FIELDS_HELLO         10	/* its fields */
#define SDT_FIELD_HELLO_ARCH     0
#define SDT_FIELD_HELLO_CPUS     1
#define SDT_FIELD_HELLO_CLOCK    2
#define SDT_FIELD_HELLO_CLOCK_HZ 3
#define SDT_FIELD_HELLO_PATCHED  4
#define SDT_FIELD_HELLO_REFUSED  5
#define SDT_FIELD_HELLO_FOLDED   6
#define SDT_FIELD_HELLO_PROTOCOL 7
#define SDT_FIELD_HELLO_ENTRIES  8
#define SDT_FIELD_HELLO_VERSION  9
#define SDT_REPLY_RUN_RETURN     SDT_CTL_RETURN " xx"	/* run: `return CPU VALUE` */
#define SDT_FIELDS_RUN_RETURN    2	/* its fields */
#define SDT_FIELD_RUN_RETURN_CPU 0
#define SDT_FIELD_RUN_RETURN_VALUE 1
#define SDT_REPLY_RUN_FAULT      SDT_CTL_FAULT " xxxx"	/* run: `fault CPU CAUSE PC ADDR` */
#define SDT_FIELDS_RUN_FAULT     4	/* its fields */
#define SDT_FIELD_RUN_FAULT_CPU  0
#define SDT_FIELD_RUN_FAULT_CAUSE 1
#define SDT_FIELD_RUN_FAULT_PC   2
#define SDT_FIELD_RUN_FAULT_ADDR 3
#define SDT_REPLY_READ_BYTES     SDT_CTL_BYTES " w"	/* read: `bytes HEX` */
#define SDT_FIELDS_READ_BYTES    1	/* its fields */
#define SDT_FIELD_READ_BYTES_HEX 0
#define SDT_REPLY_READ_FAULT     SDT_CTL_FAULT " "	/* read: `fault` */
#define SDT_FIELDS_READ_FAULT    0	/* its fields */
#define SDT_REPLY_FLUSH_UNFLUSHED SDT_CTL_UNFLUSHED " xx"	/* flush: `unflushed CPU EVENTS` */
#define SDT_FIELDS_FLUSH_UNFLUSHED 2	/* its fields */
#define SDT_FIELD_FLUSH_UNFLUSHED_CPU 0
#define SDT_FIELD_FLUSH_UNFLUSHED_EVENTS 1
#define SDT_REPLY_STATS_CPU      SDT_CTL_CPU " xxx"	/* stats: `cpu CPU DISCARDED OVERWRITTEN` */
#define SDT_FIELDS_STATS_CPU     3	/* its fields */
#define SDT_FIELD_STATS_CPU_CPU  0
#define SDT_FIELD_STATS_CPU_DISCARDED 1
#define SDT_FIELD_STATS_CPU_OVERWRITTEN 2
#define SDT_REPLY_LIST_PROBE     SDT_CTL_PROBE " xxxr"	/* list: `probe KEY SITES ARMED SPEC` */
#define SDT_FIELDS_LIST_PROBE    4	/* its fields */
#define SDT_FIELD_LIST_PROBE_KEY 0
#define SDT_FIELD_LIST_PROBE_SITES 1
#define SDT_FIELD_LIST_PROBE_ARMED 2
#define SDT_FIELD_LIST_PROBE_SPEC 3
#define SDT_REPLY_TORTURE        SDT_CTL_TORTURE " wxxxxxxxx"	/* torture: `torture PROTOCOL CPUS TOGGLES CALLS FAULTS TORN WRONG LEAKED WINDOWS` */
#define SDT_FIELDS_TORTURE       9	/* its fields */
#define SDT_FIELD_TORTURE_PROTOCOL 0
#define SDT_FIELD_TORTURE_CPUS   1
#define SDT_FIELD_TORTURE_TOGGLES 2
#define SDT_FIELD_TORTURE_CALLS  3
#define SDT_FIELD_TORTURE_FAULTS 4
#define SDT_FIELD_TORTURE_TORN   5
#define SDT_FIELD_TORTURE_WRONG  6
#define SDT_FIELD_TORTURE_LEAKED 7
#define SDT_FIELD_TORTURE_WINDOWS 8
#define SDT_REPLY_SHARED_AREA    SDT_CTL_AREA " xxx"	/* shared: `area CPU AREA RING` */
#define SDT_FIELDS_SHARED_AREA   3	/* its fields */
#define SDT_FIELD_SHARED_AREA_CPU 0
#define SDT_FIELD_SHARED_AREA_AREA 1
#define SDT_FIELD_SHARED_AREA_RING 2
#define SDT_REPLY_TABLES_TABLE   SDT_CTL_TABLE " xxx"	/* tables: `table CPU AGG BYTES` */
#define SDT_FIELDS_TABLES_TABLE  3	/* its fields */
#define SDT_FIELD_TABLES_TABLE_CPU 0
#define SDT_FIELD_TABLES_TABLE_AGG 1
#define SDT_FIELD_TABLES_TABLE_BYTES 2
#define SDT_REPLY_SESSIONS_SESSION SDT_CTL_SESSION " xwxxxxxxxxx"	/* sessions: `session ID NAME POLICY CPUS RING PACKET PACKETS DISCARDED OVERWRITTEN MISPLACED PROBES` */
#define SDT_FIELDS_SESSIONS_SESSION 11	/* its fields */
#define SDT_FIELD_SESSIONS_SESSION_ID 0
#define SDT_FIELD_SESSIONS_SESSION_NAME 1
#define SDT_FIELD_SESSIONS_SESSION_POLICY 2
#define SDT_FIELD_SESSIONS_SESSION_CPUS 3
#define SDT_FIELD_SESSIONS_SESSION_RING 4
#define SDT_FIELD_SESSIONS_SESSION_PACKET 5
#define SDT_FIELD_SESSIONS_SESSION_PACKETS 6
#define SDT_FIELD_SESSIONS_SESSION_DISCARDED 7
#define SDT_FIELD_SESSIONS_SESSION_OVERWRITTEN 8
#define SDT_FIELD_SESSIONS_SESSION_MISPLACED 9
#define SDT_FIELD_SESSIONS_SESSION_PROBES 10
#define SDT_REPLY_SNAPSHOT       SDT_CTL_SNAPSHOT " xxxxxxx"	/* snapshot: `snapshot ID AREA BYTES PACKETS TAKEN LAPPED BUSY` */
#define SDT_FIELDS_SNAPSHOT      7	/* its fields */
#define SDT_FIELD_SNAPSHOT_ID    0
#define SDT_FIELD_SNAPSHOT_AREA  1
#define SDT_FIELD_SNAPSHOT_BYTES 2
#define SDT_FIELD_SNAPSHOT_PACKETS 3
#define SDT_FIELD_SNAPSHOT_TAKEN 4
#define SDT_FIELD_SNAPSHOT_LAPPED 5
#define SDT_FIELD_SNAPSHOT_BUSY  6

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
	sdt_s32 program;	/* the probe's struct sdt_slot, which gen defines beside its recorder (who takes its firings, each session's program), relative to this field */
};
_SDT_LAYOUT(sizeof(struct sdt_probe) == 88);
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
_SDT_LAYOUT(__builtin_offsetof(struct sdt_probe, program) == 84);

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
	sdt_u64 agg;	/* address of this CPU's struct sdt_agg (sdt_agg_attach, after sdt_cpu_attach); 0: probes with a program are not recorded here */
	sdt_u64 next_area;	/* the default session's next CPU area (sdt_cpu_attach links them; the registry holds the first); 0 at the end, and in the areas of other sessions */
	sdt_u64 session;	/* the id of the session this area records for (its packets' stream_id) */
	sdt_u64 visit;	/* odd while this CPU's recorder serves the sessions of a probe's slot (the slow path): closing a session or detaching a program waits for it to move */
	sdt_u64 task;	/* the task id the open packet's last task event said */
	sdt_u64 task_context;	/* its SDT_CONTEXT_*; SDT_CONTEXT_UNSAID when the packet said none yet (a packet opened, with the hook, or sdt_task_switch) */
};
_SDT_LAYOUT(sizeof(struct sdt_cpu) == 176);
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
_SDT_LAYOUT(__builtin_offsetof(struct sdt_cpu, agg) == 128);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_cpu, next_area) == 136);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_cpu, session) == 144);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_cpu, visit) == 152);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_cpu, task) == 160);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_cpu, task_context) == 168);

/* The header of every packet: CTF 1.8's packet header and context, as they stand. */
struct sdt_packet {
	sdt_u32 magic;	/* SDT_PACKET_MAGIC (0xC1FC1FC1) */
	sdt_u32 stream_id;	/* the session whose ring holds it (0: the default session) */
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
	sdt_u64 (*task)(sdt_u32 *context, const char **name);	/* the current task: its id (0: none, e.g. an interrupt or the kernel's own thread), its SDT_CONTEXT_* in *context and, when name is not NULL (the runtime asks only when it says the task anew), its name in *name (NULL: it has none); asked at each packet's first event and after sdt_task_switch, with the CPU held (cpu_area), a probe in it discarded; NULL: events carry no task */
};
#if __SIZEOF_POINTER__ == 8
_SDT_LAYOUT(sizeof(struct sdt_hooks) == 112);
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
_SDT_LAYOUT(__builtin_offsetof(struct sdt_hooks, task) == 104);
#else
_SDT_LAYOUT(sizeof(struct sdt_hooks) == 72);
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
_SDT_LAYOUT(__builtin_offsetof(struct sdt_hooks, task) == 64);
#endif

/* A program's header: what sdt_enable_program verifies and attaches to probes. After it: ninsns instructions, naggs aggregation descriptors, nconsts 64-bit constants, nprobes probe keys (u32, ascending), then the string table. */
struct sdt_program {
	sdt_u32 magic;	/* SDT_PROGRAM_MAGIC */
	sdt_u16 version;	/* SDT_PROGRAM_VERSION */
	sdt_u16 ninsns;	/* instructions (struct sdt_insn), at most SDT_PROG_MAX_INSNS */
	sdt_u32 size;	/* bytes of the whole program, header included: exactly what is given */
	sdt_u16 nconsts;	/* 64-bit constants (LDC, PIN sets) */
	sdt_u8 naggs;	/* aggregation descriptors (struct sdt_agg_desc), at most SDT_PROG_MAX_AGGS */
	sdt_u8 nargs;	/* arguments the program reads: 1 + the highest LDARG/STRCMP index (a probe with fewer is refused) */
	sdt_u32 strings;	/* bytes of the string table (NUL-terminated constants STRCMP compares with) */
	sdt_u16 nprobes;	/* the probes (by key) it attaches to among those a spec matches; 0: all of them */
	sdt_u16 flags;	/* 0 */
	sdt_u8 guard_arg;	/* the guard: a firing whose argument guard_arg fails it does nothing here, so the recorder turns it away before anything else (the first test of the predicate, which the program makes too). The test: y = (argument << guard_shift) ^ (guard_flip << 63); (y - guard_lo) <= guard_span, unsigned; a span of ~0 passes every firing */
	sdt_u8 guard_shift;	/* 64 - the bits the argument is compared in */
	sdt_u8 guard_flip;	/* 1: a signed comparison (bit 63 flipped) */
	sdt_u8 guard_pad[5];	/* 0 */
	sdt_u64 guard_lo;
	sdt_u64 guard_span;
};
_SDT_LAYOUT(sizeof(struct sdt_program) == 48);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_program, magic) == 0);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_program, version) == 4);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_program, ninsns) == 6);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_program, size) == 8);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_program, nconsts) == 12);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_program, naggs) == 14);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_program, nargs) == 15);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_program, strings) == 16);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_program, nprobes) == 20);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_program, flags) == 22);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_program, guard_arg) == 24);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_program, guard_shift) == 25);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_program, guard_flip) == 26);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_program, guard_pad) == 27);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_program, guard_lo) == 32);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_program, guard_span) == 40);

/* A probe's slot (writable; gen defines one, {0}, beside each recorder): who takes its firings (docs/sessions.md). The recorder reads route alone: 0, only the default session takes the probe, with no program (the fast path: one compare); else it makes the guard and serves every session in sessions, each through its own program. */
struct sdt_slot {
	sdt_word route;	/* 0: only session 0 takes this probe, with no program; else the recorder's slow path */
	sdt_u64 guard_lo;	/* session 0's program's guard_lo (while session 0 is the only taker) */
	sdt_u64 guard_span;	/* its guard_span; ~0 (no guard) whenever another session takes the probe, so a guard never hides an event from another session */
	sdt_u8 guard_arg;	/* its guard_arg */
	sdt_u8 guard_shift;	/* its guard_shift */
	sdt_u8 guard_flip;	/* its guard_flip */
	sdt_u8 pad;	/* 0 */
	sdt_u32 sessions;	/* the sessions that enable the probe, a bit each (bit 0: the default session): its sites are armed while this is not 0 */
	const struct sdt_program *program[8];	/* each session's program (SDT_MAX_SESSIONS of them); NULL: every firing is recorded in that session */
};
#if __SIZEOF_POINTER__ == 8
_SDT_LAYOUT(sizeof(struct sdt_slot) == 96);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_slot, route) == 0);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_slot, guard_lo) == 8);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_slot, guard_span) == 16);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_slot, guard_arg) == 24);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_slot, guard_shift) == 25);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_slot, guard_flip) == 26);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_slot, pad) == 27);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_slot, sessions) == 28);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_slot, program) == 32);
#else
_SDT_LAYOUT(sizeof(struct sdt_slot) == 64);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_slot, route) == 0);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_slot, guard_lo) == 8);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_slot, guard_span) == 16);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_slot, guard_arg) == 24);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_slot, guard_shift) == 25);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_slot, guard_flip) == 26);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_slot, pad) == 27);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_slot, sessions) == 28);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_slot, program) == 32);
#endif

/* One instruction: dst = a OP b (b: a register, or imm with SDT_OP_IMM). Jumps go forward only, so a program runs at most ninsns steps. */
struct sdt_insn {
	sdt_u8 op;	/* SDT_OP_*, with SDT_OP_IMM for a binary operation whose right operand is imm */
	sdt_u8 dst;	/* the register written (AGG: the first key register) */
	sdt_u8 a;	/* the left operand's register (LDARG: the argument; STRCMP: the string argument) */
	sdt_u8 b;	/* the right operand's register (LDARG: SDT_EXT_*; AGG: the aggregation) */
	sdt_s32 imm;	/* an immediate: a constant, a jump target, an offset into the constants or strings */
};
_SDT_LAYOUT(sizeof(struct sdt_insn) == 8);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_insn, op) == 0);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_insn, dst) == 1);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_insn, a) == 2);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_insn, b) == 3);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_insn, imm) == 4);

/* One aggregation a program's AGG instructions update. */
struct sdt_agg_desc {
	sdt_u32 id;	/* the consumer's aggregation id: entries of one id across programs have one shape */
	sdt_u8 func;	/* SDT_AGG_* */
	sdt_u8 nkeys;	/* 64-bit keys of an entry, at most SDT_AGG_MAX_KEYS */
	sdt_u16 nvals;	/* 64-bit values of an entry: what func takes (quantize SDT_AGG_QUANTIZE_BUCKETS, lquantize levels + 2) */
	sdt_u64 low;	/* lquantize: the lower bound (signed); 0 otherwise */
	sdt_u64 step;	/* lquantize: the width of a bucket; 0 otherwise */
	sdt_u32 levels;	/* lquantize: buckets between the bounds; 0 otherwise */
	sdt_u32 pad;	/* 0 */
};
_SDT_LAYOUT(sizeof(struct sdt_agg_desc) == 32);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_agg_desc, id) == 0);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_agg_desc, func) == 4);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_agg_desc, nkeys) == 5);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_agg_desc, nvals) == 6);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_agg_desc, low) == 8);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_agg_desc, step) == 16);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_agg_desc, levels) == 24);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_agg_desc, pad) == 28);

/* One CPU's aggregation tables and program state (sdt_agg_attach). Two halves, each an open-addressing index of u32 (an entry's offset in the arena + 1; 0: empty) and an arena of entries; the writer (its CPU) adds to half want, the consumer reads the other (sdt_agg_switch). */
struct sdt_agg {
	sdt_u64 self;	/* this structure's address */
	sdt_u64 cpu;	/* the CPU's number */
	sdt_u64 next;	/* the next attached CPU's struct sdt_agg (the runtime's list); 0 at the end */
	sdt_u64 seq;	/* odd while the CPU runs a program; the consumer and sdt_disable_program wait for it to move */
	sdt_u64 want;	/* the half the writer adds to (0 or 1); only sdt_agg_switch changes it */
	sdt_u64 nindex;	/* slots of each half's index, a power of two */
	sdt_u64 arena_size;	/* bytes of each half's arena */
	sdt_u64 index[2];	/* address of each half's index */
	sdt_u64 arena[2];	/* address of each half's arena */
	sdt_u64 used[2];	/* bytes of each half's arena holding entries (they lie one after the other) */
	sdt_u64 entries[2];	/* entries in each half */
	sdt_u64 dropped[2];	/* updates each half could not take: its index or arena full */
	sdt_u64 errors;	/* firings a program stopped: a division by zero, a string it could not read */
	sdt_u64 nested;	/* firings on this CPU while it ran a program: not evaluated, not recorded */
};
_SDT_LAYOUT(sizeof(struct sdt_agg) == 152);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_agg, self) == 0);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_agg, cpu) == 8);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_agg, next) == 16);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_agg, seq) == 24);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_agg, want) == 32);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_agg, nindex) == 40);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_agg, arena_size) == 48);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_agg, index) == 56);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_agg, arena) == 72);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_agg, used) == 88);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_agg, entries) == 104);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_agg, dropped) == 120);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_agg, errors) == 136);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_agg, nested) == 144);

/* An entry in an arena, 8-byte aligned; nkeys keys, then nvals values, follow (u64 each). */
struct sdt_agg_entry {
	sdt_u32 hash;	/* of id and keys */
	sdt_u32 id;	/* the aggregation (sdt_agg_desc.id) */
	sdt_u16 nkeys;
	sdt_u16 nvals;
	sdt_u32 pad;	/* 0 */
};
_SDT_LAYOUT(sizeof(struct sdt_agg_entry) == 16);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_agg_entry, hash) == 0);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_agg_entry, id) == 4);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_agg_entry, nkeys) == 8);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_agg_entry, nvals) == 10);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_agg_entry, pad) == 12);

/* A module's tables, as `sdtgen gen --module NAME` writes them into the section sdt_module_table of the module: what its loader gives sdt_module_load. */
struct sdt_module_table {
	sdt_u32 magic;	/* SDT_MODULE_TABLE_MAGIC */
	sdt_s32 sites;	/* the module's first site entry, relative to this field */
	sdt_s32 sites_end;	/* one past its last site entry, relative to this field */
	sdt_s32 probes;	/* its first probe descriptor, relative to this field */
	sdt_s32 probes_end;	/* one past its last probe descriptor, relative to this field */
	sdt_s32 name;	/* the module's name (NUL-terminated; a probe with an empty module field takes it), relative to this field */
};
_SDT_LAYOUT(sizeof(struct sdt_module_table) == 24);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_module_table, magic) == 0);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_module_table, sites) == 4);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_module_table, sites_end) == 8);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_module_table, probes) == 12);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_module_table, probes_end) == 16);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_module_table, name) == 20);

/* What the runtime keeps for one loaded module, in memory the kernel gives: sdt_module_load fills it, and the kernel leaves it alone until sdt_module_unload returned. */
struct sdt_module {
	sdt_u32 magic;	/* SDT_MODULE_MAGIC once sdt_module_load took it */
	sdt_u32 state;	/* SDT_MODULE_LOADED or SDT_MODULE_UNLOADED */
	struct sdt_site *sites;	/* the module's site entries (sorted by sdt_module_load) */
	struct sdt_site *sites_end;
	const struct sdt_probe *probes;	/* its probe descriptors */
	const struct sdt_probe *probes_end;
	const char *name;	/* its name, from its table */
	struct sdt_module *next;	/* the next loaded module (the runtime's list) */
	struct sdt_site *mark_lo;	/* the first of its sites marked for a run of the patch protocol */
	struct sdt_site *mark_hi;	/* one past the last */
	sdt_u64 text;	/* where its code is: its sites must lie in [text, text + text_size) */
	sdt_u64 text_size;
	sdt_u32 patched;	/* its sites sdt_module_load verified and disabled */
	sdt_u32 refused;	/* its sites it refused (reported one by one) */
};
#if __SIZEOF_POINTER__ == 8
_SDT_LAYOUT(sizeof(struct sdt_module) == 96);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_module, magic) == 0);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_module, state) == 4);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_module, sites) == 8);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_module, sites_end) == 16);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_module, probes) == 24);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_module, probes_end) == 32);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_module, name) == 40);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_module, next) == 48);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_module, mark_lo) == 56);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_module, mark_hi) == 64);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_module, text) == 72);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_module, text_size) == 80);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_module, patched) == 88);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_module, refused) == 92);
#else
_SDT_LAYOUT(sizeof(struct sdt_module) == 64);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_module, magic) == 0);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_module, state) == 4);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_module, sites) == 8);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_module, sites_end) == 12);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_module, probes) == 16);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_module, probes_end) == 20);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_module, name) == 24);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_module, next) == 28);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_module, mark_lo) == 32);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_module, mark_hi) == 36);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_module, text) == 40);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_module, text_size) == 48);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_module, patched) == 56);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_module, refused) == 60);
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
	int (*enable_program)(const char *spec, int mode, const void *program, unsigned long bytes);	/* sdt_enable_program */
	int (*disable_program)(const char *spec);	/* sdt_disable_program */
	int (*agg_attach)(struct sdt_cpu *c, struct sdt_agg *g, void *mem, unsigned long bytes);	/* sdt_agg_attach */
	int (*agg_switch)(void);	/* sdt_agg_switch */
	int (*module_load)(struct sdt_module *m, const struct sdt_module_table *table, const void *text, unsigned long text_size);	/* sdt_module_load */
	int (*module_unload)(struct sdt_module *m);	/* sdt_module_unload */
	int (*session_open)(struct sdt_session *s, const char *name, const struct sdt_session_config *cfg, void *memory, unsigned long bytes);	/* sdt_session_open */
	int (*session_close)(struct sdt_session *s);	/* sdt_session_close */
	int (*session_enable)(struct sdt_session *s, const char *spec, int mode);	/* sdt_session_enable */
	int (*session_disable)(struct sdt_session *s, const char *spec);	/* sdt_session_disable */
	int (*session_enable_program)(struct sdt_session *s, const char *spec, int mode, const void *program, unsigned long bytes);	/* sdt_session_enable_program */
	int (*session_disable_program)(struct sdt_session *s, const char *spec);	/* sdt_session_disable_program */
	int (*session_switch)(struct sdt_session *s);	/* sdt_session_switch */
	int (*session_flush)(struct sdt_session *s);	/* sdt_session_flush */
	unsigned long (*session_bytes)(const struct sdt_session_config *cfg);	/* sdt_session_bytes */
	int (*snapshot)(struct sdt_session *s);	/* sdt_snapshot */
};
#if __SIZEOF_POINTER__ == 8
_SDT_LAYOUT(sizeof(struct sdt_entries) == 200);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_entries, magic) == 0);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_entries, init) == 8);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_entries, cpu_attach) == 16);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_entries, enable) == 24);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_entries, disable) == 32);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_entries, set_mode) == 40);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_entries, trap) == 48);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_entries, flush) == 56);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_entries, protocol) == 64);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_entries, enable_program) == 72);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_entries, disable_program) == 80);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_entries, agg_attach) == 88);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_entries, agg_switch) == 96);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_entries, module_load) == 104);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_entries, module_unload) == 112);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_entries, session_open) == 120);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_entries, session_close) == 128);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_entries, session_enable) == 136);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_entries, session_disable) == 144);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_entries, session_enable_program) == 152);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_entries, session_disable_program) == 160);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_entries, session_switch) == 168);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_entries, session_flush) == 176);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_entries, session_bytes) == 184);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_entries, snapshot) == 192);
#else
_SDT_LAYOUT(sizeof(struct sdt_entries) == 104);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_entries, magic) == 0);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_entries, init) == 8);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_entries, cpu_attach) == 12);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_entries, enable) == 16);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_entries, disable) == 20);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_entries, set_mode) == 24);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_entries, trap) == 28);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_entries, flush) == 32);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_entries, protocol) == 36);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_entries, enable_program) == 40);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_entries, disable_program) == 44);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_entries, agg_attach) == 48);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_entries, agg_switch) == 52);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_entries, module_load) == 56);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_entries, module_unload) == 60);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_entries, session_open) == 64);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_entries, session_close) == 68);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_entries, session_enable) == 72);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_entries, session_disable) == 76);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_entries, session_enable_program) == 80);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_entries, session_disable_program) == 84);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_entries, session_switch) == 88);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_entries, session_flush) == 92);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_entries, session_bytes) == 96);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_entries, snapshot) == 100);
#endif

/* The header of every frame on a serial line; the payload and a CRC-32 (zlib's, of bytes 4..11 and the payload) follow. */
struct sdt_frame_header {
	sdt_u32 sync;	/* SDT_FRAME_SYNC: the bytes A5 5A 53 44 */
	sdt_u8 type;	/* SDT_FRAME_PACKET, _VERDICT, _TEXT, _INFO or _TABLES */
	sdt_u8 zero;	/* 0 */
	sdt_u16 check;	/* the low 16 bits of CRC-32 of type, zero and length: a reader believes a header only when it holds */
	sdt_u32 length;	/* bytes of payload */
};
_SDT_LAYOUT(sizeof(struct sdt_frame_header) == 12);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_frame_header, sync) == 0);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_frame_header, type) == 4);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_frame_header, zero) == 5);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_frame_header, check) == 6);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_frame_header, length) == 8);

/* The payload of a verdict frame, after every packet frame. */
struct sdt_frame_verdict {
	sdt_u64 seq;	/* the packet's packet_seq_num */
	sdt_u32 cpu;	/* its CPU */
	sdt_u32 keep;	/* 0: its writer reused the slot while it was sent (SDT_OVERWRITE), drop it */
};
_SDT_LAYOUT(sizeof(struct sdt_frame_verdict) == 16);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_frame_verdict, seq) == 0);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_frame_verdict, cpu) == 8);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_frame_verdict, keep) == 12);

/* The payload of the info frame, sent once before the first packet. */
struct sdt_frame_info {
	sdt_u64 clock_hz;	/* ticks a second of sdt_hooks.clock */
	sdt_u32 bits;	/* bits of a word (an integer argument) */
	sdt_u32 zero;	/* 0 */
};
_SDT_LAYOUT(sizeof(struct sdt_frame_info) == 16);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_frame_info, clock_hz) == 0);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_frame_info, bits) == 8);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_frame_info, zero) == 12);

/* What an image says of its control core (SDT_CONTROL_SERIAL, section sdt_control): the serial port a host drives it on. */
struct sdt_control_info {
	sdt_u32 magic;	/* SDT_CONTROL_MAGIC */
	sdt_u32 serial;	/* the UART the control core listens on: 0 the first */
	sdt_u64 zero;	/* 0 */
};
_SDT_LAYOUT(sizeof(struct sdt_control_info) == 16);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_control_info, magic) == 0);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_control_info, serial) == 4);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_control_info, zero) == 8);

/* The header of the module file a host gives a kernel's loader: the module follows at SDT_MODULE_FILE_HEADER, relocated for the loader's area + SDT_MODULE_FILE_HEADER (every address below is one there). */
struct sdt_module_file {
	sdt_u64 magic;	/* SDT_MODULE_FILE_MAGIC */
	sdt_u64 table;	/* the module's struct sdt_module_table */
	sdt_u64 text;	/* its code: what sdt_module_load is given */
	sdt_u64 text_size;
	sdt_u64 size;	/* bytes of the module after the header */
};
_SDT_LAYOUT(sizeof(struct sdt_module_file) == 40);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_module_file, magic) == 0);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_module_file, table) == 8);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_module_file, text) == 16);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_module_file, text_size) == 24);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_module_file, size) == 32);

/* What sdt_session_open carves from the memory it is given. */
struct sdt_session_config {
	sdt_u32 ncpus;	/* CPUs 0 .. ncpus-1 record in the session (at most SDT_MAX_CPUS); a firing on a CPU numbered higher is counted in misplaced */
	sdt_u32 policy;	/* SDT_DISCARD or SDT_OVERWRITE when a ring is full */
	sdt_u64 ring_bytes;	/* each CPU's ring (as sdt_cpu_attach takes it) */
	sdt_u64 packet_size;	/* bytes of a packet, a power of two, at least SDT_MIN_PACKET */
	sdt_u64 agg_bytes;	/* each CPU's aggregation memory (0: none; else at least SDT_AGG_MIN_BYTES): a probe with a program records nothing in a session without it */
	sdt_u64 snapshot_packets;	/* closed packets a snapshot keeps of each CPU, 0 .. SDT_SNAPSHOT_MAX (0: no snapshot area); each CPU's block holds one more, the open packet's complete events */
};
_SDT_LAYOUT(sizeof(struct sdt_session_config) == 40);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_session_config, ncpus) == 0);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_session_config, policy) == 4);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_session_config, ring_bytes) == 8);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_session_config, packet_size) == 16);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_session_config, agg_bytes) == 24);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_session_config, snapshot_packets) == 32);

/* One session, in memory the kernel gives sdt_session_open (the default session is the runtime's own): what the registry lists and a host reads after a crash. */
struct sdt_session {
	sdt_u32 magic;	/* SDT_SESSION_MAGIC while it is open */
	sdt_u32 id;	/* its number: 0 the default session, 1 .. SDT_MAX_SESSIONS-1 the others (stream_id) */
	sdt_u8 name[16];	/* 1..15 bytes of [A-Za-z0-9_-], NUL-padded */
	sdt_u32 state;	/* SDT_SESSION_OPEN or SDT_SESSION_CLOSING (SDT_SESSION_CLOSED once closed) */
	sdt_u32 ncpus;	/* entries of cpus (the default session: 0, its areas are the registry's list) */
	sdt_u32 policy;	/* SDT_DISCARD or SDT_OVERWRITE */
	sdt_u32 pad;	/* 0 */
	sdt_u64 cpus;	/* address of its struct sdt_cpu array, indexed by CPU number */
	sdt_u64 ring_bytes;	/* each CPU's ring */
	sdt_u64 packet_size;	/* bytes of a packet */
	sdt_u64 agg_bytes;	/* each CPU's aggregation memory after its struct sdt_agg (0: none) */
	sdt_u64 memory;	/* address of the memory the kernel gave */
	sdt_u64 bytes;	/* bytes of it */
	sdt_u64 used;	/* bytes of it the session uses */
	sdt_u64 misplaced;	/* firings on a CPU numbered ncpus or higher: not recorded */
	sdt_u64 snapshot;	/* address of the snapshot area (0: none): ncpus blocks of snapshot_bytes, CPU k's at snapshot + k * snapshot_bytes, each a struct sdt_snapshot then snapshot_packets + 1 packets */
	sdt_u64 snapshot_packets;	/* closed packets a snapshot keeps of each CPU (its open packet's complete events are one more) */
	sdt_u64 snapshot_bytes;	/* bytes of one CPU's block of the snapshot area */
	sdt_u64 snapshots;	/* snapshots taken: every sdt_snapshot call not refused (whatever it kept) */
	sdt_u64 snapshot_busy;	/* sdt_snapshot calls refused because a snapshot of the session was under way (or the session closing): SDT_ERR_BUSY */
	sdt_u64 snapshot_lapped;	/* packets a snapshot dropped because the writer reused their slots while they were copied, over all snapshots */
	sdt_u64 snapshot_lock;	/* 1 while a snapshot is taken or the session closes (taken by compare-and-swap, never waited for by sdt_snapshot) */
};
_SDT_LAYOUT(sizeof(struct sdt_session) == 160);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_session, magic) == 0);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_session, id) == 4);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_session, name) == 8);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_session, state) == 24);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_session, ncpus) == 28);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_session, policy) == 32);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_session, pad) == 36);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_session, cpus) == 40);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_session, ring_bytes) == 48);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_session, packet_size) == 56);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_session, agg_bytes) == 64);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_session, memory) == 72);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_session, bytes) == 80);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_session, used) == 88);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_session, misplaced) == 96);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_session, snapshot) == 104);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_session, snapshot_packets) == 112);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_session, snapshot_bytes) == 120);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_session, snapshots) == 128);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_session, snapshot_busy) == 136);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_session, snapshot_lapped) == 144);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_session, snapshot_lock) == 152);

/* The head of one CPU's block of a session's snapshot area (sdt_snapshot writes it; its packets follow at SDT_SNAPSHOT_HEAD bytes from its start, each packet_size bytes). */
struct sdt_snapshot {
	sdt_u32 magic;	/* SDT_SNAPSHOT_MAGIC once a snapshot was taken */
	sdt_u32 cpu;	/* the CPU whose packets these are */
	sdt_u64 seq;	/* odd while sdt_snapshot writes the block, even when it is whole (2 per snapshot) */
	sdt_u64 clock;	/* the clock when the CPU's packets were copied */
	sdt_u64 first_seq;	/* the number (from 0) of the first packet kept; the others follow it one by one */
	sdt_u64 packets;	/* packets kept: closed ones, then the open packet's complete events closed as one when open is 1 */
	sdt_u64 open;	/* 1 when the last packet kept is the open packet, closed in the copy */
	sdt_u64 cut;	/* events of the open packet left out: the one a recorder was writing (nesting) */
	sdt_u64 lapped;	/* packets dropped in this snapshot: the writer reused their slots while they were copied */
	sdt_u64 discarded;	/* the CPU's discarded count when its packets were copied */
	sdt_u64 overwritten;	/* the CPU's overwritten count then */
};
_SDT_LAYOUT(sizeof(struct sdt_snapshot) == 80);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_snapshot, magic) == 0);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_snapshot, cpu) == 4);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_snapshot, seq) == 8);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_snapshot, clock) == 16);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_snapshot, first_seq) == 24);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_snapshot, packets) == 32);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_snapshot, open) == 40);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_snapshot, cut) == 48);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_snapshot, lapped) == 56);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_snapshot, discarded) == 64);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_snapshot, overwritten) == 72);

/* The runtime's list of sessions, the variable sdt_session_table: what a host finds by symbol in a machine's memory, a kernel running or dead. */
struct sdt_registry {
	sdt_u32 magic;	/* SDT_REGISTRY_MAGIC once sdt_init ran */
	sdt_u32 version;	/* SDT_REGISTRY_VERSION */
	sdt_u32 max;	/* SDT_MAX_SESSIONS: entries of sessions */
	sdt_u32 pad;	/* 0 */
	sdt_u64 sessions[8];	/* address of each open struct sdt_session by id (0: free); 0 is the default session */
	sdt_u64 areas;	/* the default session's first CPU area (struct sdt_cpu, then next_area) */
};
_SDT_LAYOUT(sizeof(struct sdt_registry) == 88);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_registry, magic) == 0);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_registry, version) == 4);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_registry, max) == 8);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_registry, pad) == 12);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_registry, sessions) == 16);
_SDT_LAYOUT(__builtin_offsetof(struct sdt_registry, areas) == 80);

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
 * ``ring`` NULL with every size 0 and SDT_DISCARD gives the CPU only its identity (its number, for the sessions
 * it records in): the default session records nothing there, and counts nothing, until a ring is attached. The
 * area stays on the default session's list (the registry's) for good: give areas that live as long as the kernel.
 * SDT_ERR_CPU for a ``cpu`` of SDT_MAX_CPUS or more, SDT_ERR_ARG for the rest.
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

/*
 * Loadable modules (docs/runtime.md, "Modules"). ``table``: the module's struct sdt_module_table (the section
 * sdt_module_table of a module `sdtgen gen --module NAME` built), ``text``/``text_size``: its code, where its
 * sites must lie. Call sdt_module_load after the loader relocated the module and before any of its code runs.
 * It first takes the table whole or not at all: every entry must be a valid one, lie in ``text``, and overlap no
 * other (entries of one instruction, one probe and one form are folded), or the load returns
 * SDT_ERR_MODULE_TABLE, reporting the entry; ``m``, the table, the text or an entry that meets what the runtime
 * has (the kernel's sites, a loaded module's struct, table, text or sites) returns SDT_ERR_MODULE_LOADED. A
 * refused load writes nothing: not the module's code, not ``m``, not another table's entries (a table gen wrote
 * never holds such entries: one that does is damaged, or the loader gave the wrong text, and patching any of it
 * would write code on its word). Then it verifies each site's bytes (the expected call, or the disabled form
 * this runtime left there when the module was unloaded and kept), writes its disabled form (a site whose bytes
 * are not the expected ones is refused alone and reported, as at boot: the module's code may differ from what
 * gen saw), and arms what the specs enabled so far match. ``m`` is the runtime's until sdt_module_unload
 * returned; it is all the runtime keeps for the module. Returns the sites patched; SDT_ERR_MODULE_LOADED,
 * SDT_ERR_MODULE_TABLE, SDT_ERR_ARG, SDT_ERR_INIT (before sdt_init).
 *
 * sdt_module_unload disarms the module's sites (the patch protocol: other CPUs may run them meanwhile), takes
 * its probes away from every list and spec, and returns once no CPU is inside sdt_trap for them: the kernel may
 * then free the module (once no CPU runs its code: its sites and recorders are its code). It leaves each site in
 * its disabled form. Returns the sites it disarmed; SDT_ERR_MODULE_UNLOADED (unloaded already),
 * SDT_ERR_MODULE_UNKNOWN (never loaded). Neither is called from a probe's context (a recorder, sdt_trap).
 */
int sdt_module_load(struct sdt_module *m, const struct sdt_module_table *table, const void *text,
		    unsigned long text_size);
int sdt_module_unload(struct sdt_module *m);

/*
 * The relocation-time alternative, for a kernel whose own loader relocates modules built without `gen --module`
 * (FreeBSD's 2015 relocator, illumos's krtld): for each call or jump relocation against a probe stub symbol
 * (__dtrace_sdt_*, or __dtrace_isenabled_* with ``isenabled``), once applied and before the module runs, the
 * loader passes where the instruction starts (x86: the relocation's offset less 1, the call's opcode byte;
 * AArch64: the offset; RISC-V: the offset of R_RISCV_CALL's auipc), its ``length`` (x86 5, AArch64 4, RISC-V
 * 8) and the address it resolved the stub to. The instruction is verified and disabled: the probe costs nothing,
 * but no table names it, so it cannot be armed. Returns the bytes written over; SDT_ERR_ARG when it is not the
 * expected call or jump (left alone, reported); SDT_ERR_INIT before sdt_init.
 */
int sdt_reloc_nop(void *site, unsigned length, sdt_word stub, int isenabled);

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
/* Frames: struct sdt_frame_header, the payload, a CRC-32; the SDT_FRAME_* types are in the layouts above. */
/* Send every closed packet of ``c``, each followed by its verdict; returns the packets kept (SDT_ERR_ARG: NULL). */
int sdt_serial_drain(struct sdt_cpu *c, sdt_serial_put put);
/* The info frame: send it once after sdt_init, before the first packet. 0, or SDT_ERR_ARG for a NULL put. */
int sdt_serial_info(sdt_serial_put put);
/* One frame of ``type`` (a byte) carrying ``len`` bytes of ``data`` (less than 4 GiB). 0, or SDT_ERR_ARG. */
int sdt_serial_frame(sdt_serial_put put, unsigned type, const void *data, unsigned long len);
/* One frame whose payload is ``head`` (``head_len`` bytes) then ``body`` (``body_len``), as one payload of their
 * sizes together: a structure and the memory it describes, with no copy. 0, or SDT_ERR_ARG. */
int sdt_serial_frame_parts(sdt_serial_put put, unsigned type, const void *head, unsigned long head_len,
			   const void *body, unsigned long body_len);
/* CRC-32 as zlib computes it, continued from ``crc`` (0 to start); NULL ``data``: ``crc``. */
sdt_u32 sdt_crc32(sdt_u32 crc, const void *data, unsigned long len);

/*
 * The control core (sdt_control.c): the commands a host sends to arm, run, trace and torture a
 * kernel, over a channel the kernel gives (a UART, or a line its own shell, debugfs file or
 * syscall passes). docs/control.md lists the commands; their words and replies are the
 * SDT_CTL_* constants above. Every command is answered by reply lines, the last one starting
 * with "ok" or "error CODE" (an SDT_ERR_*); a malformed command is refused that way, never a fault.
 */
/* One reply line (no newline): over a serial line, a text frame (sdt_serial_frame) under the line's lock. */
typedef void (*sdt_control_reply)(const char *text, unsigned long len);

/* What the control core gets from a call it ran: its value, or the fault that ended it. */
struct sdt_control_fault {
	sdt_u64 cause;	/* the kernel's exception number (mcause, ESR, vector) */
	sdt_u64 pc;	/* where it faulted */
	sdt_u64 addr;	/* the address it touched, or 0 */
};

/*
 * What a kernel gives the control core, once (sdt_control_init copies it). A NULL function means the
 * kernel does not have it: the commands that need it are refused with SDT_ERR_UNSUPPORTED.
 */
struct sdt_control_ops {
	unsigned ncpus;	/* CPUs 0 .. ncpus-1, each with the area this_cpu() and cpu_area() agree on */
	const char *clock_name;	/* what sdt_hooks.clock reads, an identifier (tsc, cntvct_el0, time); NULL: "clock" */
	/* This CPU's number (the CPU running the command). */
	unsigned (*this_cpu)(void);
	/* CPU k's struct sdt_cpu, or NULL (stats, drain). */
	struct sdt_cpu *(*area)(unsigned k);
	/* Run fn(arg) on this CPU, catching a fault in it: 0 when it returned, else 1 with *fault filled.
	 * NULL: calls run unguarded (a fault is the kernel's, as any other). */
	int (*guarded)(void (*fn)(void *arg), void *arg, struct sdt_control_fault *fault);
	/* Start fn(arg) on CPU k (never this one) and return at once; 0 when it will run there. NULL: `run` and
	 * `torture` use this CPU only. */
	int (*start)(unsigned k, void (*fn)(void *arg), void *arg);
	/* Wait until ready(arg) is true while other CPUs work: sleep until an interrupt wakes this CPU (start's fn
	 * returning should wake the CPU that started it), checking ready with interrupts off so no wake-up is
	 * missed. NULL: spin. */
	void (*wait_until)(int (*ready)(void *arg), void *arg);
	/* Send every CPU's closed packets now (sdt_serial_drain of each, under the line's lock). NULL: the
	 * kernel's own consumer reads them. */
	void (*drain)(void);
	/* Give every CPU a ring of ``bytes`` in ``packet``-byte packets with ``policy`` (`ring`), ``memory`` the RAM
	 * the host gave the machine (0: not said): an SDT_ERR_* or 0. NULL: the kernel attached its own rings. */
	int (*rings)(unsigned long bytes, unsigned long packet, int policy, sdt_u64 memory);
	/* Power the machine off with ``code`` (`exit`). */
	void (*power_off)(int code);
	/* The physical address of kernel memory ``p`` (`shared`: a host that maps the machine's RAM reads the rings
	 * there). NULL: `shared` refused, packets go on the line. */
	sdt_u64 (*phys)(const void *p);
	/* Unload (0) the module the kernel's loader holds, or load it again (1): what sdt_module_unload or
	 * sdt_module_load returned (`module`, torture's mode `module`). Its code stays where it is meanwhile (other
	 * CPUs may be running it). NULL: the kernel loads no modules. */
	int (*module)(int load);
	/* Memory for programs (`program`, docs/aggregations.md): *bytes of it (set), 8-byte aligned, the kernel's for
	 * as long as the core runs. NULL: no program can be loaded. */
	void *(*program_memory)(unsigned long *bytes);
	/* CPU k's aggregation memory (`tables`): *bytes of it (set), 8-byte aligned, at least sizeof(struct sdt_agg)
	 * rounded to 8 and SDT_AGG_MIN_BYTES more; the same each call. NULL: nothing aggregates. */
	void *(*agg_memory)(unsigned k, unsigned long *bytes);
	/* Send one frame of ``type`` on the control line (sdt_serial_frame_parts under the line's lock): `take`'s
	 * SDT_FRAME_TABLES. NULL: `take` refused. */
	void (*frame)(unsigned type, const void *head, unsigned long head_len, const void *body, unsigned long body_len);
	/* Memory for the session of id ``id`` (`session open`, docs/sessions.md): *bytes of it (set: the kernel's
	 * budget for a session of that id), 8-byte aligned, the session's until `session close`; the same each call.
	 * A session asking more than *bytes is refused with SDT_ERR_MEMORY. NULL: a host opens no session. */
	void *(*session_memory)(unsigned id, unsigned long *bytes);
	/* Send area ``c``'s closed packets now (sdt_serial_drain of it, under the line's lock): `@NAME drain` of a
	 * session the host opened, whose areas are the runtime's, not the kernel's. NULL: `@NAME drain` refused, and
	 * a host reads a session's packets in the machine's memory. */
	void (*drain_area)(struct sdt_cpu *c);
};

/* Storage the control core keeps for one CPU (the kernel gives ncpus of them: no allocation). */
struct sdt_control_cpu {
	sdt_u64 opaque[24];
};

/*
 * Start the control core with ``ops`` and ``cpus`` (ops->ncpus entries); after sdt_init. Returns 0, or
 * SDT_ERR_ARG / SDT_ERR_INIT, or SDT_ERR_CPU for more than SDT_MAX_CPUS CPUs. A kernel that never calls it pays
 * nothing for having linked it.
 */
int sdt_control_init(const struct sdt_control_ops *ops, struct sdt_control_cpu *cpus);
/* Carry out one command (a NUL-terminated line, no newline), replying through ``reply``; returns 0 or the
 * SDT_ERR_* its last reply line carries. Callers on several channels are serialized. */
int sdt_control_line(const char *line, sdt_control_reply reply);
/* Feed bytes as they arrive (a UART's): each complete line is carried out (CR or LF ends one). An
 * SDT_CONTROL_ESCAPE, which a host sends before every command, starts a new line: a partial one is dropped. A
 * line longer than SDT_CONTROL_LINE (or holding a NUL) is refused (SDT_ERR_LONG). */
void sdt_control_input(const char *data, unsigned long len, sdt_control_reply reply);
/* A line being assembled: what sdt_control_input keeps for the kernel's first channel, and what a kernel keeps
 * for each other channel it feeds with sdt_control_input_on (zeroed before its first byte). */
struct sdt_control_input {
	char line[SDT_CONTROL_LINE + 1];
	unsigned long len;
	int overlong;
};
/* sdt_control_input for another channel (a second UART, a shell command's file): its own line, the same rules. */
void sdt_control_input_on(struct sdt_control_input *in, const char *data, unsigned long len, sdt_control_reply reply);
/* A console shared with a shell (docs/control.md): nonzero when byte ``c`` belongs to the control core (from an
 * SDT_CONTROL_ESCAPE to the end of its line), which the line discipline then gives sdt_control_input, not its
 * shell. Call it with every byte the console receives, in order. */
int sdt_control_claims(char c);
/* Say hello unasked: what a host that booted the kernel waits for before its first command. */
void sdt_control_announce(sdt_control_reply reply);
/* Nonzero while the control core asks the line to stay quiet (a torture run): a notify hook that sends
 * packets on the control line leaves them in the rings meanwhile. */
int sdt_control_quiet(void);
/* Whether ``pc`` lies inside a probe site's bytes (a fault there: an instruction seen half written). */
int sdt_site_contains(sdt_word pc);

/*
 * The serial port a host drives the control core on (`sdtgen qemu` wires it to its pipe): a kernel whose
 * control channel is not its first UART says so once, at file scope: SDT_CONTROL_SERIAL(1);
 */
#define SDT_CONTROL_SERIAL(port) \
	__attribute__((used, section("sdt_control"))) const struct sdt_control_info sdt_control_info = { \
		SDT_CONTROL_MAGIC, (port), 0}

/*
 * Programs: predicates and aggregations evaluated where the probe fires (docs/aggregations.md).
 *
 * Give every CPU its program state and aggregation memory once, after sdt_cpu_attach: ``bytes`` (at least
 * SDT_AGG_MIN_BYTES, 8-byte aligned) are cut into two halves of tables. A CPU without one records nothing of
 * a probe that has a program (counted in its discarded).
 */
int sdt_agg_attach(struct sdt_cpu *c, struct sdt_agg *g, void *mem, unsigned long bytes);
/*
 * Verify ``program`` (``bytes`` long: the whole of it) and attach it to every probe ``spec`` matches (those
 * among its probe keys, when it lists some), then arm their sites with ``mode``: their firings run it, and
 * are recorded only when it says so. Returns the sites armed, or a negative SDT_ERR_* (SDT_ERR_PROG_*: the
 * program, or a matched probe, refused; nothing changed). The kernel's memory ``program`` must stay as it is
 * until every probe it is attached to had sdt_disable_program.
 */
int sdt_enable_program(const char *spec, int mode, const void *program, unsigned long bytes);
/*
 * Disarm every site of every probe ``spec`` matches and detach their programs. When it returns, no CPU is
 * still reading a program it detached: its memory is the kernel's again (if no other probe keeps it).
 */
int sdt_disable_program(const char *spec);
/* 0, or the SDT_ERR_PROG_* the verifier refuses ``program`` with (sdt_enable_program runs it first). */
int sdt_program_verify(const void *program, unsigned long bytes);
/*
 * The consumer: switch every CPU to its other half of tables. Until the next switch the half each CPU
 * added to so far is frozen (struct sdt_agg's index, arena, used, entries and dropped of half 1 - want):
 * read it, then switch again (the half a CPU switches to is cleared first). Returns the CPUs switched.
 * Thread context only (it calls sync_cores and waits for CPUs inside a program to leave it).
 */
int sdt_agg_switch(void);
/* The recorders call it for a probe whose slot holds a program (and whose guard passed): 1 when the firing is to
 * be recorded. */
int sdt_program_fire(struct sdt_cpu *c, const struct sdt_program *p, sdt_u32 key, sdt_word a0, sdt_word a1,
		     sdt_word a2, sdt_word a3, sdt_word a4, sdt_word a5);

/*
 * Sessions: several tracers at once (docs/sessions.md). The default session (id 0) is what the functions above
 * act on: the areas the kernel attached, the default aggregation tables. A session of the kernel's own (ids 1 ..
 * SDT_MAX_SESSIONS-1) has its own enabled probes and programs, per-CPU rings (geometry and policy), aggregation
 * tables and counters, all carved from ``memory`` (``bytes`` of it, 8-byte aligned) as ``cfg`` says; ``s`` is the
 * kernel's storage for it. A site is armed while any session enables one of its probes; a firing is recorded once
 * in each session that takes it, after that session's own program. Returns the session's id, or SDT_ERR_NAME (a
 * name is 1..15 bytes of [A-Za-z0-9_-]; "default" is the default session's), SDT_ERR_EXISTS (the name, or ``s``,
 * is open), SDT_ERR_FULL, SDT_ERR_MEMORY (short of sdt_session_bytes(cfg)), SDT_ERR_ARG (a geometry
 * sdt_cpu_attach or sdt_agg_attach refuses, no CPUs), SDT_ERR_INIT: nothing is set up then. A CPU finds its area
 * of a session by its number (the cpu of the area hooks.cpu_area returns).
 */
int sdt_session_open(struct sdt_session *s, const char *name, const struct sdt_session_config *cfg, void *memory,
		     unsigned long bytes);
/* The bytes of memory sdt_session_open takes for ``cfg`` (0: a configuration it refuses, or one past memory). */
unsigned long sdt_session_bytes(const struct sdt_session_config *cfg);
/*
 * Disable everything session ``s`` enabled (the sites another session keeps stay armed), take it off the
 * registry, and return once no CPU is inside a recorder or a program for it: its memory is the kernel's again.
 * Returns the sites it let go, or SDT_ERR_SESSION (not an open session of the kernel's: the default session
 * cannot be closed). Thread context; not from a probe's context.
 */
int sdt_session_close(struct sdt_session *s);
/* The open session named ``name`` ("default": the default session), or NULL. */
struct sdt_session *sdt_session_find(const char *name);
/*
 * What sdt_enable, sdt_disable, sdt_enable_program, sdt_disable_program, sdt_agg_switch and sdt_flush do, for
 * session ``s`` (those are these on the default session). SDT_ERR_SESSION when ``s`` is not open; a session other
 * than the default takes only probes with a slot (SDT_ERR_PROG_SLOT otherwise: tables from an older gen).
 */
int sdt_session_enable(struct sdt_session *s, const char *spec, int mode);
int sdt_session_disable(struct sdt_session *s, const char *spec);
int sdt_session_enable_program(struct sdt_session *s, const char *spec, int mode, const void *program,
			       unsigned long bytes);
int sdt_session_disable_program(struct sdt_session *s, const char *spec);
int sdt_session_switch(struct sdt_session *s);
int sdt_session_flush(struct sdt_session *s);
/*
 * Snapshot session ``s`` (opened with snapshot_packets N): for each of its CPUs, the last N closed packets of its
 * ring and its open packet's complete events (closed as a packet in the copy) copied into that CPU's block of the
 * session's snapshot area, oldest first; a packet the writer reused while it was copied is dropped and counted
 * (struct sdt_snapshot's lapped, the session's snapshot_lapped). Recording goes on in the rings meanwhile. For a
 * panic or assert path, on any CPU, with the others running or stopped: it takes no lock but the session's own
 * snapshot word, by compare-and-swap, never waiting. Returns the packets kept over all CPUs; SDT_ERR_BUSY (counted
 * in snapshot_busy) when a snapshot of it is under way or it is closing; SDT_ERR_ARG when it has no snapshot area
 * (snapshot_packets 0, the default session); SDT_ERR_SESSION when ``s`` is not an open session.
 */
int sdt_snapshot(struct sdt_session *s);
/* The registry a host finds by symbol (struct sdt_registry): every open session, and the default session's areas. */
extern struct sdt_registry sdt_session_table;
/* The recorders' slow path: session ``id``'s area of the CPU whose default area is ``c`` (``c`` itself for id 0),
 * or NULL (the session closed, or the CPU is past its ncpus: counted in its misplaced). */
struct sdt_cpu *sdt_session_cpu(struct sdt_cpu *c, unsigned id);

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

/* A record that does not fit the open packet (open the next one, or discard: NULL), or with a task to say. */
void *sdt_event_slow(struct sdt_cpu *c, sdt_u32 key, sdt_u32 size);
/* The kernel says this CPU now runs another task (or context), or its task was renamed: the next event of each
 * session on it says the task anew. Called with the CPU held (preemption off), e.g. in the context switch; not
 * from a probe. */
void sdt_task_switch(void);
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
	/* one test: a firing inside a recorder, an event that does not fit, a size no event has, or a task to ask
	 * the hook for (a packet's first event, or the CPU changed task: docs/runtime.md, Task context) */
	if (__builtin_expect((c->nesting | (off + size > c->packet_size) | (sdt_word)(c->task_context >> 31) |
			      (size - sizeof(struct sdt_event) > 0xffff - sizeof(struct sdt_event))) != 0, 0))
		return (struct sdt_event *)sdt_event_slow(c, key, size);
	c->nesting = 1;
	__asm__ __volatile__("" ::: "memory");
	e = (struct sdt_event *)(sdt_word)(c->current + off);
	e->timestamp = c->clock_last = sdt_hooks.clock();
	e->id = key;	/* constants in a recorder: the compiler merges the three stores */
	e->size = (sdt_u16)size;
	e->unreadable = 0;
	/* the header before the offset that claims it: a snapshot of this CPU stopped here (sdt_snapshot.c) finds no
	 * header of the slot's last lap inside the offset, only this event, which nesting says is in flight */
	__asm__ __volatile__("" ::: "memory");
	c->offset = off + size;
	c->events++;
	return e;
}

/* An event with strings reserves room for the longest and gives back what they did not use (``end``). */
static inline __attribute__((always_inline)) void sdt_event_trim(struct sdt_cpu *c, struct sdt_event *e, char *end)
{
	sdt_u32 used = (sdt_u32)(end - (char *)e);

	c->offset -= e->size - used;
	e->size = (sdt_u16)used;
}

/*
 * A slot's guard, which the recorders make before anything else when the slot routes firings past the fast path:
 * 0 when the firing fails the first test of the default session's program's predicate (it does nothing then).
 * The route is read with acquire, so the guard the enabling wrote before it is the one tested; the runtime keeps
 * no guard (a span of every value) while another session takes the probe.
 */
static inline __attribute__((always_inline)) int sdt_guard(const struct sdt_slot *s, sdt_word a0, sdt_word a1,
							    sdt_word a2, sdt_word a3, sdt_word a4, sdt_word a5)
{
	sdt_u64 y;

	if (!__atomic_load_n(&s->route, __ATOMIC_ACQUIRE) || s->guard_span == ~(sdt_u64)0)
		return 1;	/* the default session alone again meanwhile, or no guard (none, or other sessions) */
	switch (s->guard_arg) {
	case 0:
		y = a0;
		break;
	case 1:
		y = a1;
		break;
	case 2:
		y = a2;
		break;
	case 3:
		y = a3;
		break;
	case 4:
		y = a4;
		break;
	default:
		y = a5;
		break;
	}
	y = (y << (s->guard_shift & 63)) ^ ((sdt_u64)s->guard_flip << 63);
	return y - s->guard_lo <= s->guard_span;
}

static inline __attribute__((always_inline)) void sdt_event_end(struct sdt_cpu *c)
{
	__asm__ __volatile__("" ::: "memory");
	c->nesting = 0;
}

/*
 * The recorders' slow path is a visit of this CPU's default area ``c``: its visit is odd from sdt_visit_begin
 * (before the slot's sessions and programs are read) to sdt_visit_end, which is how a session closing or a program
 * detached knows when no CPU still writes for it (the runtime's side makes sync_cores, so this side pays no
 * fence). A visit nested in one (an interrupt's firing) leaves the count alone: the outer one covers it.
 */
static inline __attribute__((always_inline)) sdt_word sdt_visit_begin(struct sdt_cpu *c)
{
	volatile sdt_word *v = (volatile sdt_word *)&c->visit;	/* its low word (32-bit CPUs are little-endian) */
	sdt_word was = *v;

	if (!(was & 1))
		*v = was + 1;
	__asm__ __volatile__("" ::: "memory");
	return was;
}

static inline __attribute__((always_inline)) void sdt_visit_end(struct sdt_cpu *c, sdt_word was)
{
	if (!(was & 1))
		__atomic_store_n((sdt_word *)&c->visit, was + 2, __ATOMIC_RELEASE);
}

/* The sessions of a slot the slow path serves, read inside the visit (with acquire: each session's program and
 * area are set before its bit). */
static inline __attribute__((always_inline)) sdt_u32 sdt_slot_sessions(const struct sdt_slot *s)
{
	return __atomic_load_n(&s->sessions, __ATOMIC_ACQUIRE);
}

#ifdef __cplusplus
}
#endif

#endif /* SDTGEN_SDT_RUNTIME_H */
