//! # metaroce-proto: the sans-IO protocol core of MetaRoCE
//!
//! MetaRoCE is an RDMA transport for lossy Ethernet: verbs semantics (RC and
//! UD) over UDP, sprayed over several paths, with selective retransmission.
//! The normative specification is `Documentation/metaroce/` in this
//! repository; clause numbers such as `MR-5.3.2` in comments cite it.
//!
//! This crate does no I/O and reads no clock (MR-10.1.1; packet views are
//! total, MR-10.1.2). The same source files build
//! with cargo on the host and inside `rdma_metaroce.ko` (as a `#[path]`
//! module), so the library uses only `core`, no heap, no floating point and
//! no `unsafe` (MR-10.2.1).
//!
//! ## How to drive it
//!
//! One [`Connection`] holds the transport state of one RC queue pair.
//! The caller (kernel driver, simulator, test) owns sockets, timers and
//! memory registration, and loops:
//!
//! 1. **Input.** For every UDP datagram addressed to the MetaRoCE port and
//!    demultiplexed to this QP, call [`Connection::handle_datagram`] with the
//!    current [`Instant`], the UDP source port, whether the IP ECN field was
//!    CE, the bytes after the UDP header, and a [`Memory`] implementation.
//!    The core parses and validates the packet and decides everything; it
//!    calls back into `Memory` only to move bytes (place at `(rkey, va)`,
//!    read at `(rkey, va)`, place into a receive WQE, run an atomic), where
//!    the caller performs its memory-region lookup and key checks.
//! 2. **Posting.** [`Connection::post_send`] with a [`SendWr`] and
//!    [`Connection::post_recv`] with a [`RecvWr`]; each carries the caller's
//!    `wr_id`.
//! 3. **Output.** Call [`Connection::poll_transmit`] with a buffer until it
//!    returns `None`; each [`Transmit`] says how many bytes of the buffer form
//!    a packet (everything after the UDP header), which UDP source port to
//!    use, and the ECN codepoint to set.
//! 4. **Completions.** Drain [`Connection::poll_completion`]; completions
//!    carry the `wr_id` and a [`WcStatus`] that maps onto `ib_wc_status`.
//! 5. **Timers.** Arm a timer for [`Connection::poll_timeout`]; when it
//!    fires call [`Connection::handle_timeout`], then poll again (step 3).
//!
//! ```
//! use metaroce_proto::*;
//! use std::collections::HashMap;
//!
//! /// Toy memory: local buffers and receive buffers by wr_id.
//! #[derive(Default)]
//! struct Mem { local: HashMap<u64, Vec<u8>>, recv: HashMap<u64, Vec<u8>> }
//! impl Responder for Mem {
//!     fn write_remote(&mut self, _: u32, _: u64, _: &[u8]) -> Result<(), MemError> { Err(MemError::Access) }
//!     fn read_remote(&mut self, _: u32, _: u64, _: &mut [u8]) -> Result<(), MemError> { Err(MemError::Access) }
//!     fn atomic_remote(&mut self, _: u32, _: u64, _: AtomicOp) -> Result<u64, MemError> { Err(MemError::Access) }
//!     fn write_recv(&mut self, wr: u64, off: u32, d: &[u8]) -> Result<(), MemError> {
//!         let b = self.recv.get_mut(&wr).ok_or(MemError::Access)?;
//!         b.get_mut(off as usize..off as usize + d.len()).ok_or(MemError::Access)?.copy_from_slice(d);
//!         Ok(())
//!     }
//!     fn invalidate(&mut self, _: u32) -> Result<(), MemError> { Ok(()) }
//! }
//! impl LocalMemory for Mem {
//!     fn read_local(&mut self, wr: u64, off: u32, out: &mut [u8]) -> Result<(), MemError> {
//!         let b = self.local.get(&wr).ok_or(MemError::Access)?;
//!         out.copy_from_slice(b.get(off as usize..off as usize + out.len()).ok_or(MemError::Access)?);
//!         Ok(())
//!     }
//!     fn write_local(&mut self, _: u64, _: u32, _: &[u8]) -> Result<(), MemError> { Ok(()) }
//! }
//!
//! let mut a = Connection::new(Config::test_pair(1, 2));
//! let mut b = Connection::new(Config::test_pair(2, 1));
//! let (mut ma, mut mb) = (Mem::default(), Mem::default());
//! ma.local.insert(7, b"hello, metaroce".to_vec());
//! mb.recv.insert(9, vec![0; 64]);
//! b.post_recv(RecvWr { wr_id: 9, len: 64 }).unwrap();
//! a.post_send(SendWr::send(7, 15)).unwrap();
//! let mut buf = vec![0u8; a.max_packet_len()];
//! let mut now = Instant(0);
//! // Shuttle packets both ways (a perfect network) until both are idle.
//! for _ in 0..4 {
//!     while let Some(t) = a.poll_transmit(now, &mut buf, &mut ma) {
//!         b.handle_datagram(now, t.src_port, false, &buf[..t.len], &mut mb);
//!     }
//!     while let Some(t) = b.poll_transmit(now, &mut buf, &mut mb) {
//!         a.handle_datagram(now, t.src_port, false, &buf[..t.len], &mut ma);
//!     }
//!     now = now + Duration::from_micros(1);
//! }
//! let c = a.poll_completion().unwrap();
//! assert_eq!((c.wr_id, c.status), (7, WcStatus::Success));
//! let r = b.poll_completion().unwrap();
//! assert_eq!((r.wr_id, r.byte_len, r.opcode), (9, 15, WcOpcode::Recv));
//! assert_eq!(&mb.recv[&9][..15], b"hello, metaroce");
//! ```
//!
//! The simulator in `tests/sim/` drives many connections through a virtual
//! network the same way.

#![cfg_attr(not(any(test, CONFIG_RUST)), no_std)]
#![forbid(unsafe_code)]

pub mod cc;
pub mod connection;
pub mod sack;
pub mod selftest;
pub mod time;
pub mod ud;
pub mod verbs;
pub mod wire;

pub use self::cc::CcConfig;
pub use self::connection::{
    qpn_derived_tsn, Config, Connection, PathInfo, PathStatus, QpState, Recovery, Stats, MAX_PATHS,
    WINDOW,
};
pub use self::time::{Duration, Instant};
pub use self::verbs::{
    rnr_timer_code_for_verbs, verbs_rnr_timer_ns, AtomicOp, Completion, Ecn, Flush, LocalMemory, MemError,
    Memory, PostError, RecvWr, Responder, SendWr, Transmit, WcOpcode, WcStatus, WrOpcode, WR_FENCE,
    WR_SIGNALED, WR_SOLICITED,
};

/// The default MetaRoCE UDP destination port (MR-2.3.1). Deliberately not
/// 4791 (RoCEv2), so both can run side by side.
pub const UDP_PORT: u16 = 4792;
