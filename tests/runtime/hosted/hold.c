/*
 * hold - a thread held inside the runtime while the main thread takes away what it runs, on sdtgen's hosted
 * platform (sdt_linux.h), built by fixtures/process/Makefile with PROGRAM_SRCS empty:
 *
 *   hold TRACE_DIR unload LIBRARY   LIBRARY (fixtures/module's libhkm.so) dlopened with hkm::: enabled in
 *                                   trap mode; a thread calls hkm_work(3): its first firing is a breakpoint,
 *                                   and the clock the recorder reads inside sdt_trap holds it there ~500 ms
 *                                   while the main thread unloads the module (sdt_linux_module_reload(0))
 *   hold TRACE_DIR program FILE     the program in FILE enabled on hh:hold:str:fire in branch mode; a thread
 *                                   fires it with a string in a page made unreadable after the runtime read
 *                                   the ranges (as the thread attached): the program's read faults, and the SIGSEGV handler holds the
 *                                   thread inside the program ~500 ms (then makes the page readable again)
 *                                   while the main thread calls sdt_disable_program
 *   hold TRACE_DIR beside FILE LIBRARY   the program in FILE held as above, and LIBRARY (no program on its
 *                                   probes, none armed) dlopened; the main thread unloads the module: the
 *                                   thread stays in the program until the unload returned (10 s at most)
 *
 * One JSON line: what the call returned, and whether the held thread had left when it returned ("left": 1:
 * the call waited for it). Then the platform's statistics.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <sdt.h>
#include <sdt_linux.h>

SDT_PROVIDER_DEFINE(hh);
SDT_PROBE_DEFINE1(hh, hold, str, fire, "char *");

#define HOLD_US 500000
#define HOLD_MAX_MS 10000	/* beside: how long the hold waits for the call to return, at most */

static volatile int inside, left, done;	/* the held thread is in the hold; it came out of it; it ended */
static pthread_t holder;
static int holding;	/* set before the worker starts: its first clock read (unload) is held */
static sdt_u64 (*real_clock)(void);
static char *page;
static int returned;	/* the main thread's call returned */
static int until_returned;	/* beside: the program's hold lasts until then (or HOLD_MAX_MS) */

__attribute__((noinline)) void hold_fire(const char *s)
{
	SDT_PROBE1(hh, hold, str, fire, s);
}

/* The runtime's clock, as the recorder reads it inside sdt_trap: the worker's first read waits. */
static sdt_u64 held_clock(void)
{
	if (pthread_equal(pthread_self(), holder) && __atomic_exchange_n(&holding, 0, __ATOMIC_SEQ_CST)) {
		__atomic_store_n(&inside, 1, __ATOMIC_SEQ_CST);
		usleep(HOLD_US);
		__atomic_store_n(&left, 1, __ATOMIC_SEQ_CST);
	}
	return real_clock();
}

/* The program's read of the unreadable page: held, then the page made readable and the read done again. */
static void on_segv(int sig, siginfo_t *info, void *ctx)
{
	(void)ctx;
	if ((char *)info->si_addr < page || (char *)info->si_addr >= page + 4096) {
		signal(sig, SIG_DFL);
		return;	/* not ours: the fault again, and the default action */
	}
	__atomic_store_n(&inside, 1, __ATOMIC_SEQ_CST);
	if (until_returned) {
		int ms;
		for (ms = 0; ms < HOLD_MAX_MS && !__atomic_load_n(&returned, __ATOMIC_SEQ_CST); ms++)
			usleep(1000);
	} else {
		usleep(HOLD_US);
	}
	__atomic_store_n(&left, 1, __ATOMIC_SEQ_CST);
	mprotect(page, 4096, PROT_READ | PROT_WRITE);
}

static void *work(void *fn)
{
	static struct sdt_agg g;
	static _Alignas(64) unsigned char mem[1 << 16];
	int cpu = sdt_linux_attach(-1);

	holder = pthread_self();
	if (fn) {
		((long (*)(int))fn)(3);
	} else {	/* the program's state: its CPU's aggregation memory, as a kernel gives it */
		if (cpu < 0 || sdt_agg_attach((struct sdt_cpu *)sdt_linux_cpu((unsigned)cpu), &g, mem, sizeof(mem)))
			exit(5);
		mprotect(page, 4096, PROT_NONE);	/* after the ranges were read as it attached: still "readable" */
		hold_fire(page);
	}
	sdt_linux_detach();
	__atomic_store_n(&done, 1, __ATOMIC_SEQ_CST);
	return 0;
}

/* Start the worker and wait until it is held; then ``call`` (which must wait for it) and report. */
static void held_call(void *fn, int (*call)(const char *), const char *arg)
{
	pthread_t t;
	int r, l;

	__atomic_store_n(&holding, 1, __ATOMIC_SEQ_CST);
	if (pthread_create(&t, 0, work, fn))
		exit(3);
	while (!__atomic_load_n(&inside, __ATOMIC_SEQ_CST))
		if (__atomic_load_n(&done, __ATOMIC_SEQ_CST)) {
			printf("{\"held\": 0}\n");	/* it never reached the hold: nothing to show */
			exit(6);
		} else {
			usleep(1000);
		}
	r = call(arg);
	l = __atomic_load_n(&left, __ATOMIC_SEQ_CST);
	__atomic_store_n(&returned, 1, __ATOMIC_SEQ_CST);
	pthread_join(t, 0);
	printf("{\"returned\": %d, \"left\": %d}\n", r, l);
}

static int unload(const char *unused)
{
	(void)unused;
	return sdt_linux_module_reload(0);
}

int main(int argc, char **argv)
{
	struct sdt_linux_options o = {.ring_bytes = 1 << 20, .packet_size = 4096, .policy = SDT_DISCARD};
	struct sdt_linux_stats st;

	if (argc < 4)
		return 2;
	o.trace_dir = argv[1];
	if (sdt_linux_start(&o) < 0)
		return 2;
	if (!strcmp(argv[2], "unload")) {
		void *h;
		sdt_enable("hkm:::", SDT_TRAP);	/* remembered: the module comes armed with the breakpoint */
		h = dlopen(argv[3], RTLD_NOW | RTLD_GLOBAL);
		if (!h || !dlsym(h, "hkm_work"))
			return 3;
		real_clock = sdt_hooks.clock;
		sdt_hooks.clock = held_clock;
		held_call(dlsym(h, "hkm_work"), unload, 0);
		sdt_hooks.clock = real_clock;
	} else if (!strcmp(argv[2], "program") || (!strcmp(argv[2], "beside") && argc > 4)) {
		static _Alignas(16) char code[1 << 16];
		struct sigaction sa;
		FILE *f = fopen(argv[3], "rb");
		size_t n = f ? fread(code, 1, sizeof(code), f) : 0;
		int r;
		page = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (!n || page == MAP_FAILED)
			return 3;
		strcpy(page, "held");
		sdt_linux_refresh();	/* the page is readable memory to the runtime from now on */
		r = sdt_enable_program("hh:hold:str:fire", SDT_BRANCH, code, n);
		printf("{\"enabled\": %d}\n", r);
		if (r != 1)
			return 4;
		memset(&sa, 0, sizeof(sa));
		sa.sa_sigaction = on_segv;
		sa.sa_flags = SA_SIGINFO;
		sigaction(SIGSEGV, &sa, 0);
		if (argc > 4) {	/* beside: a module with no program, unloaded while the program runs */
			if (!dlopen(argv[4], RTLD_NOW | RTLD_GLOBAL))
				return 3;
			until_returned = 1;
			held_call(0, unload, 0);
		} else {
			held_call(0, sdt_disable_program, "hh:hold:str:fire");
		}
	}
	sdt_linux_stop();
	sdt_linux_stats(&st);
	printf("{\"packets\": %lu, \"events\": %lu}\n", st.packets, st.events);
	return 0;
}
