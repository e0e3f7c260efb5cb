//! Where the kernel processed received packets, per CPU: the counters of
//! /proc/net/softnet_stat and the split of their growth between the CPU a
//! reader was on and the others, slice by slice.
//!
//! A line of softnet_stat is one online CPU's counters in hex: column 0 is
//! `processed` (packets through `__netif_receive_skb_core` on that CPU, any
//! interface, any namespace), column 9 `received_rps` (the RPS IPIs that CPU
//! took: backlogs another CPU filled for it, not packets), column 12 (where
//! present) the CPU's number, else the line's position. The counters are
//! 32 bits and wrap: deltas are taken modulo 2^32.
//!
//! Invariants: parsing never fails (a line it cannot read is skipped);
//! a CPU missing from either sample counts nothing.

use std::collections::BTreeMap;

use serde::Serialize;

/// One CPU's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuCounters {
    /// Packets processed on this CPU.
    pub processed: u32,
    /// RPS IPIs this CPU received.
    pub received_rps: u32,
}

/// Every online CPU's counters, by CPU number.
pub type Sample = BTreeMap<usize, CpuCounters>;

/// Parses the text of /proc/net/softnet_stat.
pub fn parse(text: &str) -> Sample {
    let mut out = Sample::new();
    for (pos, line) in text.lines().enumerate() {
        let cols: Vec<u32> = match line
            .split_whitespace()
            .map(|c| u32::from_str_radix(c, 16))
            .collect()
        {
            Ok(c) => c,
            Err(_) => continue,
        };
        if cols.len() < 10 {
            continue;
        }
        let cpu = cols.get(12).map_or(pos, |&c| c as usize);
        out.insert(
            cpu,
            CpuCounters {
                processed: cols[0],
                received_rps: cols[9],
            },
        );
    }
    out
}

/// This machine's counters now (empty if the file cannot be read).
pub fn sample() -> Sample {
    parse(&std::fs::read_to_string("/proc/net/softnet_stat").unwrap_or_default())
}

/// The growth of each CPU's counters from `a` to `b`, as (processed,
/// received_rps).
pub fn delta(a: &Sample, b: &Sample) -> BTreeMap<usize, (u64, u64)> {
    b.iter()
        .filter_map(|(cpu, nb)| {
            let na = a.get(cpu)?;
            Some((
                *cpu,
                (
                    u64::from(nb.processed.wrapping_sub(na.processed)),
                    u64::from(nb.received_rps.wrapping_sub(na.received_rps)),
                ),
            ))
        })
        .collect()
}

/// The packets processed, and RPS IPIs taken, on the reader's CPU and
/// elsewhere, summed over slices in each of which the reader stayed on one
/// CPU.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ReaderSplit {
    /// Slices counted.
    pub slices: u64,
    /// Packets processed on the CPU the reader was on.
    pub processed_on_reader: u64,
    /// Packets processed on the other CPUs.
    pub processed_elsewhere: u64,
    /// RPS IPIs taken by the reader's CPU.
    pub rps_on_reader: u64,
    /// RPS IPIs taken by the other CPUs.
    pub rps_elsewhere: u64,
}

impl ReaderSplit {
    /// Adds a slice from `a` to `b` during which the reader was on `cpu`.
    pub fn add(&mut self, cpu: usize, a: &Sample, b: &Sample) {
        self.slices += 1;
        for (c, (processed, rps)) in delta(a, b) {
            if c == cpu {
                self.processed_on_reader += processed;
                self.rps_on_reader += rps;
            } else {
                self.processed_elsewhere += processed;
                self.rps_elsewhere += rps;
            }
        }
    }

    /// The share of processed packets that were on the reader's CPU
    /// (`None` before any packet).
    pub fn reader_share(&self) -> Option<f64> {
        let all = self.processed_on_reader + self.processed_elsewhere;
        (all > 0).then(|| self.processed_on_reader as f64 / all as f64)
    }

    /// All RPS IPIs of the counted slices.
    pub fn rps(&self) -> u64 {
        self.rps_on_reader + self.rps_elsewhere
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Two CPUs as Linux 6.x prints them (15 columns, the CPU in column 12).
    const A: &str = "\
00000010 00000000 00000001 00000000 00000000 00000000 00000000 00000000 00000000 00000002 00000000 00000000 00000000 00000000 00000000
ffffffff 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000001 00000000 00000000
";
    const B: &str = "\
00000030 00000000 00000001 00000000 00000000 00000000 00000000 00000000 00000000 00000005 00000000 00000000 00000000 00000000 00000000
00000004 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000001 00000000 00000000 00000001 00000000 00000000
";

    #[test]
    fn lines_are_cpus_with_processed_and_received_rps() {
        let s = parse(A);
        assert_eq!(s.len(), 2);
        assert_eq!(
            s[&0],
            CpuCounters {
                processed: 0x10,
                received_rps: 2
            }
        );
        assert_eq!(s[&1].processed, u32::MAX);
    }

    #[test]
    fn the_cpu_column_wins_over_the_line_position() {
        // An offline CPU 1 leaves no line: the second line is CPU 2.
        let text = "1 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n7 0 0 0 0 0 0 0 0 3 0 0 2 0 0\n";
        let s = parse(text);
        assert_eq!(s.keys().copied().collect::<Vec<_>>(), vec![0, 2]);
        assert_eq!(s[&2].received_rps, 3);
        // Older kernels' 11 columns: the position is the CPU.
        let old = parse("5 0 0 0 0 0 0 0 0 1 0\n6 0 0 0 0 0 0 0 0 2 0\n");
        assert_eq!(old[&1].processed, 6);
    }

    #[test]
    fn bad_lines_are_skipped() {
        assert!(parse("").is_empty());
        assert!(parse("zz 0 0\n1 2 3\n").is_empty());
    }

    #[test]
    fn deltas_wrap_at_32_bits() {
        let d = delta(&parse(A), &parse(B));
        assert_eq!(d[&0], (0x20, 3));
        assert_eq!(d[&1], (5, 1));
        // A CPU in one sample only counts nothing.
        let one = parse("1 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n");
        assert_eq!(delta(&one, &parse(B)).len(), 1);
    }

    #[test]
    fn slices_split_by_the_readers_cpu() {
        let (a, b) = (parse(A), parse(B));
        let mut s = ReaderSplit::default();
        assert_eq!(s.reader_share(), None);
        s.add(0, &a, &b);
        assert_eq!((s.processed_on_reader, s.processed_elsewhere), (0x20, 5));
        s.add(1, &a, &b);
        assert_eq!(s.slices, 2);
        assert_eq!((s.processed_on_reader, s.processed_elsewhere), (0x25, 0x25));
        assert_eq!((s.rps_on_reader, s.rps_elsewhere), (4, 4));
        assert_eq!(s.reader_share(), Some(0.5));
        assert_eq!(s.rps(), 8);
    }
}
