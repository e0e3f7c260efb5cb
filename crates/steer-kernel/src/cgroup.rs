//! Where the UDP in-kernel recorder attaches by default: the root of the
//! cgroup v2 hierarchy, read from the mount table (`/sys/fs/cgroup` on a
//! unified host, `/sys/fs/cgroup/unified` on a hybrid one). Owns nothing but
//! the parse; a host without cgroup v2 mounted gets `None` and a message.

use std::path::PathBuf;

/// The first cgroup2 mount point in `/proc/self/mounts`.
pub(crate) fn cgroup2_root() -> Option<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
    cgroup2_in(&mounts)
}

/// The first cgroup2 mount point of a mount table in the format of
/// `/proc/self/mounts` (octal escapes in the path decoded).
fn cgroup2_in(mounts: &str) -> Option<PathBuf> {
    mounts.lines().find_map(|line| {
        let mut fields = line.split_whitespace();
        let (_dev, path, fstype) = (fields.next()?, fields.next()?, fields.next()?);
        (fstype == "cgroup2").then(|| PathBuf::from(unescape(path)))
    })
}

/// Decodes the kernel's `\ooo` escapes (space, tab, newline, backslash).
fn unescape(path: &str) -> String {
    let b = path.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match (b[i], octal) {
            (b'\\', Some(d)) => {
                let v = d.iter().fold(0u32, |v, c| v * 8 + u32::from(c - b'0'));
                out.push(u8::try_from(v).unwrap_or(b'?'));
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_cgroup2_mount_is_the_root_on_unified_and_hybrid_hosts() {
        let hybrid = "tmpfs /sys/fs/cgroup tmpfs rw 0 0\n\
                      cgroup /sys/fs/cgroup/cpu cgroup rw,cpu 0 0\n\
                      cgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0\n";
        assert_eq!(
            cgroup2_in(hybrid),
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
        let unified = "cgroup2 /sys/fs/cgroup cgroup2 rw,nsdelegate 0 0\n";
        assert_eq!(cgroup2_in(unified), Some(PathBuf::from("/sys/fs/cgroup")));
        assert_eq!(cgroup2_in("proc /proc proc rw 0 0\n"), None);
        assert_eq!(cgroup2_in(""), None);
        // Bad lines are skipped, escapes decoded.
        let odd = "short\ncgroup2 /mnt/my\\040cg cgroup2 rw 0 0\n";
        assert_eq!(cgroup2_in(odd), Some(PathBuf::from("/mnt/my cg")));
    }
}
