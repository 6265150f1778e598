#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Guest side of `make bench` (tools/bench): TCP, rdma_rxe and MetaRoCE measured one
# after the other in the same boot, between the same two namespaces (hostA veth0
# 198.18.0.1 -> hostB veth1 198.18.0.2), for ib_write_bw, ib_send_bw, ib_read_bw and
# ib_send_lat, each on a clean link and with 1% netem loss on both veths.
#   bench.sh OUTDIR      writes OUTDIR/bench.csv (one row per measurement) and
#                        OUTDIR/progress.log (tools/bench follows it live)
# TCP stands in with iperf3 (one stream; -R for the read direction) and a 2-byte
# TCP_NODELAY ping-pong for latency. A transport whose data path does not work (a
# short RC ping-pong fails) is recorded as unavailable instead of failing the bench.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/../lib/ktap.sh"     # mrc_insmod
. "$HERE/../lib/net.sh"
OUT=${1:?usage: bench.sh OUTDIR}
# shellcheck disable=SC2034  # read by verbs.sh
VB_LOGDIR=$OUT/bench-logs
. "$HERE/../lib/verbs.sh"    # vb_gid_index, vb_tcp_listening, _vb_await
# shellcheck disable=SC2034  # read by mrc_insmod
KO=${METAROCE_KO:-$HERE/../../rdma_metaroce.ko}
CSV=$OUT/bench.csv
BW_SECONDS=${BENCH_BW_SECONDS:-5}      # perftest -D / iperf3 -t
LAT_ITERS=${BENCH_LAT_ITERS:-1000}
TMO=120                                # bound on every process
PORT=21000

progress() { echo "$*" | tee -a "$OUT/progress.log" >&2; }
row() { echo "$*" >> "$CSV"; }        # transport,test,loss,value,unit,status,note

cleanup() {
    rdma link del rxeA 2>/dev/null; rdma link del rxeB 2>/dev/null
    rdma link del mrcA 2>/dev/null; rdma link del mrcB 2>/dev/null
    rm_hosts; rmmod rdma_metaroce 2>/dev/null; modprobe -r rdma_rxe 2>/dev/null; true
}
trap cleanup EXIT
cleanup
: > "$OUT/progress.log"
echo "transport,test,loss_pct,value,unit,status,note" > "$CSV"
mk_hosts

netem() { # LOSS-PCT: 0 removes the qdisc
    tc -n hostA qdisc del dev veth0 root 2>/dev/null
    tc -n hostB qdisc del dev veth1 root 2>/dev/null
    [ "$1" = 0 ] && return 0
    tc -n hostA qdisc add dev veth0 root netem loss "$1%" &&
        tc -n hostB qdisc add dev veth1 root netem loss "$1%"
}

# pair LOG SERVER-ARGV... -- CLIENT-ARGV...: server in hostB, client in hostA once the
# server listens on $PORT; both bounded. Output in LOG.server / LOG.client.
pair() {
    local log=$1 srv=() spid crc src; shift
    while [ "$1" != -- ]; do srv+=("$1"); shift; done; shift
    timeout -k 5 "$TMO" ip netns exec hostB "${srv[@]}" > "$log.server" 2>&1 &
    spid=$!
    if ! _vb_await "$spid" vb_tcp_listening hostB "$PORT"; then
        kill "$spid" 2>/dev/null; wait "$spid" 2>/dev/null; return 1
    fi
    timeout -k 5 "$TMO" ip netns exec hostA "$@" > "$log.client" 2>&1; crc=$?
    wait "$spid" 2>/dev/null; src=$?
    [ $crc = 0 ] && [ $src = 0 ]
}

# --- TCP ---------------------------------------------------------------------------------
# A 2-byte ping-pong over one TCP_NODELAY connection: median round trip / 2, like
# perftest's t_typical for ib_send_lat.
TCP_PINGPONG='
import socket, sys, time
mode, addr, port, iters = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
if mode == "server":
    ls = socket.socket(); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((addr, port)); ls.listen(1); s, _ = ls.accept()
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for _ in range(iters):
        s.sendall(s.recv(2, socket.MSG_WAITALL))
else:
    s = socket.create_connection((addr, port)); s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    rtt = []
    for _ in range(iters):
        t = time.perf_counter(); s.sendall(b"pp"); s.recv(2, socket.MSG_WAITALL)
        rtt.append(time.perf_counter() - t)
    rtt.sort(); print("half_rtt_median_us %.2f" % (rtt[len(rtt) // 2] / 2 * 1e6))
'
tcp_measure() { # TEST LOSS
    local test=$1 loss=$2 log=$OUT/bench-logs/tcp-$1-loss$2 v rev=()
    PORT=$((PORT + 1))
    case $test in
        *_lat)
            if pair "$log" python3 -c "$TCP_PINGPONG" server 198.18.0.2 $PORT "$LAT_ITERS" -- \
                     python3 -c "$TCP_PINGPONG" client 198.18.0.2 $PORT "$LAT_ITERS" &&
               v=$(awk '/^half_rtt_median_us/ {print $2}' "$log.client") && [ -n "$v" ]; then
                row "tcp,$test,$loss,$v,us,ok,python TCP_NODELAY ping-pong (2 bytes)"
            else
                row "tcp,$test,$loss,,us,failed,$(tail -n 1 "$log.client" 2>/dev/null | tr -d ',')"
            fi ;;
        *)  [ "$test" = ib_read_bw ] && rev=(-R)    # read: data flows server -> client
            if pair "$log" iperf3 -s -1 -p $PORT -- \
                     iperf3 -c 198.18.0.2 -p $PORT -t "$BW_SECONDS" "${rev[@]}" -J &&
               v=$(python3 -c 'import json, sys; print("%.2f" % (json.load(open(sys.argv[1]))["end"]["sum_received"]["bits_per_second"] / 1e6))' "$log.client" 2>/dev/null); then
                row "tcp,$test,$loss,$v,Mbit/s,ok,iperf3 1 stream${rev:+ reverse}"
            else
                row "tcp,$test,$loss,,Mbit/s,failed,iperf3"
            fi ;;
    esac
}

# --- RDMA (perftest) ---------------------------------------------------------------------
# perftest converts cycles to time with a CPU clock it calibrates at start; under
# emulation on a loaded host that calibration sometimes fails (every rate prints as
# 0), so a run is retried up to three times before its cell is given up.
rdma_measure() { # TRANSPORT DEV-A DEV-B TEST LOSS
    local tr=$1 da=$2 db=$3 test=$4 loss=$5 log try v args
    local ga gb
    ga=$(vb_gid_index "$da" 198.18.0.1) gb=$(vb_gid_index "$db" 198.18.0.2)
    case $test in
        *_lat) args=(-n "$LAT_ITERS") ;;
        *)     args=(-D "$BW_SECONDS") ;;
    esac
    for try in 1 2 3; do
        PORT=$((PORT + 1))
        log=$OUT/bench-logs/$tr-$test-loss$loss-try$try
        if ! pair "$log" "$test" -d "$db" -x "$gb" -p $PORT -F "${args[@]}" -- \
                         "$test" -d "$da" -x "$ga" -p $PORT -F "${args[@]}" 198.18.0.2; then
            row "$tr,$test,$loss,,,failed,$(grep -m1 -iE 'fail|couldn|error' "$log.client" | tr -d ',')"
            return
        fi
        # The row after the "#bytes" header: BW average (MiB/s) is field 4; for the
        # latency tests t_typical (median, µs) is field 5.
        case $test in
            *_lat) v=$(awk '/^ *#bytes/ {h = 1; next} h && NF >= 6 {print $5; exit}' "$log.client") ;;
            *)     v=$(awk '/^ *#bytes/ {h = 1; next} h && NF >= 4 {printf "%.2f", $4 * 8.388608; exit}' "$log.client") ;;
        esac
        if awk -v v="$v" 'BEGIN {exit !(v + 0 > 0)}'; then
            case $test in
                *_lat) row "$tr,$test,$loss,$v,us,ok,t_typical over $LAT_ITERS iterations" ;;
                *)     row "$tr,$test,$loss,$v,Mbit/s,ok,BW average over ${BW_SECONDS}s (64 KiB messages)" ;;
            esac
            return
        fi
    done
    row "$tr,$test,$loss,,,failed,no rate after 3 runs (perftest clock calibration)"
}

TESTS="ib_write_bw ib_send_bw ib_read_bw ib_send_lat"

# data_path_works DEV-A DEV-B: a short RC ping-pong with data checking; on failure
# WHY says what the client printed.
data_path_works() {
    local ga gb log=$OUT/bench-logs/$1-probe
    WHY=
    if ! ga=$(vb_gid_index "$1" 198.18.0.1) || ! gb=$(vb_gid_index "$2" 198.18.0.2); then
        WHY="no RoCE v2 GID"; return 1
    fi
    PORT=$((PORT + 1))
    if TMO=30 pair "$log" ibv_rc_pingpong -d "$2" -g "$gb" -p $PORT -n 20 -c -- \
                          ibv_rc_pingpong -d "$1" -g "$ga" -p $PORT -n 20 -c 198.18.0.2 &&
       ! grep -q 'invalid data' "$log.client" "$log.server"; then
        return 0
    fi
    WHY="data path not working: ibv_rc_pingpong: $(cat "$log.client" "$log.server" 2>/dev/null |
        grep -m1 -iE "couldn|fail|error|invalid" | tr -d ',')"
    return 1
}

rdma_transport() { # NAME DEV-A DEV-B LINK-TYPE
    local tr=$1 da=$2 db=$3 type=$4 why='' loss test
    if ! { ip netns exec hostA rdma link add "$da" type "$type" netdev veth0 &&
           ip netns exec hostB rdma link add "$db" type "$type" netdev veth1 &&
           wait_for 10 vb_gid_index "$da" 198.18.0.1 && wait_for 10 vb_gid_index "$db" 198.18.0.2; }; then
        why="rdma link add failed"
    elif ! data_path_works "$da" "$db"; then
        why=$WHY
    fi
    for loss in 0 1; do
        netem "$loss"
        for test in $TESTS; do
            if [ -n "$why" ]; then
                row "$tr,$test,$loss,,,unavailable,$why"
                continue
            fi
            progress "$tr: $test, ${loss}% loss"
            rdma_measure "$tr" "$da" "$db" "$test" "$loss"
        done
    done
    netem 0
    [ -z "$why" ] || progress "$tr: unavailable ($why)"
    rdma link del "$da"; rdma link del "$db"
}

progress "TCP (iperf3, python ping-pong)"
for loss in 0 1; do
    netem "$loss"
    for test in $TESTS; do
        progress "tcp: $test, ${loss}% loss"
        tcp_measure "$test" "$loss"
    done
done
netem 0

progress "rdma_rxe"
modprobe rdma_rxe
rdma_transport rxe rxeA rxeB rxe
modprobe -r rdma_rxe

progress "MetaRoCE (rdma_metaroce)"
if mrc_insmod; then
    rdma_transport metaroce mrcA mrcB metaroce
    rmmod rdma_metaroce
else
    for loss in 0 1; do for test in $TESTS; do row "metaroce,$test,$loss,,,unavailable,insmod failed"; done; done
fi

python3 "$HERE/report.py" "$CSV" "$OUT"
