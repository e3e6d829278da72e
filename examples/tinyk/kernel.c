/*
 * tinyk: a small S-mode RISC-V kernel under OpenSBI (QEMU virt), written as a kernel engineer ports
 * sdtgen's runtime into a kernel of their own: its own boot code (start.S), linker script
 * (tinyk.ld), per-CPU data (tp points at the CPU's struct percpu), a polled 16550 UART that carries
 * the control channel and a shell on the same line (console_byte), and SBI for what S-mode cannot do
 * alone (IPIs, starting harts, power off).
 * It links the runtime, the serial transport and the control core (sdtgen's Makefile fragment
 * builds them) and nothing else of sdtgen's: `sdtgen qemu tinyk.elf -- -bios default` boots it,
 * `sdtgen attach` drives it when QEMU runs on its own. It is the worked example of a kernel a host
 * drives (docs/runtime.md#the-worked-examples): docs/control.md describes each of its ops.
 *
 * Its clock samples on a CPU of its own: `sample(n)` has the last CPU's timer interrupt fire the probe
 * tk:clock:tick:sample n times, one a tick, numbered from 0, while the caller waits (sample_start() and
 * sample_stop(): until stopped, the caller gone); the shell's `samples` says how many each CPU took
 * since boot. Those events are recorded on a CPU no call of the host's runs on, as a kernel's own
 * interrupts and threads record them (docs/control.md's `flush`). The probe's breakpoint (--arm trap)
 * nests in the timer's trap: start.S keeps sstatus, which the nested trap and its sret overwrite.
 *
 * Its tasks, as its task hook (task()) says them to the runtime (docs/runtime.md, Task context): tinyk has no
 * scheduler, so each CPU runs one kernel thread, task CPU + 1 named cpuN, in the kernel's context; an interrupt
 * (the clock's tick, an IPI) is no task's: id 0, SDT_CONTEXT_INTERRUPT. So `curcontext == interrupt` selects the
 * clock's samples, and a trace shows each CPU's thread (Perfetto: a thread track each; CTF: a tid per event).
 *
 * CPUs are numbered as Linux numbers them, independently of hart ids: the hart OpenSBI let in first (any one) is
 * CPU 0 and runs the control core, the others follow in hart order; that number is the runtime's CPU (sdt_cpu's
 * index, the host's --cpu) and the SBI calls that name a hart (IPIs, starting it) take its hart id. So the last
 * CPU, whose clock samples, is never the control core's when there are two or more, whichever hart booted.
 *
 * What S-mode needs that an M-mode kernel does by itself:
 *   - rdtime works only because M-mode (OpenSBI) sets mcounteren.TM;
 *   - an IPI is an SBI call (the IPI extension), arriving as a supervisor software interrupt;
 *   - a timer is an SBI call (the TIME extension), arriving as a supervisor timer interrupt;
 *   - a breakpoint arrives with scause 3 and sepc at the ebreak.
 */
#include <sdt.h>
#include <sdt_runtime.h>
#include <sdt_setjmp.h>

SDT_PROVIDER_DECLARE(tk);
SDT_PROBE_DEFINE2(tk, clock, tick, sample, "unsigned long", "int");

#define MAX_CPUS 8	/* harts 0..7 (start.S's stacks), CPUs 0..7 */
#define RING (64 << 10)	/* each CPU's trace ring */
#define PACKET (4 << 10)
#define UART ((volatile unsigned char *)0x10000000ul)
#define RAM 0x80000000ul
#define RAM_SIZE (128ul << 20)	/* what `-m 128M` gives; the strings a recorder may copy come from it */
#define TIMEBASE_HZ 10000000ull	/* virt's timebase-frequency (the device tree says so) */
#define SCAUSE_IRQ (1ul << 63)
#define IRQ_SSOFT 1
#define IRQ_STIMER 5
#define EXC_BREAKPOINT 3
#define SIE_SSIE (1ul << 1)
#define SIE_STIE (1ul << 5)
#define TICK_HZ 1000	/* the clock's rate while it samples */
#define SSTATUS_SIE (1ul << 1)
#define SBI_EXT_TIME 0x54494d45	/* "TIME" */
#define SBI_EXT_IPI 0x735049	/* "sPI" */
#define SBI_EXT_HSM 0x48534d	/* "HSM" */
#define SBI_EXT_SRST 0x53525354	/* "SRST" */
#define SBI_ERR_ALREADY_AVAILABLE (-6)	/* hart_start: the hart runs already */

typedef unsigned long word;

/* One CPU's data: tp holds its address. */
struct percpu {
	struct sdt_cpu area;	/* the runtime's area: cpu_area() gives it */
	unsigned cpu;	/* the logical id: its index in percpu[] and the runtime's */
	unsigned hart;	/* what SBI calls it */
	volatile int online;
	volatile unsigned long synced;	/* the sync generation this CPU has serialized for */
	void (*volatile job)(void *);	/* posted by another CPU (the control core's start), cleared when done */
	void *job_arg;
	unsigned poster;
	volatile unsigned long samples_left;	/* ticks this CPU's clock still has to sample (sample()) */
	unsigned long sample_seq;	/* the next sample's number */
	volatile unsigned long samples_taken;	/* every sample since boot: the shell's `samples` */
	volatile int ticking;	/* its timer is set */
	unsigned sampler;	/* the CPU that asked (it waits for the last sample) */
	sdt_jmp_buf recover;	/* where a fault in a guarded call jumps back to (sdt_setjmp: integer registers only) */
	volatile int guarded;
	struct sdt_control_fault fault;
	int in_irq;	/* interrupts this CPU is inside (the task hook says them) */
};

static struct percpu percpu[MAX_CPUS];
static unsigned char rings[MAX_CPUS][RING] __attribute__((aligned(64)));
static struct sdt_control_cpu control[MAX_CPUS];
static unsigned ncpus;
static unsigned boot_hart;	/* CPU 0's hart */
static volatile unsigned long sync_gen;
static volatile unsigned sync_from;
static int uart_lock;
extern volatile unsigned released;
extern char _stext[], _etext[];
void _start(void);

/* -- the CPU ----------------------------------------------------------------------------------- */

static struct percpu *self(void)
{
	struct percpu *p;

	__asm__ __volatile__("mv %0, tp" : "=r"(p));
	return p;
}

static void irq_on(void)
{
	__asm__ __volatile__("csrs sstatus, %0" ::"r"(SSTATUS_SIE) : "memory");
}

static void irq_off(void)
{
	__asm__ __volatile__("csrc sstatus, %0" ::"r"(SSTATUS_SIE) : "memory");
}

/* With interrupts off: sleep until one is pending, then take it (wfi wakes even with SIE clear). */
static void idle(void)
{
	__asm__ __volatile__("wfi\n\tcsrs sstatus, %0\n\tcsrc sstatus, %0" ::"r"(SSTATUS_SIE) : "memory");
}

static sdt_u64 clock(void)
{
	sdt_u64 t;

	__asm__ __volatile__("rdtime %0" : "=r"(t));	/* M-mode set mcounteren.TM, or this traps */
	return t;
}

static void lock(int *l)
{
	while (__atomic_exchange_n(l, 1, __ATOMIC_ACQUIRE))
		while (__atomic_load_n(l, __ATOMIC_RELAXED))
			;
}

static void unlock(int *l)
{
	__atomic_store_n(l, 0, __ATOMIC_RELEASE);
}

/* -- SBI ------------------------------------------------------------------------------------------ */

static long sbi(long ext, long fid, long a0, long a1, long a2)
{
	register long r0 __asm__("a0") = a0, r1 __asm__("a1") = a1, r2 __asm__("a2") = a2;
	register long r6 __asm__("a6") = fid, r7 __asm__("a7") = ext;

	__asm__ __volatile__("ecall" : "+r"(r0), "+r"(r1) : "r"(r2), "r"(r6), "r"(r7) : "memory");
	return r0;
}

static void send_ipi(unsigned cpu)
{
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	sbi(SBI_EXT_IPI, 0, 1l << percpu[cpu].hart, 0, 0);	/* a hart mask, from hart 0 */
}

/* -- the UART: the control channel, and the console --------------------------------------------- */

static void putc(int c)
{
	while (!(UART[5] & 0x20))	/* LSR.THRE */
		;
	UART[0] = (unsigned char)c;
}

static int getc(void)
{
	return UART[5] & 0x01 ? UART[0] : -1;	/* LSR.DR */
}

static void put(const void *data, unsigned long len)
{
	const unsigned char *p = data;

	while (len--)
		putc(*p++);
}

static void puts_raw(const char *s)
{
	while (*s)
		putc(*s++);
}

/* A reply line of the control core: a text frame, the line to itself meanwhile (a leaf lock: no probe
 * fires under it). */
static void reply(const char *text, unsigned long len)
{
	lock(&uart_lock);
	sdt_serial_frame(put, SDT_FRAME_TEXT, text, len);
	unlock(&uart_lock);
}

static void drain_all(void)
{
	unsigned k;

	for (k = 0; k < ncpus; k++) {
		lock(&uart_lock);
		sdt_serial_drain(&percpu[k].area, put);
		unlock(&uart_lock);
	}
}

/* -- the shell, on the control core's UART ----------------------------------------------------------- */

static void put_decimal(unsigned long v)
{
	char digits[20];
	unsigned n = 0;

	do
		digits[n++] = (char)('0' + v % 10);
	while (v /= 10);
	while (n)
		putc(digits[--n]);
}

/* Whether the line's n bytes are ``word`` (and, when ``more``, what follows it after a space). */
static int is(const char *line, unsigned n, const char *word, int more)
{
	unsigned i = 0;

	while (word[i] && i < n && line[i] == word[i])
		i++;
	return !word[i] && (more ? i < n && line[i] == ' ' : i == n);
}

/* One line typed at tinyk's shell: `echo TEXT` says TEXT; `samples` the samples each CPU's clock has taken since
 * boot (`samples CPU N` a CPU). Its output is console bytes, outside frames. */
static void shell_line(const char *line, unsigned n)
{
	unsigned k;

	lock(&uart_lock);
	if (is(line, n, "echo", 1)) {
		put(line + 5, n - 5);
		puts_raw("\r\n");
	} else if (is(line, n, "samples", 0)) {
		for (k = 0; k < ncpus; k++) {
			puts_raw("samples ");
			put_decimal(k);
			putc(' ');
			put_decimal(percpu[k].samples_taken);
			puts_raw("\r\n");
		}
	} else if (n) {
		puts_raw("tinyk: echo TEXT and samples are all this shell knows\r\n");
	}
	unlock(&uart_lock);
}

/* The console's line discipline: a line a host escapes (SDT_CONTROL_ESCAPE first) goes to the control core
 * whole, and every other byte to the shell's line, so a host's commands may arrive while a line is half
 * typed. A kernel whose console takes bytes in an interrupt handler (xv6's consoleintr) buffers the claimed
 * bytes there and gives them to sdt_control_input from a thread (docs/control.md). */
static void console_byte(char b)
{
	static char line[128];
	static unsigned n;

	if (sdt_control_claims(b)) {
		sdt_control_input(&b, 1, reply);
	} else if (b == '\r' || b == '\n') {
		shell_line(line, n);
		n = 0;
	} else if (n < sizeof(line)) {
		line[n++] = b;
	}
}

/* -- the runtime's hooks --------------------------------------------------------------------------- */

static int all_synced(unsigned long gen, unsigned me)
{
	unsigned k;

	for (k = 0; k < ncpus; k++)
		if (k != me && percpu[k].online && __atomic_load_n(&percpu[k].synced, __ATOMIC_ACQUIRE) < gen)
			return 0;
	return 1;
}

/* Every other CPU runs fence.i in its IPI handler and answers with an IPI; this one sleeps until all have. */
static void sync_cores(void)
{
	unsigned k, me = self()->cpu;
	unsigned long gen;

	irq_off();
	sync_from = me;
	gen = __atomic_add_fetch(&sync_gen, 1, __ATOMIC_SEQ_CST);
	percpu[me].synced = gen;
	for (k = 0; k < ncpus; k++)
		if (k != me && percpu[k].online)
			send_ipi(k);
	__asm__ __volatile__("fence.i" ::: "memory");
	while (!all_synced(gen, me))
		idle();
	irq_on();
}

static void icache_flush(void *addr, unsigned long len)
{
	(void)addr;
	(void)len;
	__asm__ __volatile__("fence.i" ::: "memory");
}

static struct sdt_cpu *cpu_area(void)
{
	return &self()->area;
}

/* Half a ring waits: its CPU sends what is there, unless the control core wants the line quiet. */
static void notify(struct sdt_cpu *c)
{
	if (!sdt_control_quiet() && c->commit_seq - c->read_seq >= c->packets / 2) {
		lock(&uart_lock);
		sdt_serial_drain(c, put);
		unlock(&uart_lock);
	}
}

/* Append ``s`` to the line being built in buf (n bytes so far, at most size). */
static unsigned add(char *buf, unsigned n, unsigned size, const char *s)
{
	while (*s && n < size)
		buf[n++] = *s++;
	return n;
}

/* A line of the runtime's log: REPLIES' `report TEXT` (no initialized arrays: they would be memset calls). */
static void report(const struct sdt_site *site, const char *line)
{
	char buf[300];

	(void)site;
	reply(buf, add(buf, add(buf, 0, sizeof(buf), SDT_CTL_REPORT " "), sizeof(buf), line));
}

/* -- traps --------------------------------------------------------------------------------------- */

/* The next tick in 1/TICK_HZ s; or none (the timer's compare value at its maximum clears the pending tick). */
static void timer_set(int on)
{
	sbi(SBI_EXT_TIME, 0, on ? (long)(clock() + TIMEBASE_HZ / TICK_HZ) : -1l, 0, 0);
}

/* A tick of this CPU's clock: the next sample, and the next tick while samples are wanted; the CPU that asked
 * is told when the last is taken. A breakpoint taken here nests in the interrupt: start.S keeps sstatus. */
static void tick(void)
{
	struct percpu *p = self();
	unsigned long left = __atomic_load_n(&p->samples_left, __ATOMIC_ACQUIRE);

	if (left) {
		SDT_PROBE2(tk, clock, tick, sample, p->sample_seq, (int)p->cpu);
		p->sample_seq++;
		p->samples_taken++;
		/* after the counts it reports; sample_stop() may have set 0 meanwhile, and 0 it stays */
		if (__atomic_compare_exchange_n(&p->samples_left, &left, left - 1, 0, __ATOMIC_RELEASE, __ATOMIC_ACQUIRE))
			left--;
	}
	__atomic_store_n(&p->ticking, left != 0, __ATOMIC_RELEASE);
	timer_set(left != 0);
	if (!left)	/* the clock stops: the CPU that asked may be asleep waiting for it */
		send_ipi(p->sampler);
}

static void ipi(void)
{
	unsigned long gen = __atomic_load_n(&sync_gen, __ATOMIC_ACQUIRE);
	struct percpu *p = self();

	__asm__ __volatile__("csrc sip, %0" ::"r"(SIE_SSIE));
	if (__atomic_load_n(&p->samples_left, __ATOMIC_ACQUIRE) && !p->ticking) {	/* sample() asked: the clock starts */
		p->ticking = 1;
		timer_set(1);
	}
	if (p->synced >= gen)
		return;	/* a wake-up: a job, or a job done */
	__asm__ __volatile__("fence.i" ::: "memory");
	__atomic_store_n(&p->synced, gen, __ATOMIC_RELEASE);
	send_ipi(sync_from);
}

static void fault(word cause, word pc, word addr)
{
	struct percpu *p = self();
	static const char hex[] = "0123456789abcdef";
	char line[80];
	unsigned n = add(line, 0, sizeof(line), SDT_CTL_PANIC " "), i;
	word v[SDT_FIELDS_PANIC];

	v[SDT_FIELD_PANIC_CPU] = p->cpu;
	v[SDT_FIELD_PANIC_CAUSE] = cause;
	v[SDT_FIELD_PANIC_PC] = pc;
	v[SDT_FIELD_PANIC_ADDR] = addr;
	if (p->guarded) {
		p->fault.cause = cause;
		p->fault.pc = pc;
		p->fault.addr = addr;
		p->area.nesting = 0;	/* a fault inside a recorder must not silence the CPU for good */
		sdt_longjmp(p->recover, 1);
	}
	for (i = 0; i < SDT_FIELD_PANIC_TORN; i++) {	/* REPLIES' `panic CPU CAUSE PC ADDR`, no torn flag */
		int shift = 60;
		while (shift > 0 && !(v[i] >> shift))
			shift -= 4;
		for (; shift >= 0; shift -= 4)
			line[n++] = hex[(v[i] >> shift) & 15];
		line[n++] = ' ';
	}
	reply(line, n - 1);
	for (;;)
		__asm__ __volatile__("wfi");
}

/* From trap_entry (start.S): r[0] is sepc, r[2] the sp, r[1] ra, r[10..15] a0..a5. */
/* An interrupt's entry and exit change what the task hook says on this CPU: the runtime is told, so the events
 * inside it, and the thread's after it, each say theirs (sdt_task_switch). */
static void irq_enter(void)
{
	self()->in_irq++;
	sdt_task_switch();
}

static void irq_exit(void)
{
	self()->in_irq--;
	sdt_task_switch();
}

void tinyk_trap(word cause, word tval, word *r)
{
	struct sdt_frame f;
	int i;

	if (cause == (SCAUSE_IRQ | IRQ_SSOFT)) {
		irq_enter();
		ipi();
		irq_exit();
		return;
	}
	if (cause == (SCAUSE_IRQ | IRQ_STIMER)) {
		irq_enter();
		tick();
		irq_exit();
		return;
	}
	if (cause == EXC_BREAKPOINT) {
		f.pc = r[0];
		f.sp = r[2];
		f.flags = 0;
		f.ret = r[10];
		f.link = r[1];
		for (i = 0; i < 6; i++)
			f.arg[i] = r[10 + i];
		if (sdt_trap(&f) != SDT_TRAP_NOT_OURS) {
			r[0] = (word)f.pc;
			r[2] = (word)f.sp;
			r[10] = (word)f.ret;
			r[1] = (word)f.link;
			return;
		}
	}
	fault(cause, r[0], tval);
}

/* The runtime's task hook: this CPU's kernel thread, or no task inside an interrupt. Called with the CPU held (in
 * a recorder, which may run in the interrupt): it reads only this CPU's data. */
static sdt_u64 task(sdt_u32 *context, const char **name)
{
	static const char names[MAX_CPUS][8] = {"cpu0", "cpu1", "cpu2", "cpu3", "cpu4", "cpu5", "cpu6", "cpu7"};
	struct percpu *p = self();

	if (p->in_irq) {
		*context = SDT_CONTEXT_INTERRUPT;
		if (name)
			*name = 0;
		return 0;
	}
	*context = SDT_CONTEXT_KERNEL;
	if (name)
		*name = names[p->cpu];
	return p->cpu + 1;
}

/* -- what the control core asks of the kernel ------------------------------------------------------ */

static unsigned this_cpu(void)
{
	return self()->cpu;
}

static struct sdt_cpu *area(unsigned k)
{
	return k < ncpus ? &percpu[k].area : 0;
}

/* fn(arg), or 1 with the fault that ended it. The runtime's setjmp, not __builtin_setjmp: GCC's saves the FP
 * registers where -march has F or D, which traps in a kernel that runs with the FPU off (docs/runtime.md). */
static __attribute__((noinline)) int guarded(void (*fn)(void *), void *arg, struct sdt_control_fault *out)
{
	struct percpu *p = self();

	if (sdt_setjmp(p->recover)) {
		p = self();
		p->guarded = 0;
		*out = p->fault;
		irq_on();	/* the trap left them off */
		return 1;
	}
	p->guarded = 1;
	__asm__ __volatile__("" ::: "memory");
	fn(arg);
	__asm__ __volatile__("" ::: "memory");
	p->guarded = 0;
	return 0;
}

static int start(unsigned k, void (*fn)(void *), void *arg)
{
	if (k >= ncpus || !percpu[k].online || __atomic_load_n(&percpu[k].job, __ATOMIC_ACQUIRE))
		return -1;
	percpu[k].job_arg = arg;
	percpu[k].poster = self()->cpu;
	__atomic_store_n(&percpu[k].job, fn, __ATOMIC_RELEASE);
	send_ipi(k);
	return 0;
}

static void wait_until(int (*ready)(void *), void *arg)
{
	irq_off();
	while (!ready(arg))
		idle();
	irq_on();
}

static void power_off(int code)
{
	sbi(SBI_EXT_SRST, 0, 0, code ? 1 : 0, 0);	/* shutdown; a reason of "failure" for a non-zero code */
	for (;;)
		__asm__ __volatile__("wfi");
}

/* -- the clock's samples --------------------------------------------------------------------------- */

static int samples_done(void *arg)
{
	return !__atomic_load_n(&((struct percpu *)arg)->samples_left, __ATOMIC_ACQUIRE);
}

static int clock_stopped(void *arg)
{
	return !__atomic_load_n(&((struct percpu *)arg)->ticking, __ATOMIC_ACQUIRE);
}

/* The last CPU's clock, asked for n samples (from 0) by this CPU; 0, or -1 while it takes others. */
static int sample_begin(struct percpu *p, unsigned long n)
{
	if (__atomic_load_n(&p->samples_left, __ATOMIC_ACQUIRE) || !clock_stopped(p))
		return -1;
	p->sampler = self()->cpu;
	p->sample_seq = 0;
	__atomic_store_n(&p->samples_left, n, __ATOMIC_RELEASE);
	if (p == self()) {
		irq_off();
		p->ticking = 1;
		timer_set(1);
		irq_on();
	} else {
		send_ipi(p->cpu);
	}
	return 0;
}

/* n samples from the last CPU's clock, one a tick, numbered from 0; waits until they are taken (the probe fires on
 * that CPU, in its timer interrupt, not here unless there is one CPU). The samples it took. */
long sample(int n)
{
	struct percpu *p = &percpu[ncpus - 1];

	if (n <= 0 || sample_begin(p, (unsigned long)n))
		return 0;
	wait_until(samples_done, p);
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	return (long)p->sample_seq;
}

/* The last CPU's clock samples on every tick from now until sample_stop(): a kernel's own activity, recorded while
 * the host does something else or nothing. 0, or -1 while it takes others. */
long sample_start(void)
{
	return sample_begin(&percpu[ncpus - 1], ~0ul);
}

/* The clock stopped; the samples it took since it was started (what sample_start's run recorded, numbered from 0). */
long sample_stop(void)
{
	struct percpu *p = &percpu[ncpus - 1];

	p->sampler = self()->cpu;
	__atomic_store_n(&p->samples_left, 0, __ATOMIC_RELEASE);
	wait_until(clock_stopped, p);	/* its next tick sees 0 and sets no other */
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	return (long)p->sample_seq;
}

/* -- boot ---------------------------------------------------------------------------------------- */

/* A hart's logical CPU: the boot hart is CPU 0, the others keep their order after it. */
static unsigned cpu_of(unsigned hart)
{
	return hart == boot_hart ? 0 : hart < boot_hart ? hart + 1 : hart;
}

static void cpu_init(unsigned cpu)
{
	struct percpu *p = &percpu[cpu];

	p->cpu = cpu;
	__asm__ __volatile__("mv tp, %0" ::"r"(p));
	__asm__ __volatile__("csrs sie, %0" ::"r"(SIE_SSIE | SIE_STIE));
}

void tinyk_secondary(word hart)
{
	struct percpu *p;

	cpu_init(cpu_of((unsigned)hart));	/* boot_hart was set before `released` */
	p = self();
	__atomic_store_n(&p->online, 1, __ATOMIC_RELEASE);
	for (;;) {
		void (*job)(void *);
		irq_off();
		while (!(job = __atomic_load_n(&p->job, __ATOMIC_ACQUIRE)))
			idle();
		irq_on();
		job(p->job_arg);
		__atomic_store_n(&p->job, (void (*)(void *))0, __ATOMIC_RELEASE);
		send_ipi(p->poster);	/* it may be asleep in wait_until() */
	}
}

static int all_online(unsigned cpus)
{
	unsigned k;

	for (k = 0; k < MAX_CPUS; k++)
		if ((cpus >> k & 1) && !__atomic_load_n(&percpu[k].online, __ATOMIC_ACQUIRE))
			return 0;
	return 1;
}

void tinyk_main(word hart)
{
	static struct sdt_range text, readable;
	static struct sdt_hooks hooks;
	static struct sdt_control_ops ops;
	unsigned k, cpus = 0;
	sdt_u64 until;

	boot_hart = (unsigned)hart;
	for (k = 0; k < MAX_CPUS; k++)
		percpu[cpu_of(k)].hart = k;
	cpu_init(0);
	puts_raw("tinyk: booting on hart ");	/* console bytes outside frames: a host shows them as they are */
	put_decimal(hart);
	puts_raw(", CPU 0\r\n");
	text.start = (word)_stext;
	text.size = (word)(_etext - _stext);
	readable.start = RAM;
	readable.size = RAM_SIZE;
	hooks.sync_cores = sync_cores;
	hooks.icache_flush = icache_flush;
	hooks.cpu_area = cpu_area;
	hooks.clock = clock;
	hooks.notify = notify;
	hooks.report = report;
	hooks.text = &text;
	hooks.ntext = 1;
	hooks.readable = &readable;
	hooks.nreadable = 1;
	hooks.clock_hz = TIMEBASE_HZ;
	hooks.task = task;
	for (k = 0; k < MAX_CPUS; k++)
		sdt_cpu_attach(&percpu[k].area, k, rings[k], RING, PACKET, SDT_DISCARD);
	ncpus = 1;
	sdt_init(&hooks);	/* before any other hart runs kernel code */
	__atomic_store_n(&released, 1, __ATOMIC_RELEASE);
	for (k = 0; k < MAX_CPUS; k++) {	/* OpenSBI may have left them stopped (HSM): start them here */
		long e = k == hart ? 0 : sbi(SBI_EXT_HSM, 0, k, (long)(word)_start, 0);
		if (e == 0 || e == SBI_ERR_ALREADY_AVAILABLE)	/* started now, or running already: it will check in */
			cpus |= 1u << cpu_of(k);
	}
	percpu[0].online = 1;
	/* Every hart that exists checks in: a second at most, since a busy host may run a vCPU's thread late. */
	for (until = clock() + TIMEBASE_HZ; clock() < until && !all_online(cpus);)
		;
	for (ncpus = 0; ncpus < MAX_CPUS && percpu[ncpus].online; ncpus++)
		;
	irq_on();
	ops.ncpus = ncpus;
	ops.clock_name = "time";
	ops.this_cpu = this_cpu;
	ops.area = area;
	ops.guarded = guarded;
	ops.start = start;
	ops.wait_until = wait_until;
	ops.drain = drain_all;
	ops.power_off = power_off;
	sdt_control_init(&ops, control);
	lock(&uart_lock);
	sdt_serial_info(put);
	unlock(&uart_lock);
	sdt_control_announce(reply);
	for (;;) {
		int c = getc();
		char b;
		if (c < 0)
			continue;
		b = (char)c;
		console_byte(b);
	}
}
