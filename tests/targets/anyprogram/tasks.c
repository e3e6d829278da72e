/*
 * Threads as a kernel's tasks (tests/targets/test_task_programs.py): each CPU of the hosted platform is a thread,
 * which says its own id and takes a name of its own, then does work with a probe in it. The test learns the ids
 * from the program itself (gettid), not from sdtgen.
 */
#define _GNU_SOURCE
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <sdt.h>

SDT_PROVIDER_DEFINE(tk);
SDT_PROBE_DEFINE2(tk, work, item, done, "long", "long");

/* This thread's id, as the system gives it. */
long tk_tid(long unused)
{
	(void)unused;
	return syscall(SYS_gettid);
}

/* Name this thread tk-K (what a reader of its trace shows). */
long tk_name(long k)
{
	char name[16] = "tk-";

	name[3] = (char)('0' + k % 10);
	name[4] = 0;
	return prctl(PR_SET_NAME, name, 0, 0, 0);
}

/* n items of work, each a firing: its number and a checksum so far. */
long tk_work(long n)
{
	long i, s = 0;

	for (i = 0; i < n; i++) {
		s = s * 7 + i;
		SDT_PROBE2(tk, work, item, done, i, s & 0xffff);
	}
	return s;
}
