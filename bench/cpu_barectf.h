/* bench/cpu_barectf_site.c's calls (bench/cpu_barectf.c). */
int bench_barectf_open(const char *stream);
void bench_barectf_close(void);
unsigned long bench_barectf_discarded(void);
double bench_loop_barectf(long n);
