//! Fuzzes the CPU-list parser (`--cpus`, sysfs lists, trace lines): no
//! input may panic it, and what it accepts prints back (ranges collapsed)
//! to text that parses to the same set.
#![no_main]

use libfuzzer_sys::fuzz_target;
use steer_core::cpu::CpuSet;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(set) = text.parse::<CpuSet>() {
        let printed = set.to_string();
        assert_eq!(
            printed.parse::<CpuSet>().ok(),
            Some(set),
            "{text:?} -> {printed:?}"
        );
    }
});
