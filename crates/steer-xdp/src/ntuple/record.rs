//! The record of the ntuple rules one hook installed, in a small file next
//! to the interface's owner lock, so that the next owner of the interface
//! can remove the rules a killed process left on the NIC (its `Drop` never
//! ran).
//!
//! It owns one file per hook, named `<lock stem>.ntuple.<pid>.<n>` (`n`
//! counts the hooks this process made), and the list of those files that
//! live hooks of this process hold ([`RuleRecord`]s not yet dropped or
//! abandoned). The file is an array of 16-byte slots, one per rule
//! location: slot `l` at byte `16 * l` holds a tag (`NTR1`), the location
//! `l` and the rule's fingerprint (both native-endian), or zeros when no
//! rule of the hook sits there. Recording or forgetting a rule is one
//! `pwrite` of 16 bytes; nothing is synced (the file is on tmpfs, gone at
//! reboot with the NIC's rules, and a killed process's writes are in the
//! page cache already). The file is made when the hook is (an engine builds
//! its hooks before its privileges drop) and written through the
//! descriptor, so a process that then switched to another user still
//! records; one that may no longer unlink it empties it at a clean stop.
//!
//! Invariants: a slot is written after its rule was installed and cleared
//! after its rule was deleted, so a record lists at least the hook's rules
//! (a crash in between leaves a slot whose rule is gone, which the next
//! owner finds absent); only files that no live hook of this process
//! holds are read as stale; locations at or past [`MAX_LOCATION`] are not
//! recorded; the record never fails its hook: an error is logged (once per
//! record) and the hook steers on, unrecorded.

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Locations past this are not recorded (the file stays small; NICs
/// hold a few thousand rules).
pub(crate) const MAX_LOCATION: u32 = 1 << 16;

const SLOT: usize = 16;
const TAG: [u8; 4] = *b"NTR1";

/// The record files live hooks of this process hold.
static LIVE: Mutex<Option<HashSet<PathBuf>>> = Mutex::new(None);
/// Numbers this process's records.
static NEXT: AtomicU64 = AtomicU64::new(0);

fn live() -> std::sync::MutexGuard<'static, Option<HashSet<PathBuf>>> {
    LIVE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Where a hook's records go: a directory and the stem naming the
/// interface (the owner lock's file name without `.lock`).
#[derive(Debug, Clone)]
pub(crate) struct RecordPlace {
    pub(crate) dir: PathBuf,
    pub(crate) stem: String,
}

/// What a dead owner left: one record file and the rules it lists.
#[derive(Debug)]
pub(crate) struct Stale {
    pub(crate) path: PathBuf,
    /// (location, fingerprint) of each recorded rule.
    pub(crate) rules: Vec<(u32, u64)>,
}

impl RecordPlace {
    /// The files under this place that no live hook of this process holds,
    /// with the rules they list. A file that cannot be read or is not a
    /// record is logged, removed and left out.
    pub(crate) fn stale(&self) -> Vec<Stale> {
        let prefix = format!("{}.ntuple.", self.stem);
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Vec::new(),
            Err(e) => {
                tracing::warn!(dir = %self.dir.display(), error = %e, "cannot list the ntuple rule records; rules a dead owner left stay on the NIC");
                return Vec::new();
            }
        };
        let mut paths: Vec<PathBuf> = entries
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
            .map(|e| e.path())
            .collect();
        paths.sort();
        let held = live();
        paths
            .into_iter()
            .filter(|p| !held.as_ref().is_some_and(|h| h.contains(p)))
            .filter_map(|path| match read_slots(&path) {
                Ok(rules) => Some(Stale { path, rules }),
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "ignoring an unreadable ntuple rule record");
                    let _ = std::fs::remove_file(&path);
                    None
                }
            })
            .collect()
    }
}

/// The slots of a record file: (location, fingerprint) of each rule.
fn read_slots(path: &Path) -> io::Result<Vec<(u32, u64)>> {
    let bytes = std::fs::read(path)?;
    if bytes.len() % SLOT != 0 || bytes.len() > SLOT * MAX_LOCATION as usize {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{} bytes: not a whole number of slots", bytes.len()),
        ));
    }
    let mut rules = Vec::new();
    for (i, slot) in bytes.chunks_exact(SLOT).enumerate() {
        if slot.iter().all(|&b| b == 0) {
            continue;
        }
        let location = u32::from_ne_bytes([slot[4], slot[5], slot[6], slot[7]]);
        if slot[..4] != TAG || location as usize != i {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("slot {i} is not a rule record"),
            ));
        }
        let mut print = [0u8; 8];
        print.copy_from_slice(&slot[8..]);
        rules.push((location, u64::from_ne_bytes(print)));
    }
    Ok(rules)
}

/// One hook's record file, open for writing.
#[derive(Debug)]
pub(crate) struct RuleRecord {
    file: File,
    path: PathBuf,
    /// An error was logged already.
    failed: bool,
}

impl RuleRecord {
    /// A new, empty record under `place`, held by this process until
    /// dropped.
    pub(crate) fn create(place: &RecordPlace) -> io::Result<Self> {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = place
            .dir
            .join(format!("{}.ntuple.{}.{n}", place.stem, std::process::id()));
        // Live before it exists: another hook of this process reading the
        // directory meanwhile must not take it for a dead owner's.
        live().get_or_insert_with(HashSet::new).insert(path.clone());
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .custom_flags(libc::O_CLOEXEC)
            .open(&path)
            .inspect_err(|_| {
                if let Some(held) = live().as_mut() {
                    held.remove(&path);
                }
            })?;
        Ok(RuleRecord {
            file,
            path,
            failed: false,
        })
    }

    /// The file.
    #[cfg(test)]
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Notes the rule at `location` (fingerprint `print`).
    pub(crate) fn record(&mut self, location: u32, print: u64) {
        let mut slot = [0u8; SLOT];
        slot[..4].copy_from_slice(&TAG);
        slot[4..8].copy_from_slice(&location.to_ne_bytes());
        slot[8..].copy_from_slice(&print.to_ne_bytes());
        self.write(location, &slot);
    }

    /// Clears the slot of the rule at `location`.
    pub(crate) fn forget(&mut self, location: u32) {
        self.write(location, &[0; SLOT]);
    }

    fn write(&mut self, location: u32, slot: &[u8; SLOT]) {
        let result = if location >= MAX_LOCATION {
            Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("location {location} is past the recorded range"),
            ))
        } else {
            self.file
                .write_all_at(slot, u64::from(location) * SLOT as u64)
        };
        if let Err(e) = result {
            if !std::mem::replace(&mut self.failed, true) {
                tracing::warn!(path = %self.path.display(), error = %e, "cannot record an ntuple rule: after a crash the next owner may not find it");
            }
        }
    }

    /// Leaves the file as it is and lets this process read it as stale, as
    /// if the process holding it had been killed.
    /// (Dropping a record does the same.)
    pub(crate) fn abandon(self) {}

    /// Closes the record, keeping the file when `keep` (rules it lists are
    /// still on the NIC) and removing it otherwise: a process that may no
    /// longer unlink in the directory (it switched to another user after
    /// the record was made) empties it through the descriptor it holds.
    pub(crate) fn close(self, keep: bool) {
        if !keep && std::fs::remove_file(&self.path).is_err() {
            let _ = self.file.set_len(0);
        }
        // The drop lets go of the file in the live list.
    }
}

impl Drop for RuleRecord {
    fn drop(&mut self) {
        if let Some(held) = live().as_mut() {
            held.remove(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn place(tag: &str) -> RecordPlace {
        let dir = std::env::temp_dir().join(format!("steer-ntuple-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        RecordPlace {
            dir,
            stem: "net1-if2".into(),
        }
    }

    #[test]
    fn rules_recorded_and_forgotten_are_what_the_next_owner_reads() {
        let p = place("slots");
        let mut r = RuleRecord::create(&p).unwrap();
        r.record(3, 0xabc);
        r.record(0, 7);
        r.record(9, 1);
        r.forget(9);
        // Live in this process: not stale.
        assert!(p.stale().is_empty());
        let path = r.path().to_path_buf();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 10 * SLOT as u64);
        r.abandon();
        let stale = p.stale();
        assert_eq!(stale.len(), 1);
        assert_eq!(stale[0].path, path);
        assert_eq!(stale[0].rules, [(0, 7), (3, 0xabc)]);
        let _ = std::fs::remove_dir_all(&p.dir);
    }

    #[test]
    fn a_closed_record_is_removed_unless_it_still_lists_rules() {
        let p = place("close");
        let r = RuleRecord::create(&p).unwrap();
        let path = r.path().to_path_buf();
        r.close(false);
        assert!(!path.exists());
        let mut r = RuleRecord::create(&p).unwrap();
        r.record(1, 1);
        let path = r.path().to_path_buf();
        r.close(true);
        assert!(path.exists());
        assert_eq!(p.stale()[0].rules, [(1, 1)]);
        let _ = std::fs::remove_dir_all(&p.dir);
    }

    #[test]
    fn a_corrupt_or_foreign_file_is_ignored_and_removed() {
        let p = place("corrupt");
        let short = p.dir.join("net1-if2.ntuple.1.0");
        std::fs::write(&short, [1u8; 5]).unwrap();
        let mut bad_slot = [0u8; 2 * SLOT];
        bad_slot[SLOT..SLOT + 4].copy_from_slice(&TAG);
        bad_slot[SLOT + 4..SLOT + 8].copy_from_slice(&7u32.to_ne_bytes());
        let wrong = p.dir.join("net1-if2.ntuple.1.1");
        std::fs::write(&wrong, bad_slot).unwrap();
        // Another interface's record is not this place's.
        let other = p.dir.join("net1-if3.ntuple.1.0");
        std::fs::write(&other, [0u8; SLOT]).unwrap();
        assert!(p.stale().is_empty());
        assert!(!short.exists() && !wrong.exists() && other.exists());
        let _ = std::fs::remove_dir_all(&p.dir);
    }

    #[test]
    fn a_missing_directory_has_nothing_stale_and_a_location_past_the_range_is_not_recorded() {
        let p = place("missing");
        let mut r = RuleRecord::create(&p).unwrap();
        r.record(MAX_LOCATION, 1);
        assert!(r.failed);
        r.record(2, 1);
        assert_eq!(std::fs::metadata(r.path()).unwrap().len(), 3 * SLOT as u64);
        drop(r);
        let _ = std::fs::remove_dir_all(&p.dir);
        assert!(p.stale().is_empty());
    }
}
