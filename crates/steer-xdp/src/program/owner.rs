//! Who owns an attached steer program: [`ProgramOwner`], the pid of the
//! process that attached it and that process's start time, written into the
//! program's `settings` map at attach (bpf/steer_xdp.h, `SETTING_OWNER_*`)
//! and read back by the next engine on the interface, by id, to tell a live
//! owner (refuse, naming it) from a dead one (take over).
//!
//! Invariant: an owner is alive only when `/proc/<pid>/stat` exists *and*
//! shows the recorded start time, so a pid reused by another process after
//! the owner died reads as dead. Pids are those of the reader's pid
//! namespace: engines in different pid namespaces on one interface see each
//! other as dead (give each its own interface).

use std::fs;

use crate::sys::libxdp::lookup_program_map;

/// Index of the owner's pid in the `settings` map (`SETTING_OWNER_PID`).
pub(super) const SETTING_OWNER_PID: u32 = 1;
/// Index of the start time's low 32 bits (`SETTING_OWNER_START_LO`).
pub(super) const SETTING_OWNER_START_LO: u32 = 2;
/// Index of the start time's high 32 bits (`SETTING_OWNER_START_HI`).
pub(super) const SETTING_OWNER_START_HI: u32 = 3;

/// The process that attached a steer program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProgramOwner {
    /// Its pid.
    pub pid: u32,
    /// Its start time in clock ticks after boot (field 22 of `/proc/<pid>/stat`).
    pub start_time: u64,
}

impl ProgramOwner {
    /// This process.
    pub fn current() -> Option<Self> {
        let pid = std::process::id();
        Some(Self {
            pid,
            start_time: start_time_of(pid)?,
        })
    }

    /// Whether the process still runs (the same process: same pid and
    /// start time).
    pub fn is_alive(&self) -> bool {
        start_time_of(self.pid) == Some(self.start_time)
    }

    /// The record as the `settings` values at the `SETTING_OWNER_*` indices.
    pub(super) fn to_settings(self) -> [(u32, u32); 3] {
        [
            (SETTING_OWNER_PID, self.pid),
            (SETTING_OWNER_START_LO, self.start_time as u32),
            (SETTING_OWNER_START_HI, (self.start_time >> 32) as u32),
        ]
    }

    /// Reads the owner record of the attached program `prog_id`; `None`
    /// when it has none (a program of an older steer, never recorded) or
    /// it cannot be read (no CAP_SYS_ADMIN, the program went away).
    pub fn of_program(prog_id: u32) -> Option<Self> {
        let read = |key: u32| -> Option<u32> {
            let mut v = [0u8; 4];
            lookup_program_map(prog_id, super::SETTINGS, &key.to_ne_bytes(), &mut v).ok()?;
            Some(u32::from_ne_bytes(v))
        };
        let pid = read(SETTING_OWNER_PID)?;
        if pid == 0 {
            return None;
        }
        let lo = read(SETTING_OWNER_START_LO)?;
        let hi = read(SETTING_OWNER_START_HI)?;
        Some(Self {
            pid,
            start_time: u64::from(hi) << 32 | u64::from(lo),
        })
    }
}

/// The start time of process `pid`, `None` when there is no such process.
fn start_time_of(pid: u32) -> Option<u64> {
    parse_start_time(&fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// Field 22 of a `/proc/<pid>/stat` line. The command name (field 2) is in
/// parentheses and may itself contain spaces and parentheses: fields are
/// counted after its last `)`.
fn parse_start_time(stat: &str) -> Option<u64> {
    let after_comm = &stat[stat.rfind(')')? + 1..];
    // Field 3 (state) is the first after the name: field 22 is the 20th.
    after_comm.split_whitespace().nth(19)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_time_is_field_22_even_with_odd_command_names() {
        let line = "4242 (a) b (c)) S 1 4242 4242 0 -1 4194560 100 0 0 0 5 6 0 0 20 0 3 0 987654321 1000 10 18446744073709551615";
        assert_eq!(parse_start_time(line), Some(987_654_321));
        assert_eq!(parse_start_time("12 (x) S 1"), None);
        assert_eq!(parse_start_time("garbage"), None);
    }

    #[test]
    fn this_process_is_alive_and_a_changed_start_time_is_not() {
        let me = ProgramOwner::current().unwrap();
        assert_eq!(me.pid, std::process::id());
        assert!(me.is_alive());
        let reused = ProgramOwner {
            start_time: me.start_time + 1,
            ..me
        };
        assert!(!reused.is_alive());
        let gone = ProgramOwner {
            pid: u32::MAX - 1,
            ..me
        };
        assert!(!gone.is_alive());
    }

    #[test]
    fn the_record_splits_the_start_time_in_two_words() {
        let o = ProgramOwner {
            pid: 7,
            start_time: 0x1_0000_0002,
        };
        assert_eq!(
            o.to_settings(),
            [
                (SETTING_OWNER_PID, 7),
                (SETTING_OWNER_START_LO, 2),
                (SETTING_OWNER_START_HI, 1)
            ]
        );
    }
}
