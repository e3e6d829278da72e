/* The classic FreeBSD form needs the function pointer every site tests; NULL: probes disabled. */
typedef void (*sdt_probe_func_t)(unsigned long, unsigned long, unsigned long, unsigned long, unsigned long,
                                 unsigned long);
volatile sdt_probe_func_t sdt_probe_func;
