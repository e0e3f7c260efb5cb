//! The RFS program's values, byte by byte in the layouts of
//! bpf/steer_rfs.h: the per-flow state ([`RfsFlow`]), the settings' and the
//! counters' indices, the move rules ([`RfsOrder`]) and the counters' sums
//! ([`RfsStats`]).

use serde::{Deserialize, Serialize};

/// `STEER_RFS_NO_CPU`: the flow still takes the kernel path.
const NO_CPU: u32 = u32::MAX;

/// Which rule lets a flow leave the CPU (or the kernel path) serving it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RfsOrder {
    /// The default: TCP moves once its socket's `rcv_nxt` has reached the
    /// segment's sequence number; UDP once the socket filter has seen every
    /// frame the XDP program saw. Packets of a flow are not reordered.
    #[default]
    Socket,
    /// RFS's `last_qtail` rule on the cpumap queues: the old CPU's cpumap
    /// program has dequeued the flow's last frame. Not enough on its own:
    /// GRO may still hold the frame after it was counted.
    Qtail,
    /// Move at once (for measuring what the rules prevent).
    None,
}

impl RfsOrder {
    /// The value of `enum steer_rfs_order`.
    pub(super) fn code(self) -> u64 {
        match self {
            Self::Socket => 0,
            Self::Qtail => 1,
            Self::None => 2,
        }
    }
}

/// What the in-kernel recorder does when an application reads a tracked
/// flow (`enum steer_rfs_record`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RfsRecord {
    /// Nothing: steer records from user space, or not at all.
    #[default]
    Off,
    /// Writes the reading CPU only when the flow crosses an LLC, or its
    /// CPU is no longer one steer steers to (the LLC-affinity rule).
    Llc,
    /// Writes every change of reading CPU.
    Always,
}

impl RfsRecord {
    /// The value of `enum steer_rfs_record`.
    pub(super) fn code(self) -> u64 {
        match self {
            Self::Off => 0,
            Self::Llc => 1,
            Self::Always => 2,
        }
    }
}

/// `STEER_RFS_NO_LLC`: a CPU the recorder never chooses.
pub(super) const NO_LLC: u32 = u32::MAX;

/// Indices of the `rfs_settings` array.
#[derive(Debug, Clone, Copy)]
pub(super) enum Setting {
    Order = 0,
    MaxHold = 1,
    UdpSettle = 2,
    Ncpus = 3,
    CpumapId = 4,
    Generic = 5,
    CompleteChecksums = 6,
    Record = 7,
    UdpAny = 8,
    MaxWait = 9,
}

/// Indices of the per-CPU `rfs_stats` array.
#[derive(Debug, Clone, Copy)]
pub(super) enum Stat {
    Redirected = 0,
    Passed = 1,
    Untracked = 2,
    Moves = 3,
    HeldBack = 4,
    Forced = 5,
    RedirectFailed = 6,
    Landed = 7,
    Delivered = 8,
    NoState = 9,
    QueueDrops = 10,
    RedirectErrors = 11,
    CsumCompleted = 12,
    CsumPassed = 13,
    Recorded = 14,
    RecNew = 15,
    RecUpdates = 16,
    RecSuppressed = 17,
}

impl Stat {
    pub(super) const ALL: [Self; 18] = [
        Self::Redirected,
        Self::Passed,
        Self::Untracked,
        Self::Moves,
        Self::HeldBack,
        Self::Forced,
        Self::RedirectFailed,
        Self::Landed,
        Self::Delivered,
        Self::NoState,
        Self::QueueDrops,
        Self::RedirectErrors,
        Self::CsumCompleted,
        Self::CsumPassed,
        Self::Recorded,
        Self::RecNew,
        Self::RecUpdates,
        Self::RecSuppressed,
    ];
}

/// The RFS program's counters, summed over CPUs: the one list of them.
///
/// Its serde form is what a running `steer rfs` reports on its stats
/// socket: every field under its own name except the recorders', which the
/// report calls `reads`, `new_flows`, `updates` and `suppressed`; a missing
/// field reads as 0. A counter added here is added to that report too.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RfsStats {
    /// Reads the in-kernel recorders saw: TCP reads of owned connections,
    /// UDP datagrams of owned ports read with their sender.
    #[serde(rename = "reads")]
    pub recorded: u64,
    /// Flows the in-kernel recorder placed: a first desired CPU written
    /// (each is also one of `recorder_updates`).
    #[serde(rename = "new_flows")]
    pub recorder_new_flows: u64,
    /// Desired CPUs the in-kernel recorder wrote (new flows and moves):
    /// the costly steering updates.
    #[serde(rename = "updates")]
    pub recorder_updates: u64,
    /// Changes of reading CPU the LLC rule left unwritten.
    #[serde(rename = "suppressed")]
    pub recorder_suppressed: u64,
    /// Frames redirected into a cpumap entry.
    pub redirected: u64,
    /// Frames of ports steer does not steer, and non-IP frames.
    pub passed: u64,
    /// Frames of steered ports whose flow has no CPU (passed).
    pub untracked: u64,
    /// Flows placed on a CPU or moved.
    pub moves: u64,
    /// Frames kept on the old path because a move had to wait.
    pub held_back: u64,
    /// UDP moves forced after the flow was quiet for the maximum hold time.
    pub forced: u64,
    /// Frames whose CPU had no cpumap entry (passed).
    pub redirect_failed: u64,
    /// Frames the cpumap programs saw (handed to a CPU's stack).
    pub landed: u64,
    /// UDP frames of tracked flows that reached their socket.
    pub delivered: u64,
    /// Frames of flows with a CPU but no state (passed).
    pub no_state: u64,
    /// Frames a full cpumap queue dropped (its CPU fell behind).
    pub queue_drops: u64,
    /// Frames that failed to reach a cpumap queue.
    pub redirect_errors: u64,
    /// Frames whose partial checksum (a local sender's, through veth) was
    /// completed before the redirect, which would otherwise lose the mark
    /// that makes the stack trust it.
    pub csum_completed: u64,
    /// Frames with a partial checksum too long to complete (over 4 KiB):
    /// passed to the kernel path, which keeps the mark.
    pub csum_passed: u64,
}

impl RfsStats {
    pub(super) fn from_sums(s: [u64; Stat::ALL.len()]) -> Self {
        Self {
            redirected: s[Stat::Redirected as usize],
            passed: s[Stat::Passed as usize],
            untracked: s[Stat::Untracked as usize],
            moves: s[Stat::Moves as usize],
            held_back: s[Stat::HeldBack as usize],
            forced: s[Stat::Forced as usize],
            redirect_failed: s[Stat::RedirectFailed as usize],
            landed: s[Stat::Landed as usize],
            delivered: s[Stat::Delivered as usize],
            no_state: s[Stat::NoState as usize],
            queue_drops: s[Stat::QueueDrops as usize],
            redirect_errors: s[Stat::RedirectErrors as usize],
            csum_completed: s[Stat::CsumCompleted as usize],
            csum_passed: s[Stat::CsumPassed as usize],
            recorded: s[Stat::Recorded as usize],
            recorder_new_flows: s[Stat::RecNew as usize],
            recorder_updates: s[Stat::RecUpdates as usize],
            recorder_suppressed: s[Stat::RecSuppressed as usize],
        }
    }
}

/// What the programs keep for one tracked flow (`struct steer_rfs_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RfsFlow {
    /// Frames of the flow the XDP program saw since tracking began.
    pub seen: u64,
    /// UDP: frames the socket filter saw (never above `seen`).
    pub delivered: u64,
    /// UDP: frames the cpumap programs saw (handed to a CPU's stack).
    pub landed: u64,
    /// The CPU whose stack handles the flow; `None` while it takes the
    /// kernel path (before its first placement).
    pub cpu: Option<u32>,
    /// Whether a move is waiting for the old path to drain.
    pub held: bool,
    landed_base: u64,
    last_qtail: u64,
    held_since: u64,
    created: u64,
    last_src: u32,
    hold_start: u64,
}

impl RfsFlow {
    /// Bytes of `struct steer_rfs_state`.
    pub(super) const LEN: usize = 72;

    /// A new entry: no frame seen, on the kernel path, made at `now_ns`.
    pub(super) fn fresh(now_ns: u64) -> Self {
        Self {
            seen: 0,
            delivered: 0,
            landed: 0,
            cpu: None,
            held: false,
            landed_base: 0,
            last_qtail: 0,
            held_since: 0,
            created: now_ns,
            last_src: 0,
            hold_start: 0,
        }
    }

    pub(super) fn to_bytes(self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        let words = [
            self.seen,
            self.delivered,
            self.landed,
            self.landed_base,
            self.last_qtail,
            self.held_since,
            self.created,
        ];
        for (chunk, w) in b.chunks_exact_mut(8).zip(words) {
            chunk.copy_from_slice(&w.to_ne_bytes());
        }
        b[56..60].copy_from_slice(&self.cpu.unwrap_or(NO_CPU).to_ne_bytes());
        b[60..64].copy_from_slice(&self.last_src.to_ne_bytes());
        b[64..72].copy_from_slice(&self.hold_start.to_ne_bytes());
        b
    }

    pub(super) fn from_bytes(b: &[u8; Self::LEN]) -> Self {
        let word = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[i * 8..i * 8 + 8]);
            u64::from_ne_bytes(w)
        };
        let cpu = u32::from_ne_bytes([b[56], b[57], b[58], b[59]]);
        let held_since = word(5);
        Self {
            seen: word(0),
            delivered: word(1),
            landed: word(2),
            landed_base: word(3),
            last_qtail: word(4),
            held_since,
            created: word(6),
            cpu: (cpu != NO_CPU).then_some(cpu),
            held: held_since != 0,
            last_src: u32::from_ne_bytes([b[60], b[61], b[62], b[63]]),
            hold_start: word(8),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_bytes_follow_steer_rfs_state() {
        let mut f = RfsFlow::fresh(0x0102);
        f.seen = 7;
        f.delivered = 5;
        f.cpu = Some(3);
        let b = f.to_bytes();
        assert_eq!(b[..8], 7u64.to_ne_bytes());
        assert_eq!(b[8..16], 5u64.to_ne_bytes());
        assert_eq!(b[48..56], 0x0102u64.to_ne_bytes());
        assert_eq!(b[56..60], 3u32.to_ne_bytes());
        assert_eq!(b.len(), 72);
        assert_eq!(RfsFlow::from_bytes(&b), f);
        let fresh = RfsFlow::from_bytes(&RfsFlow::fresh(9).to_bytes());
        assert_eq!((fresh.cpu, fresh.held), (None, false));
    }

    #[test]
    fn stats_by_index() {
        let mut sums = [0u64; Stat::ALL.len()];
        for (i, s) in sums.iter_mut().enumerate() {
            *s = i as u64 * 10;
        }
        let st = RfsStats::from_sums(sums);
        assert_eq!(
            (st.redirected, st.landed, st.no_state, st.queue_drops),
            (0, 70, 90, 100)
        );
        assert_eq!((st.csum_completed, st.csum_passed), (120, 130));
        assert_eq!(
            (
                st.recorded,
                st.recorder_new_flows,
                st.recorder_updates,
                st.recorder_suppressed
            ),
            (140, 150, 160, 170)
        );
        assert_eq!(
            (
                RfsRecord::Off.code(),
                RfsRecord::Llc.code(),
                RfsRecord::Always.code()
            ),
            (0, 1, 2)
        );
        assert_eq!(
            (
                RfsOrder::Socket.code(),
                RfsOrder::Qtail.code(),
                RfsOrder::None.code()
            ),
            (0, 1, 2)
        );
    }
}
