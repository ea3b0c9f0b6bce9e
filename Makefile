# Developer targets.  CI runs .ci/run (the README's test command); these are extras.
PY ?= python
ASAN_PRELOAD = $(shell gcc -print-file-name=libasan.so) $(shell gcc -print-file-name=libubsan.so)
SAN_DIR = build/sanitize
# the interpreter itself, not a launcher script (valgrind would trace the script)
PY_EXE = $(shell $(PY) -c 'import sys; print(sys.executable)')

.PHONY: build cuda mpi test-mpi test test-all test-gpu gpu-prepare gpu-check calibration asan tsan valgrind bench docs-ops check-docs portable arm-test clean

build:            ## compile the C core in place
	$(PY) setup.py build_ext --inplace

cuda:             ## compile the C core and the CUDA backend in place (fails naming what is missing)
	SHARDWISE_CUDA=1 $(PY) setup.py build_ext --inplace

mpi:              ## compile the C core and shardwise._mpi in place (needs an mpicc: pip install mpich)
	SHARDWISE_MPI=1 $(PY) setup.py build_ext --inplace

test-mpi: mpi     ## the multi-process tests: mpiexec -n 2 and -n 4 on loopback (docs/distributed.md)
	SHARDWISE_REQUIRE_MPI=1 PYTHONPATH=python $(PY) -m pytest -q -rs -p no:cacheprovider tests/distributed

test-gpu: cuda    ## the GPU tests (skipped with the reason where no GPU is usable; docs/gpu.md)
	PYTHONPATH=python $(PY) -m pytest -q -rs -m gpu tests

gpu-prepare:      ## before a device run, here with network: the wheels the GPU machine lacks -> build/gpu_wheels
	PYTHON=$(PY) bash tools/gpu_check.sh --prepare

gpu-check:        ## the whole device check (install offline, build sm_90, info, GPU tests, benchmarks) -> $$OUT
	bash tools/gpu_check.sh

portable:         ## every C file of the core compiled for aarch64 (needs apt's gcc-aarch64-linux-gnu)
	PYTHON=$(PY) bash tools/portable_build.sh

arm-test:         ## the core built for aarch64, its kernel and training tests run under qemu (once: bash tools/arm_test.sh --setup)
	bash tools/arm_test.sh

test: build       ## the default (fast) test run
	$(PY) -m pytest -q

test-all: build   ## including tests marked slow (not calibration: timings)
	$(PY) -m pytest -q -m "not calibration"

calibration: build   ## the tests that compare times (run on a quiet machine; never in the default run)
	$(PY) -m pytest -q -rs -m calibration

asan:             ## run the tests against a copy built with AddressSanitizer + UBSan
	rm -rf $(SAN_DIR) && mkdir -p $(SAN_DIR)
	git ls-files -z | xargs -0 -I{} cp --parents {} $(SAN_DIR)
	cd $(SAN_DIR) && SHARDWISE_SANITIZE=1 $(PY) setup.py build_ext --inplace
	cd $(SAN_DIR) && LD_PRELOAD="$(ASAN_PRELOAD)" ASAN_OPTIONS=detect_leaks=0 \
		UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 PYTHONPATH=python \
		$(PY) -m pytest -q --capture=sys -p no:cacheprovider tests

# asan, tsan: --capture=sys so that a sanitizer's report goes to the real stderr (pytest's fd capture would swallow it
# when the sanitizer ends the process: only the exit status, 66 for TSan, would be left)
TSAN_DIR = build/tsan
tsan:             ## the runtime's tests and the planner's threaded tables, searches and plans against a copy built with ThreadSanitizer (multi-rank: the loopback comm)
	rm -rf $(TSAN_DIR) && mkdir -p $(TSAN_DIR)
	git ls-files -z | xargs -0 -I{} cp --parents {} $(TSAN_DIR)
	cd $(TSAN_DIR) && SHARDWISE_SANITIZE=thread $(PY) setup.py build_ext --inplace
	cd $(TSAN_DIR) && LD_PRELOAD="$(shell gcc -print-file-name=libtsan.so)" \
		TSAN_OPTIONS="halt_on_error=1" PYTHONPATH=python \
		$(PY_EXE) -m pytest -q --capture=sys -p no:cacheprovider tests/train/test_runtime.py tests/iteration/test_streams.py tests/train/test_train.py tests/train/test_pipeline.py \
		tests/train/test_rnn_train.py tests/distributed/test_loopback.py tests/iteration/test_memory_plan.py \
		tests/planning/test_search_memory.py tests/planning/test_search.py tests/planning/test_scaled_tables.py \
		tests/iteration/test_simulate_c.py::test_a_large_plans_durations_are_the_same_on_one_thread_and_several -k "not torch"

valgrind: build   ## C-heavy tests under valgrind memcheck; fails on records in our C code
	$(PY_EXE) tools/valgrind_check.py $(PY_EXE) -m pytest -q -p no:cacheprovider \
		tests/planning/test_cost_model.py tests/core/test_api.py tests/planning/test_search.py tests/ops/test_kernels_conv.py \
		tests/ops/test_kernels_misc.py tests/ops/test_conformance.py tests/iteration/test_lower.py \
		tests/iteration/test_simulate_c.py -k "not gil"

bench:            ## the search-time benchmark (benchmarks/results/search_time.txt)
	$(PY) benchmarks/search_time.py

docs-ops:         ## regenerate docs/importing.md's tables of supported ops from the importers' tables
	$(PY) tools/ops_docs.py

check-docs:       ## re-run the cheap deterministic commands behind the docs' figures; fails on drift (tools/check_docs.py)
	$(PY) tools/check_docs.py --quick

clean:
	rm -rf build python/shardwise/*.so   # _core and, where built, _cuda
