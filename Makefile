# The two commands of the README, plus developer conveniences. CMake does the real work.
BUILD_DIR ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?= -DDRALENS_WARNINGS_AS_ERRORS=ON

.PHONY: demo test deps build format check-format clean

# Installs what is missing, builds, and starts the demo (Ctrl-C stops it).
demo: build
	./$(BUILD_DIR)/dralens demo

# Installs what is missing, builds everything, and runs every test.
test: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) --timeout 600

deps:
	./.ci/install-deps all

build: deps
	cmake -B $(BUILD_DIR) -S . -G Ninja $(CMAKE_FLAGS)
	cmake --build $(BUILD_DIR) -j $(JOBS)

format:
	cmake --build $(BUILD_DIR) --target format

check-format:
	cmake --build $(BUILD_DIR) --target check-format

clean:
	rm -rf $(BUILD_DIR)
