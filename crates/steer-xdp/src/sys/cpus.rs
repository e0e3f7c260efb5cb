//! The possible CPUs, as sysfs lists them: how many values a per-CPU BPF
//! map lookup writes.

use std::{fs, io};

/// The number of possible CPUs (highest id in /sys/devices/system/cpu/possible
/// plus one): the number of values a per-CPU map lookup writes.
pub(crate) fn possible_cpus() -> io::Result<usize> {
    let list = fs::read_to_string("/sys/devices/system/cpu/possible")?;
    parse_possible(&list).ok_or_else(|| io::Error::other(format!("bad cpu list {list:?}")))
}

fn parse_possible(list: &str) -> Option<usize> {
    list.trim()
        .split([',', '-'])
        .map(|n| n.trim().parse::<usize>().ok())
        .try_fold(0usize, |max, n| n.map(|n| max.max(n)))
        .map(|max| max + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn possible_cpu_list() {
        assert_eq!(parse_possible("0-3\n"), Some(4));
        assert_eq!(parse_possible("0,2-5,7"), Some(8));
        assert_eq!(parse_possible("0"), Some(1));
        assert_eq!(parse_possible("x"), None);
        assert!(possible_cpus().unwrap() >= 1);
    }
}
