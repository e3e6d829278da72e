/*
 * barectf's side of the real-CPU comparison: the event (bench/barectf.yaml's `fire`, generated into
 * barectf.c by `barectf generate`) fired through a function of its own in bench/cpu_loop.h's loop, and a file platform: one packet
 * buffer; a packet that closes is written to the stream file at once and the next opened, so every event
 * fired is in the file (barectf's own platforms do the same with fwrite). Its clock is the one sdtgen's
 * hosted platform gives (bench/cpu_loop.h).
 */
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include "barectf.h"
#include "cpu_loop.h"
#include "cpu_barectf.h"

#define PACKET_BYTES 4096	/* sdtgen's packets in the same run are 4 KiB too */

static struct barectf_default_ctx ctx;
static uint8_t packet[PACKET_BYTES];
static int fd = -1;

static uint64_t clock_value(void *data)
{
	(void)data;
	return bench_clock_ns();
}

static int backend_full(void *data)
{
	(void)data;
	return 0;
}

static void open_packet(void *data)
{
	(void)data;
	barectf_default_open_packet(&ctx);
}

static void close_packet(void *data)
{
	uint32_t size = barectf_packet_buf_size(&ctx);

	(void)data;
	barectf_default_close_packet(&ctx);
	if (write(fd, barectf_packet_buf(&ctx), size) != (ssize_t)size)
		exit(6);
}

int bench_barectf_open(const char *stream)
{
	struct barectf_platform_callbacks cbs = {clock_value, backend_full, open_packet, close_packet};

	bench_calibrate();
	fd = open(stream, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0)
		return -1;
	barectf_init(&ctx, packet, sizeof(packet), cbs, 0);
	open_packet(0);
	return 0;
}

void bench_barectf_close(void)
{
	if (barectf_packet_is_open(&ctx) && !barectf_packet_is_empty(&ctx))
		close_packet(0);
	close(fd);
}

unsigned long bench_barectf_discarded(void)
{
	return barectf_discarded_event_records_count(&ctx);
}

BENCH_FIRE_FUNCTION(bench_fire_barectf)
{
	barectf_default_trace_fire(&ctx, a, b);
}

BENCH_LOOP_FUNCTION(bench_loop_barectf, bench_fire_barectf)
