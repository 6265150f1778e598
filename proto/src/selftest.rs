//! A self-contained loopback self-test, callable from a KUnit test in the
//! kernel module and from host tests (MR-10.4.1).
//!
//! It uses no heap and little stack (the two connections are passed in by
//! the caller, who allocates them on the heap), runs a requester and a
//! responder against small fixed memories, drops one packet in seven in each
//! direction, and checks completions, data and exactly-once atomics.

use super::connection::{Config, Connection};
use super::time::Instant;
use super::verbs::{
    AtomicOp, LocalMemory, MemError, RecvWr, Responder, SendWr, WcOpcode, WcStatus,
};

const REGION: usize = 512;
const RKEY: u32 = 0x5EED;
const BASE: u64 = 0x10_0000;

/// Fixed-size memory for the self-test.
struct Mem {
    region: [u8; REGION],
    local: [[u8; 300]; 4],
    recv: [u8; 300],
    atomics: u32,
}

impl Mem {
    const fn new() -> Self {
        Mem {
            region: [0; REGION],
            local: [[0; 300]; 4],
            recv: [0; 300],
            atomics: 0,
        }
    }
    fn range(&mut self, rkey: u32, va: u64, len: usize) -> Result<&mut [u8], MemError> {
        if rkey != RKEY {
            return Err(MemError::Access);
        }
        let off = va.checked_sub(BASE).ok_or(MemError::Access)? as usize;
        self.region
            .get_mut(off..off.checked_add(len).ok_or(MemError::Access)?)
            .ok_or(MemError::Access)
    }
}

impl Responder for Mem {
    fn write_remote(&mut self, rkey: u32, va: u64, data: &[u8]) -> Result<(), MemError> {
        self.range(rkey, va, data.len())?.copy_from_slice(data);
        Ok(())
    }
    fn read_remote(&mut self, rkey: u32, va: u64, out: &mut [u8]) -> Result<(), MemError> {
        out.copy_from_slice(self.range(rkey, va, out.len())?);
        Ok(())
    }
    fn atomic_remote(&mut self, rkey: u32, va: u64, op: AtomicOp) -> Result<u64, MemError> {
        self.atomics += 1;
        let r = self.range(rkey, va, 8)?;
        let mut b = [0u8; 8];
        b.copy_from_slice(r);
        let old = u64::from_ne_bytes(b);
        let new = match op {
            AtomicOp::Cas { compare, swap } => {
                if old == compare {
                    swap
                } else {
                    old
                }
            }
            AtomicOp::Faa { add } => old.wrapping_add(add),
        };
        r.copy_from_slice(&new.to_ne_bytes());
        Ok(old)
    }
    fn write_recv(&mut self, wr_id: u64, offset: u32, data: &[u8]) -> Result<(), MemError> {
        if wr_id != 100 {
            return Err(MemError::Access);
        }
        let o = offset as usize;
        self.recv
            .get_mut(o..o + data.len())
            .ok_or(MemError::Access)?
            .copy_from_slice(data);
        Ok(())
    }
    fn invalidate(&mut self, _rkey: u32) -> Result<(), MemError> {
        Ok(())
    }
}

impl LocalMemory for Mem {
    fn read_local(&mut self, wr_id: u64, offset: u32, out: &mut [u8]) -> Result<(), MemError> {
        let b = self.local.get(wr_id as usize).ok_or(MemError::Access)?;
        let o = offset as usize;
        out.copy_from_slice(b.get(o..o + out.len()).ok_or(MemError::Access)?);
        Ok(())
    }
    fn write_local(&mut self, wr_id: u64, offset: u32, data: &[u8]) -> Result<(), MemError> {
        let b = self.local.get_mut(wr_id as usize).ok_or(MemError::Access)?;
        let o = offset as usize;
        b.get_mut(o..o + data.len())
            .ok_or(MemError::Access)?
            .copy_from_slice(data);
        Ok(())
    }
}

/// Runs the loopback self-test on two caller-allocated connections (they
/// are reset in place). Returns a description of the first failure.
pub fn loopback(a: &mut Connection, b: &mut Connection) -> Result<(), &'static str> {
    let mut ca = Config::test_pair(1, 2);
    let mut cb = Config::test_pair(2, 1);
    ca.mtu = 256;
    cb.mtu = 256;
    a.reset(ca);
    b.reset(cb);
    let mut ma = Mem::new();
    let mut mb = Mem::new();
    for (i, l) in ma.local.iter_mut().enumerate() {
        for (k, x) in l.iter_mut().enumerate() {
            *x = (i * 37 + k) as u8;
        }
    }
    b.post_recv(RecvWr {
        wr_id: 100,
        len: 300,
    })
    .map_err(|_| "post_recv")?;
    a.post_send(SendWr::write(0, 300, BASE, RKEY))
        .map_err(|_| "post write")?;
    a.post_send(SendWr::send(1, 300)).map_err(|_| "post send")?;
    a.post_send(SendWr::read(2, 300, BASE, RKEY))
        .map_err(|_| "post read")?;
    a.post_send(SendWr::faa(3, BASE + 400, RKEY, 7))
        .map_err(|_| "post faa")?;
    let mut buf = [0u8; 400];
    let mut now: u64 = 1_000;
    let mut n: u32 = 0;
    let (mut done_a, mut done_b) = (0u32, 0u32);
    for _ in 0..20_000 {
        while let Some(t) = a.poll_transmit(Instant(now), &mut buf, &mut ma) {
            n = n.wrapping_add(1);
            if n % 7 != 3 {
                b.handle_datagram(
                    Instant(now),
                    t.src_port,
                    false,
                    buf.get(..t.len).unwrap_or(&[]),
                    &mut mb,
                );
            }
        }
        while let Some(t) = b.poll_transmit(Instant(now), &mut buf, &mut mb) {
            n = n.wrapping_add(1);
            if n % 7 != 5 {
                a.handle_datagram(
                    Instant(now),
                    t.src_port,
                    false,
                    buf.get(..t.len).unwrap_or(&[]),
                    &mut ma,
                );
            }
        }
        while let Some(c) = a.poll_completion() {
            if c.status != WcStatus::Success || c.wr_id != done_a as u64 {
                return Err("requester completion wrong or out of order");
            }
            done_a += 1;
        }
        while let Some(c) = b.poll_completion() {
            if c.status != WcStatus::Success || c.opcode != WcOpcode::Recv || c.byte_len != 300 {
                return Err("receive completion wrong");
            }
            done_b += 1;
        }
        if done_a == 4 && done_b == 1 {
            break;
        }
        now += 1_000;
        for c in [&mut *a, &mut *b] {
            if c.poll_timeout()
                .map(|d| d.as_nanos() <= now)
                .unwrap_or(false)
            {
                c.handle_timeout(Instant(now));
            }
        }
    }
    if done_a != 4 || done_b != 1 {
        return Err("work did not complete");
    }
    if mb.region[..300] != ma.local[0][..] || mb.recv[..] != ma.local[1][..] {
        return Err("placed data differs");
    }
    if ma.local[2][..] != ma.local[0][..] {
        return Err("read data differs");
    }
    if mb.atomics != 1 || mb.region[400..408] != 7u64.to_ne_bytes() || ma.local[3][..8] != [0; 8] {
        return Err("atomic not executed exactly once");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn loopback_selftest_passes() {
        let mut a = super::Connection::new(super::Config::test_pair(9, 9));
        let mut b = super::Connection::new(super::Config::test_pair(9, 9));
        assert_eq!(super::loopback(&mut a, &mut b), Ok(()));
    }
}
