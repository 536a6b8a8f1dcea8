//! What the tests that run C programs under the served locks share: the
//! algorithms, a scratch directory, the C compiler, the preload library.
//! (Each test binary uses part of it.)
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// Every algorithm replace mode serves pthread mutexes with.
pub const ALGORITHMS: [&str; 7] = ["adaptive", "futex", "futex-tid", "pi", "ticket", "mcs", "spin"];

/// A fresh directory for this test process.
pub fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("lockmeter-{}-test.{}.{name}", env!("CARGO_CRATE_NAME"), std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Builds tests/c/NAME.c; returns the binary.
pub fn compile(name: &str) -> PathBuf {
    compile_at(name, "-O1")
}

/// Builds tests/c/NAME.c at an optimisation `level` (`-O0` keeps every
/// call where the source has it, for tests of call sites and frames),
/// once per test process: tests run side by side, and one rebuilding a
/// binary another was starting failed it ("Text file busy").
pub fn compile_at(name: &str, level: &str) -> PathBuf {
    static BUILT: std::sync::Mutex<Vec<(String, PathBuf)>> = std::sync::Mutex::new(Vec::new());
    let key = format!("{name}{level}");
    let mut built = BUILT.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some((_, binary)) = built.iter().find(|(k, _)| *k == key) {
        return binary.clone();
    }
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/c/{name}.c"));
    let binary = scratch(&format!("build-{key}")).join(name);
    let status = Command::new("gcc")
        .args([level, "-g", "-pthread", "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&binary)
        .arg(&source)
        .status()
        .expect("gcc runs (scripts/test.sh installs it)");
    assert!(status.success(), "{name}.c compiles");
    built.push((key, binary.clone()));
    binary
}

/// The preload library beside the `lockmeter` binary.
pub fn library() -> PathBuf {
    let dir = Path::new(env!("CARGO_BIN_EXE_lockmeter")).parent().unwrap().to_path_buf();
    let library = dir.join("liblockmeter.so");
    assert!(library.is_file(), "{} is built (cargo build --release)", library.display());
    library
}
