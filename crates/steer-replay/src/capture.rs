//! pcap and pcapng captures, streamed (a capture is never held in memory
//! whole), as [`Frame`]s: each frame's bytes, its link type and its
//! absolute time.
//!
//! Both formats and every block type are read (pcap-parser, the rusticata
//! project's streaming parser); the blocks that carry no packet are
//! skipped. pcapng sections and interfaces are followed: a packet takes its
//! link type, time unit and time offset from the interface it names.
//!
//! Invariants, for any input:
//! - A frame's bytes are never longer than the capture length its block
//!   states (nor the block's own bytes: the padding is not part of it), so
//!   the frames together hold at most the input's bytes, 16 bytes of record
//!   header at least for each.
//! - A block larger than [`MAX_BLOCK`] is an error; the reader's buffer
//!   grows only while the input still has bytes for it.
//! - Time arithmetic saturates (a pcapng interface's unit and offset are
//!   the input's): no overflow, whatever the stamps.
//! - Every error is one line, and says after how many frames it came.

use std::io::Read;

use pcap_parser::pcapng::Block;
pub use pcap_parser::Linktype;
use pcap_parser::{create_reader, PcapBlockOwned, PcapError};

use crate::link::UnsupportedLink;

/// The reader's buffer to start with; grown for larger blocks.
pub const BUFFER: usize = 1 << 16;
/// The largest block read (a frame of a capture is at most 256 KiB).
pub const MAX_BLOCK: usize = 1 << 28;

/// One captured frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame<'a> {
    /// When it was captured, in ns since the Unix epoch (saturated); `None`
    /// for a pcapng simple packet block, which has no time.
    pub time_ns: Option<u64>,
    /// The link layer `data` starts with.
    pub link: Linktype,
    /// The frame's bytes as captured (at most `caplen`).
    pub data: &'a [u8],
    /// The capture length its block states.
    pub caplen: u32,
    /// The frame's length on the wire, as its block states.
    pub orig_len: u32,
}

/// Why a capture cannot be read further.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CaptureError {
    /// The input starts with neither a pcap header nor a pcapng section.
    #[error("not a pcap or pcapng capture ({0}); write one with `tcpdump -w FILE`")]
    NotACapture(String),
    /// A frame's link layer is not one the replay reads.
    #[error(transparent)]
    Link(#[from] UnsupportedLink),
    /// A pcapng packet names an interface no block described.
    #[error("a packet names interface {interface} that no block described")]
    UnknownInterface {
        /// The interface number.
        interface: u32,
    },
    /// A block larger than [`MAX_BLOCK`].
    #[error("a block after {frames} frames is larger than {} MiB", MAX_BLOCK >> 20)]
    BlockTooLarge {
        /// Frames read before it.
        frames: u64,
    },
    /// The input ends inside a block.
    #[error("the capture is cut short inside a block after {frames} frames")]
    Truncated {
        /// Frames read before it.
        frames: u64,
    },
    /// Reading the input failed.
    #[error("cannot read the capture after {frames} frames")]
    Read {
        /// Frames read before it.
        frames: u64,
    },
    /// A block that does not parse.
    #[error("the capture is damaged after {frames} frames ({detail})")]
    Damaged {
        /// Frames read before it.
        frames: u64,
        /// What the parser said.
        detail: String,
    },
}

/// Why [`read_frames`] stopped early.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadError<E> {
    /// The capture could not be read further.
    Capture(CaptureError),
    /// The caller's function returned this error.
    Stopped(E),
}

impl<E> From<CaptureError> for ReadError<E> {
    fn from(e: CaptureError) -> Self {
        Self::Capture(e)
    }
}

/// One pcapng interface: link type and time unit.
#[derive(Debug, Clone, Copy)]
struct Interface {
    link: Linktype,
    /// Timestamp units per second.
    resolution: u64,
    /// Seconds added to every timestamp.
    offset: i64,
}

/// A pcap-parser error in a few words (its own `Debug` may print a whole
/// block's bytes).
fn describe<I>(e: &PcapError<I>) -> String {
    match e {
        PcapError::Eof => "end of input".into(),
        PcapError::BufferTooSmall => "block larger than the buffer".into(),
        PcapError::UnexpectedEof => "unexpected end of input".into(),
        PcapError::ReadError => "read error".into(),
        PcapError::Incomplete(_) => "incomplete block".into(),
        PcapError::HeaderNotRecognized => "header not recognized".into(),
        PcapError::NomError(_, kind) | PcapError::OwnedNomError(_, kind) => {
            format!("bad block: {}", kind.description())
        }
    }
}

/// ns since the epoch of a classic pcap stamp (`frac` in µs, or ns when
/// `nanos`).
fn pcap_ns(secs: u32, frac: u32, nanos: bool) -> u64 {
    let frac = if nanos {
        u64::from(frac)
    } else {
        u64::from(frac) * 1_000
    };
    // At most (2^32 - 1) * 10^9 + (2^32 - 1) * 10^3: fits a u64.
    u64::from(secs) * 1_000_000_000 + frac
}

/// Units per second of a pcapng `if_tsresol` byte: 10^n, or 2^n with the
/// top bit set; a unit a u64 cannot hold reads as the default, µs.
/// (pcap-parser's own decoding refuses every power of two: it compares the
/// byte, top bit included, with 63.)
fn ts_resolution(tsresol: u8) -> u64 {
    let n = u32::from(tsresol & 0x7f);
    let unit = if tsresol & 0x80 == 0 {
        10u64.checked_pow(n)
    } else {
        1u64.checked_shl(n)
    };
    unit.unwrap_or(1_000_000)
}

/// ns since the epoch of a pcapng stamp: `ts` units of 1/`resolution` s,
/// plus `offset` s; saturated to 0..=u64::MAX.
fn pcapng_ns(ts: u64, resolution: u64, offset: i64) -> u64 {
    let res = u128::from(resolution.max(1));
    let ts = u128::from(ts);
    // ts / res < 2^64: the sum stays far inside an i128.
    let secs = (ts / res) as i128 + i128::from(offset);
    let secs = u128::try_from(secs).unwrap_or(0);
    // secs < 2^65, frac < 2^64: both products fit a u128.
    let ns = secs * 1_000_000_000 + (ts % res) * 1_000_000_000 / res;
    u64::try_from(ns).unwrap_or(u64::MAX)
}

/// The length of the pcapng block at the start of `data` if it is less
/// than the 12 bytes of a block's type and two lengths (`be`: the
/// section's byte order). pcap-parser takes `length - 12` bytes of such a
/// block without checking (a process information block claims a 4-byte
/// header): an overflow, which panics in a debug build.
fn short_block(data: &[u8], be: bool) -> Option<u32> {
    let len: [u8; 4] = data.get(4..8)?.try_into().ok()?;
    let len = if be {
        u32::from_be_bytes(len)
    } else {
        u32::from_le_bytes(len)
    };
    (len < 12).then_some(len)
}

/// Reads the capture `input` (pcap or pcapng, told by its first bytes),
/// calling `each` for every frame in capture order, until the input ends
/// or `each` returns an error. Returns how many frames were read.
///
/// ```
/// use steer_replay::capture::{read_frames, ReadError};
/// let mut pcap = vec![0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0];
/// pcap.extend_from_slice(&[0; 8]); // time zone, accuracy
/// pcap.extend_from_slice(&65535u32.to_le_bytes()); // snap length
/// pcap.extend_from_slice(&1u32.to_le_bytes()); // Ethernet
/// for (secs, usecs) in [(1u32, 500u32), (2, 0)] {
///     pcap.extend_from_slice(&secs.to_le_bytes());
///     pcap.extend_from_slice(&usecs.to_le_bytes());
///     pcap.extend_from_slice(&[3, 0, 0, 0, 3, 0, 0, 0, 0xaa, 0xbb, 0xcc]);
/// }
/// let mut times = Vec::new();
/// let n = read_frames(pcap.as_slice(), |f| {
///     assert_eq!(f.data, &[0xaa, 0xbb, 0xcc]);
///     times.push(f.time_ns.unwrap());
///     Ok::<(), ()>(())
/// })
/// .unwrap();
/// assert_eq!((n, times), (2, vec![1_000_500_000, 2_000_000_000]));
/// assert!(matches!(
///     read_frames(&b"hello"[..], |_| Ok::<(), ()>(())),
///     Err(ReadError::Capture(_))
/// ));
/// ```
pub fn read_frames<R, E>(
    input: R,
    each: impl FnMut(Frame<'_>) -> Result<(), E>,
) -> Result<u64, ReadError<E>>
where
    R: Read + Send,
{
    read_frames_with(input, BUFFER, each)
}

/// [`read_frames`] with a first buffer of `buffer` bytes (the capture's
/// header must fit; larger blocks grow it). For tests and fuzzing, which
/// want the growing exercised on small inputs.
#[doc(hidden)]
pub fn read_frames_with<R, E>(
    input: R,
    buffer: usize,
    mut each: impl FnMut(Frame<'_>) -> Result<(), E>,
) -> Result<u64, ReadError<E>>
where
    R: Read + Send,
{
    let mut reader =
        create_reader(buffer, input).map_err(|e| CaptureError::NotACapture(describe(&e)))?;
    let mut size = buffer;
    let mut frames = 0u64;
    let mut legacy: Option<(Linktype, bool)> = None;
    let mut interfaces: Vec<Interface> = Vec::new();
    // pcapng: the section's byte order, once its header block is read.
    let mut section_be: Option<bool> = None;
    loop {
        if let Some(be) = section_be {
            if let Some(len) = short_block(reader.data(), be) {
                return Err(CaptureError::Damaged {
                    frames,
                    detail: format!("a block of {len} bytes, shorter than its own header"),
                }
                .into());
            }
        }
        let frame = match reader.next() {
            Ok((offset, block)) => {
                let frame = match block {
                    PcapBlockOwned::LegacyHeader(h) => {
                        legacy = Some((h.network, h.is_nanosecond_precision()));
                        None
                    }
                    PcapBlockOwned::Legacy(b) => {
                        let (link, nanos) = legacy.unwrap_or((Linktype::ETHERNET, false));
                        let len = (b.caplen as usize).min(b.data.len());
                        Some(Frame {
                            time_ns: Some(pcap_ns(b.ts_sec, b.ts_usec, nanos)),
                            link,
                            data: &b.data[..len],
                            caplen: b.caplen,
                            orig_len: b.origlen,
                        })
                    }
                    PcapBlockOwned::NG(Block::SectionHeader(shb)) => {
                        section_be = Some(shb.big_endian());
                        interfaces.clear();
                        None
                    }
                    PcapBlockOwned::NG(Block::InterfaceDescription(idb)) => {
                        interfaces.push(Interface {
                            link: idb.linktype,
                            resolution: ts_resolution(idb.if_tsresol),
                            offset: idb.ts_offset(),
                        });
                        None
                    }
                    PcapBlockOwned::NG(Block::EnhancedPacket(epb)) => {
                        let Some(i) = interfaces.get(epb.if_id as usize).copied() else {
                            return Err(CaptureError::UnknownInterface {
                                interface: epb.if_id,
                            }
                            .into());
                        };
                        let ts = (u64::from(epb.ts_high) << 32) | u64::from(epb.ts_low);
                        Some(Frame {
                            time_ns: Some(pcapng_ns(ts, i.resolution, i.offset)),
                            link: i.link,
                            data: &epb.data[..(epb.caplen as usize).min(epb.data.len())],
                            caplen: epb.caplen,
                            orig_len: epb.origlen,
                        })
                    }
                    PcapBlockOwned::NG(Block::SimplePacket(spb)) => {
                        // No capture length stated: the block's bytes up
                        // to the original length, without the padding.
                        let data = &spb.data[..(spb.origlen as usize).min(spb.data.len())];
                        Some(Frame {
                            time_ns: None,
                            link: interfaces.first().map_or(Linktype::ETHERNET, |i| i.link),
                            data,
                            caplen: u32::try_from(data.len()).unwrap_or(u32::MAX),
                            orig_len: spb.origlen,
                        })
                    }
                    PcapBlockOwned::NG(_) => None,
                };
                if let Some(frame) = frame {
                    frames += 1;
                    each(frame).map_err(ReadError::Stopped)?;
                }
                offset
            }
            Err(PcapError::Eof) => return Ok(frames),
            Err(PcapError::Incomplete(_)) => {
                // The block's bytes fit the buffer: read more of them (a
                // read of 0 marks the input ended, and the next block is
                // then `UnexpectedEof`).
                reader.refill().map_err(|_| CaptureError::Read { frames })?;
                continue;
            }
            Err(PcapError::BufferTooSmall) => {
                if reader.data().len() < size {
                    // Room left after the unread bytes are moved to the
                    // front: read before growing (the input may end).
                    reader.refill().map_err(|_| CaptureError::Read { frames })?;
                } else {
                    size = size.saturating_mul(2);
                    if size > MAX_BLOCK || !reader.grow(size) {
                        return Err(CaptureError::BlockTooLarge { frames }.into());
                    }
                }
                continue;
            }
            Err(PcapError::UnexpectedEof) => return Err(CaptureError::Truncated { frames }.into()),
            Err(PcapError::ReadError) => return Err(CaptureError::Read { frames }.into()),
            Err(e) => {
                return Err(CaptureError::Damaged {
                    frames,
                    detail: describe(&e),
                }
                .into())
            }
        };
        reader.consume(frame);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pcapng section: SHB, one Ethernet IDB with `tsresol` and
    /// `tsoffset` options, then `blocks`.
    fn pcapng(tsresol: u8, tsoffset: i64, blocks: &[Vec<u8>]) -> Vec<u8> {
        let mut out = Vec::new();
        // SHB: type, length 28, byte-order magic, version 1.0, section length -1.
        out.extend_from_slice(&0x0A0D_0D0Au32.to_le_bytes());
        out.extend_from_slice(&28u32.to_le_bytes());
        out.extend_from_slice(&0x1A2B_3C4Du32.to_le_bytes());
        out.extend_from_slice(&1u16.to_le_bytes());
        out.extend_from_slice(&0u16.to_le_bytes());
        out.extend_from_slice(&(-1i64).to_le_bytes());
        out.extend_from_slice(&28u32.to_le_bytes());
        // IDB: link 1, snaplen 0, options if_tsresol (9), if_tsoffset (14), end.
        let mut opts = Vec::new();
        opts.extend_from_slice(&9u16.to_le_bytes());
        opts.extend_from_slice(&1u16.to_le_bytes());
        opts.extend_from_slice(&[tsresol, 0, 0, 0]);
        opts.extend_from_slice(&14u16.to_le_bytes());
        opts.extend_from_slice(&8u16.to_le_bytes());
        opts.extend_from_slice(&tsoffset.to_le_bytes());
        opts.extend_from_slice(&[0; 4]);
        let len = 20 + opts.len() as u32;
        out.extend_from_slice(&1u32.to_le_bytes());
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&1u16.to_le_bytes());
        out.extend_from_slice(&0u16.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&opts);
        out.extend_from_slice(&len.to_le_bytes());
        for b in blocks {
            out.extend_from_slice(b);
        }
        out
    }

    /// An enhanced packet block on interface 0.
    fn epb(ts: u64, data: &[u8]) -> Vec<u8> {
        let padded = data.len().div_ceil(4) * 4;
        let len = (32 + padded) as u32;
        let mut b = Vec::new();
        b.extend_from_slice(&6u32.to_le_bytes());
        b.extend_from_slice(&len.to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(&((ts >> 32) as u32).to_le_bytes());
        b.extend_from_slice(&(ts as u32).to_le_bytes());
        b.extend_from_slice(&(data.len() as u32).to_le_bytes());
        b.extend_from_slice(&(data.len() as u32).to_le_bytes());
        b.extend_from_slice(data);
        b.resize(28 + padded, 0);
        b.extend_from_slice(&len.to_le_bytes());
        b
    }

    /// A simple packet block of `data` (original length its length).
    fn spb(data: &[u8]) -> Vec<u8> {
        let padded = data.len().div_ceil(4) * 4;
        let len = (16 + padded) as u32;
        let mut b = Vec::new();
        b.extend_from_slice(&3u32.to_le_bytes());
        b.extend_from_slice(&len.to_le_bytes());
        b.extend_from_slice(&(data.len() as u32).to_le_bytes());
        b.extend_from_slice(data);
        b.resize(12 + padded, 0);
        b.extend_from_slice(&len.to_le_bytes());
        b
    }

    /// A frame's time and bytes.
    type Read = (Option<u64>, Vec<u8>);

    fn frames(input: &[u8], buffer: usize) -> Result<Vec<Read>, CaptureError> {
        let mut out = Vec::new();
        read_frames_with(input, buffer, |f| {
            assert!(f.data.len() <= f.caplen as usize);
            out.push((f.time_ns, f.data.to_vec()));
            Ok::<(), ()>(())
        })
        .map_err(|e| match e {
            ReadError::Capture(e) => e,
            ReadError::Stopped(()) => unreachable!(),
        })?;
        Ok(out)
    }

    #[test]
    fn time_units_decode() {
        assert_eq!(ts_resolution(6), 1_000_000);
        assert_eq!(ts_resolution(9), 1_000_000_000);
        assert_eq!(ts_resolution(19), 10_000_000_000_000_000_000);
        assert_eq!(ts_resolution(20), 1_000_000);
        assert_eq!(ts_resolution(0x80 | 10), 1024);
        assert_eq!(ts_resolution(0x80 | 63), 1 << 63);
        assert_eq!(ts_resolution(0x80 | 64), 1_000_000);
    }

    #[test]
    fn timestamp_arithmetic_saturates() {
        assert_eq!(
            pcap_ns(u32::MAX, u32::MAX, false),
            4_294_971_589_967_295_000
        );
        assert_eq!(pcapng_ns(1_500, 1_000, 0), 1_500_000_000);
        assert_eq!(pcapng_ns(1_500, 1_000, 2), 3_500_000_000);
        assert_eq!(pcapng_ns(1_500, 1_000, -5), 500_000_000);
        assert_eq!(pcapng_ns(u64::MAX, 1, i64::MAX), u64::MAX);
        assert_eq!(pcapng_ns(7, 1, i64::MIN), 0);
        assert_eq!(pcapng_ns(u64::MAX, 1, i64::MIN), u64::MAX);
        assert_eq!(pcapng_ns(u64::MAX, 0, 0), u64::MAX);
        assert_eq!(pcapng_ns(u64::MAX, 1 << 63, 0), 1_999_999_999);
    }

    /// The reader had `(ts / res) as i64 + offset` and `secs * 10^9`: a
    /// stamp of 2^64 - 1 units of 1 s, or an offset near i64::MAX,
    /// overflowed (a panic in a debug build, a wrong time in release).
    #[test]
    fn extreme_pcapng_stamps_and_offsets_read() {
        let frame = [0xab; 5];
        for (resol, offset, ts, want) in [
            (0, i64::MAX, 7, u64::MAX),
            (0, 0, u64::MAX, u64::MAX),
            (0, i64::MIN, 7, 0),
            (0x80 | 63, 0, u64::MAX, 1_999_999_999),
            (6, 1, 2_000_001, 3_000_001_000),
            (0x80 | 10, 0, 3 * 1024 + 512, 3_500_000_000),
        ] {
            let input = pcapng(resol, offset, &[epb(ts, &frame)]);
            let got = frames(&input, BUFFER).unwrap();
            assert_eq!(got, vec![(Some(want), frame.to_vec())], "{resol} {offset}");
        }
    }

    /// A simple packet block's bytes end at its original length: the
    /// padding after them is not part of the frame (it was).
    #[test]
    fn simple_packets_drop_their_padding() {
        let input = pcapng(6, 0, &[spb(&[1, 2, 3, 4, 5])]);
        assert_eq!(
            frames(&input, BUFFER).unwrap(),
            vec![(None, vec![1, 2, 3, 4, 5])]
        );
    }

    /// Blocks larger than the buffer grow it (they failed as "damaged"),
    /// and a capture cut inside a block says so.
    #[test]
    fn large_blocks_grow_the_buffer_and_cut_captures_are_named() {
        let big = vec![0x5a; 3000];
        let input = pcapng(6, 0, &[epb(1, &big), epb(2, &[1, 2, 3]), epb(3, &big)]);
        let got = frames(&input, 512).unwrap();
        assert_eq!(got.len(), 3);
        assert_eq!(got[2], (Some(3_000), big.clone()));
        let cut = &input[..input.len() - 10];
        assert_eq!(frames(cut, 512), Err(CaptureError::Truncated { frames: 2 }));
        assert_eq!(
            frames(cut, BUFFER),
            Err(CaptureError::Truncated { frames: 2 })
        );
    }

    /// Found by the fuzz target `pcap`: a process information block of 9
    /// bytes after the section header made pcap-parser subtract 12 from 9.
    #[test]
    fn a_block_shorter_than_its_header_is_damaged() {
        let input = [
            10, 13, 13, 10, 28, 0, 0, 0, 77, 60, 43, 26, 1, 0, 250, 255, 255, 255, 255, 255, 255,
            255, 255, 255, 28, 0, 0, 0, 1, 0, 0, 128, 9, 0, 0, 0, 53, 64, 0,
        ];
        for buffer in [512, BUFFER] {
            let e = frames(&input, buffer).unwrap_err();
            assert!(
                matches!(&e, CaptureError::Damaged { frames: 0, detail } if detail.contains("9 bytes")),
                "{e}"
            );
        }
        // Big-endian sections too.
        let mut be = vec![
            10, 13, 13, 10, 0, 0, 0, 28, 0x1a, 0x2b, 0x3c, 0x4d, 0, 1, 0, 0,
        ];
        be.extend_from_slice(&[255; 8]);
        be.extend_from_slice(&[0, 0, 0, 28]);
        be.extend_from_slice(&[0x80, 0, 0, 1, 0, 0, 0, 4, 0, 0, 0, 4]);
        let e = frames(&be, BUFFER).unwrap_err();
        assert!(matches!(e, CaptureError::Damaged { frames: 0, .. }), "{e}");
    }

    #[test]
    fn damaged_and_foreign_inputs_are_one_line_errors() {
        let mut bad_if = pcapng(6, 0, &[epb(1, &[1])]);
        let at = bad_if.len() - 28;
        bad_if[at..at + 4].copy_from_slice(&3u32.to_le_bytes());
        for (input, want) in [
            (b"GET / HTTP/1.1\r\n\r\n".to_vec(), "not a pcap"),
            (bad_if, "interface 3"),
        ] {
            let e = frames(&input, BUFFER).unwrap_err().to_string();
            assert!(e.contains(want) && !e.contains('\n'), "{e}");
        }
    }
}
