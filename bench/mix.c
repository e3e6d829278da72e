/* make bench: firings of the fixture kernel that mix string and integer arguments (the trace writers' input):
 * a path lookup (a string event per component), a six-argument switch and two scheduler ticks an iteration. */
int vfs_lookup_id(int which);
long sched_switch(int from, int to, int prio, int cpu, long vruntime, unsigned long flags);
long sched_run(int ticks);

long bench_mix(int n)
{
	long sum = 0;

	for (int i = 0; i < n; i++) {
		sum += vfs_lookup_id(i & 3);
		sum += sched_switch(i, i + 1, i & 7, i & 3, sum, (unsigned long)i << 20);
		sum += sched_run(2);
	}
	return sum;
}
