/* The probed code of preempt_harness.c: the task's probes (integers, a string), and another task's. */
#include <sdt.h>

SDT_PROVIDER_DEFINE(pm);
SDT_PROBE_DEFINE2(pm, task, step, two, "long", "long");
SDT_PROBE_DEFINE2(pm, task, step, name, "const char *", "long");
SDT_PROBE_DEFINE1(pm, other, task, hit, "long");

static const char *const names[4] = {"zero", "one", "a name of some length", "three"};

__attribute__((noinline)) void task_step(long i)
{
	SDT_PROBE2(pm, task, step, two, i, i * 3);
	SDT_PROBE2(pm, task, step, name, names[i & 3], i);
}

__attribute__((noinline)) void other_task(long k)
{
	SDT_PROBE1(pm, other, task, hit, k);
}
