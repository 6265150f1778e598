# shellcheck shell=bash
# Sourced by the latency experiments: one ib_send_lat pair between hostA and hostB.
#   lat_pair NAME DEV-A DEV-B SERVER-ARGS CLIENT-ARGS [PERFTEST-ARGS...]
# prints "== NAME ARGS: <perftest's result line>". Ports count up from $P.
# links add|del NAME [TYPE]: a device NAMEA on hostA's veth0 and NAMEB on hostB's veth1.
links() {
  ip netns exec hostA rdma link $1 ${2}A ${3:+type $3 netdev veth0}
  ip netns exec hostB rdma link $1 ${2}B ${3:+type $3 netdev veth1}
}
cm_listening() { rdma resource show cm_id 2>/dev/null | grep -q "LISTEN.*:$2 "; }
lat_pair() {
  local name=$1 da=$2 db=$3 sa=$4 ca=$5; shift 5
  P=$((P+1))
  ip netns exec hostB timeout 60 ib_send_lat -d $db $sa -p $P -F "$@" > /tmp/s.log 2>&1 &
  case "$sa" in -R*) wait_for 20 cm_listening hostB $P ;; *) wait_for 20 vb_tcp_listening hostB $P ;; esac
  ip netns exec hostA timeout 60 ib_send_lat -d $da $ca -p $P -F "$@" 198.18.0.2 > /tmp/c.log 2>&1
  wait; echo "== $name $*: $(grep -A1 '#bytes' /tmp/c.log | tail -1)"
}
