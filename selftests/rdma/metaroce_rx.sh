#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# The receive side: each device listens on the MetaRoCE UDP port (4792, never
# RoCEv2's 4791) on its own netdev; malformed datagrams are dropped and counted,
# well-formed ones are counted per outcome; `rdma statistic` shows the counters.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/../lib/ktap.sh"
. "$HERE/../lib/net.sh"
KO=${METAROCE_KO:-$HERE/../../rdma_metaroce.ko}

cleanup() { rmmod rdma_metaroce 2>/dev/null; rm_hosts; }
trap cleanup EXIT
cleanup

# udp_port_open NS PORT: a UDP socket is bound to PORT in namespace NS (kernel sockets
# included, unlike ss's view).
udp_port_open() { ip netns exec "$1" cat /proc/net/udp | awk 'NR > 1 {print $2}' | grep -qi ":$(printf '%04X' "$2")\$"; }
counter() { rdma statistic show link mrc0/1 | tr ' ' '\n' | grep -A1 -x "$1" | tail -n1; }

ktap_header
mrc_insmod
mk_hosts
A rdma link add mrc0 type metaroce netdev veth0

check "mrc0 listens on UDP 4792 in hostA's namespace" udp_port_open hostA 4792
check_fails "nothing of ours listens on RoCEv2's port 4791" udp_port_open hostA 4791
check_fails "hostB (no MetaRoCE device yet) has no MetaRoCE socket" udp_port_open hostB 4792
check "rdma statistic lists the device counters" bash -c "rdma statistic show link mrc0/1 | grep -q rx_malformed"

# From hostB: 5 malformed datagrams, 2 whose headers are well formed but whose
# bodies are not (spec 3.3: a WRITE longer than its message, a READ request with a
# payload: the device routes on the headers, and the datagram is parsed in full
# where it ends), then 3 well-formed MetaRoCE probes (spec 3: version 1, opcode
# 0x21, 20-byte base header) for a QP without a connection.
B python3 - <<'PY'
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(('198.18.0.2', 0))
bad = [b'', b'\x10', b'\x00' * 19, b'\xf0' + b'\x21' + b'\x00' * 18, b'\xff' * 200]
def request(opcode, msg_len, payload):
    base = bytes([0x10, opcode, 0x08, 0]) + bytes.fromhex('00123456' '00000001' '00000001' '00000000')
    return base + bytes(12) + msg_len.to_bytes(4, 'big') + bytes(16) + payload
bad += [request(0x04, 4, b'\x01' * 8), request(0x06, 4, b'\x01' * 4)]
probe = bytes.fromhex('1021000000123456000000010000000000000007')
for p in bad + [probe] * 3:
    s.sendto(p, ('198.18.0.1', 4792))
PY
check "10 datagrams counted as received" wait_for 10 bash -c "[ \"\$(rdma statistic show link mrc0/1 | tr ' ' '\n' | grep -A1 -x rx_packets | tail -n1)\" = 10 ]"
check "the 7 malformed ones are dropped and counted as rx_malformed" bash -c "[ \"$(counter rx_malformed)\" = 7 ]"
check "the 3 well-formed probes count as rx_no_connection" bash -c "[ \"$(counter rx_no_connection)\" = 3 ]"
check "the device still answers verbs after bad input" bash -c "ibv_devinfo -d mrc0 | grep -q PORT_ACTIVE"
check "rdma link del closes the device's socket" bash -c "rdma link del mrc0"
check_fails "  ... port 4792 is free again in hostA" udp_port_open hostA 4792
check "rmmod" rmmod rdma_metaroce
ktap_finish
