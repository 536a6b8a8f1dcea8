#!/usr/bin/env bash
# Installs what building lockmeter needs beyond a Rust toolchain, on Debian
# or Ubuntu: a C compiler (the C ABI and its tests), and clang with libbpf's
# headers and libelf (the on-CPU table's BPF program and its loader).
set -euo pipefail

missing=()
command -v gcc >/dev/null 2>&1 || missing+=(gcc)
command -v clang >/dev/null 2>&1 || missing+=(clang)
command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
[ -f /usr/include/bpf/bpf_helpers.h ] || missing+=(libbpf-dev)
[ -f /usr/include/libelf.h ] || missing+=(libelf-dev)
[ -f /usr/include/zlib.h ] || missing+=(zlib1g-dev)
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "setup.sh: error: missing ${missing[*]}; run as root or: sudo apt-get install ${missing[*]}" >&2
        exit 1
    fi
    echo "setup.sh: installing ${missing[*]}" >&2
    apt-get update -qq && apt-get install -y -qq "${missing[@]}" >/dev/null
fi
if ! command -v cargo >/dev/null 2>&1; then
    echo "setup.sh: error: cargo not found; install a stable Rust toolchain, 1.88 or later, with rustup (Debian 12's cargo package is too old)" >&2
    exit 1
fi
# rust-version in Cargo.toml: an older cargo fails with a page of errors.
if ! cargo --version | awk '{ split($2, v, "."); exit !(v[1] > 1 || (v[1] == 1 && v[2] >= 88)) }'; then
    echo "setup.sh: error: $(cargo --version) is too old: lockmeter needs Rust 1.88 or later (rustup update stable)" >&2
    exit 1
fi
