# shellcheck shell=bash
# Sourced first by the experiments (exp-*.sh): sets HERE (selftests/), loads the
# KTAP, network and verbs helpers (perftest logs in /tmp/vb), and given a NAME
# makes OUTD, the directory of the tools/vm run that takes the experiment's files.
#   . "$(dirname "$0")/exp-env.sh" [NAME]
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. $HERE/lib/ktap.sh; . $HERE/lib/net.sh
VB_LOGDIR=/tmp/vb; mkdir -p $VB_LOGDIR
. $HERE/lib/verbs.sh
if [ -n "${1:-}" ]; then
  OUTD=${METAROCE_OUT:?run under tools/vm}/$1; mkdir -p "$OUTD"
fi
