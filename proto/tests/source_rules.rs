//! Guards for the constraints that keep `proto/src` buildable inside the
//! kernel module (spec MR-10.2): no `crate::` paths, no floating point, no
//! heap, no std; and the documented per-QP state size (MR-10.3).

use std::fs;
use std::path::Path;

fn sources() -> Vec<(String, String)> {
    fn walk(dir: &Path, out: &mut Vec<(String, String)>) {
        for e in fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().map(|x| x == "rs").unwrap_or(false) {
                out.push((p.display().to_string(), fs::read_to_string(&p).unwrap()));
            }
        }
    }
    let mut v = Vec::new();
    walk(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), &mut v);
    assert!(v.len() >= 8);
    v
}

/// Code lines only: drop `//` comments (doc comments may show examples).
fn code_lines(src: &str) -> impl Iterator<Item = (usize, &str)> {
    let cut = src.find("#[cfg(test)]").unwrap_or(src.len());
    src[..cut].lines().enumerate().filter_map(|(i, l)| {
        let code = l.split("//").next().unwrap_or("");
        (!code.trim().is_empty()).then_some((i + 1, code))
    })
}

#[test]
fn no_crate_paths_in_library() {
    for (name, src) in sources() {
        for (i, l) in src.lines().enumerate() {
            assert!(
                !l.contains("crate::"),
                "{name}:{}: `crate::` breaks the #[path] kernel build",
                i + 1
            );
        }
    }
}

#[test]
fn no_float_heap_or_std_in_library() {
    let banned = [
        "f32", "f64", "alloc::", "std::", "Vec<", "Box<", "String", "unsafe", "u128", "i128",
    ];
    for (name, src) in sources() {
        for (i, l) in code_lines(&src) {
            if l.trim_start().starts_with("#![forbid(unsafe_code)]") {
                continue;
            }
            for b in banned {
                let hit = l
                    .match_indices(b)
                    .any(|(k, _)| !l[..k].ends_with(|c: char| c.is_alphanumeric() || c == '_'));
                assert!(
                    !hit,
                    "{name}:{i}: `{b}` not allowed in the kernel-shared library: {l}"
                );
            }
        }
    }
}

#[test]
fn crate_attributes_are_module_safe() {
    let lib = fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs")).unwrap();
    assert!(lib.contains("#![cfg_attr(not(any(test, CONFIG_RUST)), no_std)]"));
    assert!(lib.contains("#![forbid(unsafe_code)]"));
}

#[test]
fn state_bytes_per_qp() {
    let n = core::mem::size_of::<metaroce_proto::Connection>();
    println!("size_of::<Connection>() = {n} bytes");
    // Spec: MR-10.3 states the size; keep it well under 64 KiB.
    assert!(n < 48 * 1024, "Connection is {n} bytes");
}

/// Builds `src/lib.rs` the way `rdma_metaroce.ko` does: as a `#[path]`
/// submodule of a `#![no_std]` crate, with `--cfg CONFIG_RUST`, panic=abort
/// and overflow checks, warnings denied (MR-10.2.1).
#[test]
fn builds_as_a_path_module_in_a_no_std_crate() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("kmod-shape");
    fs::create_dir_all(&dir).unwrap();
    let lib = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs");
    let root = format!(
        "#![no_std]\n#[path = {:?}]\npub mod proto;\n\
         pub fn kunit_case(a: &mut proto::Connection, b: &mut proto::Connection) -> bool {{\n\
             proto::selftest::loopback(a, b).is_ok()\n}}\n",
        lib.display().to_string()
    );
    fs::write(dir.join("lib.rs"), root).unwrap();
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let out = std::process::Command::new(rustc)
        .current_dir(&dir)
        .args([
            "--edition",
            "2021",
            "--crate-type",
            "lib",
            "--cfg",
            "CONFIG_RUST",
        ])
        .args([
            "-C",
            "panic=abort",
            "-C",
            "overflow-checks=on",
            "-D",
            "warnings",
        ])
        .args(["lib.rs", "-o", "libkmod_shape.rlib"])
        .output()
        .expect("run rustc");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
