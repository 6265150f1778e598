//! The simulator scenarios behind the figures in the spec and README.

use super::{jain_permille, LinkCfg, Net, SimMem};
use metaroce_proto::{Config, PathStatus, Recovery, RecvWr, SendWr, WcOpcode, WcStatus};
use std::collections::{HashMap, VecDeque};

pub const EDGE_DELAY: u64 = 500;
pub const FABRIC_DELAY: u64 = 2_000;
/// Unloaded RTT of a 4 KiB packet and its ACK, edge + fabric + edge both ways.
pub const BASE_RTT_NS: u64 = 2 * (2 * EDGE_DELAY + FABRIC_DELAY) + 3 * 330 + 3 * 10;

fn net(hosts: usize, seed: u64) -> Net {
    Net::new(
        hosts,
        4,
        LinkCfg::dc(EDGE_DELAY),
        LinkCfg::dc(FABRIC_DELAY),
        seed,
    )
}

fn cfg_paths(paths: u8, recovery: Recovery) -> impl Fn(&mut Config) {
    move |c: &mut Config| {
        c.num_paths = paths;
        c.recovery = recovery;
    }
}

#[derive(Debug, Clone, Default)]
pub struct BulkResult {
    pub bytes: u64,
    pub ns: u64,
    pub completed: bool,
    pub retx: u64,
    pub max_gap_ns: u64,
    pub detect_ns: Option<u64>,
}

impl BulkResult {
    pub fn gbps(&self) -> f64 {
        self.bytes as f64 * 8.0 / self.ns.max(1) as f64
    }
}

/// One connection writing `total` bytes as 64 KiB RDMA WRITEs, 16
/// outstanding. Optional impairments: fabric loss, a black hole on fabric
/// link 1 from `blackhole_at`.
pub fn bulk(
    loss_ppm: u64,
    recovery: Recovery,
    paths: u8,
    total: u64,
    blackhole_at: Option<u64>,
    seed: u64,
) -> BulkResult {
    bulk_over(
        |l| l.loss_ppm = loss_ppm,
        recovery,
        paths,
        total,
        blackhole_at,
        seed,
        |_| {},
    )
    .0
}

/// [`bulk`] over fabric links that `impair` sets up (loss, delay, reordering), with
/// a configuration tweak; also returns the sender's statistics.
pub fn bulk_over(
    impair: impl Fn(&mut LinkCfg),
    recovery: Recovery,
    paths: u8,
    total: u64,
    blackhole_at: Option<u64>,
    seed: u64,
    tweak: impl Fn(&mut Config),
) -> (BulkResult, metaroce_proto::Stats) {
    const MSG: u32 = 64 << 10;
    let mut n = net(2, seed);
    n.impair_fabric(impair);
    if let Some(t) = blackhole_at {
        n.fabric_link(0, 1).cfg.blackhole_from = Some(t);
        n.fabric_link(1, 1).cfg.blackhole_from = Some(t);
    }
    let base = cfg_paths(paths, recovery);
    let (a, b) = n.connect(0, 1, 0x11, 0x22, move |c: &mut Config| {
        base(c);
        tweak(c);
    });
    n.eps[b]
        .mem
        .m
        .add_region(0x77, 0x10_0000, 16 * MSG as usize);
    let data: Vec<u8> = (0..MSG).map(|i| (i * 7) as u8).collect();
    for w in 0..32 {
        n.eps[a].mem.m.set_local(w, data.clone());
    }
    let msgs = total / MSG as u64;
    let (mut posted, mut done) = (0u64, 0u64);
    let mut last_done = 0u64;
    let mut res = BulkResult::default();
    let mut watch_path = None;
    let limit = 200_000_000;
    while done < msgs && n.now < limit {
        while posted < msgs && posted - done < 16 {
            let wr = SendWr::write(
                posted % 32,
                MSG,
                0x10_0000 + (posted % 16) * MSG as u64,
                0x77,
            );
            n.eps[a].conn.post_send(wr).unwrap();
            posted += 1;
        }
        if !n.step(limit) {
            break;
        }
        for (t, c) in n.eps[a].completions.drain(..) {
            assert_eq!(c.status, WcStatus::Success, "{c:?}");
            done += 1;
            res.max_gap_ns = res
                .max_gap_ns
                .max(t - last_done.max(blackhole_at.unwrap_or(0).min(t)));
            last_done = t;
        }
        if let Some(t0) = blackhole_at {
            if n.now >= t0 && res.detect_ns.is_none() {
                let conn = &n.eps[a].conn;
                let p = *watch_path.get_or_insert_with(|| {
                    (0..paths as usize)
                        .find(|p| conn.path_info(*p).unwrap().src_port % 4 == 1)
                        .unwrap()
                });
                if conn.path_info(p).unwrap().status != PathStatus::Active {
                    res.detect_ns = Some(n.now - t0);
                }
            }
        }
    }
    res.bytes = done * MSG as u64;
    res.ns = last_done;
    res.completed = done == msgs;
    res.retx = n.eps[a].conn.stats().tx_retx;
    (res, *n.eps[a].conn.stats())
}

#[derive(Debug, Clone, Default)]
pub struct MixedResult {
    pub ops: u64,
    pub send_completions_in_order: bool,
    pub recv_completions_ok: bool,
    pub data_ok: bool,
    pub write_before_recv_ok: bool,
    pub tail_violations: u64,
    pub tail_checks: u64,
    pub atomics_exactly_once: bool,
    pub ns: u64,
    pub retx: u64,
    /// Memory accesses refused as not resident, both ends.
    pub mem_faults: u64,
    /// Writes made late (MR-10.1.3), both ends.
    pub late_copies: u64,
    pub errors: Vec<String>,
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Kind {
    Send,
    SendImm,
    Write,
    WriteImm,
    Read,
    Faa,
    Cas,
}

fn pattern(i: u64, len: u32) -> Vec<u8> {
    (0..len as u64)
        .map(|k| (i.wrapping_mul(131) ^ k.wrapping_mul(7) ^ (k >> 8)) as u8)
        .collect()
}

/// Every verb, random sizes, over an impaired fabric; checks exactly-once,
/// ordering (MR-4.3) and data.
pub fn mixed(loss_ppm: u64, dup_ppm: u64, reorder_ppm: u64, nops: u64, seed: u64) -> MixedResult {
    mixed_cfg(loss_ppm, dup_ppm, reorder_ppm, nops, seed, |_| {})
}

/// [`mixed`] with a configuration tweak applied to both ends.
pub fn mixed_cfg(
    loss_ppm: u64,
    dup_ppm: u64,
    reorder_ppm: u64,
    nops: u64,
    seed: u64,
    tweak: impl Fn(&mut Config),
) -> MixedResult {
    mixed_faulting(loss_ppm, dup_ppm, reorder_ppm, nops, seed, tweak, |_, _| {})
}

/// [`mixed_cfg`] with each end's memory set up by `mem(end, memory)`: for
/// instance accesses that find memory not resident (`fault_ppm`, on-demand
/// paging, MR-9.2.5) or copies finished late (`late_ppm`, MR-10.1.3); the
/// simulated driver resumes delivery at every step.
pub fn mixed_faulting(
    loss_ppm: u64,
    dup_ppm: u64,
    reorder_ppm: u64,
    nops: u64,
    seed: u64,
    tweak: impl Fn(&mut Config),
    mem: impl Fn(usize, &mut SimMem),
) -> MixedResult {
    const AREA: u64 = 32 << 10;
    let mut n = net(2, seed);
    n.impair_fabric(|l| {
        l.loss_ppm = loss_ppm;
        l.dup_ppm = dup_ppm;
        l.reorder_ppm = reorder_ppm;
        l.reorder_ns = 3_000;
    });
    let (a, b) = n.connect(0, 1, 0x31, 0x42, tweak);
    for (i, ep) in [a, b].into_iter().enumerate() {
        n.eps[ep].mem.m.fault_seed = seed ^ (0x0dd5 << i);
        n.eps[ep].mem.late_seed = seed ^ (0x1a7e << i);
        mem(i, &mut n.eps[ep].mem);
    }
    {
        let m = &mut n.eps[b].mem.m;
        m.add_region(0x77, 0x100_0000, (64 * AREA) as usize);
        m.add_region(0x88, 0x200_0000, 256 << 10);
        m.add_region(0x99, 0x300_0000, 4096);
        let src = pattern(999, 256 << 10);
        m.regions.get_mut(&0x88).unwrap().1.copy_from_slice(&src);
    }
    let read_src = pattern(999, 256 << 10);
    let mut rng = n.rng.clone();
    let mut res = MixedResult {
        ops: nops,
        data_ok: true,
        recv_completions_ok: true,
        write_before_recv_ok: true,
        ..Default::default()
    };
    let mut kinds: HashMap<u64, (Kind, u32, u64)> = HashMap::new();
    let mut recv_expect: VecDeque<u64> = VecDeque::new();
    let mut next_recv = 0u64;
    for _ in 0..64 {
        n.eps[b].mem.m.set_recv(1_000_000 + next_recv, 32 << 10);
        n.eps[b]
            .conn
            .post_recv(RecvWr {
                wr_id: 1_000_000 + next_recv,
                len: 32 << 10,
            })
            .unwrap();
        next_recv += 1;
    }
    let (mut posted, mut completed) = (0u64, 0u64);
    let (mut faa_n, mut cas_n) = (0u64, 0u64);
    let mut faa_orig: Vec<u64> = Vec::new();
    let limit = 2_000_000_000;
    let mut ok = true;
    let err = |s: String, errors: &mut Vec<String>| {
        if errors.len() < 10 {
            errors.push(s);
        }
    };
    let mut recent_writes: VecDeque<(u64, u64, Vec<u8>)> = VecDeque::new();
    while completed < nops && n.now < limit {
        while posted < nops && posted - completed < 24 {
            let i = posted;
            let r = rng.below(100);
            let kind = match r {
                0..=29 => Kind::Write,
                30..=39 => Kind::WriteImm,
                40..=64 => Kind::Send,
                65..=74 => Kind::SendImm,
                75..=84 => Kind::Read,
                85..=94 => Kind::Faa,
                _ => Kind::Cas,
            };
            let len = match rng.below(4) {
                0 => rng.below(64) as u32,
                1 => rng.below(4096) as u32,
                _ => rng.below(AREA - 1) as u32,
            };
            let m = &mut n.eps[a].mem.m;
            let area = 0x100_0000 + (i % 64) * AREA;
            let (wr, extra) = match kind {
                Kind::Write | Kind::WriteImm => {
                    let d = pattern(i, len);
                    m.set_local(i, d.clone());
                    if len > 0 {
                        n.eps[b]
                            .mem
                            .watch
                            .insert((0x77, area + len as u64 - 1), (area, d.clone()));
                    }
                    recent_writes.push_back((i, area, d));
                    if recent_writes.len() > 24 {
                        recent_writes.pop_front();
                    }
                    if kind == Kind::Write {
                        (SendWr::write(i, len, area, 0x77), area)
                    } else {
                        recv_expect.push_back(i);
                        (SendWr::write_imm(i, len, area, 0x77, i as u32), area)
                    }
                }
                Kind::Send | Kind::SendImm => {
                    m.set_local(i, pattern(i, len));
                    recv_expect.push_back(i);
                    if kind == Kind::Send {
                        (SendWr::send(i, len), 0)
                    } else {
                        (SendWr::send_imm(i, len, i as u32 ^ 0xabcd), 0)
                    }
                }
                Kind::Read => {
                    let len = len.min(16 << 10);
                    let off = (i * 97) % (200 << 10);
                    m.local.remove(&i);
                    kinds.insert(i, (kind, len, off));
                    (SendWr::read(i, len, 0x200_0000 + off, 0x88), off)
                }
                Kind::Faa => {
                    faa_n += 1;
                    (SendWr::faa(i, 0x300_0000, 0x99, 1), 0)
                }
                Kind::Cas => {
                    cas_n += 1;
                    (SendWr::cas(i, 0x300_0008, 0x99, cas_n - 1, cas_n), 0)
                }
            };
            let len = wr.len;
            kinds.entry(i).or_insert((kind, len, extra));
            n.eps[a].conn.post_send(wr).unwrap();
            posted += 1;
        }
        if !n.step(limit) {
            break;
        }
        // Requester completions: exactly once, in posting order.
        let comps: Vec<_> = n.eps[a].completions.drain(..).collect();
        for (_, c) in comps {
            if c.wr_id != completed || c.status != WcStatus::Success {
                ok = false;
                err(
                    format!("requester completion {c:?}, expected wr {completed}"),
                    &mut res.errors,
                );
            }
            let (kind, len, extra) = kinds[&c.wr_id];
            match kind {
                Kind::Read => {
                    let got = n.eps[a]
                        .mem
                        .m
                        .local
                        .get(&c.wr_id)
                        .cloned()
                        .unwrap_or_default();
                    let want = &read_src[extra as usize..extra as usize + len as usize];
                    if got.len() < len as usize || &got[..len as usize] != want {
                        res.data_ok = false;
                        err(format!("read {} data mismatch", c.wr_id), &mut res.errors);
                    }
                }
                Kind::Faa | Kind::Cas => {
                    let got = n.eps[a]
                        .mem
                        .m
                        .local
                        .get(&c.wr_id)
                        .cloned()
                        .unwrap_or_default();
                    if got.len() < 8 {
                        res.data_ok = false;
                        err(
                            format!("atomic {} completed ({c:?}) without a result", c.wr_id),
                            &mut res.errors,
                        );
                        completed += 1;
                        continue;
                    }
                    let v = u64::from_ne_bytes(got[..8].try_into().unwrap());
                    if kind == Kind::Faa {
                        faa_orig.push(v);
                    } else {
                        let k = c.wr_id;
                        let _ = k;
                    }
                }
                Kind::Write | Kind::WriteImm if len > 0 => {
                    n.eps[b].mem.watch.remove(&(0x77, extra + len as u64 - 1));
                }
                _ => {}
            }
            completed += 1;
        }
        // Responder completions: in message order, with data in place.
        let comps: Vec<_> = n.eps[b].completions.drain(..).collect();
        for (_, c) in comps {
            let Some(i) = recv_expect.pop_front() else {
                ok = false;
                err(format!("unexpected recv completion {c:?}"), &mut res.errors);
                continue;
            };
            let (kind, len, _) = kinds[&i];
            let good = c.status == WcStatus::Success
                && c.byte_len == len
                && match kind {
                    Kind::Send => c.opcode == WcOpcode::Recv && c.imm.is_none(),
                    Kind::SendImm => c.opcode == WcOpcode::Recv && c.imm == Some(i as u32 ^ 0xabcd),
                    Kind::WriteImm => {
                        c.opcode == WcOpcode::RecvRdmaWithImm && c.imm == Some(i as u32)
                    }
                    _ => false,
                };
            if !good {
                res.recv_completions_ok = false;
                err(
                    format!("recv completion {c:?} for op {i} {kind:?} len {len}"),
                    &mut res.errors,
                );
            }
            if matches!(kind, Kind::Send | Kind::SendImm) {
                let buf = &n.eps[b].mem.m.recv[&c.wr_id];
                if buf[..len as usize] != pattern(i, len)[..] {
                    res.data_ok = false;
                    err(format!("send {i} data mismatch"), &mut res.errors);
                }
            }
            // MR-4.3.2: every earlier write of the QP is placed.
            for (j, area, d) in recent_writes.iter() {
                if *j < i {
                    let reg = &n.eps[b].mem.m.regions[&0x77];
                    let o = (area - reg.0) as usize;
                    if reg.1[o..o + d.len()] != d[..] {
                        // A later write to the same area may legitimately
                        // have landed already; only flag if none exists.
                        let overwritten =
                            recent_writes.iter().any(|(k, a2, _)| k > j && a2 == area);
                        if !overwritten {
                            res.write_before_recv_ok = false;
                            err(
                                format!("write {j} not placed at recv completion of {i}"),
                                &mut res.errors,
                            );
                        }
                    }
                }
            }
            n.eps[b].mem.m.set_recv(1_000_000 + next_recv, 32 << 10);
            n.eps[b]
                .conn
                .post_recv(RecvWr {
                    wr_id: 1_000_000 + next_recv,
                    len: 32 << 10,
                })
                .unwrap();
            next_recv += 1;
        }
    }
    if completed < nops {
        ok = false;
        err(
            format!("only {completed} of {nops} completed by t={}", n.now),
            &mut res.errors,
        );
    }
    res.send_completions_in_order = ok;
    // Exactly-once atomics: FAA originals are 0,1,2,... in posting order,
    // the counter equals the number of FAAs, and the responder executed
    // each atomic once.
    let counter = u64::from_ne_bytes(n.eps[b].mem.m.regions[&0x99].1[..8].try_into().unwrap());
    let cas_val = u64::from_ne_bytes(n.eps[b].mem.m.regions[&0x99].1[8..16].try_into().unwrap());
    res.atomics_exactly_once = faa_orig.iter().enumerate().all(|(k, v)| *v == k as u64)
        && counter == faa_n
        && cas_val == cas_n
        && n.eps[b].mem.m.atomics_executed == faa_n + cas_n;
    if !res.atomics_exactly_once {
        err(
            format!(
                "atomics: counter {counter}/{faa_n}, cas {cas_val}/{cas_n}, executed {}",
                n.eps[b].mem.m.atomics_executed
            ),
            &mut res.errors,
        );
    }
    res.tail_violations = n.eps[b].mem.tail_violations;
    res.tail_checks = n.eps[b].mem.tail_checks;
    res.mem_faults = u64::from(n.eps[a].mem.m.faulted) + u64::from(n.eps[b].mem.m.faulted);
    res.late_copies = n.eps[a].mem.late_copies + n.eps[b].mem.late_copies;
    res.ns = n.now;
    res.retx = n.eps[a].conn.stats().tx_retx;
    res
}

impl MixedResult {
    pub fn all_ok(&self) -> bool {
        self.send_completions_in_order
            && self.recv_completions_ok
            && self.data_ok
            && self.write_before_recv_ok
            && self.tail_violations == 0
            && self.atomics_exactly_once
    }
}

#[derive(Debug, Clone, Default)]
pub struct IncastResult {
    pub per_flow: Vec<u64>,
    pub jain_permille: u64,
    pub max_queue: u64,
    pub peak_queue_startup: u64,
    pub goodput_gbps: f64,
    pub drops: u64,
}

/// `senders`:1 incast of continuous 64 KiB writes into one receiver.
pub fn incast(senders: usize, hint: bool, duration_ns: u64, seed: u64) -> IncastResult {
    const MSG: u32 = 64 << 10;
    let mut n = net(senders + 1, seed);
    let mut pairs = Vec::new();
    for s in 0..senders {
        let (a, b) = n.connect(s + 1, 0, 0x100 + s as u32, 0x200 + s as u32, |_| {});
        n.eps[b].mem.m.add_region(0x77, 0x10_0000, 8 * MSG as usize);
        let d = vec![s as u8; MSG as usize];
        for w in 0..8 {
            n.eps[a].mem.m.set_local(w, d.clone());
        }
        if hint {
            // Receiver host: share twice the BDP of its downlink.
            let bdp = BASE_RTT_NS * 100 / 8;
            n.eps[b]
                .conn
                .set_credit_hint(Some((2 * bdp / senders as u64).max(4096) as u32));
        }
        pairs.push((a, b, 0u64, 0u64));
    }
    let warm = duration_ns / 4;
    let mut bytes = vec![0u64; senders];
    let mut peak_startup = None;
    while n.now < duration_ns {
        if n.now >= warm && peak_startup.is_none() {
            peak_startup = Some(n.downlink(0).max_queue);
            n.downlink_mut(0).max_queue = 0;
        }
        for (k, (a, _, posted, done)) in pairs.iter_mut().enumerate() {
            while *posted - *done < 8 {
                let wr = SendWr::write(
                    *posted % 8,
                    MSG,
                    0x10_0000 + (*posted % 8) * MSG as u64,
                    0x77,
                );
                n.eps[*a].conn.post_send(wr).unwrap();
                *posted += 1;
            }
            let _ = k;
        }
        if !n.step(duration_ns) {
            break;
        }
        for (k, (a, _, _, done)) in pairs.iter_mut().enumerate() {
            for (t, c) in n.eps[*a].completions.drain(..) {
                assert_eq!(c.status, WcStatus::Success);
                *done += 1;
                if t >= warm {
                    bytes[k] += MSG as u64;
                }
            }
        }
    }
    let total: u64 = bytes.iter().sum();
    IncastResult {
        jain_permille: jain_permille(&bytes),
        max_queue: n.downlink(0).max_queue,
        peak_queue_startup: peak_startup.unwrap_or(0),
        goodput_gbps: total as f64 * 8.0 / (duration_ns - warm) as f64,
        drops: n.downlink(0).drops,
        per_flow: bytes,
    }
}

/// Runs every scenario and renders the figures table.
pub fn table() -> (String, Figures) {
    let total = 32 << 20;
    let lossless = bulk(0, Recovery::Selective, 4, total, None, 1);
    let lossy = bulk(10_000, Recovery::Selective, 4, total, None, 2);
    let gbn0 = bulk(0, Recovery::GoBackN, 1, total, None, 3);
    let gbn1 = bulk(10_000, Recovery::GoBackN, 1, total, None, 4);
    let mr1 = bulk(10_000, Recovery::Selective, 1, total, None, 5);
    let bh = bulk(0, Recovery::Selective, 4, total, Some(500_000), 6);
    let mix = mixed(100_000, 5_000, 20_000, 3_000, 7);
    let inc = incast(16, true, 4_000_000, 8);
    let inc_nohint = incast(16, false, 4_000_000, 9);
    let hs_off = hotspot(false, 4_000_000, 31);
    let hs_on = hotspot(true, 4_000_000, 31);
    let asym = asymmetric(41);
    let f = Figures {
        asym,
        hs_off,
        hs_on,
        lossless,
        lossy,
        gbn0,
        gbn1,
        mr1,
        bh,
        mix,
        inc,
        inc_nohint,
    };
    let mut s = String::new();
    let pct = |a: f64, b: f64| 100.0 * a / b.max(1e-9);
    s.push_str(&format!(
        "MetaRoCE simulator figures (100 Gb/s links, base RTT {:.1} us, 4 KiB MTU, 4 paths)\n",
        BASE_RTT_NS as f64 / 1000.0
    ));
    s.push_str("| scenario | result | target |\n|---|---|---|\n");
    s.push_str(&format!(
        "| lossless bulk 32 MiB, 4 paths | {:.1} Gb/s | reference |\n",
        f.lossless.gbps()
    ));
    s.push_str(&format!(
        "| 1% random loss, 4 paths | {:.1} Gb/s = {:.1}% of lossless ({} retransmissions) | >= 90% |\n",
        f.lossy.gbps(), pct(f.lossy.gbps(), f.lossless.gbps()), f.lossy.retx
    ));
    s.push_str(&format!(
        "| 1% random loss, 1 path, MetaRoCE | {:.1} Gb/s = {:.1}% of lossless | - |\n",
        f.mr1.gbps(),
        pct(f.mr1.gbps(), f.lossless.gbps())
    ));
    s.push_str(&format!(
        "| go-back-N (RoCEv2-like), lossless, 1 path | {:.1} Gb/s | - |\n",
        f.gbn0.gbps()
    ));
    s.push_str(&format!(
        "| go-back-N (RoCEv2-like), 1% loss, 1 path | {:.1} Gb/s = {:.1}% of its lossless ({} retransmissions) | comparison |\n",
        f.gbn1.gbps(), pct(f.gbn1.gbps(), f.gbn0.gbps()), f.gbn1.retx
    ));
    s.push_str(&format!(
        "| 10% loss + 0.5% dup + 2% reorder, {} mixed verbs ({} retransmissions) | exactly once & in order: {}; data: {}; writes placed before recv completion: {}; tail-last violations: {} of {} checks; atomics exactly once: {} | all yes, 0 |\n",
        f.mix.ops,
        f.mix.retx,
        yes(f.mix.send_completions_in_order && f.mix.recv_completions_ok),
        yes(f.mix.data_ok),
        yes(f.mix.write_before_recv_ok),
        f.mix.tail_violations,
        f.mix.tail_checks,
        yes(f.mix.atomics_exactly_once)
    ));
    s.push_str(&format!(
        "| black-holed path (1 of 4 links dropped at t=500 us) | abandoned after {:.1} us = {:.1} base RTTs; longest completion gap {:.1} us; {:.1} Gb/s; completed: {} | few RTTs, no stall |\n",
        f.bh.detect_ns.unwrap_or(u64::MAX) as f64 / 1000.0,
        f.bh.detect_ns.unwrap_or(u64::MAX) as f64 / BASE_RTT_NS as f64,
        f.bh.max_gap_ns as f64 / 1000.0,
        f.bh.gbps(),
        yes(f.bh.completed)
    ));
    for (name, r) in [
        ("with receiver credit hint", &f.inc),
        ("without hint (delay+ECN only)", &f.inc_nohint),
    ] {
        s.push_str(&format!(
            "| 16:1 incast, {} | Jain {:.3}; max queue after 1st ms {} KiB (start-up burst peak {} KiB); {:.1} Gb/s aggregate; {} drops | Jain >= 0.9, bounded queue |\n",
            name,
            r.jain_permille as f64 / 1000.0,
            r.max_queue >> 10,
            r.peak_queue_startup >> 10,
            r.goodput_gbps,
            r.drops
        ));
    }
    s.push_str(&format!(
        "| hot fabric link shared with a 1-path elephant | repath off: ours {:.1} Gb/s, elephant {:.1} Gb/s; repath on: ours {:.1} Gb/s, elephant {:.1} Gb/s, {} congestion repaths | load moves off the hot link |\n",
        f.hs_off.ours_gbps, f.hs_off.cross_gbps, f.hs_on.ours_gbps, f.hs_on.cross_gbps, f.hs_on.congestion_repaths
    ));
    s.push_str(&format!(
        "| 4 paths with 2/4/8/16 us fabric delays (heavy cross-path reordering), no loss | {:.1} Gb/s, {} retransmissions | no spurious retransmission |\n",
        f.asym.gbps(),
        f.asym.retx
    ));
    s.push_str(&format!(
        "| state bytes per QP | {} B | < 64 KiB |\n",
        core::mem::size_of::<metaroce_proto::Connection>()
    ));
    (s, f)
}

fn yes(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "NO"
    }
}

pub struct Figures {
    pub lossless: BulkResult,
    pub lossy: BulkResult,
    pub gbn0: BulkResult,
    pub gbn1: BulkResult,
    pub mr1: BulkResult,
    pub bh: BulkResult,
    pub mix: MixedResult,
    pub inc: IncastResult,
    pub inc_nohint: IncastResult,
    pub hs_off: HotspotResult,
    pub hs_on: HotspotResult,
    pub asym: BulkResult,
}

#[derive(Debug, Clone, Default)]
pub struct HotspotResult {
    pub ours_gbps: f64,
    pub cross_gbps: f64,
    pub hot_link_queue: u64,
    pub congestion_repaths: u64,
}

/// A 4-path connection (host 0 -> 1) shares fabric link 2 with a 1-path
/// elephant (host 2 -> 3) pinned to that link. With repathing the sprayed
/// connection moves its path off the hot link (MR-6.3.4).
pub fn hotspot(repath: bool, duration_ns: u64, seed: u64) -> HotspotResult {
    const MSG: u32 = 64 << 10;
    let mut n = net(4, seed);
    let (a, b) = n.connect(0, 1, 0x51, 0x52, |c| c.repath_congested = repath);
    let (x, y) = n.connect(2, 3, 0x61, 0x62, |c| {
        c.num_paths = 1;
        c.src_port_base = 0xC002; // path 0 hashes onto fabric link 2
    });
    for (s, d) in [(a, b), (x, y)] {
        n.eps[d]
            .mem
            .m
            .add_region(0x77, 0x10_0000, 16 * MSG as usize);
        for w in 0..16 {
            n.eps[s].mem.m.set_local(w, vec![w as u8; MSG as usize]);
        }
    }
    let warm = duration_ns / 2;
    let mut posted = [0u64; 2];
    let mut done = [0u64; 2];
    let mut bytes = [0u64; 2];
    let mut reset_queue = false;
    while n.now < duration_ns {
        for (k, s) in [a, x].into_iter().enumerate() {
            while posted[k] - done[k] < 16 {
                let wr = SendWr::write(
                    posted[k] % 16,
                    MSG,
                    0x10_0000 + (posted[k] % 16) * MSG as u64,
                    0x77,
                );
                n.eps[s].conn.post_send(wr).unwrap();
                posted[k] += 1;
            }
        }
        if !n.step(duration_ns) {
            break;
        }
        if n.now >= warm && !reset_queue {
            reset_queue = true;
            n.fabric_link(0, 2).max_queue = 0;
        }
        for (k, s) in [a, x].into_iter().enumerate() {
            for (t, c) in n.eps[s].completions.drain(..) {
                assert_eq!(c.status, WcStatus::Success);
                done[k] += 1;
                if t >= warm {
                    bytes[k] += MSG as u64;
                }
            }
        }
    }
    let span = (duration_ns - warm) as f64;
    HotspotResult {
        ours_gbps: bytes[0] as f64 * 8.0 / span,
        cross_gbps: bytes[1] as f64 * 8.0 / span,
        hot_link_queue: n.fabric_link(0, 2).max_queue,
        congestion_repaths: n.eps[a].conn.stats().congestion_repaths,
    }
}

/// Bulk transfer over 4 fabric links with very different delays (2, 4, 8,
/// 16 us): heavy reordering across paths, no loss. Per-path sequence spaces
/// mean no spurious retransmission (MR-6.2.1).
pub fn asymmetric(seed: u64) -> BulkResult {
    const MSG: u32 = 64 << 10;
    let mut n = net(2, seed);
    for d in 0..2 {
        for (i, delay) in [2_000u64, 4_000, 8_000, 16_000].into_iter().enumerate() {
            n.fabric_link(d, i).cfg.delay_ns = delay;
        }
    }
    let (a, b) = n.connect(0, 1, 0x71, 0x72, |_| {});
    n.eps[b]
        .mem
        .m
        .add_region(0x77, 0x10_0000, 16 * MSG as usize);
    for w in 0..32 {
        n.eps[a].mem.m.set_local(w, vec![w as u8; MSG as usize]);
    }
    let msgs = 512u64;
    let (mut posted, mut done, mut last) = (0u64, 0u64, 0u64);
    while done < msgs && n.now < 200_000_000 {
        while posted < msgs && posted - done < 16 {
            let wr = SendWr::write(
                posted % 32,
                MSG,
                0x10_0000 + (posted % 16) * MSG as u64,
                0x77,
            );
            n.eps[a].conn.post_send(wr).unwrap();
            posted += 1;
        }
        if !n.step(200_000_000) {
            break;
        }
        for (t, c) in n.eps[a].completions.drain(..) {
            assert_eq!(c.status, WcStatus::Success);
            done += 1;
            last = t;
        }
    }
    BulkResult {
        bytes: done * MSG as u64,
        ns: last,
        completed: done == msgs,
        retx: n.eps[a].conn.stats().tx_retx,
        max_gap_ns: 0,
        detect_ns: None,
    }
}

#[derive(Debug, Clone, Default)]
pub struct EchoPathResult {
    pub completed: bool,
    /// Per send path of the writer: smoothed RTT and window at the end.
    pub srtt_ns: [u32; 4],
    pub cwnd: [u32; 4],
    pub rx_invalid: u64,
    pub retx: u64,
}

/// Data from host 0 to host 1 over four paths whose forward fabric links
/// have delays `fwd_delay`; fabric link `ce_link` (forward) marks every
/// packet CE. Every ACK comes back with MRH path id 0 over fabric link 0
/// (MR-3.5.1: the ACK names the path it describes in `EchoPth`, not by the
/// path it travels on). Repathing is off so path `q` stays on link `q`.
pub fn echo_path_return(fwd_delay: [u64; 4], ce_link: Option<usize>, seed: u64) -> EchoPathResult {
    const MSG: u32 = 64 << 10;
    let mut n = net(2, seed);
    for (i, d) in fwd_delay.into_iter().enumerate() {
        n.fabric_link(0, i).cfg.delay_ns = d;
    }
    if let Some(l) = ce_link {
        n.fabric_link(0, l).cfg.ce_ppm = 1_000_000;
    }
    n.ack_return = Some((0, 0xC000));
    let (a, b) = n.connect(0, 1, 0x81, 0x82, |c| {
        c.repath_congested = false;
        c.num_paths = 4;
    });
    for q in 0..4 {
        assert_eq!(n.eps[a].conn.path_info(q).unwrap().src_port as usize % 4, q);
    }
    n.eps[b]
        .mem
        .m
        .add_region(0x77, 0x10_0000, 16 * MSG as usize);
    for w in 0..32 {
        n.eps[a].mem.m.set_local(w, vec![w as u8; MSG as usize]);
    }
    let msgs = 128u64;
    let (mut posted, mut done) = (0u64, 0u64);
    while done < msgs && n.now < 100_000_000 {
        while posted < msgs && posted - done < 16 {
            let wr = SendWr::write(
                posted % 32,
                MSG,
                0x10_0000 + (posted % 16) * MSG as u64,
                0x77,
            );
            n.eps[a].conn.post_send(wr).unwrap();
            posted += 1;
        }
        if !n.step(100_000_000) {
            break;
        }
        for (_, c) in n.eps[a].completions.drain(..) {
            assert_eq!(c.status, WcStatus::Success);
            done += 1;
        }
    }
    let conn = &n.eps[a].conn;
    let mut r = EchoPathResult {
        completed: done == msgs,
        rx_invalid: conn.stats().rx_invalid,
        retx: conn.stats().tx_retx,
        ..Default::default()
    };
    for q in 0..4 {
        let i = conn.path_info(q).unwrap();
        r.srtt_ns[q] = i.srtt_ns;
        r.cwnd[q] = i.cwnd;
    }
    r
}

/// What a request/response exchange under loss measured: the round trips as the
/// requester saw them (ns, sorted) and both ends' statistics.
#[derive(Debug, Clone, Default)]
pub struct RequestResponseResult {
    pub round_trips: Vec<u64>,
    pub requester: Option<metaroce_proto::Stats>,
    pub responder: Option<metaroce_proto::Stats>,
}

impl RequestResponseResult {
    /// The round trip at quantile `q` (0..1), ns.
    pub fn quantile(&self, q: f64) -> u64 {
        let n = self.round_trips.len();
        self.round_trips[(((n as f64) * q) as usize).min(n - 1)]
    }
}

/// `ib_send_lat` on the simulator: 8-byte SENDs one at a time, each answered by
/// one from the other side, over four paths whose fabric links lose `loss_ppm`;
/// timers as the kernel module sets them (500 us ACK delay, 10 ms path-RTO floor).
pub fn request_response(loss_ppm: u64, rounds: usize, seed: u64) -> RequestResponseResult {
    use metaroce_proto::Duration;
    let mut n = Net::new(2, 4, LinkCfg::dc(5_000), LinkCfg::dc(20_000), seed);
    let (a, b) = n.connect(0, 1, 10, 20, |c| {
        c.ack_delay = Duration::from_micros(500);
        c.initial_rtt = Duration::from_micros(500);
        c.min_path_rto = Duration::from_millis(10);
        c.min_rto = Duration::from_millis(50);
        c.max_rto = Duration::from_millis(500);
    });
    n.impair_fabric(|l| l.loss_ppm = loss_ppm);
    let mut next_recv = [0u64; 2];
    let mut post_recv = |n: &mut Net, k: usize, ep: usize| {
        let wr_id = 1_000_000 + next_recv[k];
        n.eps[ep].mem.m.set_recv(wr_id, 64);
        n.eps[ep].conn.post_recv(RecvWr { wr_id, len: 64 }).unwrap();
        next_recv[k] += 1;
    };
    for (k, ep) in [a, b].into_iter().enumerate() {
        for i in 0..32u64 {
            n.eps[ep].mem.m.set_local(i, vec![i as u8; 8]);
        }
        for _ in 0..16 {
            post_recv(&mut n, k, ep);
        }
    }
    let mut res = RequestResponseResult::default();
    let (mut sent, mut start) = (0u64, n.now);
    n.eps[a].conn.post_send(SendWr::send(0, 8)).unwrap();
    let limit = 1_000_000_000_000;
    while res.round_trips.len() < rounds && n.step(limit) {
        for (k, ep) in [a, b].into_iter().enumerate() {
            let done: Vec<_> = n.eps[ep].completions.drain(..).collect();
            for (_, c) in done {
                assert_eq!(c.status, WcStatus::Success, "{c:?}");
                if c.opcode != WcOpcode::Recv {
                    continue;
                }
                post_recv(&mut n, k, ep);
                if ep == a {
                    res.round_trips.push(n.now - start);
                    start = n.now;
                }
                sent += 1;
                n.eps[ep]
                    .conn
                    .post_send(SendWr::send(sent % 32, 8))
                    .unwrap();
            }
        }
    }
    res.round_trips.sort_unstable();
    res.requester = Some(*n.eps[a].conn.stats());
    res.responder = Some(*n.eps[b].conn.stats());
    res
}

#[derive(Debug, Clone, Default)]
pub struct ReadsResult {
    pub completed: u64,
    pub data_ok: bool,
    pub ns: u64,
    pub retx_responder: u64,
    pub rx_invalid_requester: u64,
    pub errors: Vec<String>,
}

/// `nreads` READs of `len` bytes each (many packets at the configured MTU) from a
/// 256 KiB region, `outstanding` posted at a time, as `ib_read_bw` posts them:
/// every one must complete in order with its data.
pub fn reads(
    loss_ppm: u64,
    dup_ppm: u64,
    reorder_ppm: u64,
    reorder_ns: u64,
    nreads: u64,
    len: u32,
    outstanding: u64,
    seed: u64,
    tweak: impl Fn(&mut Config),
) -> ReadsResult {
    let mut n = net(2, seed);
    n.impair_fabric(|l| {
        l.loss_ppm = loss_ppm;
        l.dup_ppm = dup_ppm;
        l.reorder_ppm = reorder_ppm;
        l.reorder_ns = reorder_ns;
    });
    let (a, b) = n.connect(0, 1, 0x51, 0x62, tweak);
    let src = pattern(4242, 256 << 10);
    n.eps[b].mem.m.add_region(0x88, 0x200_0000, 256 << 10);
    n.eps[b].mem.m.regions.get_mut(&0x88).unwrap().1.copy_from_slice(&src);
    let mut res = ReadsResult { data_ok: true, ..Default::default() };
    let (mut posted, mut completed) = (0u64, 0u64);
    let limit = 4_000_000_000;
    let offs = |i: u64| (i * 4096) % ((256 << 10) - u64::from(len) + 1);
    while completed < nreads && n.now < limit {
        while posted < nreads && posted - completed < outstanding {
            n.eps[a].mem.m.local.remove(&posted);
            let wr = SendWr::read(posted, len, 0x200_0000 + offs(posted), 0x88);
            if n.eps[a].conn.post_send(wr).is_err() {
                break;
            }
            posted += 1;
        }
        let Some(comps) = step_then_completions(&mut n, a, limit) else { break };
        for c in comps {
            if c.wr_id != completed || c.status != WcStatus::Success {
                if res.errors.len() < 10 {
                    res.errors.push(format!("completion {c:?}, expected wr {completed}"));
                }
                res.data_ok = false;
            }
            let got = n.eps[a].mem.m.local.get(&c.wr_id).cloned().unwrap_or_default();
            let o = offs(c.wr_id) as usize;
            if got.len() < len as usize || got[..len as usize] != src[o..o + len as usize] {
                res.data_ok = false;
                if res.errors.len() < 10 {
                    res.errors.push(format!("read {} data mismatch", c.wr_id));
                }
            }
            completed += 1;
        }
    }
    res.completed = completed;
    res.ns = n.now;
    res.retx_responder = n.eps[b].conn.stats().tx_retx;
    res.rx_invalid_requester = n.eps[a].conn.stats().rx_invalid;
    res
}

/// One step of the network, then what completed at endpoint `ep` since the last
/// call; `None` once nothing moves.
fn step_then_completions(n: &mut Net, ep: usize, limit: u64) -> Option<Vec<metaroce_proto::Completion>> {
    n.step(limit).then(|| n.eps[ep].completions.drain(..).map(|(_, c)| c).collect())
}
