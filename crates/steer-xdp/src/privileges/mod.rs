//! Least privilege for a set-up steer process: dropping the capabilities
//! it no longer needs (the engine's `drop_privileges`, kernel-socket
//! steering's: the calling thread keeps exactly `keep`, and every thread it
//! starts afterwards inherits that), running as another user
//! ([`RunAs`](crate::privileges::RunAs), `--user`), and the seccomp allowlist
//! ([`seccomp`](crate::privileges::seccomp)).
//!
//! Invariants: capability sets belong to each thread, so the caller drops
//! before it starts the threads that should run reduced; the bounding set
//! is lowered first (that needs CAP_SETPCAP, still held then), so a program
//! this process executes later cannot get the dropped capabilities back;
//! the inheritable and ambient sets are emptied; the permitted and
//! effective sets keep exactly `keep`.

mod allowlist;
mod run_as;
pub mod seccomp;

use caps::CapSet;
pub use caps::{errors::CapsError, Capability, CapsHashSet};
pub use run_as::{RunAs, RunAsError};

/// Drops every capability of the calling thread but `keep`, from every set.
///
/// ```no_run
/// use steer_xdp::privileges::{drop_all_but, Capability};
/// // A program attached through netlink is detached at stop with this one.
/// drop_all_but(&[Capability::CAP_NET_ADMIN].into_iter().collect())?;
/// # Ok::<(), steer_xdp::privileges::CapsError>(())
/// ```
pub fn drop_all_but(keep: &CapsHashSet) -> Result<(), CapsError> {
    lower_bounding(keep)?;
    let effective = caps::read(None, CapSet::Effective)?;
    let permitted = caps::read(None, CapSet::Permitted)?;
    // Effective first: it must stay within the permitted set.
    caps::set(
        None,
        CapSet::Effective,
        &effective.intersection(keep).copied().collect(),
    )?;
    caps::set(
        None,
        CapSet::Permitted,
        &permitted.intersection(keep).copied().collect(),
    )?;
    Ok(())
}

/// The calling thread's permitted capabilities (what a switch to another
/// user keeps when nothing is to be dropped).
///
/// ```
/// let held = steer_xdp::privileges::permitted()?;
/// # drop(held);
/// # Ok::<(), steer_xdp::privileges::CapsError>(())
/// ```
pub fn permitted() -> Result<CapsHashSet, CapsError> {
    caps::read(None, CapSet::Permitted)
}

/// Lowers the calling thread's bounding set to `keep` and empties its
/// ambient and inheritable sets (needs CAP_SETPCAP in the effective set);
/// the permitted and effective sets stay. For a thread that must still
/// take part in a later [`RunAs::switch`] (which clears them).
///
/// ```no_run
/// steer_xdp::privileges::lower_bounding(&Default::default())?;
/// # Ok::<(), steer_xdp::privileges::CapsError>(())
/// ```
pub fn lower_bounding(keep: &CapsHashSet) -> Result<(), CapsError> {
    let bounding = caps::read(None, CapSet::Bounding)?;
    for cap in bounding.difference(keep) {
        caps::drop(None, CapSet::Bounding, *cap)?;
    }
    caps::clear(None, CapSet::Ambient)?;
    caps::clear(None, CapSet::Inheritable)
}

/// What a process holding a program attached through netlink needs to
/// detach it at stop: CAP_NET_ADMIN, and with libxdp's dispatcher also
/// CAP_SYS_ADMIN and CAP_BPF (libxdp looks the dispatcher's programs up by
/// id to rebuild it).
pub fn needed_to_detach_netlink(dispatched: bool) -> CapsHashSet {
    let mut keep: CapsHashSet = [Capability::CAP_NET_ADMIN].into_iter().collect();
    if dispatched {
        keep.extend([Capability::CAP_SYS_ADMIN, Capability::CAP_BPF]);
    }
    keep
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dropping_on_a_thread_of_its_own_leaves_only_what_is_kept() {
        // On a thread of its own: capability sets are per thread, so the
        // test harness's other threads keep theirs.
        std::thread::spawn(|| {
            let had = caps::read(None, CapSet::Permitted).unwrap();
            let keep: CapsHashSet = [Capability::CAP_NET_ADMIN].into_iter().collect();
            drop_all_but(&keep).unwrap();
            let want: CapsHashSet = had.intersection(&keep).copied().collect();
            assert_eq!(caps::read(None, CapSet::Effective).unwrap(), want);
            assert_eq!(caps::read(None, CapSet::Permitted).unwrap(), want);
            assert!(caps::read(None, CapSet::Inheritable).unwrap().is_empty());
            let bounding = caps::read(None, CapSet::Bounding).unwrap();
            assert!(bounding.is_subset(&keep), "{bounding:?}");
            // A thread started now inherits the reduced sets.
            std::thread::spawn(move || {
                assert_eq!(caps::read(None, CapSet::Effective).unwrap(), want);
            })
            .join()
            .unwrap();
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_netlink_detach_needs_net_admin_and_more_in_a_dispatcher() {
        assert_eq!(
            needed_to_detach_netlink(false),
            [Capability::CAP_NET_ADMIN].into_iter().collect()
        );
        assert!(needed_to_detach_netlink(true).contains(&Capability::CAP_BPF));
    }
}
