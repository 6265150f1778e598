# SPDX-License-Identifier: GPL-2.0
"""Scapy layers for MetaRoCE v1, written from the byte diagrams of
Documentation/metaroce/packet-formats.rst (chapter 3) -- deliberately not
from the protocol core's Rust code, so that a wire bug in the core cannot
hide by agreeing with itself.

Usable as a dissector:

    >>> from scapy.all import rdpcap
    >>> import metaroce_scapy            # binds UDP dport 4792
    >>> rdpcap("trace.pcap")[0].show()

or on raw UDP payloads: ``metaroce_scapy.MRH(payload).show()``.
"""

from scapy.fields import (BitField, ByteEnumField, ByteField, FlagsField,
                          IntField, LongField, ShortField, StrFixedLenField,
                          StrLenField, X3BytesField, XIntField)
from scapy.layers.inet import UDP
from scapy.packet import Packet, Raw, bind_layers, Padding

METAROCE_PORT = 4792  # MR-2.3.1

# MR-3.2.3
OPCODES = {
    0x01: "SEND", 0x02: "SEND_IMM", 0x03: "SEND_INV", 0x04: "WRITE",
    0x05: "WRITE_IMM", 0x06: "READ_REQ", 0x07: "ATOMIC_CAS",
    0x08: "ATOMIC_FAA", 0x0a: "ATOMIC_WRITE", 0x0b: "FLUSH", 0x10: "READ_RESP",
    0x11: "ATOMIC_RESP",
    0x20: "ACK", 0x21: "PROBE", 0x30: "UD_SEND", 0x31: "UD_SEND_IMM",
}
OP = {v: k for k, v in OPCODES.items()}
REQUEST_OPS = {0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x0a, 0x0b}
# MR-3.3.5: the Immediate field of a FLUSH.
FLUSH_GLOBAL, FLUSH_PERSISTENT, FLUSH_WHOLE_REGION = 0x1, 0x2, 0x100
# Requests with an atomic header (ATOMIC_WRITE has none: its operand is its payload).
ATOMIC_OPS = {0x07, 0x08}
RESPONSE_OPS = {0x10, 0x11}
UD_OPS = {0x30, 0x31}
RELIABLE_OPS = REQUEST_OPS | RESPONSE_OPS

# MR-3.2.4: bit 7 is the most significant; Scapy lists flags LSB first.
F_ACK_REQ, F_SOLICITED, F_RETX, F_FENCE, F_LAST, F_EXT = 0x80, 0x40, 0x20, 0x10, 0x08, 0x04
MRH_FLAG_NAMES = ["RSV0", "RSV1", "EXT", "LAST", "FENCE", "RETX", "SOLICITED", "ACK_REQ"]

# MR-3.5.2
SYNDROMES = {0: "ACK", 1: "NAK_SEQUENCE", 2: "NAK_RNR", 3: "NAK_ACCESS",
             4: "NAK_INVALID", 5: "NAK_REMOTE_OP"}
# MR-3.5.1 AckFlags
AF_ECE, AF_PROBE, AF_DUP, AF_MOVE = 0x01, 0x02, 0x04, 0x08


class MRH(Packet):
    """Base header, 20 bytes (MR-3.2.1)."""
    name = "MetaRoCE MRH"
    fields_desc = [
        BitField("ver", 1, 4),
        BitField("rsv0", 0, 4),
        ByteEnumField("opcode", 0x04, OPCODES),
        FlagsField("flags", 0, 8, MRH_FLAG_NAMES),
        BitField("rsv1", 0, 4),
        BitField("path", 0, 4),
        ByteField("rsv2", 0),
        X3BytesField("dqpn", 0),
        IntField("psn", 0),
        IntField("tsn", 0),
        XIntField("ts", 0),
    ]

    def opcode_payload_class(self):
        op = self.opcode
        if op in REQUEST_OPS:
            return REQH
        if op in RESPONSE_OPS:
            return RSPH
        if op == 0x20:
            return ACKH
        if op in UD_OPS:
            return DGH
        if op == 0x21:
            return Padding
        return Raw

    def guess_payload_class(self, payload):
        return self.opcode_payload_class()


def _mrh_of(pkt):
    p = pkt.underlayer
    while p is not None and not isinstance(p, MRH):
        p = p.underlayer
    return p


def _after_opcode_headers(pkt):
    """What follows the last opcode header: extensions (MR-3.7) or payload."""
    m = _mrh_of(pkt)
    if m is not None and int(m.flags) & F_EXT:
        return MRExt
    return Raw


class REQH(Packet):
    """Request header, 32 bytes (MR-3.3.1)."""
    name = "MetaRoCE REQH"
    fields_desc = [
        IntField("msn", 0),
        IntField("ssn", 0),
        IntField("offset", 0),
        IntField("msglen", 0),
        XIntField("imm", 0),
        XIntField("rkey", 0),
        LongField("va", 0),
    ]

    def guess_payload_class(self, payload):
        m = _mrh_of(self)
        if m is not None and m.opcode in ATOMIC_OPS:
            return ATH
        return _after_opcode_headers(self)


class ATH(Packet):
    """Atomic header, 16 bytes (MR-3.3.4)."""
    name = "MetaRoCE ATH"
    fields_desc = [
        LongField("swap_add", 0),
        LongField("compare", 0),
    ]

    def guess_payload_class(self, payload):
        return _after_opcode_headers(self)


class RSPH(Packet):
    """Response header, 16 bytes (MR-3.4.1)."""
    name = "MetaRoCE RSPH"
    fields_desc = [
        IntField("req_msn", 0),
        IntField("offset", 0),
        IntField("resp_len", 0),
        IntField("rsv", 0),
    ]

    def guess_payload_class(self, payload):
        return _after_opcode_headers(self)


class ACKH(Packet):
    """ACK/NAK header, 68 bytes (MR-3.5.1)."""
    name = "MetaRoCE ACKH"
    fields_desc = [
        IntField("cum_tsn", 0),
        ByteEnumField("syndrome", 0, SYNDROMES),
        ByteField("rnr_timer", 0),
        BitField("rsv", 0, 4),
        BitField("echo_path", 0, 4),
        FlagsField("ack_flags", 0, 8, ["ECE", "PROBE", "DUP", "R3", "R4", "R5", "R6", "R7"]),
        IntField("msn", 0),
        IntField("nak_tsn", 0),
        IntField("echo_psn", 0),
        XIntField("echo_ts", 0),
        IntField("ack_delay", 0),
        ShortField("ce_count", 0),
        ShortField("rcv_count", 0),
        ShortField("credit", 0xFFFF),
        ShortField("sack_len", 32),
        StrFixedLenField("sack", b"\x00" * 32, 32),
    ]

    def guess_payload_class(self, payload):
        return _after_opcode_headers(self)

    # MR-3.5.4: bit i = byte i/8, bit i%8 from the LSB: TSN cum+1+i received.
    def sacked(self):
        out = []
        for i in range(256):
            if self.sack[i // 8] >> (i % 8) & 1:
                out.append((self.cum_tsn + 1 + i) & 0xFFFFFFFF)
        return out


def sack_bitmap(cum_tsn, tsns):
    """Builds the 32-byte SACK bitmap for received TSNs above cum_tsn (MR-3.5.4)."""
    b = bytearray(32)
    for t in tsns:
        i = (t - cum_tsn - 1) & 0xFFFFFFFF
        if i < 255:
            b[i // 8] |= 1 << (i % 8)
    return bytes(b)


class DGH(Packet):
    """Datagram header, 12 bytes (MR-3.6.1)."""
    name = "MetaRoCE DGH"
    fields_desc = [
        XIntField("qkey", 0),
        ByteField("rsv", 0),
        X3BytesField("src_qpn", 0),
        XIntField("imm", 0),
    ]

    def guess_payload_class(self, payload):
        return _after_opcode_headers(self)


class MRExt(Packet):
    """One extension of the chain (MR-3.7.2)."""
    name = "MetaRoCE extension"
    fields_desc = [
        BitField("more", 0, 1),
        BitField("type", 0, 7),
        ByteField("length", 1),
        FlagsField("ext_flags", 0, 8, ["CRITICAL", "X1", "X2", "X3", "X4", "X5", "X6", "X7"]),
        ByteField("rsv", 0),
        StrLenField("data", b"", length_from=lambda p: max(0, p.length - 1) * 4),
    ]

    def guess_payload_class(self, payload):
        return MRExt if self.more else Raw


bind_layers(UDP, MRH, dport=METAROCE_PORT)


def ext(type_, words_data=b"", critical=False, more=False):
    """Builds one extension; data is padded to whole words."""
    d = words_data + b"\x00" * (-len(words_data) % 4)
    return bytes(MRExt(more=int(more), type=type_, length=1 + len(d) // 4,
                       ext_flags=1 if critical else 0, data=d))


def dissect(payload):
    """Parses a UDP payload (bytes) into a Scapy packet."""
    return MRH(payload)


def rnr_delay_us(code):
    """RNR timer code to microseconds (MR-3.5.6)."""
    m = code & 7
    e = min(code >> 3, 19)
    return (8 + m) * (2 ** e) / 8.0
