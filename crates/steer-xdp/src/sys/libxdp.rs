//! The libxdp/libbpf FFI: small owners of the C objects with safe methods, so
//! that the steer program's logic (`program.rs`) is plain Rust.
//!
//! - [`BpfObject`]: an object opened from an in-memory ELF image, not loaded.
//! - [`XdpProgram`]: the libxdp program made from a `BpfObject`, which it
//!   owns: attaching loads the object; dropping closes the program, then the
//!   object (libxdp keeps a reference to an external object and does not
//!   close it).
//! - [`XdpLink`]: a bpf_link attaching a loaded program to an interface's
//!   XDP hook; the kernel detaches the program when the last file
//!   descriptor of the link closes, which includes the process exiting for
//!   any reason (`SIGKILL` too).
//! - [`Map`]: a map of a loaded object, borrowed from its object. Every
//!   operation goes through libbpf's `bpf_map__{lookup,update,delete}_elem`,
//!   which check the key and value lengths against the map's definition (for
//!   per-CPU maps: one 8-byte slot per possible CPU) before the kernel reads
//!   or writes the buffers, so byte slices of any length are safe to pass.
//! - [`MapFd`]: a map's own file descriptor (a duplicate, so it outlives
//!   nothing it should not and is `Send + Sync`) with the key and value
//!   lengths the kernel expects, checked before every call: for maps shared
//!   between threads (the RFS program's flow maps).
//! - [`MappedMap`]: the memory of a `BPF_F_MMAPABLE` array map mapped
//!   into this process, as byte atomics, unmapped on drop.
//! - [`Link`]: a program attached to a raw tracepoint (`struct bpf_link`),
//!   detached when dropped.
//! - [`Multiprog`]: a snapshot of the XDP programs attached to an interface;
//!   [`ProgramRef`] is one of them, valid while the snapshot lives.
//! - [`lookup_program_map`]: reads a map of a program another process
//!   loaded, found by the program's id (what a new engine reads the owner
//!   record of an attached steer program with).
//!
//! Invariants: an owner holds a non-null pointer that libbpf/libxdp returned
//! as a success (error pointers are refused at construction) and frees it
//! exactly once, in `Drop`; a borrowed handle cannot outlive its owner.

use std::{
    ffi::{c_void, CStr, CString},
    io,
    marker::PhantomData,
    os::{
        fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd},
        raw::{c_char, c_int},
    },
    ptr::{self, NonNull},
};

use libxdp_sys as xdp;

/// How a program is attached (`enum xdp_attach_mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AttachMode(xdp::xdp_attach_mode);

impl AttachMode {
    /// Driver (native) mode.
    pub(crate) const NATIVE: Self = AttachMode(xdp::xdp_attach_mode_XDP_MODE_NATIVE);
    /// Generic (skb) mode.
    pub(crate) const SKB: Self = AttachMode(xdp::xdp_attach_mode_XDP_MODE_SKB);
}

/// A NUL-terminated copy of `s`; EINVAL for an interior NUL.
fn c_string(s: &str) -> io::Result<CString> {
    CString::new(s).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

/// A negative-errno return as an `io::Error`.
fn check_rc(rc: c_int) -> io::Result<()> {
    if rc < 0 {
        Err(io::Error::from_raw_os_error(-rc))
    } else {
        Ok(())
    }
}

/// A libxdp/libbpf pointer return: the pointer, or the error it encodes (an
/// error pointer, or NULL with errno set).
fn check_ptr<T>(p: *mut T) -> io::Result<NonNull<T>> {
    // SAFETY: libxdp_get_error only inspects the pointer value.
    let err = unsafe { xdp::libxdp_get_error(p as *const c_void) };
    match NonNull::new(p) {
        Some(p) if err == 0 => Ok(p),
        _ => {
            let errno = if err != 0 {
                -(err as i32)
            } else {
                io::Error::last_os_error()
                    .raw_os_error()
                    .unwrap_or(libc::EINVAL)
            };
            Err(io::Error::from_raw_os_error(errno.abs()))
        }
    }
}

/// A BPF object opened from memory and not loaded yet (`struct bpf_object`).
#[derive(Debug)]
pub(crate) struct BpfObject(NonNull<xdp::bpf_object>);

impl BpfObject {
    /// Opens the ELF object `image` (`bpf_object__open_mem`, default options).
    pub(crate) fn open_mem(image: &'static [u8]) -> io::Result<Self> {
        route_logs();
        // SAFETY: `image` is valid for its length and lives forever (libbpf
        // may keep pointing into it); null options select the defaults.
        let obj =
            unsafe { xdp::bpf_object__open_mem(image.as_ptr().cast(), image.len(), ptr::null()) };
        check_ptr(obj).map(BpfObject)
    }

    /// Binds program `name` to the device `ifindex` with load `flags`
    /// (`bpf_program__set_ifindex`, `bpf_program__set_flags`); ENOENT when
    /// the object has no such program.
    pub(crate) fn bind_program(&mut self, name: &str, ifindex: u32, flags: u32) -> io::Result<()> {
        let name = c_string(name)?;
        // SAFETY: the object is valid (owned by `self`); the name is
        // NUL-terminated and outlives the call.
        let prog = unsafe { xdp::bpf_object__find_program_by_name(self.0.as_ptr(), name.as_ptr()) };
        if prog.is_null() {
            return Err(io::Error::from_raw_os_error(libc::ENOENT));
        }
        // SAFETY: `prog` belongs to the object, which is not loaded (a
        // BpfObject is loaded only through the XdpProgram that consumes it).
        unsafe {
            xdp::bpf_program__set_ifindex(prog, ifindex);
            check_rc(xdp::bpf_program__set_flags(prog, flags))
        }
    }
}

// SAFETY: the object is owned exclusively by this value (maps borrowed from
// it cannot outlive the borrow) and libbpf keeps no thread-affine state, so
// moving the owner to another thread is sound.
unsafe impl Send for BpfObject {}

impl BpfObject {
    /// Loads the object into the kernel: its maps are created and its
    /// programs verified (`bpf_object__load`).
    pub(crate) fn load(&mut self) -> io::Result<()> {
        // SAFETY: the object is valid (owned by `self`); loading twice is
        // refused by libbpf with an error, not undefined behaviour.
        check_rc(unsafe { xdp::bpf_object__load(self.0.as_ptr()) })
    }

    /// The file descriptor of the loaded program `name`, owned by the
    /// object (valid while `self` lives); ENOENT when there is no such
    /// program or it is not loaded.
    pub(crate) fn program_fd(&self, name: &str) -> io::Result<RawFd> {
        let name = c_string(name)?;
        // SAFETY: the object is valid; the name is NUL-terminated and
        // outlives the call.
        let prog = unsafe { xdp::bpf_object__find_program_by_name(self.0.as_ptr(), name.as_ptr()) };
        if prog.is_null() {
            return Err(io::Error::from_raw_os_error(libc::ENOENT));
        }
        // SAFETY: `prog` belongs to the object, valid while `self` lives.
        let fd = unsafe { xdp::bpf_program__fd(prog) };
        if fd < 0 {
            return Err(io::Error::from_raw_os_error(libc::ENOENT));
        }
        Ok(fd)
    }

    /// The map `name` of the loaded object; ENOENT when there is no such map
    /// or it has not been created in the kernel.
    pub(crate) fn map(&self, name: &str) -> io::Result<Map<'_>> {
        let name = c_string(name)?;
        // SAFETY: the object is valid while `self` lives; the name is
        // NUL-terminated and outlives the call.
        let map = unsafe { xdp::bpf_object__find_map_by_name(self.0.as_ptr(), name.as_ptr()) };
        let map = NonNull::new(map).ok_or_else(|| io::Error::from_raw_os_error(libc::ENOENT))?;
        // SAFETY: `map` belongs to the object, valid while `self` lives.
        if unsafe { xdp::bpf_map__fd(map.as_ptr()) } < 0 {
            return Err(io::Error::from_raw_os_error(libc::ENOENT));
        }
        Ok(Map {
            map,
            _object: PhantomData,
        })
    }
}

/// The kernel's id of the program behind `fd` (`bpf_prog_get_info_by_fd`).
pub(crate) fn program_id(fd: RawFd) -> io::Result<u32> {
    // SAFETY: an all-zero bpf_prog_info is a valid request (no arrays asked
    // for); the kernel writes at most `len` bytes into it.
    let mut info: xdp::bpf_prog_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<xdp::bpf_prog_info>() as u32;
    // SAFETY: `info` and `len` are valid for writes for the call; a bad fd
    // is an error return.
    check_rc(unsafe { xdp::bpf_prog_get_info_by_fd(fd, &mut info, &mut len) })?;
    Ok(info.id)
}

/// `XDP_FLAGS_SKB_MODE` and `XDP_FLAGS_DRV_MODE` (linux/if_link.h).
const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;

/// A bpf_link attaching an XDP program to an interface. The program stays
/// attached exactly as long as the link's file descriptor is open: closing
/// it (dropping this value, or the process exiting however it exits)
/// detaches the program, and no netlink call can replace or remove it
/// meanwhile.
#[derive(Debug)]
pub(crate) struct XdpLink {
    /// Held only to be closed when the link is dropped.
    _fd: OwnedFd,
}

impl XdpLink {
    /// Attaches the loaded program `prog_fd` to `ifindex` in `mode`
    /// (`bpf_link_create` with `BPF_XDP`).
    pub(crate) fn create(prog_fd: RawFd, ifindex: i32, mode: AttachMode) -> io::Result<Self> {
        // SAFETY: an all-zero options struct is libbpf's "no options"; `sz`
        // tells libbpf which fields this caller knows.
        let mut opts: xdp::bpf_link_create_opts = unsafe { std::mem::zeroed() };
        opts.sz = std::mem::size_of::<xdp::bpf_link_create_opts>();
        opts.flags = if mode == AttachMode::SKB {
            XDP_FLAGS_SKB_MODE
        } else {
            XDP_FLAGS_DRV_MODE
        };
        // SAFETY: `opts` is valid for the call; the kernel checks the fds.
        let fd =
            unsafe { xdp::bpf_link_create(prog_fd, ifindex, xdp::bpf_attach_type_BPF_XDP, &opts) };
        if fd < 0 {
            return Err(io::Error::from_raw_os_error(-fd));
        }
        // SAFETY: a non-negative return is a new file descriptor this
        // process owns and nothing else closes.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(XdpLink { _fd: fd })
    }
}

/// `XDP_FLAGS_REPLACE` (linux/if_link.h): act only if the attached program
/// is the one named by `old_prog_fd`.
const XDP_FLAGS_REPLACE: u32 = 1 << 4;

/// Detaches the program `prog_fd` attached through netlink (without
/// libxdp's dispatcher) from `ifindex` in `mode` (`bpf_xdp_detach`), only
/// if it is still the one attached: needs CAP_NET_ADMIN alone, where
/// libxdp's detach also looks the program up by id (CAP_SYS_ADMIN).
pub(crate) fn detach_netlink(ifindex: i32, mode: AttachMode, prog_fd: RawFd) -> io::Result<()> {
    // SAFETY: all-zero is libbpf's "no options"; zeroing also clears the
    // padding after `old_prog_fd`, which libbpf checks is zero.
    let mut opts: xdp::bpf_xdp_attach_opts = unsafe { std::mem::zeroed() };
    opts.sz = std::mem::size_of::<xdp::bpf_xdp_attach_opts>();
    opts.old_prog_fd = prog_fd;
    let flags = XDP_FLAGS_REPLACE
        | if mode == AttachMode::SKB {
            XDP_FLAGS_SKB_MODE
        } else {
            XDP_FLAGS_DRV_MODE
        };
    // SAFETY: `opts` is valid for the call; the kernel checks the fd.
    check_rc(unsafe { xdp::bpf_xdp_detach(ifindex, flags, &opts) })
}

/// Detaches whatever program is attached through netlink to `ifindex` in
/// `mode`, if its id is `prog_id` (asked first with `bpf_xdp_query_id`;
/// CAP_NET_ADMIN alone). For when the kernel refuses to match the program
/// by its fd ([`detach_netlink`]'s EINVAL for a multi-buffer,
/// device-bound program); the check and the detach are two calls, which is
/// safe while the interface's owner lock keeps other steer processes out.
pub(crate) fn detach_netlink_by_id(ifindex: i32, mode: AttachMode, prog_id: u32) -> io::Result<()> {
    let flags = if mode == AttachMode::SKB {
        XDP_FLAGS_SKB_MODE
    } else {
        XDP_FLAGS_DRV_MODE
    };
    let mut attached = 0u32;
    // SAFETY: `attached` is a valid out-pointer for the call.
    check_rc(unsafe { xdp::bpf_xdp_query_id(ifindex, flags as i32, &mut attached) })?;
    if attached != prog_id {
        return Err(io::Error::other(format!(
            "another program (id {attached}) is attached in its place"
        )));
    }
    // SAFETY: null options are libbpf's "none": detach what is attached in
    // this mode.
    check_rc(unsafe { xdp::bpf_xdp_detach(ifindex, flags, ptr::null()) })
}

/// An fd returned by a libbpf `*_get_fd_by_id` call, owned.
fn owned_fd(rc: c_int) -> io::Result<OwnedFd> {
    if rc < 0 {
        return Err(io::Error::from_raw_os_error(-rc));
    }
    // SAFETY: a non-negative return is a new file descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(rc) })
}

/// Reads `key` of the map named `map_name` that the program with id
/// `prog_id` uses (another process's program: found through
/// `bpf_prog_get_fd_by_id`, its map ids and `bpf_map_get_fd_by_id`, which
/// need CAP_SYS_ADMIN). ENOENT when the program or map is gone; EINVAL
/// when the key or value length differs from the map's.
pub(crate) fn lookup_program_map(
    prog_id: u32,
    map_name: &str,
    key: &[u8],
    value: &mut [u8],
) -> io::Result<()> {
    // SAFETY: a plain lookup by id; the result is checked.
    let prog = owned_fd(unsafe { xdp::bpf_prog_get_fd_by_id(prog_id) })?;
    let mut ids = [0u32; 16];
    // SAFETY: all-zero is a valid request; then the map-id array is asked
    // for, of `ids.len()` entries, which the kernel fills up to that count.
    let mut info: xdp::bpf_prog_info = unsafe { std::mem::zeroed() };
    info.nr_map_ids = ids.len() as u32;
    info.map_ids = ids.as_mut_ptr() as u64;
    let mut len = std::mem::size_of::<xdp::bpf_prog_info>() as u32;
    // SAFETY: `info`, `len` and the array `info.map_ids` points to are valid
    // for writes for the call (the kernel writes at most `nr_map_ids` ids).
    check_rc(unsafe { xdp::bpf_prog_get_info_by_fd(prog.as_raw_fd(), &mut info, &mut len) })?;
    let n = (info.nr_map_ids as usize).min(ids.len());
    for &id in &ids[..n] {
        // SAFETY: as above.
        let Ok(map) = owned_fd(unsafe { xdp::bpf_map_get_fd_by_id(id) }) else {
            continue;
        };
        // SAFETY: all-zero is a valid bpf_map_info request.
        let mut minfo: xdp::bpf_map_info = unsafe { std::mem::zeroed() };
        let mut mlen = std::mem::size_of::<xdp::bpf_map_info>() as u32;
        // SAFETY: `minfo` and `mlen` are valid for writes for the call.
        if unsafe { xdp::bpf_map_get_info_by_fd(map.as_raw_fd(), &mut minfo, &mut mlen) } < 0 {
            continue;
        }
        let name: Vec<u8> = minfo
            .name
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        if name != map_name.as_bytes() {
            continue;
        }
        if minfo.key_size as usize != key.len() || minfo.value_size as usize != value.len() {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        // SAFETY: the key and value buffers are exactly as long as the map's
        // key and value (checked just above; not a per-CPU map, whose values
        // would be longer: the caller names an array or hash map) and valid
        // for the call.
        return check_rc(unsafe {
            xdp::bpf_map_lookup_elem(
                map.as_raw_fd(),
                key.as_ptr().cast(),
                value.as_mut_ptr().cast(),
            )
        });
    }
    Err(io::Error::from_raw_os_error(libc::ENOENT))
}

impl BpfObject {
    /// Sets the size of map `name` before the object is loaded
    /// (`bpf_map__set_max_entries`); ENOENT when there is no such map.
    pub(crate) fn set_max_entries(&mut self, name: &str, entries: u32) -> io::Result<()> {
        let name = c_string(name)?;
        // SAFETY: the object is valid (owned by `self`); the name is
        // NUL-terminated and outlives the call.
        let map = unsafe { xdp::bpf_object__find_map_by_name(self.0.as_ptr(), name.as_ptr()) };
        if map.is_null() {
            return Err(io::Error::from_raw_os_error(libc::ENOENT));
        }
        // SAFETY: `map` belongs to the object, which is not loaded yet (a
        // BpfObject is loaded only through the XdpProgram that consumes it).
        check_rc(unsafe { xdp::bpf_map__set_max_entries(map, entries) })
    }
}

impl Drop for BpfObject {
    fn drop(&mut self) {
        // SAFETY: the object is owned by `self` and closed only here.
        unsafe { xdp::bpf_object__close(self.0.as_ptr()) };
    }
}

/// A libxdp program (`struct xdp_program`) and the object it came from.
#[derive(Debug)]
pub(crate) struct XdpProgram {
    // Dropped after `Drop::drop` closed the program.
    obj: BpfObject,
    prog: NonNull<xdp::xdp_program>,
}

// SAFETY: the libxdp/libbpf objects are owned exclusively by this value (no
// other handle aliases them; borrowed `Map`s cannot leave the thread that
// borrows it, XdpProgram not being Sync) and libbpf/libxdp keep no
// thread-affine state, so moving the owner to another thread is sound.
unsafe impl Send for XdpProgram {}

impl XdpProgram {
    /// Makes the libxdp program of section `section` of `obj`
    /// (`xdp_program__from_bpf_obj`). On error the object is closed.
    pub(crate) fn from_object(obj: BpfObject, section: &str) -> io::Result<Self> {
        let section = c_string(section)?;
        // SAFETY: the object is valid and not loaded; libxdp keeps a
        // reference to it, which is why the XdpProgram owns the object and
        // closes it after the program.
        let prog = unsafe { xdp::xdp_program__from_bpf_obj(obj.0.as_ptr(), section.as_ptr()) };
        let prog = check_ptr(prog)?;
        Ok(XdpProgram { obj, prog })
    }

    /// Loads the object and attaches the program to `ifindex` in `mode`
    /// (`xdp_program__attach`).
    pub(crate) fn attach(&mut self, ifindex: i32, mode: AttachMode) -> io::Result<()> {
        // SAFETY: the program is valid (owned by `self`).
        check_rc(unsafe { xdp::xdp_program__attach(self.prog.as_ptr(), ifindex, mode.0, 0) })
    }

    /// Detaches the program from `ifindex` (`xdp_program__detach`).
    pub(crate) fn detach(&mut self, ifindex: i32, mode: AttachMode) -> io::Result<()> {
        // SAFETY: the program is valid (owned by `self`).
        check_rc(unsafe { xdp::xdp_program__detach(self.prog.as_ptr(), ifindex, mode.0, 0) })
    }

    /// The program's file descriptor (negative before it is loaded), owned
    /// by the program.
    pub(crate) fn fd(&self) -> RawFd {
        // SAFETY: the program is valid (owned by `self`).
        unsafe { xdp::xdp_program__fd(self.prog.as_ptr()) }
    }

    /// The kernel's id of the program (0 before it is loaded).
    pub(crate) fn id(&self) -> u32 {
        // SAFETY: the program is valid (owned by `self`).
        unsafe { xdp::xdp_program__id(self.prog.as_ptr()) }
    }

    /// The program's name (the C function's name).
    pub(crate) fn name(&self) -> &CStr {
        // SAFETY: the program is valid (owned by `self`).
        let name = unsafe { xdp::xdp_program__name(self.prog.as_ptr()) };
        if name.is_null() {
            return c"";
        }
        // SAFETY: a non-null name is a NUL-terminated string owned by the
        // program, which lives as long as `self` and keeps its name.
        unsafe { CStr::from_ptr(name) }
    }

    /// The map `name` of the loaded object; ENOENT when there is no such map
    /// or it has not been created in the kernel.
    pub(crate) fn map(&self, name: &str) -> io::Result<Map<'_>> {
        self.obj.map(name)
    }

    /// The file descriptor of program `name` (the C function's name) of the
    /// loaded object, borrowed from it: any program of the object, not only
    /// the attached one (a cpumap entry's program, a socket filter).
    pub(crate) fn program_fd(&self, name: &str) -> io::Result<BorrowedFd<'_>> {
        let name = c_string(name)?;
        // SAFETY: the object is valid while `self` lives; the name is
        // NUL-terminated and outlives the call.
        let prog =
            unsafe { xdp::bpf_object__find_program_by_name(self.obj.0.as_ptr(), name.as_ptr()) };
        if prog.is_null() {
            return Err(io::Error::from_raw_os_error(libc::ENOENT));
        }
        // SAFETY: `prog` belongs to the object, valid while `self` lives.
        let fd = unsafe { xdp::bpf_program__fd(prog) };
        if fd < 0 {
            return Err(io::Error::from_raw_os_error(libc::ENOENT));
        }
        // SAFETY: the fd is the object's, open until the object is closed,
        // which happens only when `self` is dropped: the borrow cannot
        // outlive it.
        Ok(unsafe { BorrowedFd::borrow_raw(fd) })
    }

    /// Attaches program `name` (the C function's name) of the loaded object
    /// to the raw tracepoint `tracepoint`
    /// (`bpf_program__attach_raw_tracepoint`).
    pub(crate) fn attach_raw_tracepoint(&self, name: &str, tracepoint: &str) -> io::Result<Link> {
        let name = c_string(name)?;
        let tp = c_string(tracepoint)?;
        // SAFETY: the object is valid while `self` lives; the name is
        // NUL-terminated and outlives the call.
        let prog =
            unsafe { xdp::bpf_object__find_program_by_name(self.obj.0.as_ptr(), name.as_ptr()) };
        if prog.is_null() {
            return Err(io::Error::from_raw_os_error(libc::ENOENT));
        }
        // SAFETY: `prog` belongs to the loaded object; the tracepoint name is
        // NUL-terminated and outlives the call. The link holds its own
        // reference to the program, so it may outlive the object.
        let link = unsafe { xdp::bpf_program__attach_raw_tracepoint(prog, tp.as_ptr()) };
        check_ptr(link).map(Link)
    }

    /// Attaches program `name` (the C function's name) of the loaded object
    /// to the cgroup (v2) directory open as `cgroup`, as a BPF link
    /// (`bpf_program__attach_cgroup`): the attach type is the one its
    /// section gave it at load. Other programs of the cgroup stay attached.
    pub(crate) fn attach_cgroup(&self, name: &str, cgroup: BorrowedFd<'_>) -> io::Result<Link> {
        let name = c_string(name)?;
        // SAFETY: the object is valid while `self` lives; the name is
        // NUL-terminated and outlives the call.
        let prog =
            unsafe { xdp::bpf_object__find_program_by_name(self.obj.0.as_ptr(), name.as_ptr()) };
        if prog.is_null() {
            return Err(io::Error::from_raw_os_error(libc::ENOENT));
        }
        // SAFETY: `prog` belongs to the loaded object; the cgroup fd is
        // open for the call (libbpf does not keep it: the link holds the
        // cgroup itself). The link holds its own reference to the program.
        let link = unsafe { xdp::bpf_program__attach_cgroup(prog, cgroup.as_raw_fd()) };
        check_ptr(link).map(Link)
    }

    /// A [`MapFd`] for map `name` of the loaded object (see
    /// [`Map::to_map_fd`]).
    pub(crate) fn map_fd(&self, name: &str, possible_cpus: usize) -> io::Result<MapFd> {
        self.map(name)?.to_map_fd(possible_cpus)
    }
}

impl Drop for XdpProgram {
    fn drop(&mut self) {
        // SAFETY: the program is owned by `self` and closed only here; it
        // does not close the external object, which the `obj` field closes
        // right after.
        unsafe { xdp::xdp_program__close(self.prog.as_ptr()) };
    }
}

/// A created map of a loaded object (`struct bpf_map`), borrowed from its
/// object.
#[derive(Debug)]
pub(crate) struct Map<'a> {
    map: NonNull<xdp::bpf_map>,
    _object: PhantomData<&'a BpfObject>,
}

impl Map<'_> {
    /// A [`MapFd`] for this map (a duplicate of its descriptor, independent
    /// of the object). `value_len` is what a lookup writes: the value size,
    /// or for a per-CPU map one 8-byte-rounded value per possible CPU
    /// (`possible_cpus`).
    pub(crate) fn to_map_fd(&self, possible_cpus: usize) -> io::Result<MapFd> {
        // SAFETY: `self.map` is a created map of a loaded object, valid while
        // the object is borrowed.
        let (fd, key, value, kind) = unsafe {
            let m = self.map.as_ptr();
            (
                xdp::bpf_map__fd(m),
                xdp::bpf_map__key_size(m),
                xdp::bpf_map__value_size(m),
                xdp::bpf_map__type(m),
            )
        };
        let percpu = matches!(
            kind,
            xdp::bpf_map_type_BPF_MAP_TYPE_PERCPU_ARRAY
                | xdp::bpf_map_type_BPF_MAP_TYPE_PERCPU_HASH
                | xdp::bpf_map_type_BPF_MAP_TYPE_LRU_PERCPU_HASH
        );
        let value = value as usize;
        let value_len = if percpu {
            value.div_ceil(8) * 8 * possible_cpus
        } else {
            value
        };
        if fd < 0 {
            return Err(io::Error::from_raw_os_error(libc::EBADF));
        }
        // SAFETY: `fd` is the map's open descriptor; F_DUPFD_CLOEXEC makes
        // a new one that the OwnedFd owns alone.
        let dup = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
        if dup < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(MapFd {
            // SAFETY: `dup` was just returned by fcntl and is owned by nobody else.
            fd: unsafe { OwnedFd::from_raw_fd(dup) },
            key_len: key as usize,
            value_len,
        })
    }

    /// Sets `key` to `value` (`BPF_ANY`). EINVAL when a length does not
    /// match the map's definition.
    pub(crate) fn update(&self, key: &[u8], value: &[u8]) -> io::Result<()> {
        // SAFETY: the map is valid while its object is borrowed; libbpf
        // checks both lengths against the map's definition before the kernel
        // reads the buffers, which outlive the call.
        check_rc(unsafe {
            xdp::bpf_map__update_elem(
                self.map.as_ptr(),
                key.as_ptr().cast(),
                key.len(),
                value.as_ptr().cast(),
                value.len(),
                0,
            )
        })
    }

    /// Removes `key`; ENOENT when it is absent.
    pub(crate) fn delete(&self, key: &[u8]) -> io::Result<()> {
        // SAFETY: as in `update`; only the key is read.
        check_rc(unsafe {
            xdp::bpf_map__delete_elem(self.map.as_ptr(), key.as_ptr().cast(), key.len(), 0)
        })
    }

    /// Reads the value of `key` into `value` (for a per-CPU map: one 8-byte
    /// slot per possible CPU, in CPU order). EINVAL when a length does not
    /// match the map's definition.
    pub(crate) fn lookup(&self, key: &[u8], value: &mut [u8]) -> io::Result<()> {
        // SAFETY: as in `update`; libbpf checks that `value` is exactly as
        // long as what the kernel writes, and `value` is borrowed mutably
        // for the call.
        check_rc(unsafe {
            xdp::bpf_map__lookup_elem(
                self.map.as_ptr(),
                key.as_ptr().cast(),
                key.len(),
                value.as_mut_ptr().cast(),
                value.len(),
                0,
            )
        })
    }
}

/// The 8-byte slots of a per-CPU map's lookup, one per possible CPU, in
/// CPU order.
pub(crate) fn per_cpu_values(buf: &[u8]) -> impl Iterator<Item = u64> + '_ {
    buf.chunks_exact(8)
        .map(|c| u64::from_ne_bytes(c.try_into().unwrap_or_default()))
}

/// A map's own descriptor, with the key and value lengths the kernel reads
/// and writes; every call checks the buffers against them first, so byte
/// slices of any length are safe to pass. `Send + Sync` (a descriptor).
#[derive(Debug)]
pub(crate) struct MapFd {
    fd: OwnedFd,
    key_len: usize,
    value_len: usize,
}

/// `BPF_NOEXIST`: create only.
pub(crate) const BPF_NOEXIST: u64 = 1;

impl MapFd {
    fn check(&self, key: &[u8], value: Option<usize>) -> io::Result<()> {
        if key.len() != self.key_len || value.is_some_and(|v| v != self.value_len) {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        Ok(())
    }

    /// Sets `key` to `value` with `flags` (`BPF_ANY` = 0, [`BPF_NOEXIST`]).
    pub(crate) fn update(&self, key: &[u8], value: &[u8], flags: u64) -> io::Result<()> {
        self.check(key, Some(value.len()))?;
        // SAFETY: the descriptor is a map's; both buffers have exactly the
        // lengths the kernel reads (checked above) and outlive the call.
        check_rc(unsafe {
            xdp::bpf_map_update_elem(
                self.fd.as_raw_fd(),
                key.as_ptr().cast(),
                value.as_ptr().cast(),
                flags,
            )
        })
    }

    /// Removes `key`; ENOENT when it is absent.
    pub(crate) fn delete(&self, key: &[u8]) -> io::Result<()> {
        self.check(key, None)?;
        // SAFETY: as in `update`; only the key is read.
        check_rc(unsafe { xdp::bpf_map_delete_elem(self.fd.as_raw_fd(), key.as_ptr().cast()) })
    }

    /// Every key of the map now (a hash map's keys as `bpf_map_get_next_key`
    /// walks them: keys deleted or added meanwhile may be missed or seen).
    pub(crate) fn keys(&self) -> io::Result<Vec<Vec<u8>>> {
        let mut keys: Vec<Vec<u8>> = Vec::new();
        loop {
            let mut next = vec![0u8; self.key_len];
            let cur = keys.last().map_or(std::ptr::null(), |k| k.as_ptr().cast());
            // SAFETY: the descriptor is a map's; `cur` is null or a key of
            // exactly `key_len` bytes, and `next` has room for one.
            let rc = unsafe {
                xdp::bpf_map_get_next_key(self.fd.as_raw_fd(), cur, next.as_mut_ptr().cast())
            };
            match check_rc(rc) {
                Ok(()) => keys.push(next),
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(keys),
                Err(e) => return Err(e),
            }
        }
    }

    /// Reads the value of `key` into `value`; ENOENT when it is absent.
    pub(crate) fn lookup(&self, key: &[u8], value: &mut [u8]) -> io::Result<()> {
        self.check(key, Some(value.len()))?;
        // SAFETY: as in `update`; `value` is exactly as long as what the
        // kernel writes and is borrowed mutably for the call.
        check_rc(unsafe {
            xdp::bpf_map_lookup_elem(
                self.fd.as_raw_fd(),
                key.as_ptr().cast(),
                value.as_mut_ptr().cast(),
            )
        })
    }

    /// The value of `key` in a per-CPU map, one u64 per possible CPU, in
    /// CPU order.
    pub(crate) fn lookup_per_cpu(&self, key: &[u8]) -> io::Result<Vec<u64>> {
        let mut values = vec![0u8; self.value_len];
        self.lookup(key, &mut values)?;
        Ok(per_cpu_values(&values).collect())
    }

    /// Every entry of a hash map now, keys and values, `chunk` entries a
    /// system call (`BPF_MAP_LOOKUP_BATCH`: the kernel walks the buckets,
    /// so an entry added or deleted meanwhile may be missed, but none is
    /// read twice). A bucket holding more than `chunk` entries grows the
    /// chunk. EINVAL or EOPNOTSUPP from a kernel or map without batch
    /// lookups: walk with [`MapFd::keys`] instead.
    pub(crate) fn entries(&self, chunk: usize) -> io::Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut chunk = chunk.max(1);
        let mut out = Vec::new();
        // The position between calls: for hash maps a bucket number (4
        // bytes at least, whatever the key's size).
        let token_len = self.key_len.max(8);
        let mut token = vec![0u8; token_len];
        let mut next = vec![0u8; token_len];
        let mut started = false;
        let opts = xdp::bpf_map_batch_opts {
            sz: std::mem::size_of::<xdp::bpf_map_batch_opts>(),
            elem_flags: 0,
            flags: 0,
        };
        loop {
            let mut keys = vec![0u8; chunk * self.key_len];
            let mut values = vec![0u8; chunk * self.value_len];
            let mut count = u32::try_from(chunk).unwrap_or(u32::MAX);
            let in_batch = if started {
                token.as_mut_ptr().cast()
            } else {
                std::ptr::null_mut()
            };
            // SAFETY: the descriptor is a map's; `in_batch` is null or a
            // token of `token_len` bytes the previous call wrote, `next`
            // has room for one; `keys` and `values` have room for `count`
            // keys and values of the map's lengths; `opts` is initialised
            // with its size. All outlive the call.
            let rc = unsafe {
                xdp::bpf_map_lookup_batch(
                    self.fd.as_raw_fd(),
                    in_batch,
                    next.as_mut_ptr().cast(),
                    keys.as_mut_ptr().cast(),
                    values.as_mut_ptr().cast(),
                    &mut count,
                    &opts,
                )
            };
            let done = match check_rc(rc) {
                Ok(()) => false,
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => true,
                // One bucket does not fit: again from the same place.
                Err(e) if e.raw_os_error() == Some(libc::ENOSPC) && count == 0 => {
                    chunk = chunk.saturating_mul(2);
                    continue;
                }
                Err(e) => return Err(e),
            };
            let n = (count as usize).min(chunk);
            out.extend(
                keys.chunks_exact(self.key_len)
                    .zip(values.chunks_exact(self.value_len))
                    .take(n)
                    .map(|(k, v)| (k.to_vec(), v.to_vec())),
            );
            if done {
                return Ok(out);
            }
            std::mem::swap(&mut token, &mut next);
            started = true;
        }
    }

    /// The kernel's id of the map (`bpf_map_get_info_by_fd`).
    pub(crate) fn id(&self) -> io::Result<u32> {
        // SAFETY: bpf_map_info is plain data; all-zero is the documented
        // initial value.
        let mut info: xdp::bpf_map_info = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<xdp::bpf_map_info>() as u32;
        // SAFETY: `info` and `len` are valid for writes and describe each
        // other; the descriptor is a map's.
        check_rc(unsafe { xdp::bpf_map_get_info_by_fd(self.fd.as_raw_fd(), &mut info, &mut len) })?;
        Ok(info.id)
    }
}

impl MapFd {
    /// Maps the first `len` bytes of this map (an array created with
    /// `BPF_F_MMAPABLE`) into the process, shared with the programs that
    /// use it. EINVAL when the map is not mmapable, or shorter than `len`.
    pub(crate) fn mmap(self, len: usize) -> io::Result<MappedMap> {
        if len == 0 {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        // SAFETY: a fresh shared mapping of the map's descriptor, placed by
        // the kernel; nothing else in the process refers to the range.
        let ptr = unsafe {
            libc::mmap(
                ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                self.fd.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(ptr.cast::<u8>())
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
        Ok(MappedMap {
            ptr,
            len,
            _fd: self,
        })
    }
}

/// The memory of an mmapable array map, mapped into this process (see
/// [`MapFd::mmap`]); the kernel's programs read and write the same bytes.
/// Owns its mapping (unmapped on drop) and a descriptor of the map.
#[derive(Debug)]
pub(crate) struct MappedMap {
    ptr: NonNull<u8>,
    len: usize,
    _fd: MapFd,
}

// SAFETY: the mapping is plain shared memory, reached only through atomics
// (`bytes`); the pointer is owned by this value and unmapped once.
unsafe impl Send for MappedMap {}
// SAFETY: as for Send: `&self` hands out only atomics.
unsafe impl Sync for MappedMap {}

impl MappedMap {
    /// The mapping as bytes.
    pub(crate) fn bytes(&self) -> &[std::sync::atomic::AtomicU8] {
        // SAFETY: the mapping is `len` bytes long and lives as long as
        // `self`; AtomicU8 has the size and alignment of u8, and every
        // access from this process goes through these atomics.
        unsafe {
            std::slice::from_raw_parts(
                self.ptr.as_ptr().cast::<std::sync::atomic::AtomicU8>(),
                self.len,
            )
        }
    }
}

impl Drop for MappedMap {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are exactly the mapping `mmap` made, and no
        // borrow of `bytes` outlives `self`.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// A program attached to a tracepoint; dropping it detaches the program.
#[derive(Debug)]
pub(crate) struct Link(NonNull<xdp::bpf_link>);

// SAFETY: a bpf_link is a file descriptor and a small heap object owned
// exclusively by this value; libbpf keeps no thread-affine state in it.
unsafe impl Send for Link {}
// SAFETY: no method takes `&self`; shared references can do nothing.
unsafe impl Sync for Link {}

impl Drop for Link {
    fn drop(&mut self) {
        // SAFETY: the link is owned by `self` and destroyed only here.
        unsafe { xdp::bpf_link__destroy(self.0.as_ptr()) };
    }
}

/// The XDP programs attached to one interface, as libxdp sees them
/// (`struct xdp_multiprog`): a dispatcher with its component programs, or a
/// single legacy program.
#[derive(Debug)]
pub(crate) struct Multiprog(NonNull<xdp::xdp_multiprog>);

impl Multiprog {
    /// The programs attached to `ifindex`; `None` when there are none or the
    /// query failed.
    pub(crate) fn on_interface(ifindex: i32) -> Option<Self> {
        // SAFETY: a plain query; the result is checked here and closed on drop.
        let mp = unsafe { xdp::xdp_multiprog__get_from_ifindex(ifindex) };
        check_ptr(mp).ok().map(Multiprog)
    }

    /// Whether a single program is attached without libxdp's dispatcher.
    pub(crate) fn is_legacy(&self) -> bool {
        // SAFETY: the multiprog is valid (owned by `self`).
        unsafe { xdp::xdp_multiprog__is_legacy(self.0.as_ptr()) }
    }

    /// The mode the programs are attached in.
    pub(crate) fn attach_mode(&self) -> AttachMode {
        // SAFETY: the multiprog is valid (owned by `self`).
        AttachMode(unsafe { xdp::xdp_multiprog__attach_mode(self.0.as_ptr()) })
    }

    /// The legacy program, or the dispatcher.
    pub(crate) fn main_program(&self) -> Option<ProgramRef<'_>> {
        // SAFETY: the multiprog is valid (owned by `self`).
        let p = unsafe { xdp::xdp_multiprog__main_prog(self.0.as_ptr()) };
        NonNull::new(p).map(ProgramRef::new)
    }

    /// The dispatcher's component programs, in run order (none for a legacy
    /// program). Each next one is asked for when the iterator is advanced.
    pub(crate) fn programs(&self) -> impl Iterator<Item = ProgramRef<'_>> + '_ {
        let mut prev: Option<NonNull<xdp::xdp_program>> = None;
        let mut done = false;
        std::iter::from_fn(move || {
            if done {
                return None;
            }
            let after = prev.map_or(ptr::null(), |p| p.as_ptr().cast_const());
            // SAFETY: the multiprog is valid while `self` is borrowed, and
            // `after` is null or a program it returned.
            let next =
                NonNull::new(unsafe { xdp::xdp_multiprog__next_prog(after, self.0.as_ptr()) });
            done = next.is_none();
            prev = next;
            next.map(ProgramRef::new)
        })
    }

    /// Detaches a legacy program (`xdp_multiprog__detach`).
    pub(crate) fn detach(&self) -> io::Result<()> {
        // SAFETY: the multiprog is valid (owned by `self`).
        check_rc(unsafe { xdp::xdp_multiprog__detach(self.0.as_ptr()) })
    }
}

impl Drop for Multiprog {
    fn drop(&mut self) {
        // SAFETY: the multiprog is owned by `self` and closed only here; the
        // ProgramRefs borrowed from it are gone by now.
        unsafe { xdp::xdp_multiprog__close(self.0.as_ptr()) };
    }
}

/// One program of a [`Multiprog`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct ProgramRef<'a> {
    prog: NonNull<xdp::xdp_program>,
    _multiprog: PhantomData<&'a Multiprog>,
}

impl<'a> ProgramRef<'a> {
    fn new(prog: NonNull<xdp::xdp_program>) -> Self {
        ProgramRef {
            prog,
            _multiprog: PhantomData,
        }
    }

    /// The program's name (the C function's name).
    pub(crate) fn name(&self) -> &'a CStr {
        // SAFETY: the program lives as long as its multiprog ('a).
        let name = unsafe { xdp::xdp_program__name(self.prog.as_ptr()) };
        if name.is_null() {
            return c"";
        }
        // SAFETY: a non-null name is a NUL-terminated string owned by the
        // program, which lives for 'a and does not change its name.
        unsafe { CStr::from_ptr(name) }
    }

    /// The kernel's id of the program.
    pub(crate) fn id(&self) -> u32 {
        // SAFETY: the program lives as long as its multiprog.
        unsafe { xdp::xdp_program__id(self.prog.as_ptr()) }
    }

    /// Detaches this component program from `ifindex`, attached in `mode`.
    pub(crate) fn detach(&self, ifindex: i32, mode: AttachMode) -> io::Result<()> {
        // SAFETY: the program lives as long as its multiprog; detaching
        // rebuilds the dispatcher in the kernel and leaves this snapshot's
        // memory alone.
        check_rc(unsafe { xdp::xdp_program__detach(self.prog.as_ptr(), ifindex, mode.0, 0) })
    }
}

/// Stops libbpf's and libxdp's own messages to stderr (warnings such as "No
/// bpffs found" that every load on a machine without bpffs prints); errors
/// still come back as values.
pub(crate) fn silence() {
    // SAFETY: a NULL print function is libbpf's and libxdp's documented way
    // to disable their output; neither keeps the previous one.
    unsafe {
        libbpf_sys::libbpf_set_print(None);
        xdp::libxdp_set_print(None);
    }
}

/// Sends libbpf's and libxdp's own messages to `tracing` at debug level
/// (targets `libbpf` and `libxdp`) instead of stderr: the fallbacks they
/// announce on every start ("No bpffs found ... Falling back to loading
/// single prog without dispatcher", "skipping unrecognized data section")
/// are expected, and what fails comes back as an error value. A verifier
/// log shows with `RUST_LOG=libbpf=debug`. Idempotent; the first call
/// installs the printers.
pub(crate) fn route_logs() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(install_printers);
}

#[cfg(target_arch = "x86_64")]
fn install_printers() {
    // SAFETY: the printers are `extern "C"` functions with the signatures
    // the libraries declare, valid for the life of the process.
    unsafe {
        libbpf_sys::libbpf_set_print(Some(print_libbpf));
        xdp::libxdp_set_print(Some(print_libxdp));
    }
}

/// Where `va_list` is not a pointer the printers cannot forward it: silence.
#[cfg(not(target_arch = "x86_64"))]
fn install_printers() {
    silence();
}

#[cfg(target_arch = "x86_64")]
extern "C" {
    /// libc's `vsnprintf`; on x86_64 a `va_list` argument is a pointer to
    /// its one `__va_list_tag`, which is what the printers receive.
    fn vsnprintf(buf: *mut c_char, len: usize, fmt: *const c_char, ap: *mut c_void) -> c_int;
}

/// Formats a library message into a string, without its trailing newline.
///
/// # Safety
/// `fmt` and `ap` must be the format and the arguments a library passed to
/// its printer, used once.
#[cfg(target_arch = "x86_64")]
unsafe fn format_message(fmt: *const c_char, ap: *mut c_void) -> String {
    let mut buf = [0u8; 512];
    // SAFETY: `buf` is writable for its length (vsnprintf writes at most
    // that, NUL included); `fmt` and `ap` come from the library's call, per
    // the caller's contract.
    let n = unsafe { vsnprintf(buf.as_mut_ptr().cast(), buf.len(), fmt, ap) };
    let end = usize::try_from(n).unwrap_or(0).min(buf.len() - 1);
    String::from_utf8_lossy(&buf[..end]).trim_end().to_owned()
}

#[cfg(target_arch = "x86_64")]
unsafe extern "C" fn print_libbpf(
    _level: libbpf_sys::libbpf_print_level,
    fmt: *const c_char,
    ap: *mut libbpf_sys::__va_list_tag,
) -> c_int {
    // SAFETY: libbpf hands its format and arguments, used once here.
    let msg = unsafe { format_message(fmt, ap.cast()) };
    tracing::debug!(target: "libbpf", "{msg}");
    0
}

#[cfg(target_arch = "x86_64")]
unsafe extern "C" fn print_libxdp(
    _level: xdp::libxdp_print_level,
    fmt: *const c_char,
    ap: *mut xdp::__va_list_tag,
) -> c_int {
    // SAFETY: libxdp hands its format and arguments, used once here.
    let msg = unsafe { format_message(fmt, ap.cast()) };
    tracing::debug!(target: "libxdp", "{msg}");
    0
}
