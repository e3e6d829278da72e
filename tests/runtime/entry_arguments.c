/*
 * Every public function of sdt_runtime.h called with what it cannot use (NULL pointers, an empty spec, a mode,
 * size or sequence number out of range), in a program of its own: one line "name result" each, for
 * tests/runtime/test_entry_arguments.py. A crash is the program dying.
 */
#include <stdio.h>
#include <string.h>

#include <sdt_runtime.h>

/* The linker sets, with one entry each that is no site: sdt_init runs over an empty table. */
static struct sdt_site no_site __attribute__((used, section("set_sdt_sites_set")));
static const struct sdt_probe no_probe __attribute__((used, section("set_sdt_probes_set")));

static _Alignas(8) unsigned char ring[4 * SDT_MIN_PACKET];
static struct sdt_cpu area;
static unsigned long put_bytes;

static void put(const void *data, unsigned long len)
{
	(void)data;
	put_bytes += len;
}

static void cpu_release(struct sdt_cpu *c)
{
	(void)c;
}

static void said(const char *name, long value)
{
	printf("%s %ld\n", name, value);
	fflush(stdout);
}

int main(void)
{
	struct sdt_hooks hooks;
	struct sdt_range range = {0, 0};
	sdt_u64 seq = 0;

	memset(&hooks, 0, sizeof(hooks));
	said("enable_before_init", sdt_enable(":::", SDT_TRAP));
	said("init_null", sdt_init(0));
	hooks.ntext = 1;	/* counted, but NULL */
	said("init_text_null", sdt_init(&hooks));
	hooks.ntext = 0;
	hooks.nreadable = 1;
	said("init_readable_null", sdt_init(&hooks));
	hooks.nreadable = 0;
	hooks.cpu_release = cpu_release;	/* a release without an area to release */
	said("init_release_alone", sdt_init(&hooks));
	hooks.cpu_release = 0;
	hooks.readable = &range;
	said("flush_before_init", (sdt_flush(), 0));
	said("init", sdt_init(&hooks));	/* no cpu_area, no clock: nothing is recorded */
	said("init_again", sdt_init(&hooks));
	said("flush_no_area", (sdt_flush(), 0));
	said("enable_null", sdt_enable(0, SDT_TRAP));
	said("enable_empty", sdt_enable("", SDT_TRAP));
	said("enable_all", sdt_enable(":::", SDT_TRAP));
	said("enable_mode", sdt_enable(":::", 7));
	said("enable_five_fields", sdt_enable("a:b:c:d:e", SDT_BRANCH));
	said("disable_null", sdt_disable(0));
	said("disable_empty", sdt_disable(""));
	said("disable_all", sdt_disable(":::"));
	said("set_mode_zero", sdt_set_mode(0));
	said("trap_null", sdt_trap(0));
	said("attach_null", sdt_cpu_attach(0, 0, ring, sizeof(ring), SDT_MIN_PACKET, SDT_DISCARD));
	said("attach_ring_null", sdt_cpu_attach(&area, 0, 0, sizeof(ring), SDT_MIN_PACKET, SDT_DISCARD));
	said("attach", sdt_cpu_attach(&area, 0, ring, sizeof(ring), SDT_MIN_PACKET, SDT_DISCARD));
	said("consume_null", sdt_consume(0, &seq) != 0);
	said("consume_seq_null", sdt_consume(&area, 0) != 0);
	said("consume_done_null", sdt_consume_done(0, 0));
	said("consume_done_unclosed", sdt_consume_done(&area, 0));
	said("consume_done_future", sdt_consume_done(&area, 5));
	said("read_seq", (long)area.read_seq);
	said("event_slow_null", sdt_event_slow(0, 1, 32) != 0);
	said("event_begin_null", sdt_event_begin(0, 1, 32) != 0);
	said("event_below_header", sdt_event_begin(&area, 1, 8) != 0);
	said("event_past_size_field", sdt_event_slow(&area, 1, 70000) != 0);
	said("discarded", (long)area.discarded);
	said("drain_null", sdt_serial_drain(0, put));
	said("drain_put_null", sdt_serial_drain(&area, 0));
	said("info_null", sdt_serial_info(0));
	said("frame_put_null", sdt_serial_frame(0, SDT_FRAME_TEXT, "x", 1));
	said("frame_data_null", sdt_serial_frame(put, SDT_FRAME_TEXT, 0, 1));
	said("frame_type", sdt_serial_frame(put, 0x154, "x", 1));
	said("put_bytes", (long)put_bytes);
	said("frame_empty", sdt_serial_frame(put, SDT_FRAME_TEXT, 0, 0));
	said("info", sdt_serial_info(put));
	said("crc_null", (long)sdt_crc32(0x1234, 0, 10));
	return 0;
}
