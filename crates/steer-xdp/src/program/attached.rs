//! What is attached to an interface: [`attached_programs`] lists the XDP
//! programs (to find one left by a crashed run, or somebody else's), with
//! the owner record of steer's, and `detach_stale` removes steer's own
//! leftovers (the AF_XDP program's or the RFS program's).

use crate::{
    error::{Result, XdpError},
    sys::libxdp::{Multiprog, ProgramRef},
};

use super::{ProgramOwner, PROGRAM_NAME};

/// A program found attached to an interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttachedProgram {
    /// Its name.
    pub name: String,
    /// The kernel's program id.
    pub id: u32,
    /// Whether it runs through libxdp's dispatcher (else it is the only program).
    pub dispatched: bool,
    /// For a steer program: the process that attached it, when it recorded
    /// itself and the record could be read (needs CAP_SYS_ADMIN).
    pub owner: Option<ProgramOwner>,
}

impl AttachedProgram {
    /// Whether this is a steer program.
    pub fn is_steer(&self) -> bool {
        self.name == PROGRAM_NAME
    }

    /// A steer program whose recorded owner is gone: left behind by a
    /// killed engine (attached through netlink, which outlives its owner).
    pub fn is_stale(&self) -> bool {
        self.is_steer() && self.owner.is_some_and(|o| !o.is_alive())
    }
}

/// The XDP programs attached to `ifindex` (empty when none).
pub fn attached_programs(ifindex: u32) -> Vec<AttachedProgram> {
    let Ok(idx) = i32::try_from(ifindex) else {
        return Vec::new();
    };
    let Some(mp) = Multiprog::on_interface(idx) else {
        return Vec::new();
    };
    let legacy = mp.is_legacy();
    let describe = |p: ProgramRef<'_>| {
        let name = p.name().to_string_lossy().into_owned();
        let owner = (name == PROGRAM_NAME)
            .then(|| ProgramOwner::of_program(p.id()))
            .flatten();
        AttachedProgram {
            name,
            id: p.id(),
            dispatched: !legacy,
            owner,
        }
    };
    if legacy {
        mp.main_program().map(describe).into_iter().collect()
    } else {
        mp.programs().map(describe).collect()
    }
}

/// Detaches every program named `name` (one of steer's) from `ifindex`; a
/// lone legacy program is detached whatever its name (the callers check it
/// is `name` first).
pub(crate) fn detach_stale(ifindex: u32, name: &str) -> Result<()> {
    let idx = i32::try_from(ifindex).map_err(|_| XdpError::Config("ifindex overflow".into()))?;
    let Some(mp) = Multiprog::on_interface(idx) else {
        return Ok(());
    };
    let detached = if mp.is_legacy() {
        mp.detach()
    } else {
        let mode = mp.attach_mode();
        let mut last = Ok(());
        for p in mp.programs() {
            if p.name().to_bytes() == name.as_bytes() {
                last = p.detach(idx, mode);
            }
        }
        last
    };
    detached.map_err(|source| XdpError::Program {
        context: "detaching the stale program",
        source,
    })
}
