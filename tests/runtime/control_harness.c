/*
 * The control core built for this machine, with the runtime (one probe table of one entry the runtime
 * refuses: no probe is armed), so Python can feed it any bytes and read every reply line. One CPU, no
 * means to run calls elsewhere or catch faults; the kernel's text is one function, `harness_sum`, the
 * only address `run` accepts. It gives program memory and aggregation memory but no CPU area, so programs can be
 * loaded and refused but no table is attached.
 *
 * Built with -DHARNESS_CPUS (and -pthread), harness_start_cpus starts it instead as a kernel of two CPUs: CPU 1
 * a thread that runs what the core starts there, each CPU an area the kernel can say the address of (`shared`),
 * and a drain hook that counts what the core asks it to send on the line. CPU 1 takes up a job only once CPU 0
 * waits for it (the slowest a CPU may be): the core must wait for the job, not for the start.
 */
#include "sdt_runtime.c"	/* the control core (sdt_control.c) is linked beside it, as a kernel links it */

static struct sdt_site harness_site __attribute__((used, section("set_sdt_sites_set")));
static const struct sdt_probe harness_probe __attribute__((used, section("set_sdt_probes_set")));

static char replies[1 << 20];
static unsigned long used;
static struct sdt_control_cpu cpus[1];

long harness_sum(long a, long b, long c, long d, long e, long f)
{
	return a + b + c + d + e + f;
}

/* Every reply line, each followed by a newline, in one buffer the caller reads and clears. */
static void reply(const char *text, unsigned long len)
{
	unsigned long i;

	for (i = 0; i < len && used < sizeof(replies) - 1; i++)
		replies[used++] = text[i] == '\n' ? '?' : text[i];	/* a newline in a reply would split it */
	if (used < sizeof(replies) - 1)
		replies[used++] = '\n';
}

static unsigned this_cpu(void)
{
	return 0;
}

static sdt_u64 programs[64];
static sdt_u64 tables[1024];

static void *program_memory(unsigned long *bytes)
{
	*bytes = sizeof(programs);
	return programs;
}

static void *agg_memory(unsigned k, unsigned long *bytes)
{
	(void)k;
	*bytes = sizeof(tables);
	return tables;
}

#ifdef HARNESS_GUARDED
/* A call "guarded" by running it: the program under AddressSanitizer lets `read` run (a fault would end it). */
static int guarded(void (*fn)(void *), void *arg, struct sdt_control_fault *fault)
{
	(void)fault;
	fn(arg);
	return 0;
}

unsigned char harness_buffer[MAX_READ_BYTES];	/* what `read` reads at the limit */

void *harness_program_memory(void)
{
	return programs;
}
#endif

/* The runtime over harness_sum's one byte of text, a 1 kHz clock: what both starts give it. */
static int init_runtime(void)
{
	static struct sdt_hooks hooks;
	static struct sdt_range text;

	text.start = (sdt_word)harness_sum;
	text.size = 1;
	hooks.text = &text;
	hooks.ntext = 1;
	hooks.clock_hz = 1000;
	if (sdt_init(&hooks) < 0)
		return -1;
	return 0;
}

#ifdef HARNESS_CPUS
#include <pthread.h>
#include <sched.h>

static __thread unsigned harness_cpu;	/* the CPU a thread is: 0 for the caller's, 1 for the worker */
static struct sdt_cpu areas[2];
static int gate, drains;
static pthread_t worker;
static int working;
static struct {
	void (*fn)(void *);
	void *arg;
} job;

static unsigned this_cpu2(void)
{
	return harness_cpu;
}

static struct sdt_cpu *area(unsigned k)
{
	return k < 2 ? &areas[k] : 0;
}

static sdt_u64 phys(const void *p)
{
	return (sdt_u64)(sdt_word)p;
}

static void drain(void)
{
	__atomic_add_fetch(&drains, 1, __ATOMIC_SEQ_CST);
}

static void *cpu1(void *unused)
{
	(void)unused;
	harness_cpu = 1;
	while (!__atomic_load_n(&gate, __ATOMIC_ACQUIRE))
		sched_yield();
	job.fn(job.arg);
	return 0;
}

/* The last job's thread let go (if it still waits at the gate) and joined. */
void harness_join(void)
{
	if (working) {
		__atomic_store_n(&gate, 1, __ATOMIC_RELEASE);
		pthread_join(worker, 0);
		working = 0;
	}
}

static int start(unsigned k, void (*fn)(void *), void *arg)
{
	if (k != 1)
		return 1;
	harness_join();
	job.fn = fn;
	job.arg = arg;
	__atomic_store_n(&gate, 0, __ATOMIC_RELEASE);
	if (pthread_create(&worker, 0, cpu1, 0))
		return 1;
	working = 1;
	return 0;
}

/* CPU 1 goes on with its job only once the core waits here with the job not done. */
static void wait_until(int (*ready)(void *), void *arg)
{
	if (!ready(arg))
		__atomic_store_n(&gate, 1, __ATOMIC_RELEASE);
	while (!ready(arg))
		sched_yield();
}

int harness_drains(void)
{
	return __atomic_load_n(&drains, __ATOMIC_SEQ_CST);
}

int harness_start_cpus(void)
{
	static struct sdt_control_ops ops;
	static struct sdt_control_cpu two[2];

	if (init_runtime() < 0)
		return -1;
	ops.ncpus = 2;
	ops.this_cpu = this_cpu2;
	ops.area = area;
	ops.phys = phys;
	ops.drain = drain;
	ops.start = start;
	ops.wait_until = wait_until;
	return sdt_control_init(&ops, two);
}
#endif

int harness_start(void)
{
	static struct sdt_control_ops ops;

	if (init_runtime() < 0)
		return -1;
	ops.ncpus = 1;
	ops.this_cpu = this_cpu;
	ops.program_memory = program_memory;
	ops.agg_memory = agg_memory;
#ifdef HARNESS_GUARDED
	ops.guarded = guarded;
#endif
	return sdt_control_init(&ops, cpus);
}

void harness_input(const char *data, unsigned long len)
{
	sdt_control_input(data, len, reply);
}

int harness_line(const char *line)
{
	return sdt_control_line(line, reply);
}

const char *harness_replies(unsigned long *len)
{
	*len = used;
	used = 0;
	return replies;
}
