#!/usr/bin/env python3
"""Writes map outputs in Spark's sort-shuffle format, independently of Ferry's writer.

  make_spark_fixture.py <app-dir>

Writes shuffle_7_<map>_0.{data,index,checksum.<ALGO>} for two maps, the way Spark's
IndexShuffleBlockResolver does: the index is (partitions + 1) big-endian int64 offsets
and the checksum file one big-endian int64 per partition (java.util.zip's Adler32 and
CRC32, which zlib computes identically). Partition r of map m holds bytes
((m * 131 + r * 7 + i) % 251) for i in range(size); the C++ test regenerates them.
"""
import os
import struct
import sys
import zlib

SIZES = {
    11: ("ADLER32", [0, 1, 5000, 0, 70000, 3]),
    12: ("CRC32", [65536, 0, 0, 1, 250000]),
}


def partition(map_id, reduce_id, size):
    return bytes((map_id * 131 + reduce_id * 7 + i) % 251 for i in range(size))


def main():
    app_dir = sys.argv[1]
    os.makedirs(app_dir, exist_ok=True)
    for map_id, (algo, sizes) in SIZES.items():
        prefix = os.path.join(app_dir, "shuffle_7_%d_0" % map_id)
        offsets = [0]
        checksums = []
        with open(prefix + ".data", "wb") as data:
            for reduce_id, size in enumerate(sizes):
                chunk = partition(map_id, reduce_id, size)
                data.write(chunk)
                offsets.append(offsets[-1] + size)
                if algo == "ADLER32":
                    checksums.append(zlib.adler32(chunk) & 0xFFFFFFFF)
                else:
                    checksums.append(zlib.crc32(chunk) & 0xFFFFFFFF)
        with open(prefix + ".checksum." + algo, "wb") as f:
            f.write(b"".join(struct.pack(">q", c) for c in checksums))
        with open(prefix + ".index", "wb") as f:
            f.write(b"".join(struct.pack(">q", o) for o in offsets))


if __name__ == "__main__":
    main()
