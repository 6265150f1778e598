//! Connection parameter block exchanged out of band at setup (MR-7.1.3).
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |      Magic 0x4D52 ("MR")      |    Version    |  Path Count   |  0
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |   Reserved    |                 QPN (24 bits)                 |  4
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                     Initial TSN (sender's)                    |  8
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |              MTU              |        UDP Port               | 12
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! | Max RD Atomic |     Flags     |           Reserved            | 16
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                           Reserved                            | 20
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```

use super::{header_view, FieldIo, WireError, MRH_VERSION};

/// Magic number of a parameter block ("MR").
pub const PARAMS_MAGIC: u16 = 0x4D52;
/// Smallest MetaRoCE MTU (payload bytes per packet, MR-2.6.1).
pub const MIN_MTU: u16 = 256;
/// Largest MetaRoCE MTU (MR-2.6.1): what is left of a 64 KiB IP datagram once
/// IPv6, UDP and the largest MetaRoCE headers are counted, rounded down.
pub const MAX_MTU: u16 = 65000;
/// Largest `Max RD Atomic` a block may carry (MR-7.1.3): READ/atomic requests
/// outstanding per QP (MR-4.4.2).
pub const MAX_RD_ATOMIC: u8 = 32;
/// Flag: the endpoint sends credit hints (MR-8.4.1).
pub const PARAMS_FLAG_CREDIT: u8 = 0x01;

header_view! {
    /// Zero-copy view of the 24-byte connection parameter block.
    ParamsBlock, 24, {
        /// Magic.
        magic / set_magic: u16 = 0;
        /// Protocol version.
        version / set_version: u8 = 2;
        /// Paths the sender of the block will use.
        paths / set_paths: u8 = 3;
        /// QPN word (low 24 bits).
        qpn_word / set_qpn_word: u32 = 4;
        /// Initial TSN of the block sender's transmit direction.
        initial_tsn / set_initial_tsn: u32 = 8;
        /// Largest payload per packet the sender accepts and sends.
        mtu / set_mtu: u16 = 12;
        /// UDP destination port the sender listens on.
        udp_port / set_udp_port: u16 = 14;
        /// READ/atomic requests the sender accepts outstanding.
        max_rd_atomic / set_max_rd_atomic: u8 = 16;
        /// Flags.
        flags / set_flags: u8 = 17;
    }
}

/// Parsed connection parameters of one endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnParams {
    /// Protocol version spoken.
    pub version: u8,
    /// Path count (1..=8).
    pub paths: u8,
    /// QPN.
    pub qpn: u32,
    /// Initial TSN this endpoint sends with.
    pub initial_tsn: u32,
    /// MTU ([`MIN_MTU`]..=[`MAX_MTU`]).
    pub mtu: u16,
    /// UDP port.
    pub udp_port: u16,
    /// Responder resources (1..=16).
    pub max_rd_atomic: u8,
    /// `PARAMS_FLAG_*`.
    pub flags: u8,
}

impl ConnParams {
    /// Encoded length.
    pub const LEN: usize = 24;

    /// Parses and validates a block (MR-7.1.3).
    pub fn parse<T: AsRef<[u8]>>(b: &ParamsBlock<T>) -> Result<Self, WireError> {
        b.check_len()?;
        if b.magic() != PARAMS_MAGIC {
            return Err(WireError::Malformed);
        }
        let p = ConnParams {
            version: b.version(),
            paths: b.paths(),
            qpn: b.qpn_word() & 0x00ff_ffff,
            initial_tsn: b.initial_tsn(),
            mtu: b.mtu(),
            udp_port: b.udp_port(),
            max_rd_atomic: b.max_rd_atomic(),
            flags: b.flags(),
        };
        if p.version != MRH_VERSION {
            return Err(WireError::BadVersion);
        }
        if !(1..=8).contains(&p.paths)
            || !(MIN_MTU..=MAX_MTU).contains(&p.mtu)
            || p.udp_port == 0
            || !(1..=MAX_RD_ATOMIC).contains(&p.max_rd_atomic)
        {
            return Err(WireError::Malformed);
        }
        Ok(p)
    }

    /// Emits the block (reserved bytes zero).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        b: &mut ParamsBlock<T>,
    ) -> Result<(), WireError> {
        if b.check_len().is_err() {
            return Err(WireError::BufferTooSmall);
        }
        b.set_magic(PARAMS_MAGIC);
        b.set_version(self.version);
        b.set_paths(self.paths);
        b.set_qpn_word(self.qpn & 0x00ff_ffff);
        b.set_initial_tsn(self.initial_tsn);
        b.set_mtu(self.mtu);
        b.set_udp_port(self.udp_port);
        b.set_max_rd_atomic(self.max_rd_atomic);
        b.set_flags(self.flags);
        <u16 as FieldIo>::write(0, b.buffer.as_mut(), 18);
        <u32 as FieldIo>::write(0, b.buffer.as_mut(), 20);
        Ok(())
    }

    /// The values both ends use (MR-7.1.4): the smaller MTU and
    /// `max_rd_atomic`; each direction keeps its own path count.
    pub fn agree(local: &ConnParams, remote: &ConnParams) -> (u16, u8) {
        (
            local.mtu.min(remote.mtu),
            local.max_rd_atomic.min(remote.max_rd_atomic),
        )
    }
}
