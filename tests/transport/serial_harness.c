/*
 * The runtime's serial transport (sdt_serial.c) and rings (sdt_transport.c) built for this machine:
 * the byte stream a kernel would put on its UART, on stdout, for tests/transport/test_serial_frames.py.
 *
 *   serial_harness crc             CRC-32 of stdin (computed in two pieces), in hex
 *   serial_harness drain EVENTS    the info frame, a text frame, then EVENTS events of CPU 3, drained
 *   serial_harness overwrite       a packet overwritten by its writer while it is being sent
 *   serial_harness text            every length of text frame from 0 to 300 bytes
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sdt_runtime.h>

struct sdt_hooks sdt_hooks;	/* sdt_state.c's, which this test does not link */
struct sdt_registry sdt_session_table;	/* sdt_state.c's too: sdt_cpu_attach puts the area on its list */

static struct sdt_cpu cpu;
static sdt_u64 ticks;
static _Alignas(8) unsigned char ring[4 * 1024];
static int overwrite_once;

static sdt_u64 clock_fn(void)
{
	return ++ticks;
}

static struct sdt_cpu *area(void)
{
	return &cpu;
}

/* An event of 2 words and 3 zero words: 56 bytes, which no packet's 960 or 4032 bytes of room divide. */
static void record(sdt_u32 key, sdt_word a, sdt_word b)
{
	struct sdt_event *e = sdt_event_begin(&cpu, key, 56);
	sdt_word *w;

	if (!e)
		return;
	w = (sdt_word *)(e + 1);
	w[0] = a;
	w[1] = b;
	w[2] = w[3] = w[4] = 0;
	sdt_event_end(&cpu);
}

static void put(const void *data, unsigned long len)
{
	if (fwrite(data, 1, len, stdout) != len)
		exit(3);
}

/* The writer runs while the consumer sends its first packet: enough events to reuse that packet's slot. */
static void put_and_overwrite(const void *data, unsigned long len)
{
	int i;

	put(data, len);
	if (overwrite_once && len > 12) {	/* inside the packet's payload */
		overwrite_once = 0;
		for (i = 0; i < 200; i++)
			record(0x2000 + i, i, i);
		sdt_flush();
	}
}

int main(int argc, char **argv)
{
	int i, n;

	sdt_hooks.clock = clock_fn;
	sdt_hooks.cpu_area = area;
	if (argc == 2 && !strcmp(argv[1], "crc")) {
		static unsigned char buf[1 << 20];
		size_t len = fread(buf, 1, sizeof(buf), stdin);
		sdt_u32 crc = sdt_crc32(0, buf, len / 3);
		printf("%08x\n", sdt_crc32(crc, buf + len / 3, len - len / 3));
		return 0;
	}
	if (argc == 2 && !strcmp(argv[1], "text")) {
		char text[301];
		for (i = 0; i <= 300; i++) {
			memset(text, 'a' + i % 26, (size_t)i);
			sdt_serial_frame(put, SDT_FRAME_TEXT, text, (unsigned long)i);
		}
		return 0;
	}
	if (argc == 3 && !strcmp(argv[1], "drain")) {
		n = atoi(argv[2]);
		if (sdt_cpu_attach(&cpu, 3, ring, sizeof(ring), 1024, SDT_DISCARD))
			return 2;
		sdt_hooks.clock_hz = 123456789012ull;
		sdt_serial_info(put);
		sdt_serial_frame(put, SDT_FRAME_TEXT, "hello", 5);
		for (i = 0; i < n; i++) {
			record(0x1000 + i, (sdt_word)i * 3, ~(sdt_word)i);
			if (i % 20 == 19)	/* a consumer keeps up: the ring (4 packets of 17 events) never fills */
				sdt_serial_drain(&cpu, put);
		}
		sdt_flush();
		fprintf(stderr, "kept %d\n", sdt_serial_drain(&cpu, put));
		return 0;
	}
	if (argc == 2 && !strcmp(argv[1], "overwrite")) {
		if (sdt_cpu_attach(&cpu, 1, ring, sizeof(ring), 1024, SDT_OVERWRITE))
			return 2;
		for (i = 0; i < 10; i++)
			record(0x1000 + i, i, i);
		sdt_flush();
		overwrite_once = 1;
		fprintf(stderr, "kept %d\n", sdt_serial_drain(&cpu, put_and_overwrite));
		return 0;
	}
	return 2;
}
