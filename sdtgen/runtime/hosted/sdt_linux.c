/*
 * sdt_linux.c - sdtgen's runtime in a Linux process on x86-64 (sdt_linux.h): the hooks, the breakpoint
 * handler and a consumer, for any user-space program that links the runtime. Not freestanding: it is
 * compiled with the program, never with a kernel.
 *
 * What each hook is here:
 *   CPUs          threads: a thread's CPU is a slot (area and ring) it attached, explicitly or at its
 *                 first firing (lazily, in a signal handler too: only async-signal-safe calls on that
 *                 path); a thread that exits leaves its slot to be taken back once it is seen dead
 *   cpu_area      a thread-local pointer (initial-exec TLS: no allocation, safe in the handler)
 *   text          a second mapping of the text's pages, writable and never executable (a memfd the
 *                 text is remapped from), or mprotect to RWX for each batch where that is refused
 *   sync_cores    membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE), registered at start
 *   clock         the TSC in nanoseconds: its rate measured against CLOCK_MONOTONIC at start, ticks
 *                 scaled by a 32.32 multiplier (Linux's sched_clock's way), so clock_hz is 1e9
 *   breakpoint    SIGTRAP: RIP, RSP, RFLAGS, RAX and the argument registers from the ucontext into a
 *                 frame, sdt_trap, and back; a breakpoint not the runtime's goes to the handler the
 *                 program had, or kills it as SIGTRAP would have
 *   notify        a write to an eventfd that wakes the consumer thread
 *   readable      the readable mappings of /proc/self/maps: read at start, when a thread attaches, on
 *                 sdt_linux_refresh, and by the consumer after it read a string recorded unreadable
 *   text ranges   the executable segments of the program: a site outside them is refused
 *   task          the calling thread: its id (gettid, kept in TLS from its first firing), SDT_CONTEXT_TASK, and
 *                 its name (prctl PR_GET_NAME, what pthread_setname_np set) when the runtime asks for it
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <linux/membarrier.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include <sdt_linux.h>

#if !defined(__x86_64__)
#error "sdt_linux.c is the x86-64 Linux platform (its breakpoint frame and clock are x86-64's)"
#endif

#define MAX_RANGES 1024	/* readable ranges; one that would be the 1025th stays unreadable */
#define MAX_SEGMENTS 8	/* executable segments of the program */
#define MAX_MODULE_SEGMENTS 24	/* executable segments of shared objects loaded as modules, at once */
#define TLS __attribute__((tls_model("initial-exec")))

struct slot {
	struct sdt_cpu area;
	void *ring;
	int tid;	/* the thread that has it; 0: free; -1: being taken back */
	int used;	/* ever attached: the consumer reads it */
	FILE *stream;	/* trace_dir/stream_<cpu>, opened by the reader at its first packet */
};

struct segment {
	unsigned long lo, hi;	/* page-aligned */
	int fd;	/* the memfd the text is mapped from (ALIAS) */
};

static struct sdt_linux_options opt;
static struct slot slots[SDT_LINUX_MAX_CPUS];
static unsigned slots_seen;	/* the highest slot used, plus one */
static TLS __thread struct slot *self;
static TLS __thread int task_tid;	/* this thread's id, from its first firing (0: not asked yet) */
static int task_fork_handled;	/* task_after_fork registered (once, however often the runtime starts) */
static TLS __thread char task_name[16];	/* its name when the runtime first asked for it */
static TLS __thread int task_named;	/* task_name read: 1, none (prctl failed): -1, not yet: 0 */
static TLS __thread int attaching;	/* a lazy attach in progress on this thread: a firing inside it records nothing */
static int started, text_mode, wake_fd = -1, consumer_running;
static volatile int consumer_stop;
static pthread_t consumer;
static pthread_mutex_t read_lock = PTHREAD_MUTEX_INITIALIZER;
static char *packet_copy;
static long page;
static struct sdt_hooks hooks;
static struct segment segments[MAX_SEGMENTS + MAX_MODULE_SEGMENTS];	/* the program's, then modules' */
static unsigned nsegments, program_segments;	/* program_segments: the program's own, before modules' */
static struct sdt_range text_ranges[MAX_SEGMENTS];
static void *alias_at;	/* the writable mapping of the batch in progress (ALIAS) */
static unsigned long alias_len;
static unsigned long stat_packets, stat_events, stat_lost, stat_unattached, stat_transient, stat_refreshes;

/* -- lines -------------------------------------------------------------------------------------- */

/* One line on standard error, with write(2): callable from the breakpoint handler. */
static void say(const char *a, const char *b, const char *c)
{
	struct iovec v[4] = {{(void *)a, strlen(a)}, {(void *)b, strlen(b)}, {(void *)c, strlen(c)}, {"\n", 1}};

	if (writev(2, v, 4) < 0) {
	}
}

static void __attribute__((noreturn)) fatal(const char *what)
{
	say("sdt_linux: ", what, errno ? strerror(errno) : "");
	_exit(2);
}

/* -- readable ranges ------------------------------------------------------------------------------ */

/*
 * The runtime reads hooks.readable[0 .. sdt_hooks.nreadable) at every string argument, from any thread.
 * The table changes only in ways every reader may see half done: an entry keeps its start for good and
 * only its size changes (a mapping grew, shrank or went: size 0); a new range goes into a fresh entry past
 * the count, which is published after it (the count is the first thing a reader loads). A mapping
 * unmapped after the last read is still believed readable until the next: the one window that stays.
 */
static struct sdt_range ranges[MAX_RANGES];
static unsigned nranges;
static struct sdt_range fresh[MAX_RANGES];
static int refresh_lock;

static unsigned long hex(const char **p)
{
	unsigned long v = 0;

	for (;; (*p)++) {
		char ch = **p;
		int d = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
		if (d < 0)
			return v;
		v = v << 4 | (unsigned long)d;
	}
}

/* One line of /proc/self/maps into fresh[] (adjacent readable mappings merged); returns the count. */
static unsigned maps_line(const char *line, unsigned n)
{
	const char *p = line;
	unsigned long lo = hex(&p), hi;

	if (*p++ != '-')
		return n;
	hi = hex(&p);
	if (*p++ != ' ' || *p != 'r' || strstr(p, "[vvar"))	/* vvar's pages may fault when read */
		return n;
	if (n && fresh[n - 1].start + fresh[n - 1].size == lo)
		fresh[n - 1].size += hi - lo;
	else if (n < MAX_RANGES)
		fresh[n].start = lo, fresh[n].size = hi - lo, n++;
	return n;
}

/* /proc/self/maps into fresh[], with open/read/close only (async-signal-safe); returns the count. */
static unsigned read_maps(void)
{
	char buf[4096], line[256];
	unsigned n = 0, used = 0;
	ssize_t got;
	int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return 0;
	while ((got = read(fd, buf, sizeof(buf))) > 0) {
		ssize_t i;
		for (i = 0; i < got; i++) {
			if (buf[i] != '\n') {
				if (used < sizeof(line) - 1)
					line[used++] = buf[i];
				continue;
			}
			line[used] = 0;
			n = maps_line(line, n);
			used = 0;
		}
	}
	close(fd);
	return n;
}

static void publish_ranges(unsigned n)
{
	if (started)
		__atomic_store_n(&sdt_hooks.nreadable, n, __ATOMIC_RELEASE);
	else
		hooks.nreadable = n;
}

void sdt_linux_refresh(void)
{
	unsigned n, i, j, count;

	if (__atomic_exchange_n(&refresh_lock, 1, __ATOMIC_ACQUIRE))
		return;	/* another thread, or the code this signal interrupted, is at it */
	n = read_maps();
	if (!n) {
		__atomic_store_n(&refresh_lock, 0, __ATOMIC_RELEASE);
		return;
	}
	count = nranges;
	for (i = 0; i < count; i++) {	/* each entry keeps its start: what of it is readable now */
		sdt_u64 size = 0;
		for (j = 0; j < n; j++)
			if (ranges[i].start - fresh[j].start < fresh[j].size)
				size = fresh[j].start + fresh[j].size - ranges[i].start;
		if (size != ranges[i].size)
			__atomic_store_n(&ranges[i].size, size, __ATOMIC_RELAXED);
	}
	for (j = 0; j < n && count < MAX_RANGES; j++) {	/* a range no entry covers the start of: a new one */
		for (i = 0; i < count; i++)
			if (fresh[j].start - ranges[i].start < ranges[i].size)
				break;
		if (i == count)
			ranges[count++] = fresh[j];
	}
	nranges = count;
	publish_ranges(count);
	__atomic_add_fetch(&stat_refreshes, 1, __ATOMIC_RELAXED);
	__atomic_store_n(&refresh_lock, 0, __ATOMIC_RELEASE);
}

/* -- CPUs ---------------------------------------------------------------------------------------------- */

static int my_tid(void)
{
	return (int)syscall(SYS_gettid);
}

/* Whether thread tid is inside the kernel's exit path: PF_EXITING (0x4) in the flags of its stat line, the
 * ninth field, the seventh after the command's closing parenthesis. pthread_join returns once the kernel has
 * cleared the thread's tid word, before the thread is released, so its number still names it for a while;
 * from PF_EXITING on it runs no more user code. Only open, read and close: async-signal-safe. */
static int exiting(int tid)
{
	static const char head[] = "/proc/self/task/";
	char path[64], digits[16], buf[512], *p;
	unsigned long flags = 0;
	int fd, field, nd = 0, at = sizeof(head) - 1;
	ssize_t n;

	memcpy(path, head, sizeof(head) - 1);	/* no snprintf: it is not async-signal-safe */
	do
		digits[nd++] = (char)('0' + tid % 10);
	while ((tid /= 10) && nd < (int)sizeof(digits));
	while (nd)
		path[at++] = digits[--nd];
	memcpy(path + at, "/stat", sizeof("/stat"));
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;	/* released since, or no /proc: asked again at the next look */
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	p = strrchr(buf, ')');
	for (field = 2; p && field < 9; field++)
		p = strchr(p + 1, ' ');
	if (!p)
		return 0;
	for (p++; *p >= '0' && *p <= '9'; p++)
		flags = flags * 10 + (unsigned long)(*p - '0');
	return (flags & 0x4) != 0;
}

/* Whether slot s's thread has exited: its number no longer names a thread of this process, or the thread it
 * names is on its way out. */
static int owner_gone(const struct slot *s)
{
	int tid = __atomic_load_n(&s->tid, __ATOMIC_ACQUIRE);

	if (tid <= 0)
		return 0;
	if (syscall(SYS_tgkill, getpid(), tid, 0) < 0)
		return errno == ESRCH;
	if (!exiting(tid))
		return 0;
	__atomic_thread_fence(__ATOMIC_ACQUIRE);	/* its last stores, made before it entered the kernel */
	return 1;
}

/* Take slot k for the calling thread: free, or left by a thread that exited (its open packet closed first). */
static int claim(unsigned k, int tid)
{
	struct slot *s = &slots[k], *mine;
	int free = 0, old = __atomic_load_n(&s->tid, __ATOMIC_ACQUIRE);

	if (old == 0)
		return __atomic_compare_exchange_n(&s->tid, &free, tid, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
	if (!owner_gone(s) || !__atomic_compare_exchange_n(&s->tid, &old, -1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
		return 0;
	mine = self;
	self = s;	/* as that thread: what it recorded last is closed and readable */
	sdt_flush();
	self = mine;
	__atomic_store_n(&s->tid, tid, __ATOMIC_RELEASE);
	return 1;
}

/* The calling thread as CPU cpu (or the lowest one it can take): async-signal-safe. */
static int attach(int cpu)
{
	int tid = my_tid();
	unsigned k = 0;
	struct slot *s;

	if (self)
		return cpu < 0 || (cpu < SDT_LINUX_MAX_CPUS && self == &slots[cpu]) ? (int)(self - slots) : -1;
	if (cpu >= 0) {
		if (cpu >= SDT_LINUX_MAX_CPUS || !claim((unsigned)cpu, tid))
			return -1;
		k = (unsigned)cpu;
	} else {
		while (k < SDT_LINUX_MAX_CPUS && !claim(k, tid))	/* the lowest free, or left by a thread gone */
			k++;
		if (k == SDT_LINUX_MAX_CPUS)
			return -1;
	}
	s = &slots[k];
	if (!s->used) {
		/* Populated now, as LTTng-UST maps its buffers: a recorder never takes a page fault on its ring
		 * (each first touch of a page cost more than the event written into it). */
		void *ring = mmap(0, opt.ring_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE,
				  -1, 0);
		if (ring == MAP_FAILED || sdt_cpu_attach(&s->area, k, ring, opt.ring_bytes, opt.packet_size, opt.policy)) {
			if (ring != MAP_FAILED)
				munmap(ring, opt.ring_bytes);
			__atomic_store_n(&s->tid, 0, __ATOMIC_RELEASE);
			return -1;
		}
		s->ring = ring;
		__atomic_store_n(&s->used, 1, __ATOMIC_RELEASE);
		for (unsigned seen = __atomic_load_n(&slots_seen, __ATOMIC_RELAXED); seen < k + 1;)
			if (__atomic_compare_exchange_n(&slots_seen, &seen, k + 1, 0, __ATOMIC_RELEASE, __ATOMIC_RELAXED))
				break;
	}
	self = s;
	sdt_linux_refresh();	/* this thread's stack, if it is new */
	return (int)k;
}

int sdt_linux_attach(int cpu)
{
	return started ? attach(cpu) : -1;
}

void sdt_linux_detach(void)
{
	struct slot *s = self;

	if (!s)
		return;
	sdt_flush();
	self = 0;
	__atomic_store_n(&s->tid, 0, __ATOMIC_RELEASE);
}

const struct sdt_cpu *sdt_linux_cpu(unsigned cpu)
{
	return cpu < SDT_LINUX_MAX_CPUS && __atomic_load_n(&slots[cpu].used, __ATOMIC_ACQUIRE) ? &slots[cpu].area : 0;
}

/* A thread that fires before it attached: attached now, unless told not to (then counted, not recorded). */
static __attribute__((noinline, cold)) struct sdt_cpu *lazy_area(void)
{
	int k = -1, saved = errno;	/* a probe may fire between a failed call and the program's look at errno */

	if (started && !opt.no_lazy && !attaching) {
		attaching = 1;
		k = attach(-1);
		attaching = 0;
	}
	errno = saved;
	if (k < 0) {
		__atomic_add_fetch(&stat_unattached, 1, __ATOMIC_RELAXED);
		return 0;
	}
	return &self->area;
}

/* -- the hooks ------------------------------------------------------------------------------------------- */

static struct sdt_cpu *cpu_area(void)
{
	struct slot *s = self;

	return __builtin_expect(s != 0, 1) ? &s->area : lazy_area();
}

/* A thread is a task, and each thread has its own area (cpu_area), so an area's task changes only in a child of
 * fork(): its thread is another task, which its next event says. */
static void task_after_fork(void)
{
	task_tid = 0;
	task_named = 0;
	if (self)
		sdt_task_switch();
}

/* A thread is a task: its id, and its name as it was when the runtime first said it. Every packet says its task,
 * so the name is kept, not asked of the kernel a packet (a system call each packet cost a firing 1.3x on the
 * bench's loop); LTTng-UST keeps its procname the same way. A thread renamed after it fired says so with
 * sdt_linux_task_renamed. Only gettid and prctl: async-signal-safe (the breakpoint handler records too). */
static sdt_u64 task(sdt_u32 *context, const char **name)
{
	if (__builtin_expect(!task_tid, 0))
		task_tid = my_tid();
	*context = SDT_CONTEXT_TASK;
	if (name) {
		if (!task_named) {
			task_name[0] = 0;
			task_named = prctl(PR_GET_NAME, task_name, 0, 0, 0) ? -1 : 1;
		}
		*name = task_named > 0 ? task_name : 0;
	}
	return (sdt_u64)task_tid;
}

void sdt_linux_task_renamed(void)
{
	task_named = 0;
	if (self)
		sdt_task_switch();	/* its next event says the name it has now */
}

static const struct segment *segment_of(unsigned long lo, unsigned long hi)
{
	unsigned i;

	for (i = 0; i < __atomic_load_n(&nsegments, __ATOMIC_ACQUIRE); i++)
		if (lo >= segments[i].lo && hi <= segments[i].hi)
			return &segments[i];
	return 0;
}

static void *text_open(void *addr, unsigned long len)
{
	unsigned long a = (unsigned long)addr, lo = a & ~(page - 1), hi = (a + len + page - 1) & ~(page - 1);
	const struct segment *seg;

	if (text_mode == SDT_LINUX_TEXT_ALIAS) {
		seg = segment_of(lo, hi);
		if (!seg)
			fatal("a write outside the program's text: ");
		alias_len = seg->hi - seg->lo;
		alias_at = mmap(0, alias_len, PROT_READ | PROT_WRITE, MAP_SHARED, seg->fd, 0);
		if (alias_at == MAP_FAILED)
			fatal("mapping a writable alias of the text: ");
		return (char *)alias_at + (a - seg->lo);
	}
	if (mprotect((void *)lo, hi - lo, PROT_READ | PROT_WRITE | PROT_EXEC))
		fatal("mprotect text writable: ");
	return addr;
}

static void text_close(void *alias, unsigned long len)
{
	unsigned long a = (unsigned long)alias, lo = a & ~(page - 1), hi = (a + len + page - 1) & ~(page - 1);

	if (text_mode == SDT_LINUX_TEXT_ALIAS) {
		munmap(alias_at, alias_len);
		alias_at = 0;
		return;
	}
	if (mprotect((void *)lo, hi - lo, PROT_READ | PROT_EXEC))
		fatal("mprotect text back: ");
}

static void sync_cores(void)
{
	if (syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE, 0, 0))
		fatal("membarrier SYNC_CORE: ");
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

/*
 * The consumer sleeps on the eventfd only after saying so (consumer_sleeping) and finding no packet; a
 * packet's close pays the write(2) only then. Dekker's order on both sides (a packet published, a full
 * fence, the flag read; the flag set, a full fence, the rings read): either the consumer sees the packet
 * or this sees it sleeping. A write each packet was a system call every hundred-odd events.
 */
static int consumer_sleeping;

static void wake(void)
{
	sdt_u64 one = 1;
	int saved = errno;

	if (wake_fd >= 0 && write(wake_fd, &one, sizeof(one)) < 0) {	/* async-signal-safe */
	}
	errno = saved;
}

static void notify(struct sdt_cpu *c)
{
	(void)c;
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (__atomic_load_n(&consumer_sleeping, __ATOMIC_RELAXED))
		wake();
}

static void report(const struct sdt_site *site, const char *line)
{
	(void)site;
	say(line, "", "");
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

/* -- the breakpoint ---------------------------------------------------------------------------------------- */

static const greg_t argregs[6] = {REG_RDI, REG_RSI, REG_RDX, REG_RCX, REG_R8, REG_R9};
static struct sigaction their_trap;	/* the program's SIGTRAP handler before start */

static void on_trap(int sig, siginfo_t *info, void *ctx)
{
	ucontext_t *uc = ctx;
	greg_t *r = uc->uc_mcontext.gregs;
	struct sdt_frame f;
	int i, what, saved = errno;

	f.pc = (sdt_u64)r[REG_RIP];
	f.sp = (sdt_u64)r[REG_RSP];
	f.flags = (sdt_u64)r[REG_EFL];
	f.ret = (sdt_u64)r[REG_RAX];
	f.link = 0;
	for (i = 0; i < 6; i++)
		f.arg[i] = (sdt_u64)r[argregs[i]];
	what = sdt_trap(&f);
	if (what == SDT_TRAP_NOT_OURS) {	/* someone else's int3: theirs to handle, or die of it */
		errno = saved;
		if (their_trap.sa_flags & SA_SIGINFO)
			their_trap.sa_sigaction(sig, info, ctx);
		else if (their_trap.sa_handler == SIG_DFL) {
			signal(sig, SIG_DFL);
			raise(sig);
		} else if (their_trap.sa_handler != SIG_IGN)
			their_trap.sa_handler(sig);
		return;
	}
	if (what == SDT_TRAP_EMULATED)
		__atomic_add_fetch(&stat_transient, 1, __ATOMIC_RELAXED);
	r[REG_RIP] = (greg_t)f.pc;
	r[REG_RSP] = (greg_t)f.sp;
	r[REG_RAX] = (greg_t)f.ret;
	errno = saved;
}

/* -- reading the rings ------------------------------------------------------------------------------------- */

/* Whether a packet holds an event with a string it could not read (NULL, or memory mapped since). */
static int has_unreadable(const char *p)
{
	const struct sdt_packet *pk = (const void *)p;
	unsigned long off = sizeof(*pk), end = (unsigned long)(pk->content_size / 8);

	while (off + sizeof(struct sdt_event) <= end) {
		const struct sdt_event *e = (const void *)(p + off);
		if (e->unreadable)
			return 1;
		if (!e->size)
			break;
		off = (off + e->size + 7) & ~7ul;
	}
	return 0;
}

static void open_stream(struct slot *s, unsigned k)
{
	char path[4096];

	snprintf(path, sizeof(path), "%s/stream_%u", opt.trace_dir, k);
	s->stream = fopen(path, "wb");
	if (!s->stream)
		fatal(path);
}

unsigned long sdt_linux_drain(void)
{
	unsigned long read = 0;
	unsigned k, n = __atomic_load_n(&slots_seen, __ATOMIC_ACQUIRE);
	int unreadable = 0;

	pthread_mutex_lock(&read_lock);
	for (k = 0; k < n; k++) {
		struct slot *s = &slots[k];
		const struct sdt_packet *pk;
		sdt_u64 seq;
		if (!__atomic_load_n(&s->used, __ATOMIC_ACQUIRE))
			continue;
		while ((pk = sdt_consume(&s->area, &seq))) {
			memcpy(packet_copy, pk, opt.packet_size);
			if (!sdt_consume_done(&s->area, seq)) {
				__atomic_add_fetch(&stat_lost, 1, __ATOMIC_RELAXED);
				continue;
			}
			read++;
			__atomic_add_fetch(&stat_events, ((struct sdt_packet *)packet_copy)->events, __ATOMIC_RELAXED);
			unreadable |= has_unreadable(packet_copy);
			if (opt.trace_dir && !s->stream)
				open_stream(s, k);
			if (s->stream && fwrite(packet_copy, 1, opt.packet_size, s->stream) != opt.packet_size)
				fatal("writing a trace stream: ");
			if (opt.packet)
				opt.packet(k, (const struct sdt_packet *)packet_copy, opt.packet_size, opt.arg);
		}
	}
	__atomic_add_fetch(&stat_packets, read, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&read_lock);
	if (unreadable)
		sdt_linux_refresh();	/* a string in memory mapped since the last read reads next time */
	return read;
}

static void *consume(void *unused)
{
	sdt_u64 n;

	(void)unused;
	while (!consumer_stop) {
		__atomic_store_n(&consumer_sleeping, 1, __ATOMIC_RELAXED);
		__atomic_thread_fence(__ATOMIC_SEQ_CST);
		if (!consumer_stop && !sdt_linux_drain() && read(wake_fd, &n, sizeof(n)) < 0 && errno != EINTR)
			fatal("reading the eventfd: ");
		__atomic_store_n(&consumer_sleeping, 0, __ATOMIC_RELAXED);
		sdt_linux_drain();
	}
	return 0;
}

/* -- the program's text ------------------------------------------------------------------------------------- */

/* The executable segments of the object that holds this code (the program, with the runtime and its tables). */
static int find_segments(struct dl_phdr_info *info, size_t size, void *unused)
{
	unsigned long mine = (unsigned long)&find_segments;
	int i, ours = 0;

	(void)size;
	(void)unused;
	for (i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		unsigned long lo = info->dlpi_addr + ph->p_vaddr;
		if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X) && mine >= lo && mine < lo + ph->p_memsz)
			ours = 1;
	}
	if (!ours)
		return 0;
	for (i = 0; i < info->dlpi_phnum && nsegments < MAX_SEGMENTS; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		unsigned long lo = info->dlpi_addr + ph->p_vaddr;
		if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X))
			continue;
		text_ranges[nsegments].start = lo;
		text_ranges[nsegments].size = ph->p_memsz;
		segments[nsegments].lo = lo & ~(page - 1);
		segments[nsegments].hi = (lo + ph->p_memsz + page - 1) & ~(page - 1);
		segments[nsegments].fd = -1;
		nsegments++;
	}
	return 1;
}

/*
 * The text's pages, remapped from a memfd holding the same bytes, so a second, writable mapping of that
 * memfd writes them: no page is ever writable and executable at once. The remapping swaps the pages under
 * running code (this function's too) for identical ones. Refused where memfds may not be executed
 * (vm.memfd_noexec) or not made: then the caller falls back to mprotect.
 */
static int make_alias(struct segment *seg)
{
	unsigned long len = seg->hi - seg->lo, done = 0;
	int fd = memfd_create("sdt-text", MFD_CLOEXEC);
	void *probe;

	if (fd < 0)
		return -1;
	if (ftruncate(fd, (off_t)len))
		goto fail;
	while (done < len) {
		ssize_t n = pwrite(fd, (char *)seg->lo + done, len - done, (off_t)done);
		if (n <= 0)
			goto fail;
		done += (unsigned long)n;
	}
	probe = mmap(0, len, PROT_READ | PROT_EXEC, MAP_SHARED, fd, 0);	/* executable at all? ask elsewhere first */
	if (probe == MAP_FAILED)
		goto fail;
	munmap(probe, len);
	if (mmap((void *)seg->lo, len, PROT_READ | PROT_EXEC, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED)
		fatal("remapping the text from its memfd: ");	/* the text may be gone: nothing to go on with */
	seg->fd = fd;
	return 0;
fail:
	close(fd);
	return -1;
}

/*
 * A child of fork() shares the memfd's pages with its parent (MAP_SHARED): the parent's next patch would
 * change the child's code under a runtime that knows nothing of it. The child copies its text into a memfd
 * of its own at once (only system calls: it may be the child of a threaded program). A patch the parent
 * makes between the fork and this copy still reaches the child. The reader thread stayed in the parent:
 * the child's packets are read by sdt_linux_drain and stop.
 */
static void after_fork_child(void)
{
	unsigned i;

	consumer_running = 0;
	if (text_mode != SDT_LINUX_TEXT_ALIAS)
		return;
	for (i = 0; i < nsegments; i++) {
		int shared = segments[i].fd;
		if (segments[i].lo == segments[i].hi)	/* a module's, closed */
			continue;
		if (make_alias(&segments[i]))
			fatal("a child's own copy of the text: ");
		close(shared);
	}
}

/* Whether mprotect may make text writable and executable (a hardened kernel refuses). */
static int mprotect_allowed(const struct segment *seg)
{
	if (mprotect((void *)seg->lo, (size_t)page, PROT_READ | PROT_WRITE | PROT_EXEC))
		return 0;
	if (mprotect((void *)seg->lo, (size_t)page, PROT_READ | PROT_EXEC))
		fatal("mprotect text back: ");
	return 1;
}

static int writable_text(void)
{
	unsigned i;
	int alias = opt.text != SDT_LINUX_TEXT_MPROTECT;

	dl_iterate_phdr(find_segments, 0);
	if (!nsegments) {
		say("sdt_linux: ", "the program's executable segments not found", "");
		return -1;
	}
	for (i = 0; alias && i < nsegments; i++)
		if (make_alias(&segments[i]))
			alias = 0;
	if (alias) {
		text_mode = SDT_LINUX_TEXT_ALIAS;
		if (pthread_atfork(0, 0, after_fork_child))
			fatal("pthread_atfork: ");
		return 0;
	}
	if (opt.text == SDT_LINUX_TEXT_ALIAS || i > 1) {	/* asked for an alias, or some text is already aliased */
		say("sdt_linux: a writable alias of the text (memfd_create, then mmap of it executable) is refused: ",
		    strerror(errno), "");
		return -1;
	}
	if (!mprotect_allowed(&segments[0])) {
		say("sdt_linux: mprotect refuses to make text writable and executable (", strerror(errno),
		    opt.text == SDT_LINUX_TEXT_MPROTECT ? "): use the alias (SDT_LINUX_TEXT_AUTO)"
							 : "), and a writable alias of it (memfd) is refused too");
		return -1;
	}
	text_mode = SDT_LINUX_TEXT_MPROTECT;
	return 0;
}

/* -- shared objects as modules ---------------------------------------------------------------------------------- */

/*
 * A shared object built with `sdtgen gen --module NAME` and -DSDT_MODULE_DLOPEN registers itself from its
 * constructor (after the dynamic linker relocated it, before its code runs) and unregisters from its destructor
 * (dlclose): its executable segment becomes text the runtime may write (aliased like the program's), then
 * sdt_module_load; sdt_module_unload, then the alias goes with it.
 */
static pthread_mutex_t module_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sdt_module *last_module;	/* the last one opened: what sdt_linux_module_reload works on */
static const struct sdt_module_table *last_table;

struct module_text {
	unsigned long table, lo, size;
};

/* The executable segment of the loaded object whose segments hold the module's table. */
static int find_module(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct module_text *mt = arg;
	int i, ours = 0;

	(void)size;
	for (i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		unsigned long lo = info->dlpi_addr + ph->p_vaddr;
		if (ph->p_type == PT_LOAD && mt->table >= lo && mt->table < lo + ph->p_memsz)
			ours = 1;
	}
	for (i = 0; ours && i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X)) {
			mt->lo = info->dlpi_addr + ph->p_vaddr;
			mt->size = ph->p_memsz;
			break;
		}
	}
	return ours;
}

/* A free entry of segments[] for a module's text (one a module closed, or a new one), or NULL. */
static struct segment *module_segment(void)
{
	unsigned i, n = nsegments;

	for (i = program_segments; i < n; i++)
		if (segments[i].lo == segments[i].hi)
			return &segments[i];
	return n < MAX_SEGMENTS + MAX_MODULE_SEGMENTS ? &segments[n] : 0;
}

int sdt_linux_module_open(struct sdt_module *m, const struct sdt_module_table *table)
{
	struct module_text mt = {(unsigned long)table, 0, 0};
	struct segment *seg;
	int r;

	if (!__atomic_load_n(&started, __ATOMIC_ACQUIRE)) {
		say("sdt_linux: ", "a module was loaded before sdt_linux_start: its probes stay calls to empty stubs", "");
		return SDT_ERR_INIT;
	}
	dl_iterate_phdr(find_module, &mt);
	sdt_linux_refresh();	/* its strings are readable memory now */
	if (!mt.size) {
		say("sdt_linux: ", "a module's table is in no loaded object with code", "");
		return SDT_ERR_MODULE_TABLE;
	}
	pthread_mutex_lock(&module_lock);
	seg = module_segment();
	if (!seg) {
		pthread_mutex_unlock(&module_lock);
		say("sdt_linux: ", "more modules loaded at once than MAX_MODULE_SEGMENTS", "");
		return SDT_ERR_ARG;
	}
	seg->fd = -1;
	seg->lo = mt.lo & ~(page - 1);
	seg->hi = (mt.lo + mt.size + page - 1) & ~(page - 1);
	if (text_mode == SDT_LINUX_TEXT_ALIAS && make_alias(seg))
		fatal("a writable alias of a module's text: ");
	if (seg == &segments[nsegments])
		__atomic_store_n(&nsegments, nsegments + 1, __ATOMIC_RELEASE);	/* text_open finds it from now on */
	r = sdt_module_load(m, table, (void *)mt.lo, mt.size);
	if (r >= 0) {
		last_module = m;
		last_table = table;
	}
	if (r < 0) {
		if (seg->fd >= 0)
			close(seg->fd);
		seg->lo = seg->hi = 0;
	}
	pthread_mutex_unlock(&module_lock);
	return r;
}

int sdt_linux_module_close(struct sdt_module *m)
{
	unsigned long lo = (unsigned long)m->text & ~(page - 1);
	unsigned i;
	int r;

	if (!__atomic_load_n(&started, __ATOMIC_ACQUIRE))
		return SDT_ERR_INIT;
	pthread_mutex_lock(&module_lock);
	r = sdt_module_unload(m);
	if (m == last_module && r != SDT_ERR_MODULE_UNKNOWN)
		last_module = 0;
	for (i = program_segments; r >= 0 && i < nsegments; i++)
		if (segments[i].lo == lo && segments[i].hi != lo) {
			if (segments[i].fd >= 0)
				close(segments[i].fd);	/* the mapping goes with the object's own */
			segments[i].fd = -1;
			segments[i].lo = segments[i].hi = 0;
		}
	pthread_mutex_unlock(&module_lock);
	return r;
}

/* The last module opened unloaded (0) or loaded again (1) where it is, its object staying mapped: a kernel's
 * loader keeping a module's memory across an unload and a load (the control core's `module`, its torture). */
int sdt_linux_module_reload(int load)
{
	int r;

	pthread_mutex_lock(&module_lock);
	r = !last_module ? SDT_ERR_MODULE_UNKNOWN
	    : load ? sdt_module_load(last_module, last_table, (void *)(unsigned long)last_module->text,
				     (unsigned long)last_module->text_size)
		   : sdt_module_unload(last_module);
	pthread_mutex_unlock(&module_lock);
	return r;
}

/* -- start and stop ------------------------------------------------------------------------------------------- */

int sdt_linux_start(const struct sdt_linux_options *options)
{
	struct sigaction sa;
	struct sdt_session_config geometry = {0};	/* the runtime's own check of a ring, with no area attached */
	int r;

	opt = *options;
	if (!opt.ring_bytes)
		opt.ring_bytes = 1ul << 20;
	if (!opt.packet_size)
		opt.packet_size = 4096;
	page = sysconf(_SC_PAGESIZE);
	geometry.ncpus = 1;
	geometry.policy = (sdt_u32)opt.policy;
	geometry.ring_bytes = opt.ring_bytes;
	geometry.packet_size = opt.packet_size;
	if (!sdt_session_bytes(&geometry)) {
		say("sdt_linux: ", "ring_bytes and packet_size are not a ring the runtime takes (powers of two, "
		    "a packet of SDT_MIN_PACKET bytes or more, two packets or more)", "");
		return -1;
	}
	packet_copy = malloc(opt.packet_size);
	if (!packet_copy)
		fatal("the packet buffer: ");
	if (syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_SYNC_CORE, 0, 0)) {
		say("sdt_linux: membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_SYNC_CORE): ", strerror(errno),
		    " (Linux 4.16 or later serializes other threads' instruction fetch)");
		return -1;
	}
	if (writable_text())
		return -1;
	if (!opt.no_consumer) {
		wake_fd = eventfd(0, EFD_CLOEXEC);
		if (wake_fd < 0)
			fatal("eventfd: ");
	}
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_trap;
	sa.sa_flags = SA_SIGINFO | SA_NODEFER;	/* a probe in code a handler runs traps again */
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGTRAP, &sa, &their_trap))
		fatal("sigaction SIGTRAP: ");
	ns_mult = (1000000000ull << 32) / tsc_hz();
	hooks.text_open = text_open;
	hooks.text_close = text_close;
	hooks.sync_cores = sync_cores;
	hooks.cpu_area = cpu_area;
	hooks.clock = clock_ns;
	hooks.notify = notify;
	hooks.report = report;
	hooks.readable = ranges;
	hooks.text = text_ranges;
	hooks.ntext = nsegments;
	program_segments = nsegments;
	hooks.clock_hz = 1000000000;
	hooks.task = task;
	if (!task_fork_handled && pthread_atfork(0, 0, task_after_fork))
		fatal("pthread_atfork: ");
	task_fork_handled = 1;
	sdt_linux_refresh();
	r = sdt_init(&hooks);
	if (r < 0)
		return r;
	__atomic_store_n(&started, 1, __ATOMIC_RELEASE);
	if (!opt.no_consumer) {
		if (pthread_create(&consumer, 0, consume, 0))
			fatal("the consumer thread: ");
		consumer_running = 1;
	}
	return r;
}

void sdt_linux_stop(void)
{
	unsigned k;

	if (self)
		sdt_flush();
	for (k = 0; k < SDT_LINUX_MAX_CPUS; k++)	/* what threads that exited without detaching recorded last */
		if (__atomic_load_n(&slots[k].used, __ATOMIC_ACQUIRE) && owner_gone(&slots[k]) && claim(k, my_tid()))
			__atomic_store_n(&slots[k].tid, 0, __ATOMIC_RELEASE);
	if (consumer_running) {
		consumer_stop = 1;
		wake();
		pthread_join(consumer, 0);
		consumer_running = 0;
	}
	sdt_linux_drain();
	for (k = 0; k < SDT_LINUX_MAX_CPUS; k++)
		if (slots[k].stream) {
			fclose(slots[k].stream);
			slots[k].stream = 0;
		}
}

void sdt_linux_stats(struct sdt_linux_stats *s)
{
	s->packets = __atomic_load_n(&stat_packets, __ATOMIC_RELAXED);
	s->events = __atomic_load_n(&stat_events, __ATOMIC_RELAXED);
	s->lost_packets = __atomic_load_n(&stat_lost, __ATOMIC_RELAXED);
	s->unattached = __atomic_load_n(&stat_unattached, __ATOMIC_RELAXED);
	s->transient = __atomic_load_n(&stat_transient, __ATOMIC_RELAXED);
	s->refreshes = __atomic_load_n(&stat_refreshes, __ATOMIC_RELAXED);
	s->readable = nranges;
	s->cpus = __atomic_load_n(&slots_seen, __ATOMIC_ACQUIRE);
	s->text = text_mode;
}
