/*
 * sdt_linux.h - sdtgen's runtime in a Linux process on x86-64: every hook sdt_init needs, made of what a
 * process has (threads as CPUs, SIGTRAP as the breakpoint, membarrier as the IPI, the TSC as the clock),
 * and a consumer of the CPUs' rings.
 *
 * Its code is sdtgen/runtime/hosted/sdt_linux.c (`sdtgen runtime-dir`), compiled into a user-space
 * program with the program's own flags, never into a kernel: it uses libc and threads. The program
 * links the runtime (sdt_runtime.c and arch/sdt_x86_64.c) and gen's stubs and table as a kernel does;
 * docs/runtime.md ("A Linux process") says what each hook does here and what stays a limit.
 *
 *   sdt_linux_start(&options)    once, before probes are armed: patches every site (sdt_init's result)
 *   sdt_linux_attach(-1)         the calling thread becomes a CPU (or lazily, at its first firing)
 *   sdt_enable(spec, mode) ...   the runtime's own calls
 *   sdt_linux_detach()           a thread done with probes gives its CPU back (flushed)
 *   sdt_linux_stop()             the rest read, the streams closed
 *
 * Or sdt_linux_main.c, linked too, is the program's main: the control core over its functions, driven by
 * `sdtgen torture --target process` or from its command line.
 */
#ifndef SDTGEN_SDT_LINUX_H
#define SDTGEN_SDT_LINUX_H

#include <sdt_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

/* SDT_LINUX_MAX_CPUS, the threads with a CPU at once, is sdt_runtime.h's (sdtgen/layout.py: the process target
 * reads the same bound). */
#if SDT_LINUX_MAX_CPUS > SDT_MAX_CPUS
#error "the hosted platform has more CPUs than a kernel may have (SDT_MAX_CPUS)"
#endif

/* How text is written (sdt_linux_options.text). */
#define SDT_LINUX_TEXT_AUTO 0	/* an alias if the kernel allows one, else mprotect */
#define SDT_LINUX_TEXT_ALIAS 1	/* a writable second mapping of the text's pages (memfd): never W+X */
#define SDT_LINUX_TEXT_MPROTECT 2	/* the text made writable and executable for each batch */

struct sdt_linux_options {
	unsigned long ring_bytes;	/* each CPU's ring (0: 1 MiB) */
	unsigned long packet_size;	/* bytes of a packet (0: 4096) */
	int policy;	/* SDT_DISCARD or SDT_OVERWRITE, when a ring is full */
	int no_consumer;	/* nonzero: no thread reads packets as they close, only sdt_linux_drain and stop */
	int no_lazy;	/* nonzero: a thread that never called sdt_linux_attach records nothing (counted) */
	int text;	/* SDT_LINUX_TEXT_* */
	const char *trace_dir;	/* the packets of CPU k go to trace_dir/stream_k, as they stand (NULL: none) */
	/* Called for every packet read, in the reading thread, with a copy of it (NULL: none). */
	void (*packet)(unsigned cpu, const struct sdt_packet *p, unsigned long size, void *arg);
	void *arg;
};

struct sdt_linux_stats {
	unsigned long packets, events;	/* read so far */
	unsigned long lost_packets;	/* overwritten while being read (SDT_OVERWRITE): dropped */
	unsigned long unattached;	/* firings on a thread without a CPU (none free, or no_lazy): not recorded */
	unsigned long transient;	/* breakpoints of patches in flight met (SDT_TRAP_EMULATED) */
	unsigned long refreshes;	/* times the readable ranges were read from /proc/self/maps */
	unsigned long readable;	/* readable ranges given to the runtime (SDT_LINUX_MAX_RANGES at most) */
	unsigned cpus;	/* the highest CPU number attached so far, plus one */
	int text;	/* SDT_LINUX_TEXT_ALIAS or SDT_LINUX_TEXT_MPROTECT: how text is written */
};

/*
 * Start: membarrier registered, SIGTRAP handled, the clock calibrated, text made writable the chosen
 * way, the readable ranges read, sdt_init run, the consumer thread started. Returns the sites patched,
 * or -1 with a line on standard error saying what failed (membarrier refused, no way to write text).
 */
int sdt_linux_start(const struct sdt_linux_options *options);

/* The calling thread as CPU ``cpu`` (-1: the lowest free one); returns its number, or -1 when it is taken. */
int sdt_linux_attach(int cpu);

/* The calling thread's open packet closed, and its CPU free for another thread. */
void sdt_linux_detach(void);

/* Read the readable ranges again (memory mapped since: heap, thread stacks). Async-signal-safe. */
void sdt_linux_refresh(void);

/* The calling thread was renamed (pthread_setname_np, prctl PR_SET_NAME) after it fired: its next event says its
 * new name. The runtime keeps a thread's name from its first event on, as LTTng-UST keeps its procname. */
void sdt_linux_task_renamed(void);

/* Read every closed packet now, from the calling thread; returns the packets read. */
unsigned long sdt_linux_drain(void);

/* The calling thread's packet closed, the consumer stopped, every packet read, the streams closed. */
void sdt_linux_stop(void);

void sdt_linux_stats(struct sdt_linux_stats *stats);

/* CPU ``cpu``'s area (its discarded and overwritten counts), or NULL when no thread ever had it. */
const struct sdt_cpu *sdt_linux_cpu(unsigned cpu);

/*
 * A shared object built as a module (`sdtgen gen --module NAME`, its stubs compiled with -DSDT_MODULE_DLOPEN)
 * calls these from its constructor and destructor: when the process dlopens it, its text is made writable the
 * way the program's is and its sites registered (sdt_module_load: the specs enabled so far arm them); dlclose
 * unregisters them (sdt_module_unload). The runtime's result, or SDT_ERR_INIT before sdt_linux_start.
 */
int sdt_linux_module_open(struct sdt_module *m, const struct sdt_module_table *table);
int sdt_linux_module_close(struct sdt_module *m);
/* The last module opened unloaded (``load`` 0) or loaded again (1) in place, its object still mapped (the control
 * core's `module` command and module torture): the runtime's result; SDT_ERR_MODULE_UNKNOWN when none is open. */
int sdt_linux_module_reload(int load);

/*
 * The hosted platform's main (sdt_linux_main.c, compiled beside sdt_linux.c): the command line whose flags
 * sdt_runtime.h names SDT_PROCESS_* (what `sdtgen torture --target process` gives), threads as CPUs and the
 * control core over the program's functions. It is the program's main unless the program has its own, which may
 * call it. Returns the process's exit status.
 */
int sdt_linux_main(int argc, char **argv);

#ifdef __cplusplus
}
#endif

#endif
