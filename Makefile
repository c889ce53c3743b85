# The commands of the README. Each target does its own set-up first.
CARGO ?= cargo
JOBS ?= 2
PREFIX ?= /usr/local
TARGET_DIR ?= $(or $(CARGO_TARGET_DIR),target)
# The pinned cbindgen (scripts/setup.sh installs it): from PATH, else cargo's bin folder.
CBINDGEN ?= $(or $(shell command -v cbindgen 2>/dev/null),$(or $(CARGO_HOME),$(HOME)/.cargo)/bin/cbindgen)
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)

# What `make install` copies, built optimized: libsat (.so and .a) and satrun.
RELEASE_BUILD = $(CARGO) build --release -j $(JOBS) -p sat-capi -p sat-core --lib --bin satrun

.PHONY: setup demo test simulate simulate-rare fuzz soak abe-test miri python-test bench bench-abe bench-detail bench-protocols bench-advised bench-python bench-videostream clean header install uninstall

setup:
	@scripts/setup.sh

# A local run of the embedded default: one server and two clients over shm (Figure 11) sharing chunks:
# the writer writes a board, the reader's subscription fires on each release (sat-core/examples/demo.rs).
demo: setup
	$(CARGO) build --release -j $(JOBS) --bin satrun --example demo
	target/release/satrun -n 3 --topology sat-core/topologies/figure11.xml --provider shm -- \
		target/release/examples/demo --rounds 5

# Every test: unit, property and multi-process integration tests, then the
# Python module's, run by the venv's pytest with the release satrun.
test:
	@scripts/setup.sh --test
	$(CARGO) build -j $(JOBS) --workspace --all-targets
	$(RELEASE_BUILD)
	$(CARGO) test -j $(JOBS) --workspace -- --test-threads=2
	$(MAKE) --no-print-directory simulate SEEDS=$(SIM_SEEDS)
	$(MAKE) --no-print-directory simulate-rare
	$(MAKE) --no-print-directory abe-test
	$(MAKE) --no-print-directory miri
	$(MAKE) --no-print-directory fuzz INPUTS=$(FUZZ_SHORT)
	$(MAKE) --no-print-directory python-test

# Fuzzing (sat-core/src/fuzz.rs): every decoder and parser that sees bytes from elsewhere (the wire
# header, packet prefixes, seed and desk frames, topology XML, connection strings, and the
# encryption layer's policies, certificates, epoch records, sealed versions and key files), each from
# a corpus of valid encodings and seeded mutations of them. `make fuzz` runs INPUTS inputs per
# target; `make test` a short pass. A failure prints the input and how to replay it.
INPUTS ?= 1000000
FUZZ_SHORT ?= 20000
FUZZ_SEED ?= 1
fuzz:
	$(CARGO) build --release -j $(JOBS) -p sat-core --features fuzz,abe --bin sat-fuzz
	$(TARGET_DIR)/release/sat-fuzz --inputs $(INPUTS) --seed $(FUZZ_SEED)

# The whole-stack simulator (sat-core/src/simulator): the real clients, stores and servers under
# one seeded scheduler, the invariants checked after every step. `make simulate SEEDS=N [FROM=S]`
# runs seeds S..S+N; a failure prints its seed, and `sat-simulate --seed S --trace` replays it.
SEEDS ?= 200
FROM ?= 0
# The seeds `make test` runs: 0..SIM_SEEDS, then seeds outside that range known to reach a rare
# path: a server's loss that the client's transport reports before the run does (44559, 44754:
# sat-core/src/client/failover.rs); a chain's release under way when a server is lost (48341:
# sat-core/src/server/republish.rs); a READ asked in the poll that took in its home's loss while
# another thread waited on the chunk (48646); a client lost with its server (52019).
SIM_SEEDS ?= 300
SIM_RARE_SEEDS ?= 44559 44754 48341 48646 52019
simulate:
	$(CARGO) build --release -j $(JOBS) -p sat-core --features simulator --bin sat-simulate
	$(TARGET_DIR)/release/sat-simulate --seeds $(SEEDS) --from $(FROM) --jobs $(JOBS)

simulate-rare:
	$(CARGO) build --release -j $(JOBS) -p sat-core --features simulator --bin sat-simulate
	@for s in $(SIM_RARE_SEEDS); do \
		$(TARGET_DIR)/release/sat-simulate --seeds 1 --from $$s --jobs 1 || exit 1; \
	done

# The C ABI's unsafe code under Miri, nightly's interpreter (sat-capi's unit tests: handles checked
# before any read, the chains' memory, the status, panic and log paths, all without a run, since
# libfabric cannot run under Miri). Skipped, saying so, where rustup has no nightly toolchain.
miri:
	@status=0; scripts/setup.sh --miri || status=$$?; \
	if [ $$status -eq 0 ]; then \
		MIRIFLAGS=-Zmiri-disable-isolation $(CARGO) +nightly miri test -p sat-capi --lib; \
	elif [ $$status -eq 3 ]; then echo "miri: skipped (no nightly toolchain with Miri)"; \
	else exit $$status; fi

# The encryption layer (feature `abe`): its tests (sat-core's, and the C ABI's), and no ABE or AEAD
# crate in the default build.
abe-test:
	$(CARGO) test -j $(JOBS) -p sat-core --features abe,fuzz --lib -- abe fuzz
	$(CARGO) build -j $(JOBS) -p sat-core --features abe --example tenants
	$(CARGO) test -j $(JOBS) -p sat-core --features abe --test tenants --test sat_abe_cli --test secrets_wiped
# The C ABI's protected calls (bindings-tests/abe_tenants.c): the test links the libsat that cargo
# builds with the feature next to it (target/debug/deps), and runs target/debug/satrun.
	$(CARGO) build -j $(JOBS) -p sat-core --bin satrun
	$(CARGO) test -j $(JOBS) -p sat-capi --features abe --test c_abe
	@if $(CARGO) tree -e normal --workspace | grep -E -i -w 'rabe|ring|blake3|ed25519-dalek|aes-gcm|aead|chacha20|chacha20poly1305'; then \
		echo "the default build pulls in an ABE, AEAD or signature crate (above): it must stay behind feature abe" >&2; \
		exit 1; \
	else echo "default build: no ABE or AEAD crate"; fi

# The `sat` Python module built (release) into .venv, and its tests; then tools/sat-stats's.
VENV := $(CURDIR)/.venv
python-test:
	@scripts/setup.sh --test
	VIRTUAL_ENV=$(VENV) PATH="$(VENV)/bin:$$PATH" $(VENV)/bin/maturin develop --release --quiet \
		-j $(JOBS) -m sat-python/Cargo.toml --features abe
	$(RELEASE_BUILD)
	$(CARGO) build -j $(JOBS) -p sat-core --features abe --bin sat-abe
	SAT_TARGET_DIR=$(abspath $(TARGET_DIR)) $(VENV)/bin/python -m pytest -q sat-python/tests tools/tests

# SAT against its peers, one table (bench/run.py, docs/PERFORMANCE.md): the video pipeline against
# Open MPI and ZeroMQ, hand-off latency and 64 MiB PUT/GET against the raw transport, fi_pingpong
# and MPI (point-to-point and RMA), and the statistics stream's cost. About 5 minutes.
BENCH_BUILD := $(abspath $(TARGET_DIR))/bench
# The encryption layer's cost on 1 MiB chunks: plaintext against protected, steady state and first access
# to a key epoch (sat-bench/src/bin/sat-abe-bench.rs).
bench-abe:
	$(CARGO) build --release -j $(JOBS) -p sat-core --features abe --bin satrun
	$(CARGO) build --release -j $(JOBS) -p sat-bench --features abe --bin sat-abe-bench
	$(TARGET_DIR)/release/sat-abe-bench

bench:
	@scripts/setup.sh --peers
	$(CARGO) build --release -j $(JOBS) -p sat-capi -p sat-core --lib --bin satrun
	$(CARGO) build --release -j $(JOBS) -p sat-bench --bin sat-handoff-bench --bin sat-transport-bench \
		--bin sat-sync-bench
	$(MAKE) --no-print-directory bench-videostream
	$(MAKE) --no-print-directory -C bench/pipeline BUILD=$(BENCH_BUILD)
	$(MAKE) --no-print-directory -C bench/mpi OUT=$(BENCH_BUILD)/mpi_bench
	python3 bench/run.py --target-dir $(TARGET_DIR) --build $(BENCH_BUILD)

# The soak (not in `make test`): 16 processes under a steady mixed load for SOAK_S seconds (an hour), every
# read checked, every process's resident size sampled; fails if one grows past a fifth plus 16 MiB
# (bench/soak.py, sat-core/examples/soak.rs).
SOAK_S ?= 3600
soak: setup
	$(CARGO) build --release -j $(JOBS) -p sat-core --bin satrun --example soak
	python3 bench/soak.py --target-dir $(TARGET_DIR) --seconds $(SOAK_S)

# examples-c/videostream against the workspace's release libsat (a sat.pc of its own), for the benchmarks.
bench-videostream:
	@mkdir -p $(BENCH_BUILD)
	@printf 'Name: sat\nDescription: SAT (this workspace)\nVersion: $(VERSION)\nCflags: -I%s\nLibs: -L%s -Wl,-rpath,%s -lsat\n' \
		'$(CURDIR)/include' '$(abspath $(TARGET_DIR))/release' '$(abspath $(TARGET_DIR))/release' \
		> $(BENCH_BUILD)/sat.pc
	PKG_CONFIG_PATH=$(BENCH_BUILD) $(MAKE) --no-print-directory -C examples-c BUILD=$(BENCH_BUILD) \
		$(BENCH_BUILD)/videostream

# Every consistency protocol on the same workloads, one table (docs/PROTOCOLS.md): time and messages per
# operation over the protocols' own messages (SAT_HOST_SEGMENTS=off). About 2 minutes.
bench-protocols: setup
	$(CARGO) build --release -j $(JOBS) -p sat-capi -p sat-core --lib --bin satrun
	$(CARGO) build --release -j $(JOBS) -p sat-bench --bin sat-protocols-bench
	$(MAKE) --no-print-directory bench-videostream
	$(TARGET_DIR)/release/sat-protocols-bench --providers shm --videostream $(BENCH_BUILD)/videostream

# The adviser's protocols against each protocol (docs/PROTOCOLS.md, "The adviser"): each workload's MESI
# run writes its statistics, tools/sat-stats --advise turns them into a protocol per chunk, and the table adds a
# row per workload where the same MESI program runs with SAT_ADVICE set to that advice.
ADVICE := $(BENCH_BUILD)/advice
bench-advised: setup
	$(CARGO) build --release -j $(JOBS) -p sat-capi -p sat-core --lib --bin satrun
	$(CARGO) build --release -j $(JOBS) -p sat-bench --bin sat-protocols-bench
	$(MAKE) --no-print-directory bench-videostream
	@scripts/setup.sh --python
	rm -rf $(ADVICE)
	$(TARGET_DIR)/release/sat-protocols-bench --providers shm --videostream $(BENCH_BUILD)/videostream \
		--protocols mesi --stats $(ADVICE) > /dev/null
	for d in $(ADVICE)/*/; do \
		$(VENV)/bin/python tools/sat-stats "$$d" --advise --json > "$${d%/}.json" || exit 1; done
	$(TARGET_DIR)/release/sat-protocols-bench --providers shm --videostream $(BENCH_BUILD)/videostream \
		--advice $(ADVICE)

# The transport, coherence and synchronization benchmarks of docs/PERFORMANCE.md's later sections.
bench-detail: setup
	$(CARGO) build --release -j $(JOBS) -p sat-core --bin satrun
	$(CARGO) build --release -j $(JOBS) -p sat-bench --bin sat-transport-bench
	target/release/sat-transport-bench --providers shm,tcp --reps 3
	$(CARGO) build --release -j $(JOBS) -p sat-bench --bin sat-protocol-bench && target/release/sat-protocol-bench --providers shm,tcp
	$(CARGO) build --release -j $(JOBS) -p sat-bench --bin sat-sync-bench && target/release/sat-sync-bench --providers shm,tcp

# A 100 MB numpy array handed from one process to another through SAT (a service), and through
# multiprocessing.shared_memory, Redis and Ray, measured in the same run (sat-python/bench/share_numpy.py).
bench-python:
	@scripts/setup.sh --bench
	VIRTUAL_ENV=$(VENV) PATH="$(VENV)/bin:$$PATH" $(VENV)/bin/maturin develop --release --quiet \
		-j $(JOBS) -m sat-python/Cargo.toml --features abe
	$(RELEASE_BUILD)
	$(CARGO) build -j $(JOBS) -p sat-core --features abe --bin sat-abe
	SAT_TARGET_DIR=$(abspath $(TARGET_DIR)) $(VENV)/bin/python sat-python/bench/share_numpy.py --provider shm
	SAT_TARGET_DIR=$(abspath $(TARGET_DIR)) $(VENV)/bin/python sat-python/bench/share_numpy.py --provider tcp \
		--only sat,sat-scopes,shared_memory

# include/sat.h from sat-capi/src, by the pinned cbindgen (sat-capi/tests/header.rs checks it is current).
header: setup
	$(CBINDGEN) --quiet --config sat-capi/cbindgen.toml --crate sat-capi --output include/sat.h

# SAT's C library as a system library under PREFIX (DESTDIR too; scripts/install.sh): libsat.so.$(VERSION)
# with its soname link libsat.so.0 and libsat.so, libsat.a, sat.h, sat_compat.h, satrun, the pkg-config
# modules sat and sat-static, and the CMake package (find_package(sat) gives sat::sat and sat::sat_static):
#   cc app.c $$(PKG_CONFIG_PATH=$$PREFIX/lib/pkgconfig pkg-config --cflags --libs sat)
# LIBDIR=lib64 for another library folder; RPATH=1 to put the run path in sat.pc. Never calls sudo:
# what is missing is reported (scripts/setup.sh --check), and a prefix the user cannot write is an error.
LIBDIR ?= lib
RPATH ?= 0
INSTALL_ENV = PREFIX='$(abspath $(PREFIX))' DESTDIR='$(DESTDIR)' LIBDIR='$(LIBDIR)' RPATH='$(RPATH)' \
	VERSION='$(VERSION)' TARGET_DIR='$(TARGET_DIR)'
install:
	@scripts/setup.sh --check
	$(RELEASE_BUILD)
	@$(INSTALL_ENV) scripts/install.sh install

# Removes what `make install` wrote under PREFIX (its list, share/sat/installed-files), and the folders
# it made that are left empty.
uninstall:
	@$(INSTALL_ENV) scripts/install.sh uninstall

clean:
	$(CARGO) clean
