//! What an [`XdpPort`](crate::XdpPort) is opened with: interface, queues, XDP
//! attach mode, AF_XDP bind mode, UMEM and ring sizes, the owned ports. Plain
//! data with defaults that work on veth; validation happens in `XdpPort::open`.

/// How the XDP program is attached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[doc(alias = "XDP_FLAGS_DRV_MODE")]
#[doc(alias = "XDP_FLAGS_SKB_MODE")]
pub enum XdpMode {
    /// Native (driver) mode, falling back to generic when the driver lacks it.
    #[default]
    Auto,
    /// Native (driver) mode only.
    Native,
    /// Generic (skb) mode: works on every device, slower.
    Generic,
}

impl XdpMode {
    /// The modes to try, in order, to attach in this one.
    pub fn attempts(self) -> &'static [XdpMode] {
        match self {
            XdpMode::Auto => &[XdpMode::Native, XdpMode::Generic],
            XdpMode::Native => &[XdpMode::Native],
            XdpMode::Generic => &[XdpMode::Generic],
        }
    }
}

/// How the XDP program is held on the interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[doc(alias = "bpf_link")]
pub enum XdpAttach {
    /// Through a bpf_link only this process holds: the kernel detaches the
    /// program when the process ends, however it ends (`kill -9` too), so a
    /// crash leaves the interface as it was. Needs Linux >= 5.9 and no
    /// other XDP program on the interface.
    #[default]
    Link,
    /// Through netlink, by libxdp: the program stays attached until it is
    /// detached, also after a crash (owned traffic then reaches the kernel,
    /// as the program's redirect falls back to `XDP_PASS` once the sockets
    /// are gone). With bpffs mounted, libxdp's dispatcher runs other XDP
    /// programs beside steer's.
    Netlink,
}

/// How the AF_XDP sockets are bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[doc(alias = "XDP_COPY")]
#[doc(alias = "XDP_ZEROCOPY")]
pub enum BindMode {
    /// Zero-copy, falling back to copy mode when the driver lacks it (veth).
    #[default]
    Auto,
    /// Copy mode only.
    Copy,
    /// Zero-copy only.
    ZeroCopy,
}

/// Whether packets may span several UMEM frames (multi-buffer AF_XDP:
/// `xdp.frags`, `XDP_USE_SG`, descriptors chained by `XDP_PKT_CONTD`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[doc(alias = "XDP_USE_SG")]
#[doc(alias = "XDP_PKT_CONTD")]
pub enum MultiBuffer {
    /// On when the interface's MTU does not fit one frame, off otherwise.
    #[default]
    Auto,
    /// Always on (the driver must support it).
    On,
    /// Always off: an interface whose MTU does not fit one frame is refused.
    Off,
}

/// Bytes of a frame the kernel keeps in front of a received packet
/// (`XDP_PACKET_HEADROOM`).
pub const XDP_PACKET_HEADROOM: u32 = 256;

/// Ethernet header with one VLAN tag: what a frame holds beyond the MTU.
pub const L2_OVERHEAD: u32 = 18;

/// The largest MTU whose packets fit one frame of `frame_size` bytes.
///
/// ```
/// assert_eq!(steer_xdp::config::max_single_frame_mtu(2048), 1774);
/// assert_eq!(steer_xdp::config::max_single_frame_mtu(4096), 3822);
/// ```
pub fn max_single_frame_mtu(frame_size: u32) -> u32 {
    frame_size.saturating_sub(XDP_PACKET_HEADROOM + L2_OVERHEAD)
}

/// The mode the data path actually runs in, after any fallback.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ActiveModes {
    /// The XDP attach mode in use (never `Auto`).
    pub xdp: XdpMode,
    /// The bind mode in use (never `Auto`).
    pub bind: BindMode,
    /// Whether the UMEM sits on huge pages.
    pub huge_pages: bool,
    /// Whether the sockets are bound with `XDP_USE_SG` (packets may span
    /// several frames).
    pub multi_buffer: bool,
}

/// An L4 protocol the steer program can own ports of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Proto {
    /// UDP (IPPROTO_UDP).
    Udp,
    /// TCP (IPPROTO_TCP).
    Tcp,
}

impl Proto {
    /// The IP protocol number.
    pub fn number(self) -> u8 {
        match self {
            Proto::Udp => steer_core::packet::ip_proto::UDP,
            Proto::Tcp => steer_core::packet::ip_proto::TCP,
        }
    }
}

/// Busy-poll socket options (`SO_PREFER_BUSY_POLL`, `SO_BUSY_POLL`, `SO_BUSY_POLL_BUDGET`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[doc(alias = "SO_BUSY_POLL")]
#[doc(alias = "SO_PREFER_BUSY_POLL")]
pub struct BusyPoll {
    /// Busy-poll time in microseconds.
    pub usecs: u32,
    /// Packets per busy-poll round.
    pub budget: u32,
}

/// Configuration of an [`XdpPort`](crate::XdpPort).
#[derive(Debug, Clone)]
pub struct PortConfig {
    /// Interface name.
    pub interface: String,
    /// Rx queues to open a socket on; `None` = all of them.
    pub queues: Option<Vec<u32>>,
    /// XDP attach mode.
    pub xdp_mode: XdpMode,
    /// How the program is held (bpf_link or netlink).
    pub attach: XdpAttach,
    /// AF_XDP bind mode.
    pub bind_mode: BindMode,
    /// Set `XDP_USE_NEED_WAKEUP` (recommended; copy mode on veth needs tx kicks anyway).
    pub need_wakeup: bool,
    /// Frames in the shared UMEM (split evenly between the queues' free pools).
    pub frame_count: u32,
    /// Frame size in bytes (2048 or 4096).
    pub frame_size: u32,
    /// Multi-buffer packets (default [`MultiBuffer::Auto`]: on when the
    /// interface's MTU does not fit one frame).
    pub multi_buffer: MultiBuffer,
    /// Size of each rx, tx, fill and completion ring (power of two).
    pub ring_size: u32,
    /// Try huge pages for the UMEM (falls back to normal pages).
    pub huge_pages: bool,
    /// Replace a steer program left attached by a crashed run that has no
    /// owner record (an older steer's) instead of failing. A program whose
    /// recorded owner is gone is always replaced.
    pub replace_stale: bool,
    /// Traffic steer owns from the start (more can be added at run time).
    pub owned: Vec<(Proto, u16)>,
    /// Busy-poll options for every socket.
    pub busy_poll: Option<BusyPoll>,
}

impl PortConfig {
    /// Defaults for `interface`: all queues, auto modes, 4096 frames of 2048 bytes, rings of 1024.
    pub fn new(interface: impl Into<String>) -> Self {
        PortConfig {
            interface: interface.into(),
            queues: None,
            xdp_mode: XdpMode::Auto,
            attach: XdpAttach::Link,
            bind_mode: BindMode::Auto,
            need_wakeup: true,
            frame_count: 4096,
            frame_size: 2048,
            multi_buffer: MultiBuffer::Auto,
            ring_size: 1024,
            huge_pages: false,
            replace_stale: false,
            owned: Vec::new(),
            busy_poll: None,
        }
    }

    /// Own traffic to `port` of `proto`.
    pub fn own(mut self, proto: Proto, port: u16) -> Self {
        self.owned.push((proto, port));
        self
    }

    /// Open only these rx queues.
    pub fn queues(mut self, queues: impl IntoIterator<Item = u32>) -> Self {
        self.queues = Some(queues.into_iter().collect());
        self
    }

    /// XDP attach mode.
    pub fn xdp_mode(mut self, mode: XdpMode) -> Self {
        self.xdp_mode = mode;
        self
    }

    /// How the program is held (default [`XdpAttach::Link`]).
    pub fn attach(mut self, attach: XdpAttach) -> Self {
        self.attach = attach;
        self
    }

    /// AF_XDP bind mode.
    pub fn bind_mode(mut self, mode: BindMode) -> Self {
        self.bind_mode = mode;
        self
    }

    /// Frame count and ring size.
    pub fn frames(mut self, frame_count: u32, ring_size: u32) -> Self {
        self.frame_count = frame_count;
        self.ring_size = ring_size;
        self
    }

    /// Frame size in bytes (2048 or 4096: a power of two no larger than a page).
    pub fn frame_size(mut self, bytes: u32) -> Self {
        self.frame_size = bytes;
        self
    }

    /// Multi-buffer packets (see [`MultiBuffer`]).
    pub fn multi_buffer(mut self, mode: MultiBuffer) -> Self {
        self.multi_buffer = mode;
        self
    }

    /// Ask for huge pages (falls back when none are configured).
    pub fn huge_pages(mut self, on: bool) -> Self {
        self.huge_pages = on;
        self
    }

    /// Replace a steer program without an owner record instead of failing
    /// with `StaleProgram`.
    pub fn replace_stale(mut self, on: bool) -> Self {
        self.replace_stale = on;
        self
    }

    /// Busy-poll options for every socket.
    pub fn busy_poll(mut self, usecs: u32, budget: u32) -> Self {
        self.busy_poll = Some(BusyPoll { usecs, budget });
        self
    }
}
