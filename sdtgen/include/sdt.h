/*
 * sdt.h - zero-cost statically defined tracing probes (sdtgen).
 *
 * FreeBSD-compatible macros. A probe site compiles to a plain call to an
 * undefined function __dtrace_sdt_<provider>_<module>_<function>_<name>;
 * `sdtgen gen` defines it after the partial link and records every call site
 * in the linker set set_sdt_sites_set, and the runtime turns each
 * call into a NOP until the probe is enabled.
 *
 * SDT_PROBE_DEFINEn also records the probe's descriptor (provider, module,
 * function, name and argument types) in the non-loaded section .sdt_desc of
 * the object, so the tools can show real names and types.
 *
 *   SDT_PROVIDER_DEFINE(hk);
 *   SDT_PROBE_DEFINE2(hk, vfs, lookup, entry, "const char *", "int");
 *   ...
 *   SDT_PROBE2(hk, vfs, lookup, entry, path, flags);
 *
 * Also FreeBSD's SDT_PROBE_DEFINEn_XLATE (native and translated types),
 * SDT_PROBE_ARGTYPE, SDT_PROBES_ENABLED() and the kernel's DTRACE_PROBEn, and
 * SDT_PROBE_ENABLED(prov, mod, func, name): a call the runtime turns into
 * "result = 0", and arming into "result = 1".
 *
 * Define SDT_COMPILED_OUT to compile every probe out, or SDT_CLASSIC for the
 * older `if (probe enabled) call` form; both exist for comparison. Define
 * SDT_ASM_GOTO for FreeBSD 15's form: a NOP in an asm goto whose arguments are
 * evaluated only out of line (docs/table.md); both forms link into one image.
 *
 * C99 and later (also under -pedantic) and C++11 and later: in C++ the probe
 * functions keep their C names (an asm label on each block-scope declaration,
 * where extern "C" cannot go).
 */
#ifndef SDTGEN_SDT_H
#define SDTGEN_SDT_H

#ifdef __cplusplus
#define _SDT_BOOL bool
#define _SDT_STATIC_ASSERT(cond, msg) static_assert(cond, msg)
#define _SDT_LINKNAME(sym) __asm__(_SDT_XSTR(sym))
extern "C" {
#else
#define _SDT_BOOL _Bool
#define _SDT_STATIC_ASSERT(cond, msg) __extension__ _Static_assert(cond, msg)
#define _SDT_LINKNAME(sym)
#endif

#define _SDT_STR(x) #x
#define _SDT_XSTR(x) _SDT_STR(x)
#define _SDT_SYM(prov, mod, func, name) __dtrace_sdt_##prov##_##mod##_##func##_##name
#define _SDT_UINT __UINTPTR_TYPE__

/* Providers carry no data: defining one is a declaration, so it costs nothing. */
#define SDT_PROVIDER_DEFINE(prov) extern int __sdt_provider_##prov
#define SDT_PROVIDER_DECLARE(prov) extern int __sdt_provider_##prov
#define SDT_PROBE_DECLARE(prov, mod, func, name) extern int __sdt_probe_decl_##prov##_##mod##_##func##_##name

#define _SDT_T(t) ".asciz \"" t "\"\n"
#define _SDT_SYMSTR(prov, mod, func, name) _SDT_XSTR(_SDT_SYM(prov, mod, func, name))
/*
 * A probe record: "SDT1", its stub symbol, provider, module, function, name,
 * the argument count and the native types; ``more`` holds "SDTA" records
 * (symbol, argument number, native type, translated type or an empty string).
 */
#define _SDT_DESCX(prov, mod, func, name, n, types, more)                  \
	__asm__(".pushsection .sdt_desc, \"\"\n"                            \
		".asciz \"SDT1\"\n"                                         \
		".asciz \"" _SDT_SYMSTR(prov, mod, func, name) "\"\n"      \
		".asciz \"" #prov "\"\n"                                   \
		".asciz \"" #mod "\"\n"                                    \
		".asciz \"" #func "\"\n"                                   \
		".asciz \"" #name "\"\n"                                   \
		".asciz \"" #n "\"\n"                                      \
		types more                                                    \
		".popsection\n")
#define _SDT_DESC(prov, mod, func, name, n, types) _SDT_DESCX(prov, mod, func, name, n, types, "")

/*
 * An "SDTA" record. ``xs`` is the translated type already stringified (#x), so
 * FreeBSD's NULL ("no translated type") arrives as the text NULL, which the
 * assembler's .ifc turns into an empty string.
 */
#define _SDT_XT(xs) ".ifc " xs ",NULL\n.byte 0\n.else\n.asciz " xs "\n.endif\n"
#define _SDT_AREC(prov, mod, func, name, num, t, xs)                     \
	".asciz \"SDTA\"\n"                                                \
	".asciz \"" _SDT_SYMSTR(prov, mod, func, name) "\"\n"              \
	".asciz \"" #num "\"\n" _SDT_T(t) _SDT_XT(xs)

#define _SDT_SIX "sdtgen supports probes of up to six arguments (as FreeBSD has since 2024)"

/* FreeBSD's SDT_PROBE_ARGTYPE: the type (and translated type, or NULL) of argument ``num``. */
#define SDT_PROBE_ARGTYPE(prov, mod, func, name, num, type, xtype)              \
	_SDT_STATIC_ASSERT((num) >= 0 && (num) < 6, _SDT_SIX);                    \
	__asm__(".pushsection .sdt_desc, \"\"\n"                                  \
		_SDT_AREC(prov, mod, func, name, num, type, #xtype) ".popsection\n")

#define SDT_PROBE_DEFINE(prov, mod, func, name) _SDT_DESC(prov, mod, func, name, 0, "")
#define SDT_PROBE_DEFINE0(prov, mod, func, name) _SDT_DESC(prov, mod, func, name, 0, "")
#define SDT_PROBE_DEFINE1(prov, mod, func, name, t0) _SDT_DESC(prov, mod, func, name, 1, _SDT_T(t0))
#define SDT_PROBE_DEFINE2(prov, mod, func, name, t0, t1) \
	_SDT_DESC(prov, mod, func, name, 2, _SDT_T(t0) _SDT_T(t1))
#define SDT_PROBE_DEFINE3(prov, mod, func, name, t0, t1, t2) \
	_SDT_DESC(prov, mod, func, name, 3, _SDT_T(t0) _SDT_T(t1) _SDT_T(t2))
#define SDT_PROBE_DEFINE4(prov, mod, func, name, t0, t1, t2, t3) \
	_SDT_DESC(prov, mod, func, name, 4, _SDT_T(t0) _SDT_T(t1) _SDT_T(t2) _SDT_T(t3))
#define SDT_PROBE_DEFINE5(prov, mod, func, name, t0, t1, t2, t3, t4) \
	_SDT_DESC(prov, mod, func, name, 5, _SDT_T(t0) _SDT_T(t1) _SDT_T(t2) _SDT_T(t3) _SDT_T(t4))
#define SDT_PROBE_DEFINE6(prov, mod, func, name, t0, t1, t2, t3, t4, t5) \
	_SDT_DESC(prov, mod, func, name, 6, _SDT_T(t0) _SDT_T(t1) _SDT_T(t2) _SDT_T(t3) _SDT_T(t4) _SDT_T(t5))

/* The _XLATE forms give each argument a native and a translated type, as FreeBSD's network providers do. */
#define _SDT_X(prov, mod, func, name, k, t, x) _SDT_AREC(prov, mod, func, name, k, t, #x)
#define SDT_PROBE_DEFINE0_XLATE(prov, mod, func, name) _SDT_DESC(prov, mod, func, name, 0, "")
#define SDT_PROBE_DEFINE1_XLATE(prov, mod, func, name, t0, x0) \
	_SDT_DESCX(prov, mod, func, name, 1, _SDT_T(t0), _SDT_X(prov, mod, func, name, 0, t0, x0))
#define SDT_PROBE_DEFINE2_XLATE(prov, mod, func, name, t0, x0, t1, x1)                  \
	_SDT_DESCX(prov, mod, func, name, 2, _SDT_T(t0) _SDT_T(t1),                     \
		   _SDT_X(prov, mod, func, name, 0, t0, x0) _SDT_X(prov, mod, func, name, 1, t1, x1))
#define SDT_PROBE_DEFINE3_XLATE(prov, mod, func, name, t0, x0, t1, x1, t2, x2)          \
	_SDT_DESCX(prov, mod, func, name, 3, _SDT_T(t0) _SDT_T(t1) _SDT_T(t2),          \
		   _SDT_X(prov, mod, func, name, 0, t0, x0) _SDT_X(prov, mod, func, name, 1, t1, x1) \
		   _SDT_X(prov, mod, func, name, 2, t2, x2))
#define SDT_PROBE_DEFINE4_XLATE(prov, mod, func, name, t0, x0, t1, x1, t2, x2, t3, x3)  \
	_SDT_DESCX(prov, mod, func, name, 4, _SDT_T(t0) _SDT_T(t1) _SDT_T(t2) _SDT_T(t3), \
		   _SDT_X(prov, mod, func, name, 0, t0, x0) _SDT_X(prov, mod, func, name, 1, t1, x1) \
		   _SDT_X(prov, mod, func, name, 2, t2, x2) _SDT_X(prov, mod, func, name, 3, t3, x3))
#define SDT_PROBE_DEFINE5_XLATE(prov, mod, func, name, t0, x0, t1, x1, t2, x2, t3, x3, t4, x4) \
	_SDT_DESCX(prov, mod, func, name, 5, _SDT_T(t0) _SDT_T(t1) _SDT_T(t2) _SDT_T(t3) _SDT_T(t4), \
		   _SDT_X(prov, mod, func, name, 0, t0, x0) _SDT_X(prov, mod, func, name, 1, t1, x1) \
		   _SDT_X(prov, mod, func, name, 2, t2, x2) _SDT_X(prov, mod, func, name, 3, t3, x3) \
		   _SDT_X(prov, mod, func, name, 4, t4, x4))
#define SDT_PROBE_DEFINE6_XLATE(prov, mod, func, name, t0, x0, t1, x1, t2, x2, t3, x3, t4, x4, t5, x5) \
	_SDT_DESCX(prov, mod, func, name, 6,                                                        \
		   _SDT_T(t0) _SDT_T(t1) _SDT_T(t2) _SDT_T(t3) _SDT_T(t4) _SDT_T(t5),                \
		   _SDT_X(prov, mod, func, name, 0, t0, x0) _SDT_X(prov, mod, func, name, 1, t1, x1) \
		   _SDT_X(prov, mod, func, name, 2, t2, x2) _SDT_X(prov, mod, func, name, 3, t3, x3) \
		   _SDT_X(prov, mod, func, name, 4, t4, x4) _SDT_X(prov, mod, func, name, 5, t5, x5))

/* Seven arguments: FreeBSD dropped them in 2024, and sdtgen never had them. */
#define SDT_PROBE_DEFINE7(...) _SDT_STATIC_ASSERT(0, _SDT_SIX)
#define SDT_PROBE_DEFINE7_XLATE(...) _SDT_STATIC_ASSERT(0, _SDT_SIX)
#define SDT_PROBE7(...) _SDT_STATIC_ASSERT(0, _SDT_SIX)
#define DTRACE_PROBE6(...) \
	_SDT_STATIC_ASSERT(0, "sdtgen supports DTRACE_PROBE with up to five arguments, as FreeBSD does")

#define _SDT_P0 void
#define _SDT_P1 _SDT_UINT
#define _SDT_P2 _SDT_UINT, _SDT_UINT
#define _SDT_P3 _SDT_UINT, _SDT_UINT, _SDT_UINT
#define _SDT_P4 _SDT_UINT, _SDT_UINT, _SDT_UINT, _SDT_UINT
#define _SDT_P5 _SDT_UINT, _SDT_UINT, _SDT_UINT, _SDT_UINT, _SDT_UINT
#define _SDT_P6 _SDT_UINT, _SDT_UINT, _SDT_UINT, _SDT_UINT, _SDT_UINT, _SDT_UINT

#if defined(SDT_COMPILED_OUT)
#define _SDT_CALL(prov, mod, func, name, n, ...) do { } while (0)
#elif defined(SDT_CLASSIC)
/* The pre-2015 FreeBSD form: a load and a test of a function pointer at every site. */
typedef void (*sdt_probe_func_t)(_SDT_UINT, _SDT_UINT, _SDT_UINT, _SDT_UINT, _SDT_UINT, _SDT_UINT);
extern volatile sdt_probe_func_t sdt_probe_func;
#define _SDT_PAD0() 0, 0, 0, 0, 0, 0
#define _SDT_PAD1(a) a, 0, 0, 0, 0, 0
#define _SDT_PAD2(a, b) a, b, 0, 0, 0, 0
#define _SDT_PAD3(a, b, c) a, b, c, 0, 0, 0
#define _SDT_PAD4(a, b, c, d) a, b, c, d, 0, 0
#define _SDT_PAD5(a, b, c, d, e) a, b, c, d, e, 0
#define _SDT_PAD6(a, b, c, d, e, f) a, b, c, d, e, f
#define _SDT_CALL(prov, mod, func, name, n, ...)                            \
	do {                                                                \
		if (__builtin_expect(sdt_probe_func != 0, 0))              \
			sdt_probe_func(_SDT_PAD##n(__VA_ARGS__));           \
	} while (0)
#elif defined(SDT_ASM_GOTO) && !(defined(__cplusplus) && defined(__clang__))
/*
 * FreeBSD 15's form: the site is one NOP inside an asm goto, and the arguments are evaluated only on
 * the path behind its label, out of line, which calls the probe's recorder (gen writes it). The asm
 * leaves FreeBSD's record {probe, patch point, target, 0} in set_sdt_tracepoint_set (no alignment,
 * as FreeBSD's asm has none: the linker scripts align the set); the probe word names
 * sdt_<prov>_<mod>_<func>_<name>, which gen defines at the probe's descriptor. Arming writes a jump
 * to the target over the NOP. One NOP of the architecture's best encoding, never several: a CPU
 * between two of them when the jump lands would run the middle of it. (clang++ 14 takes every
 * asm goto's label for a target of every asm goto of the function, and refuses a jump into a
 * scope: C++ built by clang keeps the call form.)
 */
#if defined(__x86_64__) || defined(__i386__)
#define _SDT_GOTO_NOP ".byte 0x0f, 0x1f, 0x44, 0x00, 0x00" /* nopl 0x0(%eax,%eax,1): one 5-byte NOP */
#elif defined(__aarch64__)
#define _SDT_GOTO_NOP "nop"
#elif defined(__riscv)
#define _SDT_GOTO_NOP ".option push\n.option norvc\nnop\n.option pop" /* 4 bytes: room for a jal */
#else
#error "sdt.h: SDT_ASM_GOTO knows x86-64, i386, AArch64 and RISC-V"
#endif
#if __SIZEOF_POINTER__ == 8
#define _SDT_GOTO_WORD ".quad "
#else
#define _SDT_GOTO_WORD ".long "
#endif
#define _SDT_REC(prov, mod, func, name) __sdt_rec___dtrace_sdt_##prov##_##mod##_##func##_##name
#define _SDT_CALL(prov, mod, func, name, n, ...)                                              \
	__extension__({ /* a statement expression: __label__ without -pedantic's complaint */ \
		__label__ _sdt_fire;                                                          \
		extern void _SDT_REC(prov, mod, func, name)(_SDT_P##n)                        \
			_SDT_LINKNAME(_SDT_REC(prov, mod, func, name));                       \
		__asm__ goto("990:\n\t" _SDT_GOTO_NOP "\n"                                     \
			     ".pushsection set_sdt_tracepoint_set, \"aw\"\n\t"                    \
			     _SDT_GOTO_WORD _SDT_XSTR(sdt_##prov##_##mod##_##func##_##name) "\n\t" \
			     _SDT_GOTO_WORD "990b\n\t" _SDT_GOTO_WORD "%l0\n\t" _SDT_GOTO_WORD "0\n" \
			     ".popsection" : : : : _sdt_fire);                                \
		if (0) {                                                                      \
		_sdt_fire:                                                                    \
			_SDT_REC(prov, mod, func, name)(__VA_ARGS__);                          \
		}                                                                             \
		(void)0;                                                                      \
	})
#else
#define _SDT_CALL(prov, mod, func, name, n, ...)                              \
	do {                                                                  \
		extern void _SDT_SYM(prov, mod, func, name)(_SDT_P##n)       \
			_SDT_LINKNAME(_SDT_SYM(prov, mod, func, name));       \
		_SDT_SYM(prov, mod, func, name)(__VA_ARGS__);                 \
	} while (0)
#endif

#define _SDT_A(x) ((_SDT_UINT)(x))
#define SDT_PROBE0(prov, mod, func, name) _SDT_CALL(prov, mod, func, name, 0, )
#define SDT_PROBE1(prov, mod, func, name, a0) _SDT_CALL(prov, mod, func, name, 1, _SDT_A(a0))
#define SDT_PROBE2(prov, mod, func, name, a0, a1) \
	_SDT_CALL(prov, mod, func, name, 2, _SDT_A(a0), _SDT_A(a1))
#define SDT_PROBE3(prov, mod, func, name, a0, a1, a2) \
	_SDT_CALL(prov, mod, func, name, 3, _SDT_A(a0), _SDT_A(a1), _SDT_A(a2))
#define SDT_PROBE4(prov, mod, func, name, a0, a1, a2, a3) \
	_SDT_CALL(prov, mod, func, name, 4, _SDT_A(a0), _SDT_A(a1), _SDT_A(a2), _SDT_A(a3))
#define SDT_PROBE5(prov, mod, func, name, a0, a1, a2, a3, a4) \
	_SDT_CALL(prov, mod, func, name, 5, _SDT_A(a0), _SDT_A(a1), _SDT_A(a2), _SDT_A(a3), _SDT_A(a4))
#define SDT_PROBE6(prov, mod, func, name, a0, a1, a2, a3, a4, a5) \
	_SDT_CALL(prov, mod, func, name, 6, _SDT_A(a0), _SDT_A(a1), _SDT_A(a2), _SDT_A(a3), _SDT_A(a4), _SDT_A(a5))
/* FreeBSD's five-argument SDT_PROBE(). */
#define SDT_PROBE(prov, mod, func, name, a0, a1, a2, a3, a4) SDT_PROBE5(prov, mod, func, name, a0, a1, a2, a3, a4)

/*
 * Per-probe is-enabled: a call to __dtrace_isenabled_<prov>_<mod>_<func>_<name>,
 * a stub returning 0 that the runtime turns into "result = 0" in place,
 * and arming into "result = 1": no trap and no branch. The empty asm keeps the
 * call a plain call (never a tail jump, which could not be patched so).
 * Asking does not fire the probe.
 */
#define _SDT_ISEN(prov, mod, func, name) __dtrace_isenabled_##prov##_##mod##_##func##_##name
/* FreeBSD's SDT_PROBES_ENABLED(): true while any probe is armed; the boot runtime keeps the flag. */
extern volatile _SDT_BOOL sdt_probes_enabled;
#if defined(SDT_COMPILED_OUT)
#define SDT_PROBE_ENABLED(prov, mod, func, name) 0
#define SDT_PROBES_ENABLED() 0
#elif defined(SDT_CLASSIC)
#define SDT_PROBE_ENABLED(prov, mod, func, name) __builtin_expect(sdt_probe_func != 0, 0)
#define SDT_PROBES_ENABLED() __builtin_expect(sdt_probe_func != 0, 0)
#else
#define SDT_PROBE_ENABLED(prov, mod, func, name)                               \
	__builtin_expect(__extension__({                                       \
		extern int _SDT_ISEN(prov, mod, func, name)(void)              \
			_SDT_LINKNAME(_SDT_ISEN(prov, mod, func, name));       \
		int _sdt_on = _SDT_ISEN(prov, mod, func, name)();              \
		__asm__("" : "+r"(_sdt_on));                                   \
		_sdt_on;                                                       \
	}), 0)
#define SDT_PROBES_ENABLED() __builtin_expect(sdt_probes_enabled, 0)
#endif

/*
 * The kernel's anonymous probes: provider sdt, empty module and function, the
 * types given as C types beside each argument.
 */
#define DTRACE_PROBE(name)                                                    \
	do {                                                                  \
		_SDT_DESC(sdt, , , name, 0, "");                              \
		SDT_PROBE0(sdt, , , name);                                    \
	} while (0)
#define DTRACE_PROBE1(name, type0, arg0)                                      \
	do {                                                                  \
		_SDT_DESC(sdt, , , name, 1, _SDT_T(#type0));                  \
		SDT_PROBE1(sdt, , , name, arg0);                              \
	} while (0)
#define DTRACE_PROBE2(name, type0, arg0, type1, arg1)                         \
	do {                                                                  \
		_SDT_DESC(sdt, , , name, 2, _SDT_T(#type0) _SDT_T(#type1));   \
		SDT_PROBE2(sdt, , , name, arg0, arg1);                        \
	} while (0)
#define DTRACE_PROBE3(name, type0, arg0, type1, arg1, type2, arg2)            \
	do {                                                                  \
		_SDT_DESC(sdt, , , name, 3, _SDT_T(#type0) _SDT_T(#type1) _SDT_T(#type2)); \
		SDT_PROBE3(sdt, , , name, arg0, arg1, arg2);                  \
	} while (0)
#define DTRACE_PROBE4(name, type0, arg0, type1, arg1, type2, arg2, type3, arg3) \
	do {                                                                  \
		_SDT_DESC(sdt, , , name, 4, _SDT_T(#type0) _SDT_T(#type1) _SDT_T(#type2) _SDT_T(#type3)); \
		SDT_PROBE4(sdt, , , name, arg0, arg1, arg2, arg3);            \
	} while (0)
#define DTRACE_PROBE5(name, type0, arg0, type1, arg1, type2, arg2, type3, arg3, type4, arg4) \
	do {                                                                  \
		_SDT_DESC(sdt, , , name, 5,                                   \
			  _SDT_T(#type0) _SDT_T(#type1) _SDT_T(#type2) _SDT_T(#type3) _SDT_T(#type4)); \
		SDT_PROBE5(sdt, , , name, arg0, arg1, arg2, arg3, arg4);      \
	} while (0)

#ifdef __cplusplus
}
#endif

#endif /* SDTGEN_SDT_H */
