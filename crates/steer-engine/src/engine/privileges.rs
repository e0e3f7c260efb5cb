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
//! An engine with a steering hook also keeps CAP_NET_ADMIN: the hook may
//! call the kernel on every move (ntuple rules are ethtool set commands).
//!
//! The drop itself is [`steer_xdp::privileges::drop_all_but`], on the thread
//! that runs `start`, after the port is open and before the engine starts
//! any thread of its own (capability sets are per thread; the engine's
//! threads inherit the reduced sets, threads the application started
//! earlier keep theirs).
//!
//! With [`EngineBuilder::run_as`](super::EngineBuilder::run_as) the same
//! point switches the process to another user instead
//! ([`steer_xdp::privileges::RunAs::switch`]), keeping what
//! [`needed_at_run_time`] says across the switch; the user and group ids
//! change on every thread, and threads started earlier lose every
//! capability.

use caps::{Capability, CapsHashSet};
use steer_xdp::XdpAttach;

/// What the engine still needs once its port is open, for a program held
/// as `attach` (`dispatched`: in libxdp's dispatcher), with or without a
/// steering hook.
pub(crate) fn needed_at_run_time(attach: XdpAttach, dispatched: bool, hook: bool) -> CapsHashSet {
    let mut keep = match (attach, dispatched) {
        (XdpAttach::Link, _) => CapsHashSet::new(),
        // Detaching through netlink at stop (through libxdp, which looks
        // programs up by id, when they run in its dispatcher).
        (XdpAttach::Netlink, dispatched) => {
            steer_xdp::privileges::needed_to_detach_netlink(dispatched)
        }
    };
    if hook {
        keep.insert(Capability::CAP_NET_ADMIN);
    }
    keep
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_needs_nothing_and_netlink_needs_net_admin_to_detach_and_more_in_a_dispatcher() {
        assert!(needed_at_run_time(XdpAttach::Link, false, false).is_empty());
        assert_eq!(
            needed_at_run_time(XdpAttach::Netlink, false, false),
            [Capability::CAP_NET_ADMIN].into_iter().collect()
        );
        assert!(needed_at_run_time(XdpAttach::Netlink, true, false)
            .contains(&Capability::CAP_SYS_ADMIN));
    }

    #[test]
    fn a_steering_hook_keeps_net_admin() {
        assert_eq!(
            needed_at_run_time(XdpAttach::Link, false, true),
            [Capability::CAP_NET_ADMIN].into_iter().collect()
        );
    }
}
