/*
 * The LTTng-UST tracepoint provider of the real-CPU comparison (bench/cpu_lttng_site.c): one event with
 * two integer fields, as sdtgen's bench/cpu_site.c probe and barectf's bench/barectf.yaml event carry.
 */
#undef LTTNG_UST_TRACEPOINT_PROVIDER
#define LTTNG_UST_TRACEPOINT_PROVIDER bench

#undef LTTNG_UST_TRACEPOINT_INCLUDE
#define LTTNG_UST_TRACEPOINT_INCLUDE "./cpu_lttng_tp.h"

#if !defined(BENCH_CPU_LTTNG_TP_H) || defined(LTTNG_UST_TRACEPOINT_HEADER_MULTI_READ)
#define BENCH_CPU_LTTNG_TP_H

#include <lttng/tracepoint.h>

LTTNG_UST_TRACEPOINT_EVENT(bench, fire,
	LTTNG_UST_TP_ARGS(long, a, long, b),
	LTTNG_UST_TP_FIELDS(
		lttng_ust_field_integer(long, a, a)
		lttng_ust_field_integer(long, b, b)
	)
)

#endif

#include <lttng/tracepoint-event.h>
