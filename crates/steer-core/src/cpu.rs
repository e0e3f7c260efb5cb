//! CPU identities, CPU sets and the cache layout the steering rules consult.
//!
//! This module owns the *plain data* view of a machine that steer-core needs:
//! which CPUs exist, which are online, and which last-level cache (LLC) each
//! one sits behind. It does no discovery: the `topology` crate (hwloc, sysfs,
//! synthetic or XML) builds a [`CpuLayout`] and hands it in, so steer-core
//! stays pure logic that tests can drive with any shape of machine.
//!
//! Invariants:
//! - CPU ids are dense indices `0..CpuLayout::nr_cpus()`, below [`MAX_CPUS`].
//! - A CPU's LLC id never changes after construction; only its online state
//!   does, through [`CpuLayout::set_online`], and every reader sees the change
//!   without a lock (one relaxed atomic bit per CPU).
//! - A CPU outside the layout is treated as invalid: never online, sharing an
//!   LLC with nobody.

use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};

/// A CPU index, as the kernel numbers them (`/sys/devices/system/cpu/cpuN`),
/// or in hwloc logical order for synthetic topologies.
pub type CpuId = usize;

/// Largest number of CPUs steer handles, like glibc's `CPU_SETSIZE`.
pub const MAX_CPUS: usize = 1024;

const WORDS: usize = MAX_CPUS / 64;

/// A fixed-size set of CPU ids (a bitmap of [`MAX_CPUS`] bits), `Copy` and
/// allocation-free so hot paths can test membership with one load.
///
/// ```
/// use steer_core::cpu::CpuSet;
/// let set: CpuSet = "0-3,8".parse().unwrap();
/// assert!(set.contains(2) && set.contains(8) && !set.contains(5));
/// assert_eq!(set.len(), 5);
/// assert_eq!(set.to_string(), "0-3,8");
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct CpuSet {
    words: [u64; WORDS],
}

impl Default for CpuSet {
    fn default() -> Self {
        Self::new()
    }
}

impl CpuSet {
    /// The empty set.
    pub const fn new() -> Self {
        Self { words: [0; WORDS] }
    }

    /// The set `0..n` (all of the first `n` CPUs).
    ///
    /// # Panics
    /// If `n > MAX_CPUS`.
    pub fn first(n: usize) -> Self {
        assert!(n <= MAX_CPUS, "CpuSet::first({n}) exceeds MAX_CPUS");
        (0..n).collect()
    }

    /// Adds `cpu`; returns false (and changes nothing) if it is `>= MAX_CPUS`.
    pub fn insert(&mut self, cpu: CpuId) -> bool {
        if cpu >= MAX_CPUS {
            return false;
        }
        self.words[cpu / 64] |= 1 << (cpu % 64);
        true
    }

    /// Removes `cpu` if present.
    pub fn remove(&mut self, cpu: CpuId) {
        if cpu < MAX_CPUS {
            self.words[cpu / 64] &= !(1 << (cpu % 64));
        }
    }

    /// Whether `cpu` is in the set (false for any id `>= MAX_CPUS`).
    #[inline]
    pub fn contains(&self, cpu: CpuId) -> bool {
        cpu < MAX_CPUS && self.words[cpu / 64] & (1 << (cpu % 64)) != 0
    }

    /// Number of CPUs in the set.
    pub fn len(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.words.iter().all(|&w| w == 0)
    }

    /// The CPUs in ascending order.
    pub fn iter(&self) -> impl Iterator<Item = CpuId> + '_ {
        self.words.iter().enumerate().flat_map(|(i, &w)| {
            let mut bits = w;
            std::iter::from_fn(move || {
                if bits == 0 {
                    return None;
                }
                let b = bits.trailing_zeros() as usize;
                bits &= bits - 1;
                Some(i * 64 + b)
            })
        })
    }

    /// The `n`-th CPU of the set in ascending order (`None` if `n >= len`).
    pub fn nth(&self, n: usize) -> Option<CpuId> {
        self.iter().nth(n)
    }
}

impl FromIterator<CpuId> for CpuSet {
    /// Collects CPU ids; ids `>= MAX_CPUS` are ignored.
    fn from_iter<I: IntoIterator<Item = CpuId>>(iter: I) -> Self {
        let mut set = Self::new();
        for cpu in iter {
            set.insert(cpu);
        }
        set
    }
}

/// Error from parsing a kernel CPU list such as `0-3,8,10-11`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuListError {
    /// The offending piece of the list.
    pub piece: String,
}

impl fmt::Display for CpuListError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "bad CPU list item {:?}: expected N or N-M with N <= M < {MAX_CPUS}",
            self.piece
        )
    }
}

impl std::error::Error for CpuListError {}

impl FromStr for CpuSet {
    type Err = CpuListError;

    /// Parses the kernel's list format (`/sys/.../online`, `shared_cpu_list`,
    /// `taskset -c`): comma-separated ids and inclusive ranges; an empty or
    /// all-blank string is the empty set.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut set = Self::new();
        for piece in s.trim().split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let err = || CpuListError {
                piece: piece.to_string(),
            };
            let (lo, hi) = match piece.split_once('-') {
                Some((a, b)) => (a.trim().parse::<usize>(), b.trim().parse::<usize>()),
                None => (piece.parse::<usize>(), piece.parse::<usize>()),
            };
            let (lo, hi) = (lo.map_err(|_| err())?, hi.map_err(|_| err())?);
            if lo > hi || hi >= MAX_CPUS {
                return Err(err());
            }
            for cpu in lo..=hi {
                set.insert(cpu);
            }
        }
        Ok(set)
    }
}

impl fmt::Display for CpuSet {
    /// Formats in the kernel's list format, ranges collapsed (`0-3,8`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        let mut iter = self.iter().peekable();
        while let Some(lo) = iter.next() {
            let mut hi = lo;
            while iter.peek() == Some(&(hi + 1)) {
                hi = iter.next().unwrap_or(hi);
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if lo == hi {
                write!(f, "{lo}")?;
            } else {
                write!(f, "{lo}-{hi}")?;
            }
        }
        Ok(())
    }
}

impl fmt::Debug for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CpuSet({self})")
    }
}

/// Id of a last-level cache domain. Dense from 0 within one layout.
pub type LlcId = u16;

/// Error from building a [`CpuLayout`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LayoutError {
    /// No CPUs were given.
    Empty,
    /// More CPUs than [`MAX_CPUS`].
    TooManyCpus(usize),
}

impl fmt::Display for LayoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Empty => f.write_str("a CPU layout needs at least one CPU"),
            Self::TooManyCpus(n) => write!(f, "{n} CPUs exceed the limit of {MAX_CPUS}"),
        }
    }
}

impl std::error::Error for LayoutError {}

/// Which LLC each CPU sits behind and which CPUs are online: the facts the
/// LLC-affinity rule and the dispatcher consult on every packet.
///
/// Read-mostly: the LLC map is immutable; the online bitmap is a handful of
/// atomic words written only on CPU hotplug.
///
/// ```
/// use steer_core::cpu::CpuLayout;
/// // 4 CPUs, 2 per LLC: {0,1} and {2,3}.
/// let layout = CpuLayout::uniform(4, 2).unwrap();
/// assert!(layout.shares_llc(0, 1));
/// assert!(!layout.shares_llc(1, 2));
/// layout.set_online(3, false);
/// assert!(!layout.is_online(3));
/// assert_eq!(layout.online_cpus().to_string(), "0-2");
/// ```
#[derive(Debug)]
pub struct CpuLayout {
    llc_of: Box<[Option<LlcId>]>,
    online: [AtomicU64; WORDS],
}

impl CpuLayout {
    /// Builds a layout from each CPU's LLC id (`None`: the CPU exists but is
    /// not present or its cache is unknown; it then shares an LLC with nobody).
    /// All CPUs with an LLC start online.
    pub fn new(llc_of: Vec<Option<LlcId>>) -> Result<Self, LayoutError> {
        if llc_of.is_empty() {
            return Err(LayoutError::Empty);
        }
        if llc_of.len() > MAX_CPUS {
            return Err(LayoutError::TooManyCpus(llc_of.len()));
        }
        let layout = Self {
            llc_of: llc_of.into_boxed_slice(),
            online: std::array::from_fn(|_| AtomicU64::new(0)),
        };
        for cpu in 0..layout.nr_cpus() {
            layout.set_online(cpu, layout.llc_of[cpu].is_some());
        }
        Ok(layout)
    }

    /// `nr_cpus` CPUs in consecutive groups of `cpus_per_llc` (the last group
    /// may be smaller). Handy for tests and what-if models.
    pub fn uniform(nr_cpus: usize, cpus_per_llc: usize) -> Result<Self, LayoutError> {
        let per = cpus_per_llc.max(1);
        Self::new(
            (0..nr_cpus)
                .map(|c| Some(LlcId::try_from(c / per).unwrap_or(LlcId::MAX)))
                .collect(),
        )
    }

    /// Number of CPU ids in the layout (online or not).
    #[inline]
    pub fn nr_cpus(&self) -> usize {
        self.llc_of.len()
    }

    /// Whether `cpu` is an id of this layout.
    #[inline]
    pub fn is_valid(&self, cpu: CpuId) -> bool {
        cpu < self.nr_cpus()
    }

    /// The LLC `cpu` sits behind, if known.
    #[inline]
    pub fn llc_of(&self, cpu: CpuId) -> Option<LlcId> {
        self.llc_of.get(cpu).copied().flatten()
    }

    /// Whether two CPUs share a last-level cache (the kernel's
    /// `cpus_share_cache`). A CPU shares with itself when its LLC is known.
    #[inline]
    pub fn shares_llc(&self, a: CpuId, b: CpuId) -> bool {
        match (self.llc_of(a), self.llc_of(b)) {
            (Some(x), Some(y)) => x == y,
            _ => false,
        }
    }

    /// Whether `cpu` is valid and currently online.
    #[inline]
    pub fn is_online(&self, cpu: CpuId) -> bool {
        cpu < self.nr_cpus()
            && self.online[cpu / 64].load(Ordering::Relaxed) & (1 << (cpu % 64)) != 0
    }

    /// Marks `cpu` online or offline (hotplug, or a worker that died).
    /// Ids outside the layout are ignored.
    pub fn set_online(&self, cpu: CpuId, online: bool) {
        if cpu >= self.nr_cpus() {
            return;
        }
        let bit = 1u64 << (cpu % 64);
        if online {
            self.online[cpu / 64].fetch_or(bit, Ordering::Relaxed);
        } else {
            self.online[cpu / 64].fetch_and(!bit, Ordering::Relaxed);
        }
    }

    /// The online CPUs.
    pub fn online_cpus(&self) -> CpuSet {
        let mut set = CpuSet::new();
        for (w, word) in set.words.iter_mut().zip(&self.online) {
            *w = word.load(Ordering::Relaxed);
        }
        set
    }

    /// Number of distinct LLC ids (highest id + 1).
    pub fn nr_llcs(&self) -> usize {
        self.llc_of
            .iter()
            .flatten()
            .map(|&l| usize::from(l) + 1)
            .max()
            .unwrap_or(0)
    }

    /// The CPUs (online or not) behind LLC `llc`.
    pub fn cpus_of_llc(&self, llc: LlcId) -> CpuSet {
        (0..self.nr_cpus())
            .filter(|&c| self.llc_of(c) == Some(llc))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpuset_parse_and_format_round_trip() {
        for s in ["", "0", "0-3", "0-3,8", "1,3,5-7,1023"] {
            let set: CpuSet = s.parse().unwrap();
            assert_eq!(set.to_string(), s);
        }
        let set: CpuSet = " 0 - 2 , 4 \n".parse().unwrap();
        assert_eq!(set.to_string(), "0-2,4");
    }

    #[test]
    fn cpuset_rejects_bad_lists() {
        for s in ["x", "3-1", "1024", "0-1024", "1,,a", "-1", "1-"] {
            assert!(s.parse::<CpuSet>().is_err(), "{s:?} should fail");
        }
    }

    #[test]
    fn cpuset_ops() {
        let mut set = CpuSet::first(3);
        assert_eq!(set.len(), 3);
        assert!(!set.insert(MAX_CPUS));
        assert!(!set.contains(MAX_CPUS));
        set.remove(1);
        assert_eq!(set.iter().collect::<Vec<_>>(), vec![0, 2]);
        assert_eq!(set.nth(1), Some(2));
        assert_eq!(set.nth(2), None);
        assert!(CpuSet::new().is_empty());
    }

    #[test]
    fn layout_llc_and_online() {
        let l = CpuLayout::uniform(5, 2).unwrap();
        assert_eq!(l.nr_llcs(), 3);
        assert_eq!(l.cpus_of_llc(2).to_string(), "4");
        assert!(l.shares_llc(2, 3));
        assert!(!l.shares_llc(3, 4));
        assert!(!l.shares_llc(0, 99));
        assert!(!l.is_online(5));
        l.set_online(99, false);
        l.set_online(0, false);
        assert!(!l.is_online(0));
        l.set_online(0, true);
        assert!(l.is_online(0));
        assert_eq!(l.online_cpus().len(), 5);
    }

    #[test]
    fn layout_unknown_llc_is_offline_and_shares_nothing() {
        let l = CpuLayout::new(vec![Some(0), None, Some(0)]).unwrap();
        assert!(!l.is_online(1));
        assert!(!l.shares_llc(1, 1));
        assert!(l.shares_llc(0, 2));
        assert_eq!(CpuLayout::new(vec![]).unwrap_err(), LayoutError::Empty);
    }
}
