#!/usr/bin/env python3
"""An independent byte-level BPE (GPT-2's encoder.py algorithm, with Python's `regex` module
running the pre-tokenizer pattern as written in tokenizer.json), to check Tessera's
tokenizer.json reader, and a builder of small tokenizer.json files in Hugging Face's layout.

    bpe_reference.py build --pattern gpt2|llama3|qwen2 --corpus FILE --merges N --out DIR [--nfc]
        learns N merges from FILE and writes DIR/tokenizer.json and DIR/tokenizer_config.json
        (eos_token <|endoftext|>; llama3: ignore_merges and <|begin_of_text|> too; merges as
        [a, b] pairs for qwen2, "a b" strings otherwise, as the releases do).
    bpe_reference.py check --dir DIR --shards OUT TEXT...
        encodes each TEXT file (special tokens recognised, then the eos id) and compares the
        concatenation with the token shards OUT/train_*.bin; prints the first difference.
"""
import argparse
import glob
import json
import os
import struct
import sys
from collections import Counter

import regex
import unicodedata

PATTERNS = {
    "gpt2": r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""",
    "llama3": r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""",
    "qwen2": r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""",
}


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


B2U = bytes_to_unicode()


def words(text, pattern):
    return ["".join(B2U[b] for b in w.encode("utf-8")) for w in regex.findall(pattern, text)]


def build(a):
    text = open(a.corpus, encoding="utf-8").read()
    pattern = PATTERNS[a.pattern]
    counts = Counter(tuple(w) for w in words(text, pattern))
    vocab = {B2U[b]: i for i, b in enumerate(sorted(B2U))}
    merges = []
    for _ in range(a.merges):
        pairs = Counter()
        for w, c in counts.items():
            for p in zip(w, w[1:]):
                pairs[p] += c
        if not pairs:
            break
        best = max(pairs, key=lambda p: (pairs[p], p))
        merges.append(best)
        vocab["".join(best)] = len(vocab)
        merged = Counter()
        for w, c in counts.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(w[i] + w[i + 1])
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            merged[tuple(out)] += c
        counts = merged
    added = ["<|endoftext|>"] + (["<|begin_of_text|>"] if a.pattern == "llama3" else [])
    added_tokens = []
    for t in added:
        added_tokens.append({"id": len(vocab), "content": t, "single_word": False, "lstrip": False,
                             "rstrip": False, "normalized": False, "special": True})
        vocab[t] = len(vocab)
    split = {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False}
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                  "use_regex": a.pattern == "gpt2"}
    tok = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added_tokens,
        "normalizer": {"type": "NFC"} if a.nfc else None,
        "pre_tokenizer": byte_level if a.pattern == "gpt2" else
                         {"type": "Sequence", "pretokenizers": [split, byte_level]},
        "post_processor": None, "decoder": {"type": "ByteLevel"},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": a.pattern == "llama3",
                  "vocab": vocab,
                  "merges": [list(m) for m in merges] if a.pattern == "qwen2" else [" ".join(m) for m in merges]},
    }
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False)
    with open(os.path.join(a.out, "tokenizer_config.json"), "w") as f:
        json.dump({"eos_token": "<|endoftext|>"}, f)
    print(f"{len(vocab)} tokens, {len(merges)} merges")
    return 0


class Bpe:
    def __init__(self, directory):
        tok = json.load(open(os.path.join(directory, "tokenizer.json"), encoding="utf-8"))
        m = tok["model"]
        self.vocab = m["vocab"]
        self.ranks = {tuple(x.split(" ", 1)) if isinstance(x, str) else tuple(x): i
                      for i, x in enumerate(m["merges"])}
        self.ignore_merges = m.get("ignore_merges", False)
        pre = tok["pre_tokenizer"]
        self.pattern = PATTERNS["gpt2"] if pre["type"] == "ByteLevel" else pre["pretokenizers"][0]["pattern"]["Regex"]
        self.added = {t["content"]: t["id"] for t in tok["added_tokens"]}
        self.nfc = (tok.get("normalizer") or {}).get("type") == "NFC"
        self.eos = self.added.get("<|endoftext|>")

    def bpe(self, word):
        if self.ignore_merges and word in self.vocab:
            return [self.vocab[word]]
        sym = list(word)
        while len(sym) > 1:
            pairs = [(self.ranks.get(p, 1 << 60), i) for i, p in enumerate(zip(sym, sym[1:]))]
            rank, _ = min(pairs)
            if rank == 1 << 60:
                break
            first, second = [p for p, r in self.ranks.items() if r == rank][0]
            out, i = [], 0
            while i < len(sym):
                if i + 1 < len(sym) and sym[i] == first and sym[i + 1] == second:
                    out.append(first + second)
                    i += 2
                else:
                    out.append(sym[i])
                    i += 1
            sym = out
        return [self.vocab[s] for s in sym]

    def encode(self, text):
        ids = []
        if self.added:
            parts = regex.split("(" + "|".join(regex.escape(t) for t in sorted(self.added, key=len, reverse=True)) + ")", text)
        else:
            parts = [text]
        for part in parts:
            if part in self.added:
                ids.append(self.added[part])
                continue
            if self.nfc:  # the text between added tokens, as the tokenizers library normalizes it
                part = unicodedata.normalize("NFC", part)
            for w in words(part, self.pattern):
                ids.extend(self.bpe(w))
        return ids


def read_shards(out):
    ids = []
    for path in sorted(glob.glob(os.path.join(out, "train_*.bin"))):
        data = open(path, "rb").read()
        magic, version, width, count, vocab, _ = struct.unpack("<8sIIQII", data[:32])
        fmt = "<u2" if width == 2 else "<u4"
        import numpy
        ids.extend(int(x) for x in numpy.frombuffer(data[32:32 + count * width], dtype=fmt))
    return ids


def check(a):
    bpe = Bpe(a.dir)
    want = []
    for path in a.texts:
        want.extend(bpe.encode(open(path, encoding="utf-8", newline="").read()))
        want.append(bpe.eos)
    got = read_shards(a.shards)
    for i, (x, y) in enumerate(zip(got, want)):
        if x != y:
            print(f"first difference at token {i}: tessera {got[i:i + 8]} vs reference {want[i:i + 8]}")
            return 1
    if len(got) != len(want):
        print(f"tessera wrote {len(got)} tokens, the reference {len(want)}")
        return 1
    print(f"{len(got)} tokens identical")
    return 0


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("--pattern", choices=sorted(PATTERNS), required=True)
    b.add_argument("--corpus", required=True)
    b.add_argument("--merges", type=int, default=300)
    b.add_argument("--out", required=True)
    b.add_argument("--nfc", action="store_true")
    c = sub.add_parser("check")
    c.add_argument("--dir", required=True)
    c.add_argument("--shards", required=True)
    c.add_argument("texts", nargs="+")
    a = ap.parse_args()
    return build(a) if a.cmd == "build" else check(a)


if __name__ == "__main__":
    sys.exit(main())
