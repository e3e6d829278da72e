/*
 * The runtime's one CPU bound, SDT_MAX_CPUS, at the limit and one past it: what sdt_cpu_attach and
 * sdt_control_init answer for CPU SDT_MAX_CPUS - 1 and SDT_MAX_CPUS (a CPU count of SDT_MAX_CPUS and one
 * more), printed one line each as `NAME RESULT` for the test to read. Built for this machine under
 * AddressSanitizer; the kernel's storage is as large as it says, so a refusal is the runtime's own.
 */
#include <stdio.h>

#include "sdt_runtime.c"

static struct sdt_site limit_site __attribute__((used, section("set_sdt_sites_set")));
static const struct sdt_probe limit_probe __attribute__((used, section("set_sdt_probes_set")));

static struct sdt_control_cpu storage[SDT_MAX_CPUS + 1];
static sdt_u64 ring[2 * SDT_MIN_PACKET / 8];

static unsigned this_cpu(void)
{
	return 0;
}

int main(void)
{
	struct sdt_cpu area;
	struct sdt_control_ops ops;
	unsigned n;

	sdt_copy(&ops, &(struct sdt_control_ops){.this_cpu = this_cpu}, sizeof(ops));
	for (n = SDT_MAX_CPUS - 1; n <= SDT_MAX_CPUS; n++)
		printf("attach-%u %d\n", n, sdt_cpu_attach(&area, n, ring, sizeof(ring), SDT_MIN_PACKET, SDT_DISCARD));
	for (n = SDT_MAX_CPUS; n <= SDT_MAX_CPUS + 1; n++) {
		ops.ncpus = n;
		printf("control-%u %d\n", n, sdt_control_init(&ops, storage));
	}
	return 0;
}
