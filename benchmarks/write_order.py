"""When do nvJPEG's hardware engines write a batch's output: in the stream's order, or at the call?

    python benchmarks/write_order.py [--sizes 1,2,8,64,256] [--reps 5]

For each batch size, queues about 0.1 s of GPU work on a stream, then a copy of the output
buffer, then the decode (``NvjpegDecoder.decode_batch(..., stream_order=False)``, so the
decoder itself does not wait), on a decoder whose states were already initialised for that
size (the first call of a size initialises them, which may wait for the stream) and on a
fresh one. Prints how often the copy, which the stream runs before the decode, saw decoded
bytes: the engines wrote before the work queued ahead of them was done. ``stream_order=True``
(the default) is checked the same way.
"""
from __future__ import annotations

import argparse
import io
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from torchdali.decode import NvjpegDecoder  # noqa: E402


def _jpeg(seed: int) -> bytes:
    from PIL import Image

    rng = np.random.default_rng(seed)
    arr = (rng.random((96, 128, 3)) * 255).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="JPEG", quality=90)
    return buf.getvalue()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--sizes", default="1,2,8,64,256")
    p.add_argument("--reps", type=int, default=5)
    args = p.parse_args()
    print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}")
    blob = _jpeg(0)
    for n in (int(x) for x in args.sizes.split(",")):
        data = torch.frombuffer(bytearray(blob * n), dtype=torch.uint8).pin_memory()
        offsets = np.arange(n, dtype=np.int64) * len(blob)
        lengths = np.full(n, len(blob), dtype=np.int64)
        sizes = np.array([(96, 128)] * n, dtype=np.int64)
        out_off = np.arange(n, dtype=np.int64) * 96 * 128 * 3
        for ordered in (False, True):
            for warm in (True, False):
                early = 0
                dec = NvjpegDecoder(0, pipeline_depth=1)
                stream = torch.cuda.Stream()
                out = torch.zeros(n * 96 * 128 * 3, dtype=torch.uint8, device="cuda")
                if warm:  # initialise the states for this size first
                    dec.decode_batch(data, offsets, lengths, sizes, out, out_off, stream)
                    stream.synchronize()
                for _ in range(args.reps):
                    out.zero_()
                    torch.cuda.synchronize()
                    with torch.cuda.stream(stream):
                        torch.cuda._sleep(200_000_000)
                        before = out.clone()
                    status = dec.decode_batch(data, offsets, lengths, sizes, out, out_off, stream,
                                              stream_order=ordered)
                    stream.synchronize()
                    assert not any(status), dec.last_errors
                    early += int(bool(before.any()))
                    if not warm:
                        dec.close()
                        dec = NvjpegDecoder(0, pipeline_depth=1)
                dec.close()
                print(f"batch {n:4d}, stream_order={ordered!s:5}, states {'initialised' if warm else 'fresh':11}: "
                      f"the copy queued before the decode saw decoded bytes in {early} of {args.reps}", flush=True)


if __name__ == "__main__":
    main()
