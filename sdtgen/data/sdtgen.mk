# sdtgen.mk - zero-cost SDT probes for a kernel-style Makefile.
#
#   include $(shell sdtgen makefile)
#   CFLAGS := ... -I$(SDT_INCLUDE)
#   $(eval $(call sdt_image,build/kernel.elf,build/kernel.o,$(OBJS)))
#
# sdt_image(IMAGE, PARTIAL, OBJECTS) adds the steps between your objects and
# the final image:
#   PARTIAL      ld -r of OBJECTS with sdtgen's partial linker script (which
#                merges their text into one .text but for the sections
#                SDT_KEEP_TEXT names: PARTIAL_sdt_partial.ld), then
#                `sdtgen gen`, which writes PARTIAL_sdt_stubs.c and
#                PARTIAL_sdt_table.S (named from PARTIAL without .o)
#   *_sdt_*.o    the stubs, recorders and table, and sdtgen's runtime
#                (SDT_RUNTIME_SRCS), compiled with SDT_CFLAGS: your CFLAGS,
#                so their code model and ABI are the kernel's (never LTO)
#   *_sdt_runtime.a  the runtime's objects and its port of SDT_ARCH: the
#                final link takes the members the image uses (the core, which
#                every recorder calls; sdt_serial.o only when the kernel calls
#                sdt_serial_*), so an unused part costs nothing
#   *_sdt_final.ld  sdtgen's final linker script for SDT_ARCH, from its template
#   IMAGE        the final link with that script (or SDT_FINAL_LDS, your own,
#                which INCLUDEs sdt_text.ld and sdt_data.ld from
#                SDT_LINKER_SCRIPTS), then `sdtgen check`; an image that
#                fails the check is deleted
#
# sdt_baseline(BASELINE, IMAGE) adds BASELINE: IMAGE built again by the same
# Makefile with every probe compiled out (SDT_COMPILED_OUT=1), in a directory
# of its own (BASELINE.d/, the sources found from here by vpath), then copied
# to BASELINE: what `sdtgen cost IMAGE BASELINE` compares against.
#
# Output is Kbuild-style ("  SDTGEN  build/kernel.o"); V=1 prints commands.
# Every path is found from this file's own place, so a make that has nothing
# to do starts sdtgen at most once (the `sdtgen makefile` of the include).
#
# What the fragment gives you: SDT_INCLUDE, the directory of sdt.h and
# sdt_runtime.h (-I for your sources), SDT_RUNTIME_DIR, the directory of the
# runtime's C sources, and SDT_LINKER_SCRIPTS, the directory of its linker
# scripts and of the snippets your own final script INCLUDEs.
sdt_here := $(dir $(lastword $(MAKEFILE_LIST)))
SDT_INCLUDE := $(abspath $(sdt_here)../include)
SDT_LINKER_SCRIPTS := $(abspath $(sdt_here)linker_scripts)
SDT_RUNTIME_DIR := $(abspath $(sdt_here)../runtime)
# The runtime's portable sources in SDT_RUNTIME_DIR, each compiled on its own (the port of an architecture,
# arch/sdt_$(SDT_ARCH).c, is chosen when it is compiled): a file the runtime gains is named here, once.
sdt_runtime_files := sdt_runtime.c sdt_serial.c sdt_control.c sdt_setjmp.c

# What you may set, before the sdt_image line or on the command line:
SDTGEN ?= sdtgen
SDT_ARCH ?= $(sdt_derived_arch)
SDT_MODE ?= reloc
# SDT_STRICT=1: a probe used without SDT_PROBE_DEFINE stops the build (gen --strict), not just a warning
SDT_STRICT ?= 0
SDT_CC ?= $(CC)
SDT_CFLAGS ?= $(CFLAGS)
# sdtgen's runtime (patching, arming, recording, the serial transport, the control core, a setjmp): compiled
# for every image like the generated code, with the port of SDT_ARCH, into an archive the final link takes what
# it uses from
SDT_RUNTIME_SRCS ?= $(addprefix $(SDT_RUNTIME_DIR)/,$(sdt_runtime_files))
# The hosted platform (a Linux process as the kernel: its hooks, and the main sdtgen drives it with) for a program
# that links the runtime in user space, as fixtures/process does: compiled with your program, not the kernel flags
SDT_HOSTED_SRCS ?= $(SDT_RUNTIME_DIR)/hosted/sdt_linux.c $(SDT_RUNTIME_DIR)/hosted/sdt_linux_main.c
SDT_LD ?= $(LD)
SDT_AR ?= $(AR)
# Options of the runtime's own build only (e.g. -DSDT_NAIVE_PROTOCOL, the torture test's unsafe patching)
SDT_RUNTIME_CFLAGS ?=
SDT_ASFLAGS ?=
SDT_LDFLAGS ?=
# SDT_CLOCK_HZ=N (the ticks a second of the kernel's sdt_hooks.clock): gen also writes PARTIAL_sdt_metadata,
# the CTF metadata that makes the runtime's packets, as the kernel's transport carries them out, a trace
# (a directory of it, named `metadata`, and the CPUs' streams); SDT_CLOCK_NAME names the clock in it
SDT_CLOCK_HZ ?=
SDT_CLOCK_NAME ?=
# SDT_KEEP_TEXT: the kernel's own text sections (.text.NAME: its boot code's .text.entry, a .text.init its final
# script bounds with its own symbols) that the partial link keeps as they are instead of merging them into .text
SDT_KEEP_TEXT ?=
# The partial link's script, when not sdtgen's (partial.ld, or with SDT_KEEP_TEXT PARTIAL_sdt_partial.ld)
SDT_PARTIAL_LDS ?=
SDT_FINAL_LDS ?=
# SDT_COMPILED_OUT=1: every probe compiled out (sdt.h's SDT_COMPILED_OUT): sdt_image adds -DSDT_COMPILED_OUT to
# CFLAGS after your Makefile set them (a `make CFLAGS+=...` would replace them), so the image is the baseline of
# `sdtgen cost`; sdt_baseline builds it beside the probed image
SDT_COMPILED_OUT ?=

# The Makefile that included this one (sdt_baseline runs it again), and, in that run, where the sources are.
sdt_makefile := $(abspath $(firstword $(MAKEFILE_LIST)))
SDT_BASELINE_SRC ?=
ifneq ($(SDT_BASELINE_SRC),)
vpath %.c $(SDT_BASELINE_SRC)
vpath %.h $(SDT_BASELINE_SRC)
vpath %.S $(SDT_BASELINE_SRC)
vpath %.s $(SDT_BASELINE_SRC)
endif

# SDT_ARCH, unless set: the architecture $(SDT_CC) builds for with SDT_CFLAGS (`-dumpmachine`, which
# clang answers for its --target), asked only when a link needs it. A cross build whose SDT_ARCH
# disagrees with its compiler fails in the linker with "cannot represent machine"; one whose compiler
# is none of sdtgen's stops here.
sdt_derived_arch = $(eval SDT_ARCH := $(shell $(SDTGEN) arch --triple "$$($(SDT_CC) $(SDT_CFLAGS) -dumpmachine)"))$(if \
	$(SDT_ARCH),$(SDT_ARCH),$(error cannot tell the architecture of SDT_CC=$(SDT_CC): set SDT_ARCH (see `$(SDTGEN) arch`)))
sdt_need_arch = $(if $(SDT_ARCH),)# expands to nothing, after asking: a compiler sdtgen cannot serve stops the first link

# Every C and assembly file sdtgen writes or ships is compiled by this one command.
sdt_compile = $(SDT_CC) $(SDT_CFLAGS) -fno-lto -I$(SDT_INCLUDE)

ifeq ($(V),1)
sdt_q :=
sdt_msg := @:
else
sdt_q := @
sdt_msg := @printf '  %-7s %s\n'
endif

# sdt_runtime_obj(PARTIAL, SOURCE): the object of one runtime source for one image
sdt_runtime_obj = $(patsubst %.c,$(1:.o=)_sdt_rt_%.o,$(notdir $(2)))

# The runtime's sources, each once, in the order first named: a kernel that adds a file the defaults hold
# already (sdt_serial.c, as an older guide said) gets one rule for it, not a second one make warns about
# ("overriding recipe"). Two different files of one name would be one object: that stops the build.
sdt_uniq = $(if $(1),$(firstword $(1)) $(call sdt_uniq,$(filter-out $(firstword $(1)),$(1))))
sdt_runtime_srcs = $(strip $(call sdt_uniq,$(abspath $(SDT_RUNTIME_SRCS)))$(foreach n,$(sort $(notdir $(SDT_RUNTIME_SRCS))),$(if \
	$(word 2,$(filter %/$(n),$(call sdt_uniq,$(abspath $(SDT_RUNTIME_SRCS))))),$(error SDT_RUNTIME_SRCS names two \
	files called $(n) ($(filter %/$(n),$(call sdt_uniq,$(abspath $(SDT_RUNTIME_SRCS))))): each would be one object; \
	rename one))))

sdt_runtime_headers = $(wildcard $(SDT_RUNTIME_DIR)/*.h $(SDT_INCLUDE)/*.h)

define sdt_runtime_rule
$(call sdt_runtime_obj,$(1),$(2)): $(2) $(wildcard $(dir $(2))*.[ch]) $$(sdt_runtime_headers)
	$$(sdt_msg) CC $$@
	$$(sdt_q)$$(sdt_compile) $$(SDT_RUNTIME_CFLAGS) -c -o $$@ $$<
endef

# sdt_stamp(FILE, VALUE): VALUE kept in FILE, rewritten (when make reads this file) only when it changes, so a
# new SDT_CLOCK_HZ reruns gen and a new SDT_KEEP_TEXT the partial link, as Kbuild's if_changed does for new flags.
sdt_stamp = $(shell echo '$(2)' | cmp -s - $(1) 2>/dev/null || { mkdir -p $(dir $(1)) && echo '$(2)' > $(1); })

# sdt_partial_lds(PARTIAL): the partial link's script
sdt_partial_lds = $(or $(SDT_PARTIAL_LDS),$(if $(SDT_KEEP_TEXT),$(1:.o=)_sdt_partial.ld,$(SDT_LINKER_SCRIPTS)/partial.ld))

define sdt_image
$(if $(filter 1,$(SDT_COMPILED_OUT)),override CFLAGS += -DSDT_COMPILED_OUT)
$(if $(SDT_CLOCK_HZ),$(call sdt_stamp,$(2:.o=)_sdt_clock,$(SDT_CLOCK_HZ) $(SDT_CLOCK_NAME)))
$(if $(SDT_KEEP_TEXT),$(call sdt_stamp,$(2:.o=)_sdt_keep,$(SDT_KEEP_TEXT)))
$(2): $(3) $(call sdt_partial_lds,$(2)) $(if $(SDT_CLOCK_HZ),$(2:.o=)_sdt_clock)
	$$(sdt_msg) LD $$@$$(sdt_need_arch)
	$$(sdt_q)$$(SDT_LD) -r -T $(call sdt_partial_lds,$(2)) -o $$@ $(3)
	$$(sdt_msg) SDTGEN $$@
	$$(sdt_q)$$(SDTGEN) gen $$@ --mode $$(SDT_MODE)$$(if $$(filter 1,$$(SDT_STRICT)), --strict) --stubs $(2:.o=)_sdt_stubs.c --table $(2:.o=)_sdt_table.S \
		$$(if $$(SDT_CLOCK_HZ),--ctf-metadata $(2:.o=)_sdt_metadata --clock-hz $$(SDT_CLOCK_HZ)$$(if $$(SDT_CLOCK_NAME), --clock-name $$(SDT_CLOCK_NAME))) \
		|| { rm -f $$@; exit 1; }

$(2:.o=)_sdt_stubs.c $(2:.o=)_sdt_table.S $(if $(SDT_CLOCK_HZ),$(2:.o=)_sdt_metadata): $(2) ;

$(2:.o=)_sdt_stubs.o: $(2:.o=)_sdt_stubs.c
	$$(sdt_msg) CC $$@
	$$(sdt_q)$$(sdt_compile) -c -o $$@ $$<

$(2:.o=)_sdt_rt_arch.o: $(wildcard $(SDT_RUNTIME_DIR)/arch/*.[ch]) $$(sdt_runtime_headers)
	$$(sdt_msg) CC $$@
	$$(sdt_q)$$(sdt_compile) $$(SDT_RUNTIME_CFLAGS) -c -o $$@ $(SDT_RUNTIME_DIR)/arch/sdt_$$(SDT_ARCH).c

$(2:.o=)_sdt_table.o: $(2:.o=)_sdt_table.S
	$$(sdt_msg) AS $$@
	$$(sdt_q)$$(sdt_compile) $$(SDT_ASFLAGS) -c -o $$@ $$<

$(foreach s,$(sdt_runtime_srcs),$(eval $(call sdt_runtime_rule,$(2),$(s))))

$(2:.o=)_sdt_runtime.a: $(call sdt_runtime_obj,$(2),$(sdt_runtime_srcs)) $(2:.o=)_sdt_rt_arch.o
	$$(sdt_msg) AR $$@
	$$(sdt_q)rm -f $$@ && $$(SDT_AR) rcs $$@ $$^

$(2:.o=)_sdt_partial.ld: $(SDT_LINKER_SCRIPTS)/partial.ld $(2:.o=)_sdt_keep
	$$(sdt_q)$$(SDTGEN) linker-script partial $(addprefix --keep ,$(SDT_KEEP_TEXT)) -o $$@

$(2:.o=)_sdt_final.ld: $(addprefix $(SDT_LINKER_SCRIPTS)/,final.ld.in sdt_text.ld sdt_data.ld)
	$$(sdt_q)$$(SDTGEN) linker-script final --arch $$(SDT_ARCH) -o $$@

$(1): $(2) $(2:.o=)_sdt_stubs.o $(2:.o=)_sdt_table.o $(2:.o=)_sdt_runtime.a $$(or $$(SDT_FINAL_LDS),$(2:.o=)_sdt_final.ld)
	$$(sdt_msg) LD $$@
	$$(sdt_q)$$(SDT_LD) $$(SDT_LDFLAGS) -L $$(SDT_LINKER_SCRIPTS) -T $$(or $$(SDT_FINAL_LDS),$(2:.o=)_sdt_final.ld) -o $$@ $(2) $(2:.o=)_sdt_stubs.o $(2:.o=)_sdt_table.o $(2:.o=)_sdt_runtime.a
	$$(sdt_msg) SDTCHK $$@
	$$(sdt_q)$$(SDTGEN) check --quiet $(2) $$@ || { rm -f $$@; exit 1; }
endef

# sdt_baseline(BASELINE, IMAGE): IMAGE (a path under the current directory) without probes. Always run: the
# inner make decides what is out of date, from the sources and its own objects, never the probed ones.
define sdt_baseline
$(if $(filter /%,$(2)),$(error sdt_baseline: IMAGE $(2) is absolute: give it relative to $(CURDIR)))
$(1): FORCE_SDT_BASELINE
	$$(sdt_msg) MAKE $$@
	$$(sdt_q)mkdir -p $(1).d
	$$(sdt_q)$$(MAKE) --no-print-directory -C $(1).d -f $(sdt_makefile) SDT_COMPILED_OUT=1 \
		SDT_BASELINE_SRC=$(CURDIR) $(2)
	$$(sdt_q)cp $(1).d/$(2) $$@

.PHONY: FORCE_SDT_BASELINE
endef
