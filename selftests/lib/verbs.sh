# Data-path tests shared by the *_data.sh suites: unmodified verbs programs
# (ibv_*_pingpong, perftest, rping) between hostA and hostB (selftests/lib/net.sh),
# first on a clean link, then under netem loss/reordering, then teardown under
# traffic. Sourced after ktap.sh and net.sh; the suite sets:
#   VB_TYPE        rdma link type (rxe, metaroce)
#   VB_DEV_A/B     device names on veth0 (hostA) and veth1 (hostB). `rdma system` is in
#                  shared netns mode, so both devices are visible in both namespaces
#                  and each side must name its own.
#   VB_RX_COUNTER  an `rdma statistic` port counter of received packets (driver-specific)
#   VB_UDP_PORT    the driver's UDP destination port (4791 rxe)
#   VB_MAD_AT      offset of a UD payload (a MAD on QP1) in the driver's IPv4 packets
#                  (see vb_netem: only the CM's DREQ passes netem without loss)
#   VB_TIMEOUT     bound on every verbs process, seconds (default 60): a hang fails one
#                  test point instead of the tier
# shellcheck shell=bash

VB_TIMEOUT=${VB_TIMEOUT:-60}
VB_SYS=/sys/class/infiniband
VB_ADDR_A=198.18.0.1 VB_ADDR_B=198.18.0.2
VB_PORT=20000                         # every test pair gets its own TCP/CM port
VB_ITERS=${VB_ITERS:-200}
# Lossy but still making progress: RC must recover from loss and reordering.
VB_NETEM=${VB_NETEM:-"delay 1ms reorder 10% 50% loss 1%"}
VB_LOGDIR=${VB_LOGDIR:-${METAROCE_OUT:-/tmp}/$(basename "$0" .sh)-logs}
mkdir -p "$VB_LOGDIR"

vb_link_add() { # NS DEV NETDEV
    ip netns exec "$1" rdma link add "$2" type "$VB_TYPE" netdev "$3"
}
vb_links_add() { vb_link_add hostA "$VB_DEV_A" veth0 && vb_link_add hostB "$VB_DEV_B" veth1; }
vb_links_del() {
    rdma link del "$VB_DEV_A" 2>/dev/null
    rdma link del "$VB_DEV_B" 2>/dev/null
    true
}

# vb_gid_index DEV IPV4: the index of DEV's RoCE v2 GID holding the IPv4-mapped
# address (gid_idx, lib/net.sh).
vb_gid_index() {
    local gid
    # shellcheck disable=SC2086  # split the dotted quad
    gid=$(IFS=.; set -- $2; printf '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x' "$1" "$2" "$3" "$4")
    gid_idx "$1" "$gid"
}
vb_find_gids() {
    VB_GID_A=$(vb_gid_index "$VB_DEV_A" "$VB_ADDR_A") && VB_GID_B=$(vb_gid_index "$VB_DEV_B" "$VB_ADDR_B")
}

vb_counter() { # DEV NAME: a port counter; rxe prints one per line, metaroce one line
    rdma statistic show link "$1/1" | awk -v n="$2" '{for (i = 1; i < NF; i++) if ($i == n) print $(i + 1)}'
}
vb_counter_above() { local v; v=$(vb_counter "$1" "$2"); [ -n "$v" ] && [ "$v" -gt "$3" ]; }
# The nonzero port counters of hostA's mrcA and hostB's mrcB whose names match the
# extended regex NAMES, as "mrcA.name=value ..." (the bench experiment scripts).
vb_nonzero_counters() { # NAMES
    local ns dev
    for ns in hostA hostB; do
        dev=mrc${ns#host}
        ip netns exec "$ns" rdma statistic show link "$dev/1" |
            awk -v d="$dev" -v re="^($1)\$" 'NF == 2 && $1 ~ re && $2 > 0 {printf "%s.%s=%s ", d, $1, $2}'
    done
}
# Kernel QPs (the GSI QP of ib_core's MAD layer) stay; anything else on the two
# devices belongs to a process.
vb_no_user_qps() {
    local left
    left=$(rdma resource show qp | grep -E "^link ($VB_DEV_A|$VB_DEV_B)/1 " | grep -vE 'type (GSI|SMI)')
    [ -z "$left" ] || { echo "$left"; return 1; }
}

vb_tcp_listening() { [ -n "$(ip netns exec "$1" ss -Hltn "sport = :$2")" ]; }
# rdma_cm listeners are invisible to ss; rdma resource lists them per device.
vb_cm_listening() { rdma resource show cm_id | grep -q "state LISTEN .*src-addr $1:$2 "; }

# _vb_await PID COND...: poll COND until it holds; give up as soon as PID (the
# server) has exited, or after 30 s (process start-up is slow under TCG).
_vb_await() {
    local pid=$1 deadline=$(( $(date +%s) + 30 )); shift
    until "$@" >/dev/null 2>&1; do
        kill -0 "$pid" 2>/dev/null || return 1
        [ "$(date +%s)" -lt "$deadline" ] || return 1
        sleep 0.1
    done
}

_vb_log() { # SLUG -> log path prefix for the next test point
    echo "$VB_LOGDIR/$(printf '%02d' $((KTAP_N + 1)))-$(echo "$1" | tr -c 'A-Za-z0-9_.\n-' '_')"
}
_vb_tails() { # LOG-PREFIX: the end of each output, without perftest's banner
    local f n
    for f in "$1".server "$1".server.err "$1".client "$1".client.err; do
        [ -s "$f" ] || continue
        n=3; [ "${f%.err}" = "$f" ] || n=6
        ktap_diag "  ${f#"$1".} (${f}):"
        grep -vE '^ *(local|remote) address|^ GID:|^-+$| : |^ *#bytes|^\*+$|^$' "$f" | tail -n $n | sed 's/^/#     /'
    done
}
# _vb_watch SECONDS LOG-PREFIX: after SECONDS (unless stopped first, when the pair
# ended), writes `rdma -dd resource show qp` and the link counters to LOG.stuck.
_vb_watch() {
    local sp
    trap 'kill "$sp" 2>/dev/null; exit 0' TERM
    sleep "$1" & sp=$!
    wait "$sp"
    { date; timeout 5 rdma -dd resource show qp; timeout 5 rdma statistic show; } > "$2.stuck" 2>&1
}
# _vb_stop PID: ends a background job of this shell if it still runs (a PID that
# has ended may belong to another process by now), and reaps it.
_vb_stop() {
    if jobs -rp | grep -qx "$1"; then
        kill "$1" 2>/dev/null
    fi
    wait "$1" 2>/dev/null
}
# _vb_pair DESC VERIFY LISTEN-COND... : runs "${VB_SRV[@]}" in hostB, waits until
# LISTEN-COND holds, runs "${VB_CLI[@]}" in hostA; both bounded by VB_PAIR_TIMEOUT
# (default VB_TIMEOUT). The test point passes if both exit 0 and VERIFY LOG-PREFIX
# accepts their output. stdout and stderr go to separate files (LOG.client,
# LOG.client.err): the programs' unbuffered stderr would otherwise land inside
# their block-buffered stdout lines.
_vb_pair() {
    local desc=$1 verify=$2 log spid src crc tmo=${VB_PAIR_TIMEOUT:-$VB_TIMEOUT}; shift 2
    ktap_out_of_time "$desc"
    log=$(_vb_log "$desc")
    timeout -k 5 "$tmo" ip netns exec hostB "${VB_SRV[@]}" > "$log.server" 2> "$log.server.err" &
    spid=$!
    # A pair about to time out is stuck: record the QPs' state (per-path windows,
    # bytes in flight, timers) and the counters while both programs still exist
    # (the server, started first, is the first to be killed).
    _vb_watch "$((tmo - 3))" "$log" &
    local wpid=$!
    if ! _vb_await "$spid" "$@"; then
        kill "$spid" 2>/dev/null; wait "$spid"
        _vb_stop "$wpid"
        ktap_fail "$desc (the server never listened)"
        _vb_tails "$log"
        return 1
    fi
    timeout -k 5 "$tmo" ip netns exec hostA "${VB_CLI[@]}" > "$log.client" 2> "$log.client.err"
    crc=$?
    wait "$spid"; src=$?
    _vb_stop "$wpid"
    if [ $crc = 0 ] && [ $src = 0 ] && "$verify" "$log"; then
        ktap_pass "$desc"
        [ -z "${VB_SUMMARY:-}" ] || ktap_diag "  $VB_SUMMARY"
        return 0
    fi
    local why="client exit $crc, server exit $src"
    { [ $crc = 124 ] || [ $src = 124 ]; } && why="$why; timed out after ${tmo}s"
    ktap_fail "$desc ($why)"
    [ -z "${VB_WHY:-}" ] || ktap_diag "  $VB_WHY"
    [ ! -s "$log.stuck" ] || ktap_diag "  the QPs' state $((tmo - 3)) s in: $log.stuck"
    _vb_tails "$log"
    return 1
}

# --- the programs ---------------------------------------------------------------------

# ibv_{rc,ud,srq}_pingpong -c: the receiver checks every message's contents and
# prints "invalid data" on a mismatch (without failing), so the output is checked too.
_vb_pingpong_ok() {
    VB_WHY='' VB_SUMMARY=''
    if grep -q 'invalid data' "$1".server.err "$1".client.err; then
        VB_WHY="data mismatch: $(grep -h 'invalid data' "$1".client.err "$1".server.err | head -n 1)"; return 1
    fi
    if ! grep -q "^$VB_ITERS iters in" "$1".server || ! grep -q "^$VB_ITERS iters in" "$1".client; then
        VB_WHY="no '$VB_ITERS iters in' summary"; return 1
    fi
    VB_SUMMARY=$(grep -h "^$VB_ITERS iters in" "$1".client)
}
vb_pingpong() { # DESC-SUFFIX TOOL [ARGS...]
    local sfx=$1 tool=$2 port=$((VB_PORT += 1)); shift 2
    VB_SRV=("$tool" -d "$VB_DEV_B" -g "$VB_GID_B" -p "$port" -n "$VB_ITERS" -c "$@")
    VB_CLI=("$tool" -d "$VB_DEV_A" -g "$VB_GID_A" -p "$port" -n "$VB_ITERS" -c "$@" "$VB_ADDR_B")
    _vb_pair "$tool -c${*:+ $*}$sfx" _vb_pingpong_ok vb_tcp_listening hostB "$port"
}

# perftest: the client's result row (after the "#bytes" header) must report every
# iteration (per QP) and a non-zero bandwidth or latency. perftest converts cycles to
# time with a CPU clock it calibrates at start; under emulation on a loaded host the
# calibration can fail ("Correlation coefficient r^2 ... < 0.9") and every rate then
# prints as 0: the run itself completed, only its rate is unknown.
_vb_perf_expect=0
_vb_perf_ok() {
    local row log=$1
    VB_WHY='' VB_SUMMARY=''
    row=$(awk '/^ *#bytes/ {h = 1; next} h && NF >= 4 {print; exit}' "$log".client)
    [ -n "$row" ] || { VB_WHY="no result row"; return 1; }
    VB_SUMMARY="result: $(echo "$row" | tr -s ' \t' ' ')"
    # shellcheck disable=SC2086
    set -- $row
    [ "$2" = "$_vb_perf_expect" ] || { VB_WHY="$2 iterations reported, expected $_vb_perf_expect"; return 1; }
    # Any measured figure above zero (a bandwidth rounds to 0.00 MB/s for a few 8-byte
    # atomics on a slow kernel, while the message rate still shows).
    echo "$row" | awk '{for (i = 3; i <= NF; i++) if ($i + 0 > 0) exit 0; exit 1}' && return 0
    # ($1 is the result row's first field here: `set --` above replaced it.)
    if grep -q 'Correlation coefficient' "$log".client "$log".client.err; then
        VB_SUMMARY="$VB_SUMMARY (rate not measured: perftest's CPU clock calibration failed under emulation)"
        return 0
    fi
    VB_WHY="zero result: $row"; return 1
}
vb_perftest() { # DESC-SUFFIX TOOL [ARGS...]  (-q N in ARGS multiplies the iterations)
    local sfx=$1 tool=$2 port=$((VB_PORT += 1)) q=1 a prev=; shift 2
    for a in "$@"; do [ "$prev" = -q ] && q=$a; prev=$a; done
    _vb_perf_expect=$((VB_ITERS * q))
    VB_SRV=("$tool" -d "$VB_DEV_B" -x "$VB_GID_B" -p "$port" -n "$VB_ITERS" -F "$@")
    VB_CLI=("$tool" -d "$VB_DEV_A" -x "$VB_GID_A" -p "$port" -n "$VB_ITERS" -F "$@" "$VB_ADDR_B")
    _vb_pair "$tool -n $VB_ITERS${*:+ $*}$sfx" _vb_perf_ok vb_tcp_listening hostB "$port"
}
# The round trip of the last `vb_perftest ... ib_send_lat` in whole microseconds:
# twice its typical one-way latency (t_typical, the 6th field of VB_SUMMARY); 0 when
# that run produced no result row.
vb_round_trip_us() {
    # shellcheck disable=SC2086
    (set -- ${VB_SUMMARY:-}; awk -v t="${6:-0}" 'BEGIN { printf "%d", 2 * t }')
}
# The same run's mean round trip (twice t_avg, the 7th field): what an RTT estimate
# that averages its samples (srtt) follows, where a heavy tail moves the mean far
# from the typical figure.
vb_mean_round_trip_us() {
    # shellcheck disable=SC2086
    (set -- ${VB_SUMMARY:-}; awk -v t="${7:-0}" 'BEGIN { printf "%d", 2 * t }')
}

# rping -V validates each round trip (server RDMA-reads the client's buffer, writes it
# back); -v prints it, and every printed line must be exactly the pattern rping wrote:
# "rdma-ping-N: " then letters from 'A'+N mod 58 cycling through 'A'..'z', up to
# VB_RPING_SIZE - 1 bytes (rping -S; default 64, rping's own).
VB_RPING_COUNT=${VB_RPING_COUNT:-1000}
VB_RPING_SIZE=${VB_RPING_SIZE:-64}
_vb_rping_expect() {
    # The letters as one string, cut per ping (a letter at a time took minutes for
    # 64 KiB pings).
    awk -v n="$VB_RPING_COUNT" -v len="$((VB_RPING_SIZE - 1))" -v pfx="$1" 'BEGIN {
        for (c = 65; c <= 122; c++) cycle = cycle sprintf("%c", c)
        letters = cycle
        while (length(letters) < len + 58) letters = letters letters
        for (p = 0; p < n; p++) {
            s = "rdma-ping-" p ": "
            if (length(s) < len) s = s substr(letters, 1 + p % 58, len - length(s))
            print pfx s
        } }'
}
_vb_rping_ok() {
    VB_WHY='' VB_SUMMARY=''
    if ! cmp -s <(grep '^ping data: ' "$1".client) <(_vb_rping_expect 'ping data: '); then
        VB_WHY="client: $(grep -c '^ping data: ' "$1".client) ping lines, first difference: $(diff <(grep '^ping data: ' "$1".client) <(_vb_rping_expect 'ping data: ') | head -n 3 | tr '\n' ' ')"
        return 1
    fi
    if ! cmp -s <(grep '^server ping data: ' "$1".server) <(_vb_rping_expect 'server ping data: '); then
        VB_WHY="server: $(grep -c '^server ping data: ' "$1".server) ping lines differ from the pattern"
        return 1
    fi
    VB_SUMMARY="$VB_RPING_COUNT ping payloads verified on both sides"
}
vb_rping() { # DESC-SUFFIX
    local port=$((VB_PORT += 1))
    VB_SRV=(rping -s -v -V -C "$VB_RPING_COUNT" -S "$VB_RPING_SIZE" -a "$VB_ADDR_B" -p "$port")
    VB_CLI=(rping -c -v -V -C "$VB_RPING_COUNT" -S "$VB_RPING_SIZE" -a "$VB_ADDR_B" -p "$port")
    VB_PAIR_TIMEOUT=${VB_RPING_TIMEOUT:-$VB_TIMEOUT} \
        _vb_pair "rping -c -v -V -C $VB_RPING_COUNT -S $VB_RPING_SIZE (rdma_cm; payloads checked)$1" _vb_rping_ok vb_cm_listening "$VB_ADDR_B" "$port"
}

# One full round of programs. UD has no retransmission: under loss a dropped datagram
# stalls ping-pong forever by design, so under netem UD runs with delay and reordering
# but no loss (VB_UD_HOOK switches netem for it).
vb_round() { # DESC-SUFFIX
    local sfx=$1 t
    vb_pingpong "$sfx" ibv_rc_pingpong
    ${VB_UD_BEFORE:-true}
    vb_pingpong "${VB_UD_SFX:-$sfx}" ibv_ud_pingpong -s 1024   # UD payload fits the 1024-byte MTU
    ${VB_UD_AFTER:-true}
    vb_pingpong "$sfx" ibv_srq_pingpong
    # UC (VB_UC=1): MetaRoCE carries it on its reliable transport, so it runs under
    # loss as well; a RoCE device's UC loses whole messages there and stalls these.
    if [ -n "${VB_UC:-}" ]; then
        vb_pingpong "$sfx" ibv_uc_pingpong
        vb_perftest "$sfx" ib_send_bw -c UC
        vb_perftest "$sfx" ib_write_bw -c UC
    fi
    for t in ib_send_bw ib_write_bw ib_read_bw ib_atomic_bw; do
        vb_perftest "$sfx" "$t"
        vb_perftest "$sfx" "$t" -q 4 --report_gbits
    done
    for t in ib_send_lat ib_write_lat ib_read_lat; do
        vb_perftest "$sfx" "$t"
    done
    vb_rping "$sfx"
}

# netem on both veths, built as a two-band tree so that one kind of datagram can
# pass without the loss (the delay and reordering still apply to it):
#   prio 1: --+-- 1:1 netem 10:  NETEM-ARGS        every packet but ...
#             +-- 1:2 netem 20:  NETEM-ARGS - loss ... rdma_cm's DREQ (ib_cm DREQ MAD
#                                                      to QP1 on the driver's UDP port)
# Why the DREQ: rping's client calls rdma_disconnect and destroys its cm_id at once;
# ib_cm then cancels the DREQ's retransmission (cm_destroy_id in DREQ_SENT), so one
# DREQ lost strands the server, which waits for a disconnect that never comes, on
# any device (rxe as well). Every other CM MAD (REQ, REP, RTU, DREP) stays lossy and
# ib_cm retransmits it. The suite sets VB_UDP_PORT (the driver's UDP port) and
# VB_MAD_AT (the MAD's offset in the IPv4 packet: 20 IP + 8 UDP + the transport's
# headers before a UD payload); u32 offsets assume IPv4 without options, as the
# drivers send.
VB_NETEM_DREQ_HANDLE=20:
_vb_netem_lossless() { # NETEM-ARGS -> the same without "loss [random] P% [CORR%]"
    local out=() skip=0 w
    for w in "$@"; do
        if [ "$w" = loss ]; then skip=1; continue; fi
        if [ $skip = 1 ] && [[ $w =~ ^([0-9.]+%?|random)$ ]]; then continue; fi
        skip=0; out+=("$w")
    done
    echo "${out[@]}"
}
_vb_netem_tree() { # NS DEV NETEM-ARGS...
    local ns=$1 dev=$2; shift 2
    # shellcheck disable=SC2046  # netem arguments are words
    tc -n "$ns" qdisc add dev "$dev" root handle 1: prio bands 2 priomap 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 &&
        tc -n "$ns" qdisc add dev "$dev" parent 1:1 handle 10: netem "$@" &&
        tc -n "$ns" qdisc add dev "$dev" parent 1:2 handle "$VB_NETEM_DREQ_HANDLE" netem $(_vb_netem_lossless "$@") &&
        tc -n "$ns" filter add dev "$dev" parent 1: protocol ip prio 1 u32 \
            match ip protocol 17 0xff match ip dport "$VB_UDP_PORT" 0xffff \
            match u32 1 0x00ffffff at 32 \
            match u8 7 0xff at $((VB_MAD_AT + 1)) \
            match u16 0x0015 0xffff at $((VB_MAD_AT + 16)) \
            flowid 1:2
}
# (dest QPN: the low 24 bits of the transport header's second word, at 28 + 4 in
# both BTH and MetaRoCE's MRH; MAD management class 7 is the CM, attribute 0x0015
# its DREQ.)
vb_netem() { # add|change|del [NETEM-ARGS...]; change alters the lossy band only
    local op=$1; shift
    case $op in
        add) _vb_netem_tree hostA veth0 "$@" && _vb_netem_tree hostB veth1 "$@" ;;
        change) tc -n hostA qdisc change dev veth0 handle 10: netem "$@" &&
                    tc -n hostB qdisc change dev veth1 handle 10: netem "$@" ;;
        del) tc -n hostA qdisc del dev veth0 root && tc -n hostB qdisc del dev veth1 root ;;
    esac
}
_vb_netem_stat() { # NS DEV HANDLE FIELD(dropped|pkt): the netem qdisc's counter
    tc -s -n "$1" qdisc show dev "$2" |
        awk -v h="$3" -v f="$4" '$1 == "qdisc" {cur = ($3 == h)}
            cur && $1 == "Sent" {for (i = 1; i <= NF; i++) {
                if (f == "pkt" && $(i + 1) == "pkt") {print $i; exit}
                if (f == "dropped" && $i == "(dropped") {sub(/,/, "", $(i + 1)); print $(i + 1); exit}}}'
}
vb_netem_dropped() { _vb_netem_stat "$1" "$2" 10: dropped; } # NS DEV -> packets lost
vb_netem_spared() { _vb_netem_stat "$1" "$2" "$VB_NETEM_DREQ_HANDLE" pkt; } # NS DEV -> DREQs

# Start ib_write_bw between the devices and return once VB_DEV_B's receive counter
# shows the RDMA traffic flowing (not just the TCP exchange of QP numbers).
# Sets VB_SPID (server, bounded by timeout), VB_CPID (client, the program itself so
# that it can be killed), VB_LOGP.
_vb_start_write_bw() { # DESC CLIENT-WRAPPER ARGS...
    local desc=$1 wrap=$2 port=$((VB_PORT += 1)) base; shift 2
    VB_LOGP=$(_vb_log "$desc")
    base=$(vb_counter "$VB_DEV_B" "$VB_RX_COUNTER")
    timeout -k 5 "$VB_TIMEOUT" ip netns exec hostB ib_write_bw -d "$VB_DEV_B" -x "$VB_GID_B" -p "$port" -F "$@" \
        > "$VB_LOGP.server" 2> "$VB_LOGP.server.err" &
    VB_SPID=$!
    if ! _vb_await "$VB_SPID" vb_tcp_listening hostB "$port"; then
        kill "$VB_SPID" 2>/dev/null; VB_CPID=; return 1
    fi
    $wrap ip netns exec hostA ib_write_bw -d "$VB_DEV_A" -x "$VB_GID_A" -p "$port" -F "$@" "$VB_ADDR_B" \
        > "$VB_LOGP.client" 2> "$VB_LOGP.client.err" &
    VB_CPID=$!
    # 200 packets: well past the handful a connection exchanges before data moves.
    wait_for 30 vb_counter_above "$VB_DEV_B" "$VB_RX_COUNTER" "$(( ${base:-0} + 200 ))"
}
_vb_exited_by_itself() { [ "$1" != 124 ] && [ "$1" != 137 ]; }
_vb_exercised() { [ "$VB_FLOWING" = 1 ] || { echo "no RDMA traffic flowed: not exercised"; return 1; }; }

# _vb_traffic DESC WRAP ARGS...: one test point for "_vb_start_write_bw started".
# VB_FLOWING records the outcome: without traffic the "mid-transfer" and "under
# traffic" points below were not exercised and fail rather than pass vacuously.
_vb_traffic() {
    local desc=$1
    VB_FLOWING=0
    ktap_out_of_time "$desc"
    if _vb_start_write_bw "$@"; then VB_FLOWING=1; ktap_pass "$desc"; return 0; fi
    ktap_fail "$desc (no growth within 30 s)"
    _vb_tails "$VB_LOGP"
    return 1
}

# A client SIGKILLed mid-transfer: the server notices through its TCP control socket
# and exits; the kernel destroys both sides' QPs; the devices keep working.
vb_killed_mid_transfer() {
    local crc=none src
    _vb_traffic "ib_write_bw -n 1000000 moves data: $VB_DEV_B's $VB_RX_COUNTER grows" "" -n 1000000
    # Killed whether or not the traffic started: nothing may outlive the test point.
    # (wait's stderr: bash would print its "Killed" job notice into the TAP stream)
    if [ -n "$VB_CPID" ]; then kill -KILL "$VB_CPID" 2>/dev/null; wait "$VB_CPID" 2>/dev/null; crc=$?; fi
    wait "$VB_SPID" 2>/dev/null; src=$?
    check "client SIGKILLed mid-transfer (exit $crc); the server notices and exits by itself (exit $src, not the ${VB_TIMEOUT}s timeout)" \
        eval "_vb_exercised && _vb_exited_by_itself $src"
    check "no QPs left on $VB_DEV_A or $VB_DEV_B once both processes are gone (rdma resource show qp)" \
        wait_for 10 vb_no_user_qps
    vb_pingpong " (after the killed transfer)" ibv_rc_pingpong
}

# `rdma link del` of the client's device under traffic: the deletion completes (rxe
# waits for the device's user contexts to close; a driver with disassociate may tear
# them down at once), both programs end within their bound, nothing is left on the
# peer, and the re-added device carries traffic again.
vb_link_del_under_traffic() {
    local crc=none src
    _vb_traffic "ib_write_bw -D 10 moves data: $VB_DEV_B's $VB_RX_COUNTER grows" "timeout -k 5 $VB_TIMEOUT" -D 10
    check "rdma link del $VB_DEV_A under traffic returns within ${VB_TIMEOUT}s" \
        eval "timeout -k 5 $VB_TIMEOUT ip netns exec hostA rdma link del $VB_DEV_A && _vb_exercised"
    check "$VB_DEV_A is unregistered" wait_for 10 test ! -e "$VB_SYS/$VB_DEV_A"
    if [ -n "$VB_CPID" ]; then wait "$VB_CPID" 2>/dev/null; crc=$?; fi
    wait "$VB_SPID" 2>/dev/null; src=$?
    check "both programs end within ${VB_TIMEOUT}s (client exit $crc, server exit $src)" \
        eval "_vb_exited_by_itself $crc && _vb_exited_by_itself $src"
    check "no QPs left on $VB_DEV_B" wait_for 10 vb_no_user_qps
    check "rdma link add $VB_DEV_A again; its RoCE v2 GID for $VB_ADDR_A returns" \
        eval "vb_link_add hostA $VB_DEV_A veth0 && wait_for 10 vb_find_gids"
    vb_find_gids
    vb_pingpong " (on the re-added $VB_DEV_A)" ibv_rc_pingpong
}

# The whole suite, after the caller loaded its driver. Ends with ktap_finish's status.
vb_suite() {
    ktap_diag "$VB_TYPE: $VB_DEV_A on veth0 ($VB_ADDR_A, hostA) <-> $VB_DEV_B on veth1 ($VB_ADDR_B, hostB); logs in $VB_LOGDIR"
    mk_hosts
    check "rdma link add $VB_DEV_A (hostA, veth0) and $VB_DEV_B (hostB, veth1), type $VB_TYPE" vb_links_add
    check "both devices have a RoCE v2 GID for their IPv4 address" wait_for 10 vb_find_gids
    vb_find_gids
    ktap_diag "GID index: $VB_DEV_A $VB_GID_A, $VB_DEV_B $VB_GID_B"

    vb_round ""

    # shellcheck disable=SC2086  # netem arguments are words
    check "netem on veth0 and veth1: $VB_NETEM (rdma_cm's DREQ without the loss)" vb_netem add $VB_NETEM
    local lossless
    # shellcheck disable=SC2086  # netem arguments are words
    lossless=$(_vb_netem_lossless $VB_NETEM)
    # rping connects through rdma_cm, whose QPs get a local ACK timeout of about 1 s
    # (CMA_IBOE_PACKET_LIFETIME): a RoCE device such as rxe stalls ~1 s per lost packet,
    # and 1000 pings (about 8000 packets) lose ~80 at 1%.
    VB_UD_BEFORE="vb_netem change $lossless" VB_UD_AFTER="vb_netem change $VB_NETEM" \
        VB_UD_SFX=" under netem $lossless (no loss: UD does not retransmit)" \
        VB_RPING_TIMEOUT=${VB_RPING_LOSSY_TIMEOUT:-240} \
        vb_round " under netem $VB_NETEM"
    local da db
    da=$(vb_netem_dropped hostA veth0) db=$(vb_netem_dropped hostB veth1)
    check "netem dropped packets in both directions during the lossy round (veth0 $da, veth1 $db)" \
        test "${da:-0}" -gt 0 -a "${db:-0}" -gt 0
    # The one rping's client sent one DREQ (hostA -> hostB); a filter matching more
    # than the DREQ would spare hundreds of packets from the loss.
    da=$(vb_netem_spared hostA veth0) db=$(vb_netem_spared hostB veth1)
    check "only rping's DREQ passed netem without loss (veth0 $da, veth1 $db packets)" \
        test "${da:-0}" -ge 1 -a "${da:-0}" -le 3 -a "${db:-0}" = 0
    check "netem removed" vb_netem del

    vb_killed_mid_transfer
    vb_link_del_under_traffic
}
