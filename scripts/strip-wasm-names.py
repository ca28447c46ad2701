#!/usr/bin/env python3
"""Removes the custom sections of a .wasm file in place: `name` (function names for stack traces,
~40% of the file), `producers` (the toolchain's versions) and `target_features` (for linkers).
Engines ignore custom sections, so nothing at run time reads them; panics still print their
messages."""
import sys


def leb(data, i):
    result = shift = 0
    while True:
        b = data[i]
        i += 1
        result |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return result, i


DROPPED = (b"name", b"producers", b"target_features")


def strip(path):
    data = open(path, "rb").read()
    if data[:4] != b"\0asm":
        sys.exit(f"{path} is not a wasm module")
    out, i = bytearray(data[:8]), 8
    while i < len(data):
        start = i
        section_id = data[i]
        size, body = leb(data, i + 1)
        end = body + size
        keep = True
        if section_id == 0:
            n, j = leb(data, body)
            keep = data[j : j + n] not in DROPPED
        if keep:
            out += data[start:end]
        i = end
    open(path, "wb").write(out)
    print(f"[build] {path}: {len(data)} -> {len(out)} bytes (name, producers and target_features sections removed)")


for p in sys.argv[1:]:
    strip(p)
