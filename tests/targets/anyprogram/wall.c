/*
 * A program that says when it fires, by its own clock: each firing carries the CLOCK_REALTIME nanoseconds the
 * program read just before it (tests/session/test_machine_clock.py, tests/trace/test_machines.py: the truth a trace's
 * correlation with the host's real time is held to). Built by this directory's Makefile (PROG=wall).
 */
#include <sdt.h>
#include <time.h>

SDT_PROVIDER_DEFINE(wall);
SDT_PROBE_DEFINE2(wall, clock, now, fired, "long", "long");

static long realtime_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

/* One firing, tagged ``tag``, with the real time it fired at; returns the tag. */
long wall_fire(long tag)
{
	SDT_PROBE2(wall, clock, now, fired, tag, realtime_ns());
	return tag;
}
