//! Dropping the capabilities an engine no longer needs once it is set up
//! ([`EngineBuilder::drop_privileges`](super::EngineBuilder::drop_privileges)).
//!
//! What a running engine does needs no capability: packets move through
//! rings it already mapped, wake-ups and statistics go through sockets it
//! already holds, map updates go through map file descriptors it already
//! holds (the kernel checks privileges when a descriptor is obtained, not
//! when it is used), and a program held by a bpf_link is detached by
//! closing the link. Only a program attached through netlink needs
//! CAP_NET_ADMIN again, to be detached at stop, and one that runs in
//! libxdp's dispatcher also CAP_SYS_ADMIN and CAP_BPF (libxdp looks the
//! dispatcher's programs up by id to rebuild it). [`needed_at_run_time`]
//! says which; the tests check the effective set of a running engine and
//! that it still serves, reports and stops cleanly with only that.
//!
//! Invariants:
//! - Capability sets belong to each thread. [`drop_all_but`] changes the
//!   calling thread's, which every thread it starts afterwards inherits:
//!   the engine calls it on the thread that runs `start`, after the port is
//!   open and before it starts any thread of its own. Threads the
//!   application started earlier keep theirs.
//! - The bounding set is lowered first (that needs CAP_SETPCAP, still held
//!   then), so a program this process executes later cannot get the
//!   dropped capabilities back either; the inheritable and ambient sets are
//!   emptied; the permitted and effective sets keep exactly `keep`.

use caps::CapsHashSet;
use xdp_io::XdpAttach;

/// What the engine still needs once its port is open, for a program held
/// as `attach` (`dispatched`: in libxdp's dispatcher).
pub(crate) fn needed_at_run_time(attach: XdpAttach, dispatched: bool) -> CapsHashSet {
    match (attach, dispatched) {
        (XdpAttach::Link, _) => CapsHashSet::new(),
        // Detaching through netlink at stop (through libxdp, which looks
        // programs up by id, when they run in its dispatcher).
        (XdpAttach::Netlink, dispatched) => {
            xdp_io::privileges::needed_to_detach_netlink(dispatched)
        }
    }
}

/// Drops every capability of the calling thread but `keep`, from every
/// set (see the module's invariants).
pub(crate) fn drop_all_but(keep: &CapsHashSet) -> Result<(), caps::errors::CapsError> {
    xdp_io::privileges::drop_all_but(keep)
}

#[cfg(test)]
mod tests {
    use super::*;
    use caps::{CapSet, Capability};

    #[test]
    fn a_link_needs_nothing_and_netlink_needs_net_admin_to_detach_and_more_in_a_dispatcher() {
        assert!(needed_at_run_time(XdpAttach::Link, false).is_empty());
        assert_eq!(
            needed_at_run_time(XdpAttach::Netlink, false),
            [Capability::CAP_NET_ADMIN].into_iter().collect()
        );
        assert!(needed_at_run_time(XdpAttach::Netlink, true).contains(&Capability::CAP_SYS_ADMIN));
    }

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
}
