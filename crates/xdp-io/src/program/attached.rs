//! What is attached to an interface: [`attached_programs`] lists the XDP
//! programs (to find one left by a crashed run, or somebody else's), and
//! `detach_stale` removes steer's own leftovers (the AF_XDP program's or the
//! RFS program's).

use crate::{
    error::{Result, XdpError},
    sys::libxdp::{Multiprog, ProgramRef},
};

/// A program found attached to an interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttachedProgram {
    /// Its name.
    pub name: String,
    /// The kernel's program id.
    pub id: u32,
    /// Whether it runs through libxdp's dispatcher (else it is the only program).
    pub dispatched: bool,
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
    let describe = |p: ProgramRef<'_>| AttachedProgram {
        name: p.name().to_string_lossy().into_owned(),
        id: p.id(),
        dispatched: !legacy,
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
