# The two commands of the README, plus developer conveniences. CMake does the real work.
BUILD_DIR ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?= -DDRALENS_WARNINGS_AS_ERRORS=ON

.PHONY: demo test deps configure build format check-format clean crash-loop bench load soak sanitize \
	tsan fuzz fuzz-merge fuzz-smoke generate chart-files chart-test image image-test scale

# Installs what is missing, builds the binary (not the tests), and starts the demo (Ctrl-C stops
# it). DEMO_FLAGS passes flags through, e.g. make demo DEMO_FLAGS=--demo-nodes=4
demo: configure
	cmake --build $(BUILD_DIR) -j $(JOBS) --target dralens
	./$(BUILD_DIR)/dralens demo $(DEMO_FLAGS)

# Installs what is missing, builds everything, and runs every test.
test: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) --timeout 600
	$(MAKE) fuzz-smoke
	$(MAKE) image-test

# A short run of every libFuzzer target (tests/fuzz) in its own clang build (build-fuzz), with
# the seed corpus; part of `make test`. About 3 minutes of build and 2 of fuzzing on 2 cores.
FUZZ_SMOKE_SECONDS ?= 10
fuzz-smoke:
	CC=clang CXX=clang++ cmake -B build-fuzz -S . -G Ninja $(CMAKE_FLAGS) -DDRALENS_FUZZ=ON \
	  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDRALENS_FUZZ_SECONDS=$(FUZZ_SMOKE_SECONDS)
	cmake --build build-fuzz -j $(JOBS) --target fuzzers
	cd build-fuzz && ctest -L fuzz --output-on-failure -j $(JOBS)

# The kill -9 loop of the node role, many more rounds than the test suite runs.
CRASH_ROUNDS ?= 25
crash-loop: build
	DRALENS_CRASH_ROUNDS=$(CRASH_ROUNDS) ./$(BUILD_DIR)/tests/integration_test \
	  --gtest_filter='*CrashAtEveryStep*'

# The whole suite under AddressSanitizer and UndefinedBehaviorSanitizer (debug build, its own
# build folder); about 10 minutes on 2 cores.
sanitize: deps
	cmake -B build-asan -S . -G Ninja $(CMAKE_FLAGS) -DDRALENS_ENABLE_SANITIZERS=ON \
	  -DCMAKE_BUILD_TYPE=Debug
	cmake --build build-asan -j $(JOBS)
	cd build-asan && UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  ctest --output-on-failure -j $(JOBS) --timeout 600

# The whole suite under ThreadSanitizer (its own build folder). Debian's gRPC, abseil and
# libstdc++ are not instrumented: src/common/tsan_absl_sync.cc tells TSan about absl's locks,
# ignore_noninstrumented_modules keeps TSan's memcpy/malloc interceptors from judging those
# libraries' internals, and tests/tsan.supp holds what remains (one race inside gRPC).
TSAN_OPTIONS_MAKE = suppressions=$(CURDIR)/tests/tsan.supp ignore_noninstrumented_modules=1 \
	halt_on_error=1 second_deadlock_stack=1
tsan: deps
	cmake -B build-tsan -S . -G Ninja $(CMAKE_FLAGS) -DDRALENS_ENABLE_TSAN=ON \
	  -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS=-O1
	cmake --build build-tsan -j $(JOBS)
	cd build-tsan && TSAN_OPTIONS="$(TSAN_OPTIONS_MAKE)" ctest --output-on-failure -j $(JOBS) --timeout 1800 -LE fuzz

# libFuzzer targets (tests/fuzz) under clang with ASan and UBSan, in build-fuzz, each run for
# FUZZ_SECONDS, one at a time (or FUZZ_RUNS executions, e.g. FUZZ_RUNS=10000000
# FUZZ_SECONDS=0); FUZZ_TARGETS picks some (e.g. FUZZ_TARGETS="cel quantity"). Crashing inputs
# land in build-fuzz/fuzz/artifacts/. `make fuzz-merge` then folds what the runs found into
# tests/fuzz/corpus/, minimised.
FUZZ_SECONDS ?= 60
FUZZ_RUNS ?=
FUZZ_TARGETS ?=
fuzz:
	./.ci/install-deps fuzz
	CC=clang CXX=clang++ cmake -B build-fuzz -S . -G Ninja $(CMAKE_FLAGS) -DDRALENS_FUZZ=ON \
	  -DCMAKE_BUILD_TYPE=RelWithDebInfo
	cmake --build build-fuzz -j $(JOBS) --target fuzzers
	FUZZ_RUNS=$(FUZZ_RUNS) tests/fuzz/run_fuzzers.sh build-fuzz $(FUZZ_SECONDS) $(FUZZ_TARGETS)

fuzz-merge:
	tests/fuzz/merge_corpus.sh build-fuzz $(FUZZ_TARGETS)

deps:
	./.ci/install-deps all

# The container image the chart runs, built without a daemon or a registry from Debian packages
# (mmdebstrap from the Debian mirror, umoci) into an OCI archive; see the Dockerfile for the same
# image in a registry-backed CI. The Debian layer is cached in $(BUILD_DIR)/image until
# .ci/image/runtime-packages, .ci/image/dpkg-excludes or the script change. Needs root (sudo otherwise).
IMAGE_REPOSITORY ?= ghcr.io/dralens/dralens
IMAGE_ARCHIVE ?= $(BUILD_DIR)/dralens-image.oci.tar
SUDO := $(shell [ "$$(id -u)" -eq 0 ] || echo sudo)
image: configure
	./.ci/install-deps image
	cmake --build $(BUILD_DIR) -j $(JOBS) --target dralens
	$(SUDO) env IMAGE_REPOSITORY=$(IMAGE_REPOSITORY) .ci/image/build-oci.sh $(BUILD_DIR)/dralens \
	  $(IMAGE_ARCHIVE)

# Runs the image's root filesystem as a container would (namespaces, read-only root, chroot):
# `dralens --version`, then the node role against the demo's API server; part of `make test`.
image-test: image
	/usr/bin/python3 tests/image/rootfs_test.py --archive $(IMAGE_ARCHIVE) \
	  --dralens $(BUILD_DIR)/dralens

configure: deps
	cmake -B $(BUILD_DIR) -S . -G Ninja $(CMAKE_FLAGS)

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

format:
	cmake --build $(BUILD_DIR) --target format

check-format:
	cmake --build $(BUILD_DIR) --target check-format

clean:
	rm -rf $(BUILD_DIR)

# Builds and runs the NodePrepareResources benchmark (prints figures; never fails on time).
# BENCH_ARGS passes flags through, e.g. make bench BENCH_ARGS=--iterations=500
bench: configure
	cmake --build $(BUILD_DIR) -j $(JOBS) --target prepare_bench
	./$(BUILD_DIR)/tests/bench/prepare_bench $(BENCH_ARGS)

# The workload against real node and cluster processes (dynamic MIG, consumable capacity) under
# API faults, a down collector and kill -9 of the node every minute, some inside prepare and
# unprepare calls; checks the invariants after each recovery.
SOAK_MINUTES ?= 5
soak: configure
	cmake --build $(BUILD_DIR) -j $(JOBS) --target soak_driver
	./$(BUILD_DIR)/tests/bench/soak_driver --minutes=$(SOAK_MINUTES)

# The cluster role at fleet scale: the real `dralens cluster` against a generated fleet served by
# an API-server stand-in in its own process; ready time, memory, scrapes and watch events per
# CPU-second, each figure verified against the truth of CLUSTER-SPEC.md (tests/bench/scale).
# SCALE_ARGS passes flags through, e.g. make scale SCALE_ARGS="--sizes=1000,5000 --orders=name"
scale: configure
	cmake --build $(BUILD_DIR) -j $(JOBS) --target scale_bench
	./$(BUILD_DIR)/tests/bench/scale/scale_bench $(SCALE_ARGS)

# The node role under 1,000 concurrent prepares and unprepares with 50 scrapers (figures only).
load: configure
	cmake --build $(BUILD_DIR) -j $(JOBS) --target load_driver
	./$(BUILD_DIR)/tests/bench/load_driver $(LOAD_ARGS)

# Rewrites every generated file from its source: the rules, the chart's rule file, alert values
# and schema from alerts/config.yaml; the dashboards from grafana/src/; the chart's dashboard
# copies; the chart README's values table. Tests fail when a committed file differs from what
# this makes.
generate:
	/usr/bin/python3 alerts/generate.py
	/usr/bin/python3 grafana/generate.py
	$(MAKE) chart-files
	/usr/bin/python3 tests/chart/chart_test.py --write-values-table

# Copies grafana/*.json dashboards into charts/dralens/files/ (Helm reads nothing outside the
# chart); the chart_files test fails when the copies drift.
chart-files:
	/usr/bin/python3 charts/chart_files.py

# Renders the Helm chart for every values variant and checks it; needs only golang-go and
# golang-github-masterminds-sprig-dev, not the C++ build.
chart-test:
	/usr/bin/python3 alerts/generate.py --check
	/usr/bin/python3 grafana/generate.py --check
	/usr/bin/python3 charts/chart_files.py --check
	/usr/bin/python3 tests/chart/chart_test.py --build-dir $(BUILD_DIR)
