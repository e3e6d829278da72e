/*
 * sdt_linux.c - the runtime's hooks for a Linux process (moved from fixtures/process/platform.c,
 * which includes it where they stood).
 */

/* -- the hooks ------------------------------------------------------------------------------- */

static void *text_open(void *addr, unsigned long len)
{
	unsigned long lo = (unsigned long)addr & ~(page - 1), hi = ((unsigned long)addr + len + page - 1) & ~(page - 1);

	if (mprotect((void *)lo, hi - lo, PROT_READ | PROT_WRITE | PROT_EXEC))
		die("mprotect text writable");
	return addr;
}

static void text_close(void *alias, unsigned long len)
{
	unsigned long lo = (unsigned long)alias & ~(page - 1), hi = ((unsigned long)alias + len + page - 1) & ~(page - 1);

	if (mprotect((void *)lo, hi - lo, PROT_READ | PROT_EXEC))
		die("mprotect text back");
}

static void sync_cores(void)
{
	if (syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE, 0, 0))
		die("membarrier SYNC_CORE");
}

static struct sdt_cpu *cpu_area(void)
{
	return self ? &self->area : 0;
}

static sdt_u64 clock_tsc(void)
{
	unsigned lo, hi;

	__asm__ __volatile__("rdtsc" : "=a"(lo), "=d"(hi));
	return (sdt_u64)hi << 32 | lo;
}

static sdt_u64 ns_mult;	/* nanoseconds per TSC tick, as a 32.32 fixed-point number */

static sdt_u64 clock_ns(void)
{
	return (sdt_u64)(((unsigned __int128)clock_tsc() * ns_mult) >> 32);
}

static void notify(struct sdt_cpu *c)
{
	sdt_u64 one = 1;

	(void)c;
	if (write(wake_fd, &one, sizeof(one)) < 0) {	/* async-signal-safe: it may run in the SIGTRAP handler */
	}
}

static void report(const struct sdt_site *site, const char *line)
{
	(void)site;
	fprintf(stderr, "%s\n", line);
}

/* Readable memory for strings: every readable mapping, as /proc/self/maps has them now. */
static void read_ranges(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];

	if (!f)
		die("/proc/self/maps");
	nranges = 0;
	while (fgets(line, sizeof(line), f) && nranges < MAX_RANGES) {
		unsigned long lo, hi;
		char perms[5];
		if (sscanf(line, "%lx-%lx %4s", &lo, &hi, perms) == 3 && perms[0] == 'r') {
			ranges[nranges].start = lo;
			ranges[nranges].size = hi - lo;
			nranges++;
		}
	}
	fclose(f);
}

static sdt_u64 tsc_hz(void)
{
	struct timespec a, b, d = {0, 50 * 1000 * 1000};
	sdt_u64 t0, t1;

	clock_gettime(CLOCK_MONOTONIC, &a);
	t0 = clock_tsc();
	nanosleep(&d, 0);
	clock_gettime(CLOCK_MONOTONIC, &b);
	t1 = clock_tsc();
	return (t1 - t0) * 1000000000ull / (sdt_u64)((b.tv_sec - a.tv_sec) * 1000000000ll + (b.tv_nsec - a.tv_nsec));
}

/* -- the breakpoint ---------------------------------------------------------------------------- */

static const greg_t argregs[6] = {REG_RDI, REG_RSI, REG_RDX, REG_RCX, REG_R8, REG_R9};

static unsigned long transient;	/* traps on a breakpoint of a patch in flight (SDT_TRAP_EMULATED) */

static void on_trap(int sig, siginfo_t *info, void *ctx)
{
	ucontext_t *uc = ctx;
	greg_t *r = uc->uc_mcontext.gregs;
	struct sdt_frame f;
	int i, what;

	(void)info;
	f.pc = (sdt_u64)r[REG_RIP];
	f.sp = (sdt_u64)r[REG_RSP];
	f.flags = (sdt_u64)r[REG_EFL];
	f.ret = (sdt_u64)r[REG_RAX];
	f.link = 0;
	for (i = 0; i < 6; i++)
		f.arg[i] = (sdt_u64)r[argregs[i]];
	what = sdt_trap(&f);
	if (what == SDT_TRAP_NOT_OURS) {
		signal(sig, SIG_DFL);	/* someone else's breakpoint: die of it as a process would */
		return;
	}
	if (what == SDT_TRAP_EMULATED)
		__atomic_add_fetch(&transient, 1, __ATOMIC_RELAXED);
	r[REG_RIP] = (greg_t)f.pc;
	r[REG_RSP] = (greg_t)f.sp;
	r[REG_RAX] = (greg_t)f.ret;
}

/* -- the consumer ------------------------------------------------------------------------------- */

static unsigned long drained_packets;

static void drain_all(void)
{
	char *copy = packet_copy;
	int k;

	pthread_mutex_lock(&drain_lock);
	for (k = 0; k < ncpus; k++) {
		const struct sdt_packet *pk;
		sdt_u64 seq;
		while ((pk = sdt_consume(&cpus[k].area, &seq))) {
			memcpy(copy, pk, packet_bytes);
			if (!sdt_consume_done(&cpus[k].area, seq)) {
				lost_packets++;
				continue;
			}
			consumed_events += ((struct sdt_packet *)copy)->events;
			drained_packets++;
			if (streams[k] && fwrite(copy, 1, packet_bytes, streams[k]) != packet_bytes)
				die("write trace stream");
		}
	}
	pthread_mutex_unlock(&drain_lock);
}

static void *consume(void *unused)
{
	sdt_u64 n;

	(void)unused;
	while (!consumer_stop) {
		if (read(wake_fd, &n, sizeof(n)) < 0 && errno != EINTR)
			die("read eventfd");
		drain_all();
	}
	return 0;
}

