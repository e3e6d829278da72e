"""The emulator target: the image's PT_LOAD segments in Unicorn engines, one a CPU (``target``), the
platform it gives the runtime, its torture and exhaustive proofs. Private to this target: nothing outside
``sdtgen.targets`` imports it but the tests of it and ``bench``."""
