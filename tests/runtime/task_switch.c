/*
 * The writer's task context (docs/runtime.md) as a kernel with a task hook drives it: one CPU, a ring of
 * 1024-byte packets, and a current task the script sets, as a scheduler would between firings (and says so:
 * sdt_task_switch). Each word of
 * the script is `t:ID:CONTEXT:NAME` (the task from now on; NAME `-`: it has none) or `e` (a firing: an event
 * of key 1 holding its number, from 0). The packets are then written to stdout as they stand (the open one
 * flushed); stderr: the events discarded, how many times the runtime asked the hook for the task's name, for the
 * task at all, and the switches the script made.
 *
 *   task_switch [--no-hook] WORD...
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sdt_runtime.h>

struct sdt_hooks sdt_hooks;	/* sdt_state.c's, which this program does not link */
struct sdt_registry sdt_session_table;	/* sdt_state.c's too: sdt_cpu_attach puts the area on its list */

#define PACKET 1024
#define PACKETS 256

static struct sdt_cpu cpu;
static _Alignas(8) unsigned char ring[PACKETS * PACKET];
static sdt_u64 ticks, task_id;
static sdt_u32 task_context;
static char task_name[256];
static int task_named;
static unsigned long names_asked, asked, switches;

static sdt_u64 clock_fn(void)
{
	return ++ticks;
}

static struct sdt_cpu *area(void)
{
	return &cpu;
}

static sdt_u64 task(sdt_u32 *context, const char **name)
{
	*context = task_context;
	asked++;
	if (name) {
		names_asked++;
		*name = task_named ? task_name : 0;
	}
	return task_id;
}

int main(int argc, char **argv)
{
	const struct sdt_packet *pk;
	sdt_u64 seq, fired = 0;
	int i = 1;

	sdt_hooks.clock = clock_fn;
	sdt_hooks.cpu_area = area;
	sdt_hooks.task = task;
	if (i < argc && !strcmp(argv[i], "--no-hook"))
		sdt_hooks.task = 0, i++;
	if (sdt_cpu_attach(&cpu, 0, ring, sizeof(ring), PACKET, SDT_DISCARD))
		return 2;
	for (; i < argc; i++) {
		if (argv[i][0] == 't') {
			char *at = argv[i] + 2, *end;
			task_id = strtoull(at, &end, 0);
			task_context = (sdt_u32)strtoul(end + 1, &end, 0);
			task_named = strcmp(end + 1, "-") != 0;
			snprintf(task_name, sizeof(task_name), "%s", end + 1);
			sdt_task_switch();	/* the scheduler says the CPU runs another task */
			switches++;
		} else {
			struct sdt_cpu *c = sdt_hooks.cpu_area();
			struct sdt_event *e = sdt_event_begin(c, 1, sizeof(*e) + sizeof(sdt_word));
			if (e) {
				*(sdt_word *)(e + 1) = (sdt_word)fired;
				sdt_event_end(c);
			}
			fired++;
			sdt_cpu_put(c);
		}
	}
	sdt_flush();
	while ((pk = sdt_consume(&cpu, &seq))) {
		if (fwrite(pk, 1, PACKET, stdout) != PACKET)
			return 3;
		sdt_consume_done(&cpu, seq);
	}
	fprintf(stderr, "%llu %lu %lu %lu\n", (unsigned long long)cpu.discarded, names_asked, asked, switches);
	return 0;
}
