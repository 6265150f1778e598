#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# The data-path suite (selftests/lib/verbs.sh) on MetaRoCE: unmodified verbs programs
# (ibv_*_pingpong -c, perftest, rping) between two namespaces, clean and under netem
# loss/reordering, then a client killed mid-transfer and `rdma link del` under
# traffic. rxe_data.sh runs the same suite on rdma_rxe. Runs as root in the test VM.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/../lib/ktap.sh"
. "$HERE/../lib/net.sh"
. "$HERE/../lib/verbs.sh"
# shellcheck disable=SC2034  # read by mrc_insmod
KO=${METAROCE_KO:-$HERE/../../rdma_metaroce.ko}

# shellcheck disable=SC2034  # read by verbs.sh
VB_TYPE=metaroce VB_DEV_A=mrcA VB_DEV_B=mrcB VB_RX_COUNTER=rx_packets VB_UC=1
# The module's default udp_port; a UD payload follows the MRH (20) and UD (12) headers.
# shellcheck disable=SC2034
VB_UDP_PORT=4792 VB_MAD_AT=$((20 + 8 + 20 + 12))

cleanup() { vb_links_del; rm_hosts; rmmod rdma_metaroce 2>/dev/null; true; }
trap cleanup EXIT
cleanup

ktap_header
check "load rdma_metaroce" mrc_insmod
vb_suite
check "rmmod rdma_metaroce after the suite" rmmod rdma_metaroce

# links_up [SUFFIX]: rdma link add on both hosts' veths, then their RoCE v2 GIDs
# (VB_GID_A, VB_GID_B) once both have one.
links_up() {
    check "rdma link add $VB_DEV_A and $VB_DEV_B${1:-}" vb_links_add
    check "both devices have their RoCE v2 GID" wait_for 10 vb_find_gids
    vb_find_gids
}

# rc_mtu_case RC_MTU LINK_MTU MIN_AVG [ZERO_COPY [STEER [RPS [UNLOCKED]]]]: RC packets of up to RC_MTU
# bytes on veths with LINK_MTU, the data checked end to end, and one ib_write_bw
# direction (A sends data packets and no ACKs) whose packets must average more than
# MIN_AVG bytes. With zero_copy_tx=ZERO_COPY (default 1) nine in ten of those packets
# at least carry their payload as page references, or (0) none does; path probes
# (path_probes: a path that timed out, as under a slow debug kernel) carry no payload
# and are not counted among them. With
# steer_bytes=STEER (default: the module's) and more than one CPU, B hands received
# packets of STEER bytes or more to another CPU (spec MR-10.3.5), or with 0 none, nor
# with RPS=1, where both veths spread received packets over the CPUs themselves
# (receive packet steering). With unlocked_copy_bytes=UNLOCKED (default: the
# module's) B copies the payload pieces of at least that many bytes after releasing
# the QP's lock (spec MR-10.1.3), or with 0 none. A 64 KiB rping then checks READ
# and WRITE payloads both ways.
rc_mtu_case() {
    local mtu_rc=$1 mtu_link=$2 avg_min=$3 zc=${4:-1} steer=${5:-} rps=${6:-0} unlocked=${7:-}
    local pk0 by0 zc0 pk by zcd st0 st uc0 uc pp0 pp
    local on=; [ "$rps" = 1 ] && on=" on veths with RPS"
    vb_links_del; rm_hosts
    check "load rdma_metaroce rc_mtu=$mtu_rc zero_copy_tx=$zc${steer:+ steer_bytes=$steer}${unlocked:+ unlocked_copy_bytes=$unlocked}$on" \
        mrc_insmod rc_mtu="$mtu_rc" zero_copy_tx="$zc" ${steer:+steer_bytes=$steer} ${unlocked:+unlocked_copy_bytes=$unlocked}
    mk_hosts
    ip -n hostA link set veth0 mtu "$mtu_link"; ip -n hostB link set veth1 mtu "$mtu_link"
    if [ "$rps" = 1 ]; then
        check "receive packet steering over every CPU on both veths" hosts_rps "$(all_cpus_mask)"
    fi
    links_up " on $mtu_link-byte veths"
    vb_pingpong " with rc_mtu=$mtu_rc (64 KiB messages)" ibv_rc_pingpong -s 65536
    pk0=$(vb_counter "$VB_DEV_A" tx_packets) by0=$(vb_counter "$VB_DEV_A" tx_bytes)
    zc0=$(vb_counter "$VB_DEV_A" tx_zero_copy) st0=$(vb_counter "$VB_DEV_B" rx_steered)
    uc0=$(vb_counter "$VB_DEV_B" rx_unlocked_copies) pp0=$(vb_counter "$VB_DEV_A" path_probes)
    vb_perftest " with rc_mtu=$mtu_rc zero_copy_tx=$zc" ib_write_bw -s 65536
    pk=$(( $(vb_counter "$VB_DEV_A" tx_packets) - pk0 )) by=$(( $(vb_counter "$VB_DEV_A" tx_bytes) - by0 ))
    zcd=$(( $(vb_counter "$VB_DEV_A" tx_zero_copy) - zc0 )) st=$(( $(vb_counter "$VB_DEV_B" rx_steered) - st0 ))
    uc=$(( $(vb_counter "$VB_DEV_B" rx_unlocked_copies) - uc0 )) pp=$(( $(vb_counter "$VB_DEV_A" path_probes) - pp0 ))
    ktap_diag "$VB_DEV_A sent $pk packets ($pp of them path probes), $by bytes, $zcd with their payload's pages attached; $VB_DEV_B steered $st, copied $uc pieces unlocked"
    check "its RDMA WRITE packets carried more than $avg_min bytes each on average" \
        test "$pk" -gt 0 -a "$by" -gt $((pk * avg_min))
    if [ "$zc" = 1 ]; then
        check "nine in ten of its data packets at least went out by reference (tx_zero_copy)" \
            test "$pp" -lt "$pk" -a $((zcd * 10)) -ge $(((pk - pp) * 9))
    else
        check "none of them went out by reference with zero_copy_tx=0" test "$zcd" -eq 0
    fi
    if [ "$steer" = 0 ]; then
        check "with steer_bytes=0 $VB_DEV_B handled every packet where it arrived (rx_steered)" test "$st" -eq 0
    elif [ "$rps" = 1 ]; then
        check "with RPS spreading them $VB_DEV_B handled every packet where it arrived (rx_steered)" test "$st" -eq 0
    elif [ "$(nproc)" -gt 1 ]; then
        # Each 64 KiB message is at least two such packets; A's ACKs are steered too.
        check "$VB_DEV_B copied the large packets on another CPU (rx_steered, MR-10.3.5)" \
            test "$st" -ge "$VB_ITERS"
    fi
    if [ "$unlocked" = 0 ]; then
        check "with unlocked_copy_bytes=0 $VB_DEV_B copied every payload under the QP's lock (rx_unlocked_copies)" \
            test "$uc" -eq 0
    else
        # Each 64 KiB message is at least two packets of page-sized pieces or more.
        check "$VB_DEV_B copied payload after releasing the QP's lock (rx_unlocked_copies, MR-10.1.3)" \
            test "$uc" -ge "$VB_ITERS"
    fi
    VB_RPING_SIZE=65000 VB_RPING_COUNT=100 vb_rping " with rc_mtu=$mtu_rc"
    vb_links_del; rm_hosts
    check "rmmod rdma_metaroce (rc_mtu=$mtu_rc$on)" rmmod rdma_metaroce
}
# Beyond verbs' largest MTU (4096) on a jumbo-frame link: 64 KiB writes take 8 packets
# of at most 8888 bytes (9000 - 112 of headers), 8 KiB each on average; with verbs'
# 4096-byte MTU they would take 16 of 4 KiB.
rc_mtu_case 9000 9000 6000
# Beyond Ethernet's jumbo frames, on a virtual link whose MTU allows it (MR-2.6.1
# allows up to 65000): 64 KiB messages travel as two 32 KiB packets.
rc_mtu_case 32768 65535 24000
# The same with every payload copied into its packet, every packet handled on the
# CPU it arrives on, and every copy into memory made under the QP's lock.
rc_mtu_case 32768 65535 24000 0 0 0 0
# The same on veths that spread received packets themselves (RPS): no steering on top.
rc_mtu_case 32768 65535 24000 1 "" 1

# reply_wait_us (spec MR-5.4.6): in a request/response exchange the answers carry
# the acknowledgements, so most ACKs never travel as packets of their own; the data
# is checked, and a one-way stream (no answers to wait for) still completes. An ACK
# rides on an answer only when the answer leaves within reply_wait_us of the request's
# arrival, i.e. when the program's turnaround (recv completion polled, answer posted)
# is shorter than the wait; how long that takes depends on the machine (50 us held on
# some runs of this VM and not on others). So the wait is chosen from a round trip
# measured first without holding: one round trip is two turnarounds and two transits,
# so a wait of one round trip covers a typical turnaround twice over. A side holds an
# ACK only while it is itself sending, i.e. it sent within the last 8 x reply_wait_us:
# when the round trip with the wait is not under that (the debug kernel: about 4 ms,
# beyond the longest wait, 500 us), nothing is held and the count is not asserted;
# nor when the round trip measured without holding is itself beyond that longest
# wait, which then covers no turnaround (a machine busy with other work).
reply_wait_case() {
    local wait_us rtt0 acks0 carried0 acks carried rtt
    check "load rdma_metaroce to measure a round trip (reply_wait_us=0)" mrc_insmod
    mk_hosts
    links_up
    vb_perftest " with reply_wait_us=0" ib_send_lat -s 8
    rtt0=$(vb_round_trip_us)
    vb_links_del; rm_hosts
    check "rmmod rdma_metaroce (reply_wait_us=0)" rmmod rdma_metaroce
    wait_us=$rtt0
    [ "$wait_us" -lt 50 ] && wait_us=50
    [ "$wait_us" -gt 500 ] && wait_us=500
    ktap_diag "round trip without holding ${rtt0} us: reply_wait_us=$wait_us"
    check "load rdma_metaroce reply_wait_us=$wait_us" mrc_insmod reply_wait_us=$wait_us
    mk_hosts
    links_up
    vb_pingpong " with reply_wait_us=$wait_us" ibv_rc_pingpong -s 64
    acks0=$(vb_counter "$VB_DEV_A" acks_sent) carried0=$(vb_counter "$VB_DEV_A" acks_piggybacked)
    vb_perftest " with reply_wait_us=$wait_us" ib_send_lat -s 8
    acks=$(( $(vb_counter "$VB_DEV_A" acks_sent) - acks0 ))
    carried=$(( $(vb_counter "$VB_DEV_A" acks_piggybacked) - carried0 ))
    rtt=$(vb_round_trip_us)
    ktap_diag "$VB_DEV_A: $acks ACK packets, $carried ACKs carried by its answers; round trip ${rtt} us"
    if [ "$rtt0" -gt "$wait_us" ]; then
        # The wait was cut to the longest allowed: it no longer covers a turnaround
        # (a loaded or slow machine: 2,002 us without holding on one run here while a
        # kernel was being built beside the guest, 133 ACK packets and 70 carried).
        ktap_skip "most of $VB_DEV_A's ACKs rode on its answers: round trip ${rtt0} us without holding, beyond the longest wait ($wait_us us)"
    elif [ "$rtt" -gt 0 ] && [ "$rtt" -lt $((8 * wait_us)) ]; then
        check "most of $VB_DEV_A's ACKs rode on its answers" test "$carried" -gt "$acks"
    else
        ktap_skip "most of $VB_DEV_A's ACKs rode on its answers: round trip ${rtt} us, not under $((8 * wait_us)) us"
    fi
    vb_perftest " with reply_wait_us=$wait_us" ib_write_bw -s 65536
    vb_links_del; rm_hosts
    check "rmmod rdma_metaroce (reply_wait_us=$wait_us)" rmmod rdma_metaroce
}
reply_wait_case

# Request/response under loss (no delay, so a QP's runs from its process and from the
# receive softirq overlap on both vCPUs): every round trip completes, and the lost
# messages are recovered by their tail-loss probes (2 srtt + ack_delay, MR-5.3.4)
# rather than by path timeouts (10 ms at least). A QP's work must therefore wait for
# its earliest deadline: a work left pending for a later one (a path RTO) hid the
# next message's tail probe (before 2026-12-02: 33 path timeouts to 174 probes here).
# The exchange must also never stall: a build whose idle run could cancel the work a
# concurrent run had just armed stalled in four runs of four on this link (it passed
# once on 1500-byte veths).
lossy_request_response_case() {
    local n=${VB_LOSSY_RR_ITERS:-10000} tp0 pt0 tp pt rtt mean
    # The bench's latency link: 64 KiB veths, rc_mtu=32768.
    check "load rdma_metaroce rc_mtu=32768 for request/response under loss" mrc_insmod rc_mtu=32768
    mk_hosts
    ip -n hostA link set veth0 mtu 65535; ip -n hostB link set veth1 mtu 65535
    links_up
    check "netem loss 1% on veth0 and veth1" \
        eval "tc -n hostA qdisc add dev veth0 root netem loss 1% && tc -n hostB qdisc add dev veth1 root netem loss 1%"
    tp0=$(vb_counter "$VB_DEV_A" tail_probes) pt0=$(vb_counter "$VB_DEV_A" path_timeouts)
    VB_ITERS=$n vb_perftest " under netem loss 1%" ib_send_lat -s 8
    tp=$(( $(vb_counter "$VB_DEV_A" tail_probes) - tp0 )) pt=$(( $(vb_counter "$VB_DEV_A" path_timeouts) - pt0 ))
    rtt=$(vb_round_trip_us) mean=$(vb_mean_round_trip_us)
    ktap_diag "$VB_DEV_A: $tp tail probes, $pt path timeouts in $n round trips; round trip ${rtt} us, mean ${mean} us"
    # A tail probe waits 2 srtt + 0.5 ms, srtt being the largest of the QP's four
    # paths; a path times out at 10 ms at the earliest. The count tells the two
    # apart only while that wait stays well inside the floor: a round trip of at
    # most 1 ms (2.5 ms of 10; one path's srtt would have to reach 4.75 ms). With
    # round trips of a few milliseconds, one jittery path's srtt brings the probe's
    # wait to the floor and the path timeout fires first (the debug kernel: 3.7 ms
    # on one host, 11 path timeouts to 184 probes; under 3 ms on CI's on
    # 2026-12-02, one path timeout to ten probes or more). There the count is not
    # asserted; the plain kernel (round trips of 60-100 us) asserts it. srtt
    # averages its samples, so the mean round trip must stay inside that too: a
    # jittery guest's typical round trip of 181 us came with a mean of 1.9 ms
    # (36 path timeouts to 177 probes, 2026-12-07).
    [ "$mean" -gt "$rtt" ] && rtt=$mean
    if [ "$rtt" -gt 0 ] && [ "$rtt" -le 1000 ]; then
        check "$VB_DEV_A's tail probes recovered its losses, fewer than one in ten waited for a path timeout" \
            test "$tp" -gt 0 -a $((pt * 10)) -lt "$tp"
    else
        ktap_skip "$VB_DEV_A's tail probes recovered its losses: round trip ${rtt} us, above 1000 us"
    fi
    vb_links_del; rm_hosts
    check "rmmod rdma_metaroce (request/response under loss)" rmmod rdma_metaroce
}
lossy_request_response_case

# Verbs applications beyond perftest and rdma-core's examples, unmodified, over
# rdma_cm: libfabric's verbs provider (fi_pingpong on a connected MSG endpoint, its
# receiver checking every message's bytes) and qperf (RC SEND, RDMA WRITE and READ
# bandwidth, SEND latency; both atomics' message rates). Each must run to its end with results,
# over MetaRoCE (its packet count moves).
_fi_pingpong_ok() {
    VB_WHY='' VB_SUMMARY=''
    # One result row per transfer size: bytes, #sent, #ack ("=N": all acknowledged),
    # total, time, MB/sec, ...
    local rows
    rows=$(grep -cE '^[0-9]+[kmg]?[[:space:]]+[0-9]+[kmg]?[[:space:]]+=[0-9]' "$1".client)
    [ "$rows" -ge 1 ] || { VB_WHY="no result row"; return 1; }
    if grep -qi 'integrity\|error' "$1".client "$1".client.err "$1".server "$1".server.err; then
        VB_WHY=$(grep -hi 'integrity\|error' "$1".client "$1".client.err "$1".server "$1".server.err | head -n 1)
        return 1
    fi
    VB_SUMMARY="$rows transfer sizes, every message checked"
}
_qperf_ok() {
    VB_WHY='' VB_SUMMARY=''
    local t want=$QPERF_TESTS got
    # Each test prints its name, then "bw = N unit" or "latency = N unit" (or, for
    # the atomics, "msg_rate = N unit").
    for t in $want; do
        got=$(awk -v t="$t:" '$1 == t {f = 1; next} f && NF >= 3 && $2 == "=" {print $3; exit}' "$1".client)
        if ! awk -v v="${got:-0}" 'BEGIN { exit !(v + 0 > 0) }'; then
            VB_WHY="$t: no measured figure"; return 1
        fi
        VB_SUMMARY="${VB_SUMMARY:+$VB_SUMMARY, }$t $got"
    done
}
QPERF_TESTS="rc_bw rc_lat rc_rdma_write_bw rc_rdma_read_bw"
QPERF_ATOMICS="rc_compare_swap_mr rc_fetch_add_mr"
applications_case() {
    local rx0 rx1
    # From the toolchain root's package list (tools/root-packages.txt).
    if command -v fi_pingpong > /dev/null && command -v qperf > /dev/null; then
        ktap_pass "fi_pingpong (libfabric-bin) and qperf are installed"
    else
        ktap_fail "fi_pingpong (libfabric-bin) and qperf are installed (tools/root-packages.txt)"
        return
    fi
    check "load rdma_metaroce for verbs applications" mrc_insmod
    mk_hosts
    links_up " for verbs applications"
    rx0=$(vb_counter "$VB_DEV_B" rx_packets)
    # Each end names its address (-s): the verbs provider finds its device by it.
    # VB_FI_SIZE: one message size for fi_pingpong (unset: its default sizes, 64 B
    # to 1 MiB; its '-S all' goes far beyond); VB_QPERF_SECS: each qperf test's
    # time (the debug tier's slower kernel: one size, longer tests).
    local sizes=() iters=${VB_FI_ITERS:-50}
    [ -z "${VB_FI_SIZE:-}" ] || sizes=(-S "$VB_FI_SIZE")
    VB_SRV=(fi_pingpong -p verbs -e msg -s "$VB_ADDR_B" -B 47592 -I "$iters" "${sizes[@]}" -c)
    VB_CLI=(fi_pingpong -p verbs -e msg -s "$VB_ADDR_A" -P 47592 -I "$iters" "${sizes[@]}" -c "$VB_ADDR_B")
    _vb_pair "fi_pingpong -p verbs -e msg -c ${sizes[*]:-(64 B to 1 MiB)} (libfabric's verbs provider, $iters messages a size)" \
        _fi_pingpong_ok vb_tcp_listening hostB 47592
    VB_SRV=(qperf -lp 19766)
    # shellcheck disable=SC2206  # test names are words
    VB_CLI=(qperf -lp 19766 -cm1 -t "${VB_QPERF_SECS:-2}" "$VB_ADDR_B" $QPERF_TESTS quit)
    _vb_pair "qperf -cm1 $QPERF_TESTS" _qperf_ok vb_tcp_listening hostB 19766
    # The atomics' message rates, apart: on the debug kernel they read 0 a second
    # (2026-12-07; 1,024 atomics posted at once against one outstanding), not
    # explained yet; there they are a known defect (VB_QPERF_ATOMICS_TODO).
    VB_SRV=(qperf -lp 19767)
    # shellcheck disable=SC2206  # test names are words
    VB_CLI=(qperf -lp 19767 -cm1 -t "${VB_QPERF_SECS:-2}" "$VB_ADDR_B" $QPERF_ATOMICS quit)
    QPERF_TESTS=$QPERF_ATOMICS _vb_pair "qperf -cm1 $QPERF_ATOMICS${VB_QPERF_ATOMICS_TODO:+ # TODO $VB_QPERF_ATOMICS_TODO}" \
        _qperf_ok vb_tcp_listening hostB 19767
    rx1=$(vb_counter "$VB_DEV_B" rx_packets)
    check "the applications' traffic went over MetaRoCE ($VB_DEV_B received $((rx1 - rx0)) packets)" \
        test "$((rx1 - rx0))" -gt 1000
    vb_links_del; rm_hosts
    check "rmmod rdma_metaroce (verbs applications)" rmmod rdma_metaroce
}
applications_case
ktap_finish
