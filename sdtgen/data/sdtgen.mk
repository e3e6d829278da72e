# sdtgen.mk - zero-cost SDT probes for a kernel-style Makefile.
#
#   include $(shell sdtgen makefile)
#   $(eval $(call sdt_image,build/kernel.elf,build/kernel.o,$(OBJS)))
#
# sdt_image(IMAGE, PARTIAL, OBJECTS) adds the steps between your objects and
# the final image:
#   PARTIAL      ld -r of OBJECTS with sdtgen's partial linker script, then
#                `sdtgen gen`, which writes PARTIAL_sdt_stubs.c and
#                PARTIAL_sdt_table.S (named from PARTIAL without .o)
#   *_sdt_*.o    the stubs (compiled without LTO) and the table
#   *_sdt_final.ld  sdtgen's final linker script for SDT_ARCH, from its template
#   IMAGE        the final link with that script (or SDT_FINAL_LDS), then
#                `sdtgen check`; an image that fails the check is deleted
#
# Output is Kbuild-style ("  SDTGEN  build/kernel.o"); V=1 prints commands.
# Override any of these before or after the include (SDT_FINAL_LDS empty: each
# image gets PARTIAL_sdt_final.ld, written by `sdtgen linker-script final` for SDT_ARCH):
sdt_final_template := $(dir $(lastword $(MAKEFILE_LIST)))linker_scripts/final.ld.in
sdt_runtime_dir := $(dir $(lastword $(MAKEFILE_LIST)))../runtime
sdt_include_dir := $(dir $(lastword $(MAKEFILE_LIST)))../include
SDTGEN ?= sdtgen
SDT_ARCH ?= $(sdt_derived_arch)
SDT_MODE ?= reloc
# SDT_STRICT=1: a probe used without SDT_PROBE_DEFINE stops the build (gen --strict), not just a warning
SDT_STRICT ?= 0
SDT_CC ?= $(CC)
SDT_LD ?= $(LD)
SDT_STUB_CFLAGS ?= -O2 -ffreestanding -fno-pic
SDT_ASFLAGS ?=
SDT_LDFLAGS ?=
SDT_PARTIAL_LDS ?= $(shell $(SDTGEN) linker-script partial --path)
SDT_FINAL_LDS ?=

# SDT_ARCH, unless set: the architecture $(SDT_CC) builds for, asked once (`$(CC) -dumpmachine`).
# A cross build whose SDT_ARCH disagrees with its compiler fails in the linker with
# "cannot represent machine"; one whose compiler is none of sdtgen's stops here.
sdt_derived_arch = $(eval SDT_ARCH := $(shell $(SDTGEN) arch --triple "$$($(SDT_CC) -dumpmachine)"))$(if \
	$(SDT_ARCH),$(SDT_ARCH),$(error cannot tell the architecture of SDT_CC=$(SDT_CC): set SDT_ARCH (see `$(SDTGEN) arch`)))
sdt_need_arch = $(if $(SDT_ARCH),)# expands to nothing, after asking: a compiler sdtgen cannot serve stops the first link

ifeq ($(V),1)
sdt_q :=
sdt_msg := @:
else
sdt_q := @
sdt_msg := @printf '  %-7s %s\n'
endif

define sdt_image
$(2): $(3) $$(SDT_PARTIAL_LDS)
	$$(sdt_msg) LD $$@$$(sdt_need_arch)
	$$(sdt_q)$$(SDT_LD) -r -T $$(SDT_PARTIAL_LDS) -o $$@ $(3)
	$$(sdt_msg) SDTGEN $$@
	$$(sdt_q)$$(SDTGEN) gen $$@ --mode $$(SDT_MODE)$$(if $$(filter 1,$$(SDT_STRICT)), --strict) --stubs $(2:.o=)_sdt_stubs.c --table $(2:.o=)_sdt_table.S \
		|| { rm -f $$@; exit 1; }

$(2:.o=)_sdt_stubs.c $(2:.o=)_sdt_table.S: $(2) ;

$(2:.o=)_sdt_stubs.o: $(2:.o=)_sdt_stubs.c
	$$(sdt_msg) CC $$@
	$$(sdt_q)$$(SDT_CC) $$(SDT_STUB_CFLAGS) -fno-lto -I$(sdt_include_dir) -c -o $$@ $$<

$(2:.o=)_sdt_runtime.o: $(sdt_runtime_dir)/sdt_runtime.c $(wildcard $(sdt_runtime_dir)/*.[ch] $(sdt_include_dir)/*.h)
	$$(sdt_msg) CC $$@
	$$(sdt_q)$$(SDT_CC) $$(SDT_STUB_CFLAGS) -fno-lto -I$(sdt_include_dir) -c -o $$@ $$<

$(2:.o=)_sdt_arch.o: $(wildcard $(sdt_runtime_dir)/arch/*.[ch] $(sdt_runtime_dir)/*.h $(sdt_include_dir)/*.h)
	$$(sdt_msg) CC $$@
	$$(sdt_q)$$(SDT_CC) $$(SDT_STUB_CFLAGS) -fno-lto -I$(sdt_include_dir) -c -o $$@ $(sdt_runtime_dir)/arch/sdt_$$(SDT_ARCH).c

$(2:.o=)_sdt_table.o: $(2:.o=)_sdt_table.S
	$$(sdt_msg) AS $$@
	$$(sdt_q)$$(SDT_CC) $$(SDT_STUB_CFLAGS) -fno-lto $$(SDT_ASFLAGS) -c -o $$@ $$<

$(2:.o=)_sdt_final.ld: $(sdt_final_template)
	$$(sdt_q)$$(SDTGEN) linker-script final --arch $$(SDT_ARCH) -o $$@

$(1): $(2) $(2:.o=)_sdt_stubs.o $(2:.o=)_sdt_table.o $(2:.o=)_sdt_runtime.o $(2:.o=)_sdt_arch.o $$(or $$(SDT_FINAL_LDS),$(2:.o=)_sdt_final.ld)
	$$(sdt_msg) LD $$@
	$$(sdt_q)$$(SDT_LD) $$(SDT_LDFLAGS) -T $$(or $$(SDT_FINAL_LDS),$(2:.o=)_sdt_final.ld) -o $$@ $(2) $(2:.o=)_sdt_stubs.o $(2:.o=)_sdt_table.o $(2:.o=)_sdt_runtime.o $(2:.o=)_sdt_arch.o
	$$(sdt_msg) SDTCHK $$@
	$$(sdt_q)$$(SDTGEN) check --quiet $(2) $$@ || { rm -f $$@; exit 1; }
endef

