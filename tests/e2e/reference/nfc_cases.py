#!/usr/bin/env python3
"""Cases for Tessera's NFC (runtime/train/data/nfc.h) from Python's unicodedata, an independent
implementation of the same Unicode algorithm: every code point whose NFC differs from itself
or that has a canonical decomposition or a non-zero combining class, alone and after "a", and
random sequences of letters, Hangul jamo and syllables and combining marks of many classes.

    nfc_cases.py OUT [--random N]

Writes one case per line: the input's UTF-8 bytes in hex, a space, NFC(input)'s in hex.
"""
import argparse
import random
import unicodedata


def interesting():
    out = []
    for cp in range(0x110000):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        c = chr(cp)
        if unicodedata.combining(c) or unicodedata.decomposition(c) or unicodedata.normalize("NFC", c) != c:
            out.append(c)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--random", type=int, default=20000)
    a = ap.parse_args()
    pool = interesting()
    marks = [c for c in pool if unicodedata.combining(c)]
    jamo = [chr(x) for x in list(range(0x1100, 0x1113)) + list(range(0x1161, 0x1176)) +
            list(range(0x11A8, 0x11C3))] + ["\uac00", "\uac01", "\ud7a3"]
    letters = list("aeiouAEIOUnNcCsSzZ") + ["\u0915", "\u0b47", "\u0b3e", "\u0d46", "\u0d3e", "\u03b1"]
    cases = []
    for c in pool:
        cases += [c, "a" + c]
    rng = random.Random(7)
    for _ in range(a.random):
        n = rng.randint(1, 8)
        cases.append("".join(rng.choice((marks, jamo, letters, pool)[rng.randint(0, 3)]) for _ in range(n)))
    with open(a.out, "w") as f:
        for s in cases:
            f.write(s.encode("utf-8").hex() + " " + unicodedata.normalize("NFC", s).encode("utf-8").hex() + "\n")
    print(f"{len(cases)} cases, Unicode {unicodedata.unidata_version}")


if __name__ == "__main__":
    main()
