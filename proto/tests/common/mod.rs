//! Host-only helpers shared by the integration tests: a memory model and a
//! small deterministic PRNG.
#![allow(dead_code, unreachable_pub, missing_docs)]

use metaroce_proto::{AtomicOp, Flush, LocalMemory, MemError, RecvWr, Responder};
use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::rc::Rc;

/// xorshift64*; deterministic, seedable.
#[derive(Clone, Debug)]
pub struct Rng(pub u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }
    /// True with probability `ppm` parts per million.
    pub fn chance_ppm(&mut self, ppm: u64) -> bool {
        self.below(1_000_000) < ppm
    }
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next_u64() as u8).collect()
    }
}

/// One draw of a 64-bit LCG kept in `seed`: true with probability `ppm` per
/// million. For memory behaviour drawn apart from a run's other randomness.
pub fn draw_ppm(seed: &mut u64, ppm: u64) -> bool {
    *seed = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (*seed >> 33) % 1_000_000 < ppm
}

/// A verbs SRQ: receive WQEs in posting order, shared by the memories of
/// the connections that take from it.
pub type SharedRecvQueue = Rc<RefCell<VecDeque<RecvWr>>>;

/// Registered regions by rkey, local buffers and receive buffers by wr_id.
#[derive(Default, Debug, Clone)]
pub struct VecMemory {
    pub regions: HashMap<u32, (u64, Vec<u8>)>,
    pub local: HashMap<u64, Vec<u8>>,
    pub recv: HashMap<u64, Vec<u8>>,
    pub invalidated: Vec<u32>,
    pub atomics_executed: u64,
    pub writes: u64,
    /// FLUSHes carried out: (rkey, va, len, what), in order.
    pub flushes: Vec<(u32, u64, u32, Flush)>,
    /// The next this many accesses find their memory not resident
    /// ([`MemError::Fault`], on-demand paging) and touch nothing.
    pub faults: u32,
    /// Accesses refused with [`MemError::Fault`] so far.
    pub faulted: u32,
    /// Besides: each access faults with this probability (per million),
    /// drawn from `fault_seed` (a generator of its own, so the rest of a
    /// seeded run stays the same).
    pub fault_ppm: u64,
    pub fault_seed: u64,
    /// Copies are said to be still under way ([`Responder::placed`] false),
    /// as with a driver that copies after the lock (spec MR-10.1.3).
    pub unplaced: bool,
    /// A shared receive queue (verbs SRQ) the connection takes receive WQEs
    /// from when a message needs one (MR-4.2.3); `None`: the QP has none.
    /// A WQE taken gets a zeroed buffer of its length unless one was set up
    /// (`set_recv`) when it was posted.
    pub shared: Option<SharedRecvQueue>,
    /// The WQEs this memory's connection took from [`Self::shared`], in
    /// the order it took them.
    pub taken: Vec<u64>,
}

impl VecMemory {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn add_region(&mut self, rkey: u32, base: u64, len: usize) {
        self.regions.insert(rkey, (base, vec![0; len]));
    }
    pub fn region(&self, rkey: u32) -> &[u8] {
        &self.regions[&rkey].1
    }
    pub fn set_local(&mut self, wr_id: u64, data: Vec<u8>) {
        self.local.insert(wr_id, data);
    }
    pub fn set_recv(&mut self, wr_id: u64, len: usize) {
        self.recv.insert(wr_id, vec![0; len]);
    }
    /// [`MemError::Fault`] while [`Self::faults`] lasts.
    fn resident(&mut self) -> Result<(), MemError> {
        if self.fault_ppm > 0 {
            if draw_ppm(&mut self.fault_seed, self.fault_ppm) {
                self.faulted += 1;
                return Err(MemError::Fault);
            }
        }
        if self.faults == 0 {
            return Ok(());
        }
        self.faults -= 1;
        self.faulted += 1;
        Err(MemError::Fault)
    }
    pub fn range(&mut self, rkey: u32, va: u64, len: usize) -> Result<&mut [u8], MemError> {
        let (base, buf) = self.regions.get_mut(&rkey).ok_or(MemError::Access)?;
        let off = va.checked_sub(*base).ok_or(MemError::Access)? as usize;
        buf.get_mut(off..off.checked_add(len).ok_or(MemError::Access)?)
            .ok_or(MemError::Access)
    }
}

impl Responder for VecMemory {
    fn placed(&mut self) -> bool {
        !self.unplaced
    }
    fn take_shared_recv(&mut self) -> Option<RecvWr> {
        let wr = self.shared.as_ref()?.borrow_mut().pop_front()?;
        self.recv.entry(wr.wr_id).or_insert_with(|| vec![0; wr.len as usize]);
        self.taken.push(wr.wr_id);
        Some(wr)
    }
    fn write_remote(&mut self, rkey: u32, va: u64, data: &[u8]) -> Result<(), MemError> {
        self.resident()?;
        self.writes += 1;
        self.range(rkey, va, data.len())?.copy_from_slice(data);
        Ok(())
    }
    fn read_remote(&mut self, rkey: u32, va: u64, out: &mut [u8]) -> Result<(), MemError> {
        self.resident()?;
        out.copy_from_slice(self.range(rkey, va, out.len())?);
        Ok(())
    }
    fn atomic_remote(&mut self, rkey: u32, va: u64, op: AtomicOp) -> Result<u64, MemError> {
        self.resident()?;
        self.atomics_executed += 1;
        let r = self.range(rkey, va, 8)?;
        let old = u64::from_ne_bytes(r[..8].try_into().unwrap());
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
    /// Plain memory: global visibility is given, persistence is not.
    fn flush_remote(&mut self, rkey: u32, va: u64, len: u32, what: Flush) -> Result<(), MemError> {
        if what.persistent || !self.regions.contains_key(&rkey) {
            return Err(MemError::Access);
        }
        if !what.whole_region {
            self.range(rkey, va, len as usize)?;
        }
        self.flushes.push((rkey, va, len, what));
        Ok(())
    }
    fn write_recv(&mut self, wr_id: u64, offset: u32, data: &[u8]) -> Result<(), MemError> {
        self.resident()?;
        let b = self.recv.get_mut(&wr_id).ok_or(MemError::Access)?;
        let o = offset as usize;
        b.get_mut(o..o + data.len())
            .ok_or(MemError::Access)?
            .copy_from_slice(data);
        Ok(())
    }
    fn invalidate(&mut self, rkey: u32) -> Result<(), MemError> {
        // A registered region's R_Key stops working, as a real MR's does.
        self.regions.remove(&rkey);
        self.invalidated.push(rkey);
        Ok(())
    }
}

impl LocalMemory for VecMemory {
    fn read_local(&mut self, wr_id: u64, offset: u32, out: &mut [u8]) -> Result<(), MemError> {
        self.resident()?;
        let b = self.local.get(&wr_id).ok_or(MemError::Access)?;
        let o = offset as usize;
        out.copy_from_slice(b.get(o..o + out.len()).ok_or(MemError::Access)?);
        Ok(())
    }
    fn write_local(&mut self, wr_id: u64, offset: u32, data: &[u8]) -> Result<(), MemError> {
        self.resident()?;
        let b = self.local.entry(wr_id).or_default();
        let o = offset as usize;
        if b.len() < o + data.len() {
            b.resize(o + data.len(), 0);
        }
        b[o..o + data.len()].copy_from_slice(data);
        Ok(())
    }
}
