"""Writing safetensors files that carry checksums (Sharded.save).

A safetensors file is an 8-byte little-endian header length, a JSON header
(name -> dtype, shape, data_offsets; an optional "__metadata__" object of
strings) and the data buffer. The files flexplan.torch writes add, in
"__metadata__", the CRC-32 (zlib's, IEEE 802.3) of every CRC_BLOCK bytes of
the data buffer ("flexplan.crc32": eight lowercase hex digits per block;
"flexplan.crc32.block_bytes": the block size in decimal). The C reader
(executor/safetensors.c) checks every block a read touches, once, before
the bytes are used: a refit (Sharded.load, Executor.load_weights) or an
init= from a corrupt file fails on every rank, naming the file, the tensor
and the bytes, and changes nothing. Other tools read these files as any
safetensors file (the metadata is free-form strings).
"""
import json
import os
import struct
import zlib
from typing import BinaryIO, Dict, Iterator, List

import torch

CRC_BLOCK = 1 << 20
_ST_DTYPES = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16", torch.float64: "F64",
              torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8",
              torch.bool: "BOOL", torch.float8_e4m3fn: "F8_E4M3"}


def _chunks(tensors: Dict[str, torch.Tensor], names: List[str]) -> Iterator[memoryview]:
    """each tensor's bytes, in file order, one tensor at a time"""
    for n in names:
        t = tensors[n].detach().to("cpu").contiguous().reshape(-1)
        if t.numel():
            yield t.view(torch.uint8).numpy().data  # the bytes, no copy


def crc_blocks(chunks: Iterator[memoryview], block: int = CRC_BLOCK) -> List[int]:
    """the CRC-32 of every `block` bytes of the concatenated chunks (the last
    block shorter)"""
    out: List[int] = []
    crc, used = 0, 0
    for mv in chunks:
        while len(mv):
            take = min(block - used, len(mv))
            crc = zlib.crc32(mv[:take], crc)
            used += take
            mv = mv[take:]
            if used == block:
                out.append(crc)
                crc, used = 0, 0
    if used:
        out.append(crc)
    return out


def write(f: BinaryIO, tensors: Dict[str, torch.Tensor], metadata: Dict[str, str]) -> None:
    """tensors as a safetensors file on the binary file f, names sorted,
    with metadata and the checksums in "__metadata__" (two passes over the
    tensors: the checksums precede the data)"""
    names = sorted(tensors)
    header: Dict[str, object] = {}
    off = 0
    for n in names:
        t = tensors[n]
        if t.dtype not in _ST_DTYPES:
            raise ValueError(f"{n}: dtype {t.dtype} has no safetensors name")
        nb = t.numel() * t.element_size()
        header[n] = {"dtype": _ST_DTYPES[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + nb]}
        off += nb
    crcs = crc_blocks(_chunks(tensors, names))
    header["__metadata__"] = dict(metadata, **{"flexplan.crc32.block_bytes": str(CRC_BLOCK),
                                               "flexplan.crc32": "".join("%08x" % c for c in crcs)})
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)  # the data buffer 8-aligned, as the reference writer pads
    f.write(struct.pack("<Q", len(h)))
    f.write(h)
    for mv in _chunks(tensors, names):
        f.write(mv)


def save(path: "os.PathLike[str] | str", tensors: Dict[str, torch.Tensor], metadata: Dict[str, str]) -> None:
    """write() to path, atomically for a regular file (a temporary file
    beside it, synced, renamed over it); in place for a device or FIFO"""
    if os.path.exists(path) and not os.path.isfile(path) and not os.path.isdir(path):
        with open(path, "wb") as f:
            write(f, tensors, metadata)
        return
    tmp = f"{os.fspath(path)}.tmp{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            write(f, tensors, metadata)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
