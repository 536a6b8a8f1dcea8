//! Compiles `tests/c/abi_test.c` against `include/lockmeter.h` with gcc,
//! links it with the freshly built `liblockmeter.so`, and runs it.

use std::path::PathBuf;
use std::process::Command;

/// Where cargo put `liblockmeter.so` for this build (next to the test
/// binary, in the profile's `deps` folder, or one level up).
fn library_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap().to_path_buf();
    for dir in [deps.clone(), deps.parent().unwrap().to_path_buf()] {
        if dir.join("liblockmeter.so").exists() {
            return dir;
        }
    }
    panic!("liblockmeter.so not found near {}", deps.display());
}

#[test]
fn c_program_uses_every_algorithm() {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let include = manifest.join("../../include");
    let source = manifest.join("tests/c/abi_test.c");
    let lib = library_dir();
    let out_dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let binary = out_dir.join("abi_test");
    let compile = Command::new("gcc")
        .args(["-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-pthread"])
        .arg("-I")
        .arg(&include)
        .arg(&source)
        .arg("-o")
        .arg(&binary)
        .arg("-L")
        .arg(&lib)
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .arg("-llockmeter")
        .output()
        .expect("gcc must be installed");
    assert!(compile.status.success(), "gcc failed:\n{}", String::from_utf8_lossy(&compile.stderr));
    let run = Command::new(&binary).output().unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    print!("{stdout}");
    assert!(run.status.success(), "C test failed:\n{stdout}{}", String::from_utf8_lossy(&run.stderr));
    let last = stdout.lines().last().unwrap_or_default();
    assert!(last.ends_with(" 0 failed"), "{last}");
    for name in ["adaptive", "futex", "futex-tid", "pi", "ticket", "mcs", "spin"] {
        assert!(stdout.contains(&format!("{name:<10} ok")), "{name} not ok:\n{stdout}");
    }
}

/// A program that loads the library with `dlopen` (no link-time
/// dependency) runs every algorithm from threads that come and go:
/// `mcs` keeps its thread pools in the static TLS block, which a library
/// loaded this way must find room in.
#[test]
fn c_program_loading_the_library_with_dlopen_uses_every_algorithm() {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let binary = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("dlopen_test");
    let compile = Command::new("gcc")
        .args(["-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-pthread"])
        .arg("-I")
        .arg(manifest.join("../../include"))
        .arg(manifest.join("tests/c/dlopen_test.c"))
        .arg("-o")
        .arg(&binary)
        .arg("-ldl")
        .output()
        .expect("gcc must be installed");
    assert!(compile.status.success(), "gcc failed:\n{}", String::from_utf8_lossy(&compile.stderr));
    let run = Command::new(&binary).arg(library_dir().join("liblockmeter.so")).output().unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "C test failed:\n{stdout}{}", String::from_utf8_lossy(&run.stderr));
    for name in ["adaptive", "futex", "futex-tid", "pi", "ticket", "mcs", "spin"] {
        assert!(stdout.contains(&format!("{name:<10} ok")), "{name} not ok:\n{stdout}");
    }
}
