"""The scan-marker check kernel; imported on the first launch only (see ``_triton.py``).

``scan_check.py`` holds its launcher, the plain-torch reference and the table of
bytes that may follow 0xFF inside scan data.
"""
import triton
import triton.language as tl


@triton.jit
def scan_check_kernel(data_ptr, n_data, offsets_ptr, lengths_ptr, starts_ptr, ok_ptr, flags_ptr,
                      BLOCK: tl.constexpr):
    # program (i, chunk): bytes [chunk * BLOCK, (chunk + 1) * BLOCK) of sample i's scan data
    i = tl.program_id(0)
    chunk = tl.program_id(1)
    start = tl.load(starts_ptr + i)
    base = tl.load(offsets_ptr + i)
    # pairs (p, p + 1) with p in [base + start, base + length - 1)
    first = base + tl.maximum(start, 0) + chunk.to(tl.int64) * BLOCK
    end = base + tl.load(lengths_ptr + i) - 1
    p = first + tl.arange(0, BLOCK)
    live = (p < end) & (p + 1 < n_data) & (start >= 0)
    x = tl.load(data_ptr + p, mask=live, other=0)
    nxt = tl.load(data_ptr + p + 1, mask=live & (x == 255), other=0)
    allowed = tl.load(ok_ptr + nxt.to(tl.int32), mask=live & (x == 255), other=1)
    bad = live & (x == 255) & (allowed == 0)
    # every offending byte writes the same 1: no reduction or atomics needed
    tl.store(flags_ptr + i + p * 0, 1, mask=bad)
