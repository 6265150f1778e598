#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Dissects MetaRoCE packets in a pcap (or hex UDP payloads) with the suite's
independent Scapy layers.

    dissect.py trace.pcap [--port 4792] [--verbose]
    dissect.py --hex 100488030012345601020304a0b0c0d0deadbeef...
"""
import argparse
import logging
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
logging.getLogger("scapy").setLevel(logging.ERROR)

from scapy.all import UDP, bind_layers, rdpcap  # noqa: E402
import metaroce_scapy as M  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("pcap", nargs="?")
    ap.add_argument("--hex", action="append", default=[])
    ap.add_argument("--port", type=int, default=M.METAROCE_PORT)
    ap.add_argument("--verbose", action="store_true")
    a = ap.parse_args()
    if a.port != M.METAROCE_PORT:
        bind_layers(UDP, M.MRH, dport=a.port)
    pkts = [M.MRH(bytes.fromhex(h)) for h in a.hex]
    if a.pcap:
        pkts += [p[M.MRH] for p in rdpcap(a.pcap) if p.haslayer(M.MRH)]
    for p in pkts:
        if a.verbose:
            p.show()
        else:
            print(p.summary(), "|", " ".join("%s=%s" % (f.name, p.getfieldval(f.name))
                                             for f in p.fields_desc if f.name in
                                             ("opcode", "path", "dqpn", "psn", "tsn")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
