//! Compiles the BPF program with clang when the loader is built.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=src/bpf/oncpu.bpf.c");
    println!("cargo:rerun-if-env-changed=CLANG");
    if std::env::var_os("CARGO_FEATURE_LOADER").is_none() {
        return;
    }
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("oncpu.bpf.o");
    let clang = std::env::var("CLANG").unwrap_or_else(|_| "clang".to_string());
    let arch_includes = format!("/usr/include/{}-linux-gnu", std::env::consts::ARCH);
    let status = Command::new(&clang)
        .args(["-target", "bpf", "-O2", "-g", "-Wall", "-Werror"])
        .arg(format!("-I{arch_includes}"))
        .arg("-c")
        .arg("src/bpf/oncpu.bpf.c")
        .arg("-o")
        .arg(&out)
        .status();
    match status {
        Ok(s) if s.success() => {}
        Ok(s) => panic!("{clang} failed to compile src/bpf/oncpu.bpf.c ({s}); it needs libbpf's headers (apt-get install libbpf-dev)"),
        Err(e) => panic!(
            "cannot run {clang} ({e}): the on-CPU table's BPF program is compiled with clang \
             (apt-get install clang libbpf-dev libelf-dev zlib1g-dev pkg-config, or run scripts/setup.sh)"
        ),
    }
}
