#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Guest side of `make bench` (tools/bench): TCP (iperf3), rdma_rxe (RoCEv2), siw
# (soft-iWARP over TCP) and MetaRoCE measured one after the other in the same boot.
#
#   bench.sh OUTDIR     writes OUTDIR/bench.csv (one row per run), OUTDIR/progress.log
#                       (tools/bench follows it live) and, via report.py, bench.txt,
#                       bench.json and bench.png
#
# Part 1, one link: hostA veth0 198.18.0.1 <-> hostB veth1 198.18.0.2. Cases:
# ib_write_bw and ib_read_bw (64 KiB messages, 1 and 4 QPs; TCP: iperf3 with 1 and 4
# streams, -R for read) and ib_send_lat (8 B; TCP: a python TCP_NODELAY ping-pong),
# each under every netem condition of $CONDS on both veths, $REPEATS times.
# Part 2, multipath: hostA - routerA =(NPATHS veth pairs, ECMP, L4 hash)= routerB -
# hostB, every path optionally rate-limited; ib_write_bw with 1 and 4 QPs with all
# paths healthy and with path 1 degraded.
# Part 3: kernel memory per idle connected RC QP (qpmem.py) for rxe and MetaRoCE.
#
# Guest CPU cost per GB: a sampler reads /proc/stat every 0.2 s during each bandwidth
# run; the busy jiffies of the whole guest (both namespaces, user+system+irq+softirq)
# over the steady part of the run, divided by the bytes moved in it (the measured
# rate times that interval).
#
# Environment: BENCH_QUICK=1 (fewer conditions, one repeat, short runs), and
# BENCH_WINDOW (seconds measured per bandwidth run), BENCH_REPEATS, BENCH_LAT_ITERS,
# BENCH_CONDS, BENCH_CASES, BENCH_TRANSPORTS, BENCH_QP_PAIRS, BENCH_MP_RATE (per
# path, tc syntax, empty for none), BENCH_MP_DEGRADE (netem args of the degraded
# path), BENCH_NUM_PATHS (MetaRoCE's num_paths), BENCH_PARTS (subset of "link mp
# qpmem"), BENCH_MTU (the one-link veth MTU, default 65535), BENCH_RC_MTU (MetaRoCE's
# rc_mtu parameter, default 32768; 0 for verbs' path_mtu), BENCH_RPS (receive packet
# steering on the one-link veths: 1, the default, spreads received packets over every
# CPU by flow hash, as a NIC's RSS would; 0 leaves them on the transmitting CPU),
# BENCH_MRC_ARGS (more rdma_metaroce module parameters, e.g. "cc_target_delay_us=3000")
# override single settings. Latency cases always run without RPS: its cross-CPU hop
# doubles every transport's ib_send_lat under emulation (2026-11-30 measurement in
# the README).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/../lib/ktap.sh"     # mrc_insmod
. "$HERE/../lib/net.sh"      # mk_hosts, rm_hosts, hosts_rps
OUT=${1:?usage: bench.sh OUTDIR}
# shellcheck disable=SC2034  # read by verbs.sh
VB_LOGDIR=$OUT/bench-logs
. "$HERE/../lib/verbs.sh"    # vb_gid_index, vb_tcp_listening, _vb_await
mkdir -p "$VB_LOGDIR"
# shellcheck disable=SC2034  # read by mrc_insmod
KO=${METAROCE_KO:-$HERE/../../rdma_metaroce.ko}
CSV=$OUT/bench.csv

if [ "${BENCH_QUICK:-0}" = 1 ]; then
    d_window=2 d_repeats=1 d_iters=300 d_conds="clean loss0 loss1 loss5 reorder1" d_pairs=500
else
    d_window=5 d_repeats=3 d_iters=2000 d_conds="clean loss0 loss0.1 loss1 loss5 reorder1" d_pairs=500
fi
WINDOW=${BENCH_WINDOW:-$d_window}       # seconds measured per bandwidth run
REPEATS=${BENCH_REPEATS:-$d_repeats}
LAT_ITERS=${BENCH_LAT_ITERS:-$d_iters}
CONDS=${BENCH_CONDS:-$d_conds}
CASES=${BENCH_CASES:-"write_bw_q1 write_bw_q4 read_bw_q1 read_bw_q4 send_lat"}
TRANSPORTS=${BENCH_TRANSPORTS:-"tcp rxe siw metaroce"}
QP_PAIRS=${BENCH_QP_PAIRS:-$d_pairs}
NPATHS=4
MP_RATE=${BENCH_MP_RATE-20mbit}
MP_DEGRADE=${BENCH_MP_DEGRADE:-loss 5%}
NUM_PATHS=${BENCH_NUM_PATHS:-}
PARTS=${BENCH_PARTS:-"link mp qpmem"}
LINK_MTU=${BENCH_MTU:-65535}            # MTU of the one-link part's veth pair (veth's largest)
RC_MTU=${BENCH_RC_MTU:-32768}           # MetaRoCE's rc_mtu: a 64 KiB message in two packets
RPS=${BENCH_RPS:-1}
MRC_ARGS=${BENCH_MRC_ARGS:-}            # more module parameters, space-separated
MARGIN=1                                # perftest -f: warm-up and cool-down, seconds
TMO=$((WINDOW + 120))                   # bound on every process
PORT=21000
HZ=$(getconf CLK_TCK)
ADDR_A=198.18.0.1 ADDR_B=198.18.0.2

progress() { echo "$*" | tee -a "$OUT/progress.log" >&2; }
# part,transport,case,cond,repeat,value,p99,unit,cpu_s_per_gb,kcpu_s_per_gb,status,note
# A warm-up run (WARMUP=1) records no row.
row() { [ -n "${WARMUP:-}" ] || echo "$*" >> "$CSV"; }
has() { case " $1 " in *" $2 "*) return 0 ;; esac; return 1; }

rdma_links_del() {
    local l
    for l in rxeA rxeB siwA siwB mrcA mrcB; do rdma link del "$l" 2>/dev/null; done
    true
}
rm_all_ns() { rm_hosts; ip netns del mprA 2>/dev/null; ip netns del mprB 2>/dev/null; true; }
cleanup() {
    rdma_links_del; rm_all_ns
    rmmod rdma_metaroce 2>/dev/null; modprobe -r rdma_rxe 2>/dev/null; modprobe -r siw 2>/dev/null; true
}
trap cleanup EXIT
cleanup
: > "$OUT/progress.log"
echo "part,transport,case,cond,repeat,value,p99,unit,cpu_s_per_gb,kcpu_s_per_gb,status,note" > "$CSV"
{
    echo "quick=${BENCH_QUICK:-0}"; echo "window_s=$WINDOW"; echo "repeats=$REPEATS"
    echo "lat_iters=$LAT_ITERS"; echo "conds=$CONDS"; echo "qp_pairs=$QP_PAIRS"
    echo "mp_paths=$NPATHS"; echo "mp_rate=${MP_RATE:-none}"; echo "mp_degrade=$MP_DEGRADE"
    echo "num_paths=${NUM_PATHS:-default}"; echo "link_mtu=$LINK_MTU"; echo "rc_mtu=$RC_MTU"
    echo "rps=$RPS"; echo "mrc_args=${MRC_ARGS:-none}"
    echo "kernel=$(uname -r)"; echo "cpus=$(nproc)"
    echo "mem_kb=$(awk '/MemTotal/ {print $2}' /proc/meminfo)"
} > "$OUT/bench-params.txt"   # one key=value a line

# --- link conditions ---------------------------------------------------------------------
# "loss0" is netem with no loss: the lossless baseline goes through the same qdisc as
# the lossy conditions, so that what they lose is the loss, not netem's own cost
# (2026-12-01: a netem qdisc alone took 5-8% off MetaRoCE's 1-QP write rate).
# "clean" is the link without any qdisc.
cond_args() { # COND -> netem arguments (empty: clean link)
    case $1 in
        clean) ;;
        loss*) echo "loss ${1#loss}%" ;;
        # netem reorders only delayed traffic: every packet but the given share waits 1 ms,
        # that share is sent at once and overtakes the queue.
        reorder*) echo "delay 1ms reorder ${1#reorder}%" ;;
        *) return 1 ;;
    esac
}
set_cond() { # COND: on both veths of the one-link topology
    local a
    tc -n hostA qdisc del dev veth0 root 2>/dev/null
    tc -n hostB qdisc del dev veth1 root 2>/dev/null
    a=$(cond_args "$1") || return 1
    [ -z "$a" ] && return 0
    # shellcheck disable=SC2086
    tc -n hostA qdisc add dev veth0 root netem $a && tc -n hostB qdisc add dev veth1 root netem $a
}

# --- processes ---------------------------------------------------------------------------
cm_listening() { # NS PORT: an rdma_cm listener on PORT (invisible to ss)
    rdma resource show cm_id 2>/dev/null | grep -q "LISTEN.*:$2 "
}
LISTEN=vb_tcp_listening
# pair LOG SERVER-ARGV... -- CLIENT-ARGV...: server in hostB, client in hostA once the
# server listens on $PORT ($LISTEN says how to tell); both bounded. Output in
# LOG.server / LOG.client; PAIR_END is when the client exited ($EPOCHREALTIME).
pair() {
    local log=$1 srv=() spid crc src; shift
    while [ "$1" != -- ]; do srv+=("$1"); shift; done; shift
    timeout -k 5 "$TMO" ip netns exec hostB "${srv[@]}" > "$log.server" 2>&1 &
    spid=$!
    if ! _vb_await "$spid" "$LISTEN" hostB "$PORT"; then
        kill "$spid" 2>/dev/null; wait "$spid" 2>/dev/null; return 1
    fi
    timeout -k 5 "$TMO" ip netns exec hostA "$@" > "$log.client" 2>&1; crc=$?
    PAIR_END=$EPOCHREALTIME
    wait "$spid" 2>/dev/null; src=$?
    [ $crc = 0 ] && [ $src = 0 ]
}

# /proc/stat's cpu line with a timestamp every 0.2 s, until killed.
cpu_sampler() {
    local l
    while :; do read -r l < /proc/stat; echo "$EPOCHREALTIME $l"; sleep 0.2; done
}
# cpu_cost SAMPLES END RATE-MBIT -> "TOTAL KERNEL" CPU seconds per GB (10^9 bytes) over
# about [END - MARGIN - WINDOW, END - MARGIN/2]: perftest and iperf3 move data at the
# measured rate for the last WINDOW + MARGIN seconds before they exit. The sampler
# stalls for a second or more on a loaded host, so the first sample is the last one
# at or before the window's start (else the first after it), and the interval the
# samples really span is used if it covers at least half the window.
cpu_cost() {
    awk -v e="$2" -v m="$MARGIN" -v w="$WINDOW" -v r="$3" -v hz="$HZ" '
        function busy() { return $3 + $4 + $5 + $8 + $9 + $10 }
        function kern() { return $5 + $8 + $9 }
        $1 <= e - m - w || t1 == "" { t1 = $1; b1 = busy(); k1 = kern() }
        $1 <= e - m / 2 { t2 = $1; b2 = busy(); k2 = kern() }
        END {
            if (t1 == "" || t2 - t1 < w / 2 || r <= 0) exit 1
            gb = r * (t2 - t1) / 8 / 1000
            printf "%.2f %.2f\n", (b2 - b1) / hz / gb, (k2 - k1) / hz / gb
        }' "$1"
}

# measure PART TR CASE COND REP LOG CMD-SERVER... -- CMD-CLIENT...: one run of a
# bandwidth case, with the CPU sampler around it; sets RATE (Mbit/s, from PARSE)
bw_run() {
    local log=$1 sp; shift
    cpu_sampler > "$log.cpu" &
    sp=$!
    pair "$log" "$@"; local rc=$?
    kill "$sp" 2>/dev/null; wait "$sp" 2>/dev/null
    return $rc
}

# --- TCP ---------------------------------------------------------------------------------
# An 8-byte ping-pong over one TCP_NODELAY connection: median and 99th percentile of
# round trip / 2, like perftest's ib_send_lat.
TCP_PINGPONG='
import socket, sys, time
mode, addr, port, iters = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
if mode == "server":
    ls = socket.socket(); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((addr, port)); ls.listen(1); s, _ = ls.accept()
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for _ in range(iters):
        s.sendall(s.recv(8, socket.MSG_WAITALL))
else:
    s = socket.create_connection((addr, port)); s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    rtt = []
    for _ in range(iters):
        t = time.perf_counter(); s.sendall(b"pingpong"); s.recv(8, socket.MSG_WAITALL)
        rtt.append(time.perf_counter() - t)
    rtt.sort()
    print("half_rtt_us %.2f %.2f" % (rtt[len(rtt) // 2] / 2 * 1e6, rtt[min(len(rtt) - 1, len(rtt) * 99 // 100)] / 2 * 1e6))
'
tcp_run() { # PART CASE COND REP
    local part=$1 case=$2 cond=$3 rep=$4 log v p99 q rev=() cost
    log=$OUT/bench-logs/$part-tcp-$case-$cond-r$rep
    PORT=$((PORT + 1)); LISTEN=vb_tcp_listening
    case $case in
        *_lat)
            if pair "$log" python3 -c "$TCP_PINGPONG" server "$ADDR_B" $PORT "$LAT_ITERS" -- \
                     python3 -c "$TCP_PINGPONG" client "$ADDR_B" $PORT "$LAT_ITERS" &&
               read -r v p99 < <(awk '/^half_rtt_us/ {print $2, $3}' "$log.client") && [ -n "$v" ]; then
                row "$part,tcp,$case,$cond,$rep,$v,$p99,us,,,ok,python TCP_NODELAY ping-pong (8 bytes) x $LAT_ITERS"
            else
                row "$part,tcp,$case,$cond,$rep,,,us,,,failed,$(tail -n 1 "$log.client" 2>/dev/null | tr -d ',')"
            fi ;;
        *)  q=${case##*_q}
            case $case in read_*) rev=(-R) ;; esac   # read: data flows server -> client
            if bw_run "$log" iperf3 -s -1 -p $PORT -- \
                     iperf3 -c "$ADDR_B" -p $PORT -O "$MARGIN" -t $((WINDOW + MARGIN)) -P "$q" "${rev[@]}" -J &&
               v=$(python3 -c 'import json, sys; print("%.2f" % (json.load(open(sys.argv[1]))["end"]["sum_received"]["bits_per_second"] / 1e6))' "$log.client" 2>/dev/null); then
                cost=$(cpu_cost "$log.cpu" "$PAIR_END" "$v") || cost=" "
                row "$part,tcp,$case,$cond,$rep,$v,,Mbit/s,${cost% *},${cost#* },ok,iperf3 $q stream(s)${rev:+ reverse}"
            else
                row "$part,tcp,$case,$cond,$rep,,,Mbit/s,,,failed,iperf3"
            fi ;;
    esac
}

# --- RDMA (perftest) ---------------------------------------------------------------------
# perftest converts cycles to time with a CPU clock it calibrates at start; under
# emulation on a loaded host that calibration sometimes fails (every rate prints as
# 0), so a run is retried up to three times before it is given up.
# mrc_counters DEV...: "DEV NAME VALUE" for every port counter of MetaRoCE devices
# (`rdma statistic` prints a "link DEV/1" line, then one "name value" line each).
mrc_counters() {
    local d
    for d in "$@"; do
        rdma statistic show link "$d/1" | awk -v d="$d" 'NF == 2 && $2 ~ /^[0-9]+$/ {print d, $1, $2}'
    done
}
# siw is iWARP: perftest connects it through rdma_cm (-R); the others exchange GIDs.
rdma_run() { # PART TR DEV-A DEV-B CASE COND REP
    local part=$1 tr=$2 da=$3 db=$4 case=$5 cond=$6 rep=$7 log try v p99 args sa ca test cost
    test=ib_${case%_q*}
    case $case in
        *_lat) args=(-s 8 -n "$LAT_ITERS") ;;
        *)     args=(-s 65536 -q "${case##*_q}" -D $((WINDOW + 2 * MARGIN)) -f "$MARGIN") ;;
    esac
    if [ "$tr" = siw ]; then
        # bound to one address: a wildcard rdma_cm listen would also listen through the
        # other host's siw device and collide with this one (EADDRINUSE)
        sa=(-R --bind_source_ip "$ADDR_B") ca=(-R --bind_source_ip "$ADDR_A"); LISTEN=cm_listening
    else
        sa=(-x "$(vb_gid_index "$db" "$ADDR_B")") ca=(-x "$(vb_gid_index "$da" "$ADDR_A")"); LISTEN=vb_tcp_listening
    fi
    for try in 1 2 3; do
        PORT=$((PORT + 1))
        log=$OUT/bench-logs/$part-$tr-$case-$cond-r$rep-try$try
        # MetaRoCE's counters over the run (retransmissions, timeouts, probes...), so
        # that a slow cell can be told apart: $log.counters, non-zero deltas only.
        [ "$tr" = metaroce ] && mrc_counters "$da" "$db" > "$log.counters0"
        if ! bw_run "$log" "$test" -d "$db" "${sa[@]}" -p $PORT -F "${args[@]}" -- \
                           "$test" -d "$da" "${ca[@]}" -p $PORT -F "${args[@]}" "$ADDR_B"; then
            row "$part,$tr,$case,$cond,$rep,,,,,,failed,$(grep -m1 -iE 'fail|couldn|error|unable' "$log.client" "$log.server" | cut -d: -f2- | tr -d ',')"
            return
        fi
        if [ "$tr" = metaroce ]; then
            mrc_counters "$da" "$db" | awk 'NR == FNR {was[$1 " " $2] = $3; next}
                $3 != was[$1 " " $2] {print $1, $2, $3 - was[$1 " " $2]}' "$log.counters0" - > "$log.counters"
            rm -f "$log.counters0"
        fi
        # The row after the "#bytes" header: BW average (MiB/s) is field 4; for the
        # latency test t_typical (median, us) is field 5 and the 99th percentile field 8.
        case $case in
            *_lat) read -r v p99 < <(awk '/^ *#bytes/ {h = 1; next} h && NF >= 8 {print $5, $8; exit}' "$log.client") ;;
            *)     v=$(awk '/^ *#bytes/ {h = 1; next} h && NF >= 4 {printf "%.2f", $4 * 8.388608; exit}' "$log.client") ;;
        esac
        if awk -v v="$v" 'BEGIN {exit !(v + 0 > 0)}'; then
            case $case in
                *_lat) row "$part,$tr,$case,$cond,$rep,$v,$p99,us,,,ok,t_typical and 99% percentile over $LAT_ITERS iterations" ;;
                *)     cost=$(cpu_cost "$log.cpu" "$PAIR_END" "$v") || cost=" "
                       row "$part,$tr,$case,$cond,$rep,$v,,Mbit/s,${cost% *},${cost#* },ok,BW average over ${WINDOW}s (64 KiB messages)" ;;
            esac
            return
        fi
    done
    row "$part,$tr,$case,$cond,$rep,,,,,,failed,no rate after 3 runs (perftest clock calibration)"
}

# --- devices -----------------------------------------------------------------------------
dev_names() { # TR -> "DEV-A DEV-B LINK-TYPE"
    case $1 in
        rxe) echo "rxeA rxeB rxe" ;;
        siw) echo "siwA siwB siw" ;;
        metaroce) echo "mrcA mrcB metaroce" ;;
    esac
}
# dev_up TR NETDEV-A NETDEV-B: the transport's module and one device per host; on
# failure WHY says why.
dev_up() {
    local tr=$1 da db type
    read -r da db type < <(dev_names "$tr")
    WHY=
    case $tr in
        rxe) modprobe rdma_rxe || { WHY="modprobe rdma_rxe failed"; return 1; } ;;
        siw) modprobe siw || { WHY="modprobe siw failed"; return 1; } ;;
        metaroce) lsmod | grep -q '^rdma_metaroce ' ||
                      # shellcheck disable=SC2086  # MRC_ARGS is a list of parameters
                      mrc_insmod ${NUM_PATHS:+num_paths=$NUM_PATHS} rc_mtu="$RC_MTU" $MRC_ARGS ||
                      { WHY="insmod failed"; return 1; } ;;
    esac
    if ! { ip netns exec hostA rdma link add "$da" type "$type" netdev "$2" &&
           ip netns exec hostB rdma link add "$db" type "$type" netdev "$3"; }; then
        WHY="rdma link add failed"; return 1
    fi
    if [ "$tr" != siw ] &&
       ! { wait_for 10 vb_gid_index "$da" "$ADDR_A" && wait_for 10 vb_gid_index "$db" "$ADDR_B"; }; then
        WHY="no RoCE v2 GID"; return 1
    fi
    data_path_works "$tr" "$da" "$db"
}
dev_down() { # TR
    local da db type
    read -r da db type < <(dev_names "$1")
    rdma link del "$da" 2>/dev/null; rdma link del "$db" 2>/dev/null; true
}

# data_path_works TR DEV-A DEV-B: a short ping-pong with data checking (rping through
# rdma_cm for siw, ibv_rc_pingpong otherwise); on failure WHY says what it printed.
data_path_works() {
    local tr=$1 log=$OUT/bench-logs/$1-probe-$PORT ga gb
    PORT=$((PORT + 1))
    if [ "$tr" = siw ]; then
        LISTEN=cm_listening
        TMO=30 pair "$log" rping -s -a "$ADDR_B" -p $PORT -C 10 -V -- \
                               rping -c -a "$ADDR_B" -p $PORT -C 10 -V && return 0
    else
        ga=$(vb_gid_index "$2" "$ADDR_A") gb=$(vb_gid_index "$3" "$ADDR_B")
        LISTEN=vb_tcp_listening
        if TMO=30 pair "$log" ibv_rc_pingpong -d "$3" -g "$gb" -p $PORT -n 20 -c -- \
                              ibv_rc_pingpong -d "$2" -g "$ga" -p $PORT -n 20 -c "$ADDR_B" &&
           ! grep -q 'invalid data' "$log.client" "$log.server"; then
            return 0
        fi
    fi
    WHY="data path not working: $(cat "$log.client" "$log.server" 2>/dev/null |
        grep -m1 -iE "couldn|fail|error|invalid|in use|refused|unreach" | tr -d ',')"
    return 1
}

unavailable() { # PART TR CONDS: every cell of the part as unavailable ($WHY)
    local c case
    for c in $3; do for case in $CASES; do row "$1,$2,$case,$c,1,,,,,,unavailable,$WHY"; done; done
    progress "$2: unavailable ($WHY)"
}

# --- part 1: one link, every condition ---------------------------------------------------
link_rps() { # CASE: receive packet steering over every CPU for bandwidth cases if $RPS
    local mask=0
    [ "$RPS" = 1 ] && [ "$1" != send_lat ] && mask=$(all_cpus_mask)
    hosts_rps "$mask"
}
part_link() {
    local tr cond case rep da db type
    mk_hosts
    # The same link for every transport: veth's largest MTU by default (TCP moves
    # 64 KiB GSO segments whatever the MTU; rxe's IB MTU stops at 4096; MetaRoCE's
    # rc_mtu may use it) and, like a NIC's RSS, received packets spread over the
    # CPUs by flow hash (RPS) rather than all handled on the transmitting CPU, for
    # the bandwidth cases (link_rps).
    ip -n hostA link set veth0 mtu "$LINK_MTU"
    ip -n hostB link set veth1 mtu "$LINK_MTU"
    ADDR_A=198.18.0.1 ADDR_B=198.18.0.2
    for tr in $TRANSPORTS; do
        if [ "$tr" != tcp ]; then
            read -r da db type < <(dev_names "$tr")
            if ! dev_up "$tr" veth0 veth1; then
                unavailable link "$tr" "$CONDS"; dev_down "$tr"; continue
            fi
        fi
        # One unrecorded bandwidth run first: under TCG the first use of a code
        # path pays for translating it, and without this the first transport's first
        # cells (TCP lossless) came out below its 0.1% cells in every full run.
        set_cond clean; link_rps write_bw_q1
        progress "$tr: warm-up (not recorded)"
        if [ "$tr" = tcp ]; then
            WARMUP=1 tcp_run warmup write_bw_q1 clean 0
        else
            WARMUP=1 rdma_run warmup "$tr" "$da" "$db" write_bw_q1 clean 0
        fi
        # Round by round: run 1 of every cell, then run 2... A cell's runs are
        # spread over the transport's whole turn rather than made back to back, so
        # a guest (or host) that slows down as the turn goes on costs every condition
        # alike, and a loss cell's ratio to the lossless one measures the loss.
        for rep in $(seq "$REPEATS"); do
            for cond in $CONDS; do
                set_cond "$cond" || { progress "unknown condition $cond"; continue; }
                for case in $CASES; do
                    link_rps "$case"
                    progress "$tr: $case, $cond, run $rep/$REPEATS"
                    if [ "$tr" = tcp ]; then
                        tcp_run link "$case" "$cond" "$rep"
                    else
                        rdma_run link "$tr" "$da" "$db" "$case" "$cond" "$rep"
                    fi
                done
            done
        done
        set_cond clean
        [ "$tr" = tcp ] || dev_down "$tr"
    done
    rm_hosts
}

# --- part 2: multipath -------------------------------------------------------------------
# hostA veth0 198.18.0.1/24 - mprA ha 198.18.0.254 ; hostB veth1 198.18.1.2/24 - mprB hb
# 198.18.1.254 ; path i: mprA pa<i> 198.18.1<i>.1/24 - mprB pb<i> 198.18.1<i>.2/24.
# Each router spreads the other host's /24 over the paths with an ECMP route hashing
# on addresses and UDP/TCP ports (fib_multipath_hash_policy=1).
mk_mp() {
    local ns i nhA=() nhB=()
    for ns in hostA hostB mprA mprB; do ip netns add $ns; ip -n $ns link set lo up; done
    ip link add veth0 netns hostA type veth peer name ha netns mprA
    ip link add veth1 netns hostB type veth peer name hb netns mprB
    ip -n hostA addr add 198.18.0.1/24 dev veth0
    ip -n mprA addr add 198.18.0.254/24 dev ha
    ip -n hostB addr add 198.18.1.2/24 dev veth1
    ip -n mprB addr add 198.18.1.254/24 dev hb
    for i in $(seq "$NPATHS"); do
        ip link add "pa$i" netns mprA type veth peer name "pb$i" netns mprB
        ip -n mprA addr add "198.18.1$i.1/24" dev "pa$i"
        ip -n mprB addr add "198.18.1$i.2/24" dev "pb$i"
        ip -n mprA link set "pa$i" up; ip -n mprB link set "pb$i" up
        nhA+=(nexthop via "198.18.1$i.2" dev "pa$i") nhB+=(nexthop via "198.18.1$i.1" dev "pb$i")
    done
    ip -n hostA link set veth0 up; ip -n mprA link set ha up
    ip -n hostB link set veth1 up; ip -n mprB link set hb up
    ip -n hostA route add 198.18.0.0/15 via 198.18.0.254
    ip -n hostB route add 198.18.0.0/15 via 198.18.1.254
    for ns in mprA mprB; do
        ip netns exec $ns sysctl -qw net.ipv4.ip_forward=1 net.ipv4.fib_multipath_hash_policy=1 \
            net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0
    done
    ip -n mprA route add 198.18.1.0/24 "${nhA[@]}"
    ip -n mprB route add 198.18.0.0/24 "${nhB[@]}"
}
mp_state() { # healthy|degraded: per-path rate limit on every path; path 1 degraded
    local i extra
    for i in $(seq "$NPATHS"); do
        extra=
        [ "$1" = degraded ] && [ "$i" = 1 ] && extra=$MP_DEGRADE
        tc -n mprA qdisc del dev "pa$i" root 2>/dev/null; tc -n mprB qdisc del dev "pb$i" root 2>/dev/null
        [ -z "$MP_RATE$extra" ] && continue
        # shellcheck disable=SC2086
        tc -n mprA qdisc add dev "pa$i" root netem $extra ${MP_RATE:+rate $MP_RATE} limit 100 &&
            tc -n mprB qdisc add dev "pb$i" root netem $extra ${MP_RATE:+rate $MP_RATE} limit 100
    done
}
# Packets each path carried so far, mprA -> mprB and back (pa<i> tx + pb<i> tx).
mp_counts() {
    local i a b
    for i in $(seq "$NPATHS"); do
        read -r a < <(ip netns exec mprA cat "/sys/class/net/pa$i/statistics/tx_packets")
        read -r b < <(ip netns exec mprB cat "/sys/class/net/pb$i/statistics/tx_packets")
        printf '%s ' $((a + b))
    done
}
part_mp() {
    local tr st case rep da db type before now was delta i mpcases="write_bw_q1 write_bw_q4"
    mk_mp
    ADDR_A=198.18.0.1 ADDR_B=198.18.1.2
    if ! ip netns exec hostA ping -c 2 -W 5 -q 198.18.1.2 > "$OUT/bench-logs/mp-ping" 2>&1; then
        progress "multipath topology does not route: skipped"; rm_all_ns; return
    fi
    for tr in $TRANSPORTS; do
        if [ "$tr" != tcp ]; then
            read -r da db type < <(dev_names "$tr")
            if ! dev_up "$tr" veth0 veth1; then
                CASES=$mpcases unavailable mp "$tr" "healthy degraded"; dev_down "$tr"; continue
            fi
        fi
        # Round by round, as in part 1: healthy and degraded alternate.
        for rep in $(seq "$REPEATS"); do
            for st in healthy degraded; do
                mp_state "$st"
                for case in $mpcases; do
                    progress "multipath $tr: $case, $st, run $rep/$REPEATS"
                    before=$(mp_counts)
                    if [ "$tr" = tcp ]; then
                        tcp_run mp "$case" "$st" "$rep"
                    else
                        rdma_run mp "$tr" "$da" "$db" "$case" "$st" "$rep"
                    fi
                    read -ra now <<< "$(mp_counts)"; read -ra was <<< "$before"; delta=
                    for i in "${!now[@]}"; do delta+=" $((now[i] - was[i]))"; done
                    echo "$tr,$case,$st,$rep,${delta# }" >> "$OUT/mp-path-packets.txt"
                done
            done
        done
        [ "$tr" = tcp ] || dev_down "$tr"
    done
    rm_all_ns
}

# --- part 3: kernel memory per idle connected QP -----------------------------------------
part_qpmem() {
    local tr da db type ga gb line
    local mtu cond log
    mk_hosts
    ADDR_A=198.18.0.1 ADDR_B=198.18.0.2
    # The veths' default MTU (condition "idle"), then the one-link cases' MTU, where
    # MetaRoCE's connections may use rc_mtu and each QP's buffers are sized for it.
    for mtu in $(printf '%s\n' 1500 "$LINK_MTU" | awk '!seen[$0]++'); do
        if [ "$mtu" = 1500 ]; then cond=idle; else cond=idle_mtu$mtu; fi
        ip -n hostA link set veth0 mtu "$mtu"; ip -n hostB link set veth1 mtu "$mtu"
        for tr in rxe metaroce; do
            has "$TRANSPORTS" "$tr" || continue
            read -r da db type < <(dev_names "$tr")
            progress "$tr: kernel memory of $QP_PAIRS connected QP pairs (veth MTU $mtu)"
            if ! dev_up "$tr" veth0 veth1; then
                row "qpmem,$tr,qp_memory,$cond,1,,,,,,unavailable,$WHY"; dev_down "$tr"; continue
            fi
            ga=$(vb_gid_index "$da" "$ADDR_A") gb=$(vb_gid_index "$db" "$ADDR_B")
            log=$OUT/bench-logs/qpmem-$tr${cond#idle}
            if timeout -k 5 $((QP_PAIRS * 2 + 120)) ip netns exec hostA python3 "$HERE/qpmem.py" "$da" "$ga" "$db" "$gb" "$QP_PAIRS" \
                   > "$log" 2>&1 &&
               line=$(grep '^qpmem ' "$log"); then
                # qpmem QPS SLAB VMALLOC PERCPU MEMFREE SECONDS (kB): bytes per QP
                # shellcheck disable=SC2086
                set -- $line
                row "qpmem,$tr,qp_slab,$cond,1,$(( $3 * 1024 / $2 )),,B/QP,,,ok,/proc/meminfo Slab delta over $2 connected RC QPs"
                row "qpmem,$tr,qp_vmalloc,$cond,1,$(( $4 * 1024 / $2 )),,B/QP,,,ok,VmallocUsed delta over $2 QPs"
                row "qpmem,$tr,qp_kernel,$cond,1,$(( ($3 + $4 + $5) * 1024 / $2 )),,B/QP,,,ok,Slab+VmallocUsed+Percpu delta over $2 QPs (16 send/16 recv WRs)"
                row "qpmem,$tr,qp_memfree,$cond,1,$(( $6 * 1024 / $2 )),,B/QP,,,ok,MemFree drop over $2 QPs (kernel and process)"
            else
                row "qpmem,$tr,qp_kernel,$cond,1,,,,,,failed,$(tail -n 1 "$log" | tr -d ',')"
            fi
            dev_down "$tr"
        done
    done
    rm_hosts
}

start=$(date +%s)
has "$PARTS" link && part_link
has "$PARTS" mp && part_mp
has "$PARTS" qpmem && part_qpmem
echo "guest_seconds=$(( $(date +%s) - start ))" >> "$OUT/bench-params.txt"
cleanup
python3 "$HERE/report.py" "$OUT"
