#!/usr/bin/env bash
# Builds lockmeter and runs every test: unit, integration, the C ABI test
# (needs gcc), the on-CPU table's tests (they load a BPF program: as root;
# they skip, saying so, otherwise), the locks' tests again with debug
# assertions, and the loom model tests.
set -euo pipefail
cd "$(dirname "$0")/.."

# The build's own needs (gcc, clang, libbpf headers, libelf).
bash scripts/setup.sh

# DejaVu Sans: the plots' text; pigz and kccachetest: real programs the
# profiler is tested on; jemalloc: an allocator that locks pthread mutexes
# inside its allocations, preloaded beside the library in a test.
missing=()
[ -f /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || missing+=(fonts-dejavu-core)
command -v pigz >/dev/null 2>&1 || missing+=(pigz)
command -v kccachetest >/dev/null 2>&1 || missing+=(kyotocabinet-utils)
[ -f /usr/lib/x86_64-linux-gnu/libjemalloc.so.2 ] || missing+=(libjemalloc2)
if [ ${#missing[@]} -gt 0 ]; then
    echo "test.sh: installing ${missing[*]}" >&2
    apt-get update -qq && apt-get install -y -qq "${missing[@]}" >/dev/null
fi

echo "== build (the lockmeter binary and liblockmeter.so next to it, which the tests run)"
cargo build --release --workspace

echo "== unit, integration, C and real-program tests"
cargo test --release --workspace

echo "== the locks' tests in a debug build (the lock-word protocol's assertions on)"
cargo test -p lockmeter-locks

echo "== loom model tests (every interleaving of the parking algorithms)"
RUSTFLAGS="--cfg loom" cargo test --release -p lockmeter-locks --target-dir target/loom --test 'loom*'
# adaptive's timed waiters with the handoff bound at zero: every wait asks
# for the lock to be handed over, so a deadline may pass while a request
# is pending or queued (the model clock never reaches the 1 ms bound).
LT_HANDOFF0=1 RUSTFLAGS="--cfg loom" cargo test --release -p lockmeter-locks --target-dir target/loom --test loom_timed -- --exact adaptive_timed_and_plain adaptive_two_timed_one_plain
# (and the models of adaptive's probe bits, which need its private fields)
RUSTFLAGS="--cfg loom" cargo test --release -p lockmeter-locks --target-dir target/loom --lib models::
