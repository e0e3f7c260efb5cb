//! Compiles `bpf/steer_xdp.c` with `clang -O2 -g -target bpf` into OUT_DIR so
//! that `src/program.rs` can embed it with `include_bytes!`, once plain and
//! once (`-DSTEER_RX_HASH`) calling the rx-hash kfunc; and `bpf/steer_rfs.c`,
//! the XDP RFS program for kernel sockets (`src/rfs/`), for BPF ISA v3 (its
//! socket filter uses compare-and-swap).
//!
//! The libbpf headers (`bpf_helpers.h`, `bpf_endian.h`) come from libbpf-sys,
//! which exports them as `DEP_BPF_INCLUDE` to direct dependents only: that is
//! why this crate depends on libbpf-sys directly.

use std::{env, path::PathBuf, process::Command};

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR"));
    println!("cargo:rerun-if-changed=bpf/steer_xdp.c");
    println!("cargo:rerun-if-changed=bpf/steer_xdp.h");
    println!("cargo:rerun-if-changed=bpf/steer_rfs.c");
    println!("cargo:rerun-if-changed=bpf/steer_rfs.h");
    println!("cargo:rerun-if-env-changed=CLANG");
    let bpf_inc = env::var_os("DEP_BPF_INCLUDE")
        .expect("DEP_BPF_INCLUDE unset: steer-xdp must depend on libbpf-sys directly");
    let clang = env::var("CLANG").unwrap_or_else(|_| "clang".into());
    let arch_inc = format!("/usr/include/{}-linux-gnu", env::consts::ARCH);
    // Two variants of steer_xdp: the kernel refuses a program that calls the
    // rx-hash kfunc unless it is device-bound, and only native mode takes
    // device-bound ones.
    for (src, name, defines) in [
        ("bpf/steer_xdp.c", "steer_xdp.o", &[][..]),
        (
            "bpf/steer_xdp.c",
            "steer_xdp_rxhash.o",
            &["-DSTEER_RX_HASH"][..],
        ),
        ("bpf/steer_rfs.c", "steer_rfs.o", &["-mcpu=v3"][..]),
    ] {
        let src = PathBuf::from(src);
        let obj = out.join(name);
        let status = Command::new(&clang)
            .args(["-O2", "-g", "-Wall", "-Werror", "-target", "bpf"])
            .args(defines)
            .arg("-I")
            .arg(&bpf_inc)
            .arg("-I")
            .arg(&arch_inc)
            .arg("-c")
            .arg(&src)
            .arg("-o")
            .arg(&obj)
            .status()
            .unwrap_or_else(|e| panic!("cannot run {clang} (install clang): {e}"));
        assert!(
            status.success(),
            "{clang} failed to compile {}",
            src.display()
        );
    }
}
