//! Running as an unprivileged user once set up (`--user`/`--group`):
//! [`RunAs`] names the user and group, looked up by name before anything
//! is touched, and [`RunAs::switch`] moves the process to them keeping only
//! the capabilities it still needs.
//!
//! Invariants of [`RunAs::switch`]:
//! - The order is fixed: the bounding set is lowered to what is kept (while
//!   CAP_SETPCAP is still held), the ambient and inheritable sets emptied,
//!   then `setgroups([gid])`, `setresgid`, `setresuid`; the supplementary
//!   groups are exactly the new group, and no id of the old user (real,
//!   effective or saved) is left to return to.
//! - The ids are the whole process's: glibc applies `setgroups`,
//!   `setresgid` and `setresuid` to every thread (its set-id broadcast), so
//!   threads started before the switch run as the user too. Each thread
//!   makes the call itself, and glibc aborts the process when one fails
//!   where another succeeded: every thread must still hold CAP_SETUID and
//!   CAP_SETGID when the switch runs (a thread that must shed privileges
//!   earlier lowers only its bounding set, [`lower_bounding`](super::lower_bounding)).
//! - Capabilities are each thread's: the switching thread keeps exactly
//!   `keep` (PR_SET_KEEPCAPS across the uid change, then the effective set
//!   raised again to `keep`); every other thread loses all of its own when
//!   its uid leaves 0, and threads started afterwards inherit the switching
//!   thread's sets. With nothing to keep, no thread keeps anything.

use caps::{CapSet, CapsHashSet};
use nix::unistd::{Gid, Group, Uid, User};

/// A user and group to run as once set up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunAs {
    /// The user id.
    pub uid: u32,
    /// The group id (also the only supplementary group).
    pub gid: u32,
}

/// Why a [`RunAs`] could not be looked up or switched to.
#[derive(Debug, thiserror::Error)]
pub enum RunAsError {
    /// An empty user or group name.
    #[error("an empty {0} name: name a {0} (e.g. --user nobody)")]
    Empty(&'static str),
    /// No such user in the system's user database.
    #[error("no user {0:?} on this system: name an existing user (e.g. nobody) or create it (`useradd --system {0}`)")]
    UnknownUser(String),
    /// No such group in the system's group database.
    #[error("no group {0:?} on this system: name an existing group (e.g. nogroup) or create it (`groupadd --system {0}`)")]
    UnknownGroup(String),
    /// The user or group database could not be read.
    #[error("looking up {what} {name:?}: {source}")]
    Lookup {
        /// `user` or `group`.
        what: &'static str,
        /// The name looked up.
        name: String,
        /// What the C library said.
        source: nix::Error,
    },
    /// A step of the switch failed.
    #[error("switching to uid {uid} gid {gid}: {step}: {reason}")]
    Switch {
        /// The user id switched to.
        uid: u32,
        /// The group id switched to.
        gid: u32,
        /// The step that failed.
        step: &'static str,
        /// What the kernel said.
        reason: String,
    },
}

impl RunAs {
    /// Looks `user` up (a name, or a numeric id), and `group` likewise
    /// (default: the user's primary group). Nothing is changed.
    ///
    /// ```
    /// use steer_xdp::privileges::RunAs;
    /// let root = RunAs::lookup("root", None).unwrap();
    /// assert_eq!(root, RunAs { uid: 0, gid: 0 });
    /// assert!(RunAs::lookup("no-such-user-here", None).is_err());
    /// assert!(RunAs::lookup("", None).is_err());
    /// ```
    pub fn lookup(user: &str, group: Option<&str>) -> Result<Self, RunAsError> {
        let (uid, primary) = lookup_user(user)?;
        let gid = match group {
            Some(name) => lookup_group(name)?,
            None => primary,
        };
        Ok(Self { uid, gid })
    }

    /// Switches the whole process to this user and group, keeping only
    /// `keep` on the calling thread (see the module's invariants). Needs
    /// CAP_SETUID, CAP_SETGID and CAP_SETPCAP.
    ///
    /// ```no_run
    /// use steer_xdp::privileges::{Capability, RunAs};
    /// let nobody = RunAs::lookup("nobody", None)?;
    /// // ... set up (open sockets, attach programs) ...
    /// nobody.switch(&[Capability::CAP_NET_ADMIN].into_iter().collect())?;
    /// # Ok::<(), steer_xdp::privileges::RunAsError>(())
    /// ```
    pub fn switch(&self, keep: &CapsHashSet) -> Result<(), RunAsError> {
        let fail = |step: &'static str| {
            move |reason: String| RunAsError::Switch {
                uid: self.uid,
                gid: self.gid,
                step,
                reason,
            }
        };
        let caps_err = |e: caps::errors::CapsError| e.to_string();
        let permitted = caps::read(None, CapSet::Permitted)
            .map_err(caps_err)
            .map_err(fail("reading the permitted set"))?;
        let keep: CapsHashSet = permitted.intersection(keep).copied().collect();
        super::lower_bounding(&keep)
            .map_err(caps_err)
            .map_err(fail("lowering the bounding set"))?;
        let (uid, gid) = (Uid::from_raw(self.uid), Gid::from_raw(self.gid));
        let errno = |e: nix::Error| e.desc().to_string();
        nix::unistd::setgroups(&[gid])
            .map_err(errno)
            .map_err(fail("setgroups"))?;
        nix::unistd::setresgid(gid, gid, gid)
            .map_err(errno)
            .map_err(fail("setresgid"))?;
        if !keep.is_empty() {
            nix::sys::prctl::set_keepcaps(true)
                .map_err(errno)
                .map_err(fail("PR_SET_KEEPCAPS"))?;
        }
        nix::unistd::setresuid(uid, uid, uid)
            .map_err(errno)
            .map_err(fail("setresuid"))?;
        // Exactly `keep` from here: kept in the permitted set and cleared
        // from the effective one by a change away from uid 0, untouched by
        // a switch to uid 0. The effective set shrinks first (it must stay
        // within the permitted set), then is raised to `keep` again.
        let effective = caps::read(None, CapSet::Effective)
            .map_err(caps_err)
            .map_err(fail("reading the effective set"))?;
        caps::set(
            None,
            CapSet::Effective,
            &effective.intersection(&keep).copied().collect(),
        )
        .map_err(caps_err)
        .map_err(fail("lowering the effective set"))?;
        caps::set(None, CapSet::Permitted, &keep)
            .map_err(caps_err)
            .map_err(fail("setting the permitted set"))?;
        caps::set(None, CapSet::Effective, &keep)
            .map_err(caps_err)
            .map_err(fail("raising the kept capabilities"))?;
        if !keep.is_empty() {
            nix::sys::prctl::set_keepcaps(false)
                .map_err(errno)
                .map_err(fail("PR_SET_KEEPCAPS"))?;
        }
        Ok(())
    }
}

/// A user's uid and primary gid, by name or number.
fn lookup_user(name: &str) -> Result<(u32, u32), RunAsError> {
    if name.is_empty() {
        return Err(RunAsError::Empty("user"));
    }
    let found = match name.parse::<u32>() {
        Ok(id) => User::from_uid(Uid::from_raw(id)),
        Err(_) => User::from_name(name),
    };
    match found {
        Ok(Some(u)) => Ok((u.uid.as_raw(), u.gid.as_raw())),
        Ok(None) => Err(RunAsError::UnknownUser(name.into())),
        Err(source) => Err(RunAsError::Lookup {
            what: "user",
            name: name.into(),
            source,
        }),
    }
}

/// A group's gid, by name or number.
fn lookup_group(name: &str) -> Result<u32, RunAsError> {
    if name.is_empty() {
        return Err(RunAsError::Empty("group"));
    }
    let found = match name.parse::<u32>() {
        Ok(id) => Group::from_gid(Gid::from_raw(id)),
        Err(_) => Group::from_name(name),
    };
    match found {
        Ok(Some(g)) => Ok(g.gid.as_raw()),
        Ok(None) => Err(RunAsError::UnknownGroup(name.into())),
        Err(source) => Err(RunAsError::Lookup {
            what: "group",
            name: name.into(),
            source,
        }),
    }
}

#[cfg(test)]
// Raw system calls (and a fork) to show what the filter and the switch do.
#[allow(unsafe_code)]
mod tests {
    use super::*;
    use caps::Capability;

    #[test]
    fn names_and_numbers_are_looked_up_and_unknown_ones_refused() {
        assert_eq!(
            RunAs::lookup("0", Some("root")).unwrap(),
            RunAs { uid: 0, gid: 0 }
        );
        assert!(matches!(
            RunAs::lookup("no-such-user-here", None),
            Err(RunAsError::UnknownUser(_))
        ));
        assert!(matches!(
            RunAs::lookup("root", Some("no-such-group-here")),
            Err(RunAsError::UnknownGroup(_))
        ));
        assert!(matches!(
            RunAs::lookup("root", Some("")),
            Err(RunAsError::Empty("group"))
        ));
        let msg = RunAs::lookup("no-such-user-here", None)
            .unwrap_err()
            .to_string();
        assert!(!msg.contains('\n'), "{msg}");
    }

    /// Reads one `Name:\tvalue` line of /proc/thread-self/status.
    fn status(field: &str) -> String {
        let text = std::fs::read_to_string("/proc/thread-self/status").unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{field}:")))
            .unwrap()
            .trim()
            .to_string()
    }

    /// Runs `check` in a forked child and asserts it passed: ids are the
    /// whole process's, and the test harness's other threads would be
    /// switched too. Skipped without root or a user nobody.
    fn in_child(check: impl FnOnce(RunAs)) {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("skipped: needs root");
            return;
        }
        let Ok(nobody) = RunAs::lookup("nobody", None) else {
            eprintln!("skipped: no user nobody");
            return;
        };
        // SAFETY: the child runs only `check` and exits: it takes no lock
        // another thread of the parent may have held at the fork (glibc
        // resets malloc's in the child; the rest are the child's own).
        match unsafe { nix::unistd::fork() }.unwrap() {
            nix::unistd::ForkResult::Child => {
                let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(nobody)))
                    .is_ok();
                // SAFETY: ends the forked child without running the
                // parent's atexit handlers or destructors.
                unsafe { libc::_exit(if ok { 0 } else { 1 }) };
            }
            nix::unistd::ForkResult::Parent { child } => {
                let status = nix::sys::wait::waitpid(child, None).unwrap();
                assert_eq!(status, nix::sys::wait::WaitStatus::Exited(child, 0));
            }
        }
    }

    #[test]
    fn switching_leaves_the_user_and_only_the_kept_capability() {
        in_child(|nobody| {
            let keep: CapsHashSet = [Capability::CAP_NET_ADMIN].into_iter().collect();
            nobody.switch(&keep).unwrap();
            let id = nobody.uid.to_string();
            assert_eq!(status("Uid"), [id.as_str(); 4].join("\t"));
            let gid = nobody.gid.to_string();
            assert_eq!(status("Gid"), [gid.as_str(); 4].join("\t"));
            assert_eq!(status("Groups"), gid);
            // CAP_NET_ADMIN is bit 12.
            assert_eq!(status("CapEff"), "0000000000001000");
            assert_eq!(status("CapPrm"), "0000000000001000");
            assert_eq!(status("CapBnd"), "0000000000001000");
            // A thread started now inherits it all.
            std::thread::spawn(|| assert_eq!(status("CapEff"), "0000000000001000"))
                .join()
                .unwrap();
        });
    }

    #[test]
    fn switching_with_nothing_to_keep_keeps_nothing_even_as_root() {
        in_child(|nobody| {
            nobody.switch(&CapsHashSet::new()).unwrap();
            assert_eq!(status("CapEff"), "0000000000000000");
            assert_eq!(status("CapPrm"), "0000000000000000");
        });
        // uid 0 to uid 0 clears no capability by itself.
        in_child(|_| {
            RunAs { uid: 0, gid: 0 }
                .switch(&CapsHashSet::new())
                .unwrap();
            assert_eq!(status("Uid"), "0\t0\t0\t0");
            assert_eq!(status("CapEff"), "0000000000000000");
            assert_eq!(status("CapPrm"), "0000000000000000");
            assert_eq!(status("CapBnd"), "0000000000000000");
        });
    }
}
