# sdtgen: the two commands a newcomer needs are `make demo` and `make test` (`make quick`: a subset).
# Each creates its own virtual environment in .venv on first use.

# The checkout, also when make runs elsewhere with -f (the README's tests do).
HERE := $(dir $(abspath $(lastword $(MAKEFILE_LIST))))
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEMO := build/demo
PROCESS := build/process

.PHONY: all venv demo process test quick lint matrix fuzz bench bench-startup bench-sessions bench-live realworld qemu modules torture mutate clean

all: test

# editable_mode=compat: a plain path in a .pth, not an import hook that costs every sdtgen run ~10 ms.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --config-settings editable_mode=compat -e '.[test]'
	@touch $@

venv: $(STAMP)

demo: $(STAMP)
	@rm -rf $(DEMO)
	@echo "== Building the fixture kernel with zero-cost probes"
	$(MAKE) --no-print-directory -C $(HERE)fixtures/kernel O=$(abspath $(DEMO)) SDTGEN=$(abspath $(BIN)/sdtgen)
	@echo
	@echo "== Probe sites found after the partial link"
	$(BIN)/sdtgen scan $(DEMO)/kernel.o
	@echo
	@echo "== Probes the final image describes in its own tables"
	$(BIN)/sdtgen probes $(DEMO)/kernel.elf
	@echo
	@echo "== Every site is where the table says"
	$(BIN)/sdtgen check $(DEMO)/kernel.o $(DEMO)/kernel.elf
	@echo
	@echo "== Boot it in the emulator: sites become NOPs; arm a few probes and run the kernel"
	$(BIN)/sdtgen boot $(DEMO)/kernel.elf --run kmain --arg 1 \
		--enable 'hk:vfs::' --enable 'hk:proc:exec:exec-success' --enable 'hk:sched:switch:six' \
		--run kmain --arg 1 \
		--disable 'hk:vfs::' --enable 'hk:proc:exit:done' --run kmain --arg 2

# The fixture kernel as a Linux process on this CPU: the C runtime patches its text, arms probes by spec, traps
# and branches into recorders, streams packets; then its patch protocol under real threads (docs/runtime.md).
process: $(STAMP)
	@rm -rf $(PROCESS)
	$(MAKE) --no-print-directory -C $(HERE)fixtures/process O=$(abspath $(PROCESS)) SDTGEN=$(abspath $(BIN)/sdtgen) run

# Every toolchain and link mode (gcc/clang, GNU ld/gold/lld), both table modes, each boot against the native
# run; rewrites the tables in docs/matrix.md. A tool of the checkout: it drives this sdtgen, imports none of it.
matrix: $(STAMP)
	SDTGEN=$(abspath $(BIN)/sdtgen) $(BIN)/python tools/matrix.py --arch all --output docs/matrix.md

# Kernel-scale timings and the cost of a probe, against baselines of the same run; writes BENCHMARKS.md.
# barectf 3.1.2 (a comparison of the real-CPU rows) pins PyYAML below 6 and wants jsonschema 3: installed
# without its dependency resolution, beside the ones it runs with.
BENCH_STAMP := $(VENV)/.bench-stamp
$(BENCH_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check 'pyyaml>=6,<7' 'jinja2>=3,<4' \
		'jsonschema>=3.2,<4' 'termcolor>=1.1,<2'
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps barectf==3.1.2
	@touch $@

bench: $(BENCH_STAMP)
	$(BIN)/python bench/run.py

# The start-up rows alone (sdtgen --version, scan of the fixture object), replaced in BENCHMARKS.md.
bench-startup: $(STAMP)
	$(BIN)/python bench/run.py --only startup

# The session rows alone (a firing into k sessions, a disarmed probe beside another session's armed site, the
# flight recorder over bench/mix.c, against the tree before sessions), replaced or added in BENCHMARKS.md.
bench-sessions: $(STAMP)
	$(BIN)/python bench/run.py --only sessions

# The live rows alone (a QEMU guest streamed to lttng-relayd against a local trace, a firing's way to babeltrace2's
# live output, eight process targets into one relay daemon against one), replaced or added in BENCHMARKS.md.
bench-live: $(STAMP)
	$(BIN)/python bench/run.py --only live

# The fuzz test with many more examples than CI runs.
fuzz: $(STAMP)
	SDTGEN_FUZZ_EXAMPLES=5000 $(BIN)/pytest -q tests/test_fuzz.py tests/tables/test_fuzz_tables.py
	SDTGEN_FUZZ_EXAMPLES=2000 $(BIN)/pytest -q tests/qemu/test_record.py -k whatever_the_line_carries

# The fixture kernel on QEMU on all four architectures, with the torture test at 10,000 toggles each
# (make test boots RISC-V and x86-64 with 100). Tens of minutes on two cores.
qemu: $(STAMP)
	SDTGEN_QEMU_ALL=1 SDTGEN_QEMU_TOGGLES=10000 $(BIN)/pytest -q tests/qemu

# The emulated torture test's random schedules at length, with a second session keeping sites too, and sessions on
# every architecture (make test runs fewer toggles, on x86-64; the exhaustive tests try every landing of every
# store either way).
torture: $(STAMP)
	SDTGEN_TORTURE_FULL=1 $(BIN)/pytest -q tests/targets/emulator/test_torture.py tests/targets/emulator/test_torture_keep.py \
		tests/targets/emulator/test_emulator_sessions.py

# Loadable modules at length: the module's firings against the native run on every architecture in both arming
# modes, and 1,000 unload/load cycles (2,000 toggles) under calling CPUs in the emulator and on QEMU (make test
# runs one case each and a dozen toggles). Minutes on two cores.
modules: $(STAMP)
	SDTGEN_MODULE_MATRIX=1 SDTGEN_MODULE_TORTURE=1 $(BIN)/pytest -q tests/targets/emulator/test_modules.py \
		tests/runtime/test_process_modules.py tests/qemu/test_qemu_modules.py

# A real Linux kernel (Debian's linux-source-6.1: tinyconfig + ftrace + jump labels) in build/realworld;
# its probe tables and __fentry__ sites checked against readelf and objdump. Minutes; not part of test.
realworld: $(STAMP)
	realworld/build-kernel.sh
	$(BIN)/pytest -q -p no:cacheprovider realworld

# A mutation pass (universalmutator for the runtime's C, cosmic-ray for the host's Python): a seeded sample of
# mutants, each run against only the tests that cover its file in a scratch copy of the tree; the score per
# file and the survivors go to docs/mutation.md. The defaults fit an hour on two cores.
# make mutate MUTATE_SAMPLE=20 MUTATE_SEED=7 MUTATE_FILES='sdtgen/transport/frames.py' MUTATE_JOBS=1
# The tools come with the test extras (the tool's own test runs them); `.[mutate]` has them alone.
mutate: $(STAMP)
	MUTATE_SAMPLE='$(MUTATE_SAMPLE)' MUTATE_SEED='$(MUTATE_SEED)' MUTATE_FILES='$(MUTATE_FILES)' \
		MUTATE_JOBS='$(MUTATE_JOBS)' MUTATE_BUDGET='$(MUTATE_BUDGET)' MUTATE_MAX_TESTS='$(MUTATE_MAX_TESTS)' \
		$(BIN)/python tools/mutate.py

lint: $(STAMP)
	$(BIN)/ruff check .

# Two workers, a test file each at a time (its module fixtures built once): most tests wait on one
# single-threaded emulator, compiler or QEMU vCPU, so the machine's two cores both work.
test: $(STAMP) lint
	$(BIN)/pytest -q -n 2 --dist loadfile

# A few minutes: ruff, then the build-time path on x86-64 (scan, gen, check, probes, the header in C and C++),
# the CLI's refusals, the emulated boot's output, the packets' decoder and the D compiler. No QEMU, no other
# architecture: `make test` runs everything.
QUICK_TESTS := tests/test_scan.py tests/test_codegen.py tests/test_check.py tests/test_listing.py tests/test_cli.py \
	tests/test_header.py tests/targets/emulator/test_cli_output.py tests/trace/test_packets.py tests/dscript/test_compiler.py

quick: $(STAMP) lint
	$(BIN)/pytest -q -n 2 --dist loadfile $(QUICK_TESTS)

clean:
	rm -rf build $(VENV) .pytest_cache
