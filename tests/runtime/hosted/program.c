/*
 * A user-space program of its own on sdtgen's hosted platform (sdt_linux.h), built by
 * fixtures/process/Makefile with PROGRAM_SRCS empty: its probes, its main, its threads.
 *
 *   program [--no-lazy] [--text auto|alias|mprotect] TRACE_DIR CASE
 *   late N       a thread started after sdt_linux_start fires hp:late:loop:step(i, "late-<i>", from its
 *                own stack) N times without attaching: lazily, in the breakpoint handler
 *   churn N      N threads one after another, each firing hp:churn:thread:once(k) once and exiting
 *                without detaching: more threads than CPUs, their CPUs taken back
 *   heap         strings in memory mapped after start: hp:heap:str:copy(s, k)
 *   int3         the program's own breakpoint (not a probe's) reaches the SIGTRAP handler it had
 *   int3-default the same without a handler of its own: SIGTRAP kills it
 *   fork         a child forked before its parent arms hp:churn::once runs that site as it was: its
 *                exit status is the events its CPU 0 recorded
 *   bound        the main thread asks for CPU SDT_LINUX_MAX_CPUS, then SDT_LINUX_MAX_CPUS - 1: what
 *                sdt_linux_attach answers each, as {"past": R, "last": R}
 *   tasks N R    N named threads (task-K) one after another, each saying {"k", "tid", "name"} as gettid and
 *                pthread_getname_np give them, then firing hp:task:thread:fire(k, i) R times: tasks that share
 *                a CPU, each firing's task what the thread said; half way it renames itself (and tells the
 *                runtime: sdt_linux_task_renamed) and says {"k", "from", "name"}
 *   leader       the main thread fires hp:churn::once(0) and exits (a zombie whose number still names it
 *                until the process ends); a thread it started waits for that, fires once(1) and ends the run
 * The last line is the platform's statistics as JSON.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sdt.h>
#include <sdt_linux.h>

SDT_PROVIDER_DEFINE(hp);
SDT_PROBE_DEFINE2(hp, late, loop, step, "int", "char *");
SDT_PROBE_DEFINE1(hp, churn, thread, once, "int");
SDT_PROBE_DEFINE2(hp, task, thread, fire, "int", "int");
SDT_PROBE_DEFINE2(hp, heap, str, copy, "char *", "int");

__attribute__((noinline)) void late_loop(int n)
{
	char name[32];
	int i;

	for (i = 0; i < n; i++) {
		snprintf(name, sizeof(name), "late-%d", i);
		SDT_PROBE2(hp, late, loop, step, i, name);
	}
}

static void *late_thread(void *n)
{
	late_loop((int)(long)n);
	sdt_linux_detach();	/* its last packet closed, its CPU free */
	return 0;
}

__attribute__((noinline)) void churn_once(int k)
{
	SDT_PROBE1(hp, churn, thread, once, k);
}

static void *churn_thread(void *k)
{
	churn_once((int)(long)k);
	return 0;	/* no detach: its CPU is taken back when it is seen gone */
}

static int task_rounds;

__attribute__((noinline)) void task_fire(int k, int i)
{
	SDT_PROBE2(hp, task, thread, fire, k, i);
}

static void *task_thread(void *arg)
{
	int k = (int)(long)arg, i;
	char name[16];

	snprintf(name, sizeof(name), "task-%d", k);
	pthread_setname_np(pthread_self(), name);
	pthread_getname_np(pthread_self(), name, sizeof(name));
	printf("{\"k\": %d, \"tid\": %d, \"name\": \"%s\"}\n", k, (int)gettid(), name);
	for (i = 0; i < task_rounds / 2; i++)
		task_fire(k, i);
	snprintf(name, sizeof(name), "renamed-%d", k);	/* after it fired: the runtime is told */
	pthread_setname_np(pthread_self(), name);
	sdt_linux_task_renamed();
	pthread_getname_np(pthread_self(), name, sizeof(name));
	printf("{\"k\": %d, \"from\": %d, \"name\": \"%s\"}\n", k, i, name);
	for (; i < task_rounds; i++)
		task_fire(k, i);
	return 0;
}

__attribute__((noinline)) void heap_copy(const char *s, int k)
{
	SDT_PROBE2(hp, heap, str, copy, s, k);
}

/* A fresh mapping holding ``text`` (too big for the heap: malloc maps it on its own). */
static char *mapped(const char *text)
{
	char *p = malloc(1 << 20);

	strcpy(p, text);
	return p;
}

static volatile int theirs;

/* The run's end: the rest read, and the platform's statistics as the last line. */
static int finish(void)
{
	struct sdt_linux_stats st;

	sdt_linux_stop();
	sdt_linux_stats(&st);
	printf("{\"packets\": %lu, \"events\": %lu, \"unattached\": %lu, \"cpus\": %u, \"refreshes\": %lu, "
	       "\"text\": \"%s\"}\n", st.packets, st.events, st.unattached, st.cpus, st.refreshes,
	       st.text == SDT_LINUX_TEXT_ALIAS ? "alias" : "mprotect");
	return 0;
}

/* Whether thread tid is a zombie (its stat line's state, after the command's closing parenthesis). */
static int zombie(int tid)
{
	char path[64], buf[512], *p;
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "/proc/self/task/%d/stat", tid);
	f = fopen(path, "r");
	if (!f)
		return 0;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	p = strrchr(buf, ')');
	return p && p[1] == ' ' && p[2] == 'Z';
}

/* The main thread's heir: once main is a zombie, it fires, and the run ends with the process. */
static void *leader_heir(void *unused)
{
	int i;

	(void)unused;
	for (i = 0; i < 10000 && !zombie(getpid()); i++)
		usleep(1000);
	churn_once(1);
	exit(finish());
}

static void their_trap(int sig)
{
	(void)sig;
	theirs++;
}

int main(int argc, char **argv)
{
	/* 256 packets a CPU: churn's threads, one after another on one CPU, close a packet each, and a consumer
	 * kept off the cores by a loaded machine must not find a full ring (SDT_DISCARD would drop them). */
	struct sdt_linux_options o = {.ring_bytes = 1 << 20, .packet_size = 4096, .policy = SDT_DISCARD};
	const char *what;
	int i = 1, r;

	for (; i + 1 < argc && !strncmp(argv[i], "--", 2); i++) {
		if (!strcmp(argv[i], "--no-lazy"))
			o.no_lazy = 1;
		else if (!strcmp(argv[i], "--text"))
			i++, o.text = !strcmp(argv[i], "alias") ? SDT_LINUX_TEXT_ALIAS
				     : !strcmp(argv[i], "mprotect") ? SDT_LINUX_TEXT_MPROTECT : SDT_LINUX_TEXT_AUTO;
	}
	if (i + 1 >= argc)
		return 2;
	o.trace_dir = argv[i];
	what = argv[i + 1];
	if (!strcmp(what, "int3"))
		signal(SIGTRAP, their_trap);
	r = sdt_linux_start(&o);
	if (r < 0)
		return 2;
	printf("{\"patched\": %d}\n", r);
	if (!strcmp(what, "late") || !strcmp(what, "churn")) {
		int n = atoi(argv[i + 2]), k;
		pthread_t t;
		sdt_enable("hp:late::", SDT_TRAP);
		sdt_enable("hp:churn::", SDT_BRANCH);
		for (k = 0; k < (!strcmp(what, "late") ? 1 : n); k++) {
			if (pthread_create(&t, 0, !strcmp(what, "late") ? late_thread : churn_thread,
					   (void *)(long)(!strcmp(what, "late") ? n : k)))
				return 3;
			pthread_join(t, 0);
		}
	} else if (!strcmp(what, "tasks")) {
		int n = atoi(argv[i + 2]), k;
		pthread_t t;
		task_rounds = atoi(argv[i + 3]);
		sdt_enable("hp:task::", SDT_BRANCH);
		for (k = 0; k < n; k++) {
			if (pthread_create(&t, 0, task_thread, (void *)(long)k))
				return 3;
			pthread_join(t, 0);
		}
	} else if (!strcmp(what, "bound")) {
		int past = sdt_linux_attach(SDT_LINUX_MAX_CPUS);
		printf("{\"past\": %d, \"last\": %d}\n", past, sdt_linux_attach(SDT_LINUX_MAX_CPUS - 1));
	} else if (!strcmp(what, "heap")) {
		char *a, *b;
		sdt_linux_attach(-1);
		sdt_enable("hp:heap::", SDT_TRAP);
		a = mapped("mapped after start");
		heap_copy(a, 0);	/* not in the ranges read at start: unreadable */
		sdt_flush();
		sdt_linux_drain();	/* the reader sees it and reads the ranges again */
		heap_copy(a, 1);
		b = mapped("mapped, then refreshed");
		sdt_linux_refresh();
		heap_copy(b, 2);
		heap_copy(0, 3);	/* NULL: unreadable whatever the ranges */
	} else if (!strcmp(what, "fork")) {
		int go[2], done[2], status, recorded;
		char c;
		pid_t pid;
		sdt_linux_attach(-1);
		if (pipe(go) || pipe(done))
			return 3;
		pid = fork();
		if (pid == 0) {	/* ready once fork's handlers ran: then the parent arms */
			if (write(done[1], "r", 1) != 1 || read(go[0], &c, 1) != 1)
				_exit(3);
			churn_once(7);	/* armed in the parent after the fork: not here */
			recorded = (int)sdt_linux_cpu(0)->events;	/* what the child's own CPU 0 holds */
			_exit(write(done[1], "x", 1) == 1 ? recorded : 3);
		}
		if (read(done[0], &c, 1) != 1)
			return 3;
		sdt_enable("hp:churn::", SDT_BRANCH);
		if (write(go[1], "x", 1) != 1 || read(done[0], &c, 1) != 1 || waitpid(pid, &status, 0) != pid)
			return 3;
		printf("{\"child\": %d}\n", WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status));
		churn_once(8);
	} else if (!strcmp(what, "leader")) {
		pthread_t t;
		sdt_enable("hp:churn::", SDT_BRANCH);
		churn_once(0);	/* main takes CPU 0 */
		fflush(stdout);
		if (pthread_create(&t, 0, leader_heir, 0))
			return 3;
		pthread_exit(0);	/* a zombie until the heir ends the process: its number still names it */
	} else if (!strncmp(what, "int3", 4)) {
		__asm__ __volatile__("int3");
		printf("{\"their_handler\": %d}\n", theirs);
	}
	return finish();
}
