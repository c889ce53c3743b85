# The commands of the README. Each target does its own set-up first.
CARGO ?= cargo
JOBS ?= 2

.PHONY: setup demo test bench clean

setup:
	@scripts/setup.sh

# A local run of the embedded default: one server and two clients over shm.
demo: setup
	$(CARGO) build --release -j $(JOBS) --bin satrun --example exchange
	target/release/satrun -n 3 --topology sat-core/topologies/figure11.xml --provider shm -- \
		target/release/examples/exchange --rounds 1000

# Every test: unit, property and multi-process integration tests.
test: setup
	$(CARGO) build -j $(JOBS) --workspace --all-targets
	$(CARGO) test -j $(JOBS) --workspace -- --test-threads=2

# The transport benchmark: SAT's raw transport against fi_pingpong, same run.
bench: setup
	$(CARGO) build --release -j $(JOBS) --bin satrun --bin sat-transport-bench
	target/release/sat-transport-bench --providers shm,tcp --reps 3
	$(CARGO) build --release -j $(JOBS) --bin sat-protocol-bench && target/release/sat-protocol-bench --providers shm,tcp
	$(CARGO) build --release -j $(JOBS) --bin sat-sync-bench && target/release/sat-sync-bench --providers shm,tcp

clean:
	$(CARGO) clean
