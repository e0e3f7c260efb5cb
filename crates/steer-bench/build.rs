//! Compiles steer-bench's XDP programs (`bpf/gen_rx.c`, `bpf/reflect.c`)
//! with `clang -O2 -g -target bpf` into OUT_DIR, for `include_bytes!` in
//! src/xdp.rs. The libbpf headers come from libbpf-sys's `DEP_BPF_INCLUDE`,
//! exported to direct dependents only: that is why this crate depends on
//! libbpf-sys (the same pin as steer-xdp's).

use std::{env, path::PathBuf, process::Command};

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR"));
    println!("cargo:rerun-if-changed=bpf");
    println!("cargo:rerun-if-env-changed=CLANG");
    let bpf_inc = env::var_os("DEP_BPF_INCLUDE")
        .expect("DEP_BPF_INCLUDE unset: steer-bench must depend on libbpf-sys directly");
    let clang = env::var("CLANG").unwrap_or_else(|_| "clang".into());
    let arch_inc = format!("/usr/include/{}-linux-gnu", env::consts::ARCH);
    for name in ["gen_rx", "reflect"] {
        let src = PathBuf::from(format!("bpf/{name}.c"));
        let obj = out.join(format!("{name}.o"));
        let status = Command::new(&clang)
            .args(["-O2", "-g", "-Wall", "-Werror", "-target", "bpf"])
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
