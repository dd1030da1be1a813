"""Clips of one video decoded together: a batch's clips whose packets overlap or touch become one clip.

A clip is decoded from the keyframe at or before its first frame (``_container``), so clips of one
video in one batch (``clips="uniform"`` validation, several ``clips_per_video`` without shuffling)
often share packets: every clip after a keyframe decodes the pictures from it again. ``merge_clips``
joins such clips into one ``EncodedClip`` whose packets are the union of theirs and whose output
frames are all of theirs, one after the other, so that a decoder decodes each shared packet once.

Which clips join: those of one ``source`` (the same file and stream, ``EncodedClip.source``) decoded
with the same parameters, whose packet ranges (``first_packet`` on, in decode order) overlap or are
adjacent, and whose shared packets are the same (timestamps, flags, bytes: a file rewritten between
two reads does not join). Ranges with a gap between them stay apart: decoding the gap would cost
pictures no clip asked for. Clips without packets (every frame padding) and clips without a source
are left alone.

Decoding the union gives each clip the frames it gives alone: the union starts at the first clip's
keyframe, so the packets of a later clip are decoded after those before them in the file, as a
sequential decode does, and a clip's frames (from its keyframe on in presentation order) reference
no picture before its keyframe.
"""
from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np

from ._container import EncodedClip

__all__ = ["MergedClip", "merge_clips"]


class MergedClip(NamedTuple):
    """One decode: ``clip``'s output frames are those of the batch's clips ``members`` (ascending),
    each clip's frames in its order, the clips one after the other. A clip decoded alone is its own
    ``MergedClip`` (``clip`` is the batch's clip itself)."""

    clip: EncodedClip
    members: tuple[int, ...]


def _decoding(clip: EncodedClip) -> tuple:
    """What decides how a clip's packets decode: clips may share a decode only where it is equal."""
    return (clip.source, clip.codec, bytes(clip.extradata), clip.width, clip.height, clip.pix_fmt, clip.color,
            clip.time_base)


def _packets_agree(a: EncodedClip, b: EncodedClip) -> bool:
    """Whether the packets ``a`` and ``b`` both hold (by their place in the stream) are the same: ``b``
    starts within ``a``'s range or right after it, and nothing but what they share is compared."""
    lo = b.first_packet - a.first_packet
    n = min(a.num_packets - lo, b.num_packets)
    if n <= 0:
        return True
    if not (np.array_equal(a.pts[lo: lo + n], b.pts[:n]) and np.array_equal(a.dts[lo: lo + n], b.dts[:n])
            and np.array_equal(a.key[lo: lo + n], b.key[:n])):
        return False
    sizes_a = np.diff(a.offsets[lo: lo + n + 1])
    if not np.array_equal(sizes_a, np.diff(b.offsets[: n + 1])):
        return False
    start_a, start_b = int(a.offsets[lo]), int(b.offsets[0])
    size = int(sizes_a.sum())
    return np.array_equal(a.data[start_a: start_a + size], b.data[start_b: start_b + size])


def _join(clips: Sequence[EncodedClip], order: Sequence[int], members: Sequence[int]) -> EncodedClip:
    """One clip of ``clips[members]`` (a run from ``merge_clips``): the packets of the clips in ``order``
    (first packet ascending), each from where the ones before it end, and the frames of ``members``."""
    parts: list[tuple[EncodedClip, int, int]] = []  # (clip, first packet, packets past the last) it gives
    end = clips[order[0]].first_packet
    for i in order:
        c = clips[i]
        stop = c.first_packet + c.num_packets
        if stop > end:
            parts.append((c, end - c.first_packet, c.num_packets))
            end = stop
    first = clips[order[0]]
    data = np.concatenate([c.data[int(c.offsets[j0]): int(c.offsets[j1])] for c, j0, j1 in parts])
    sizes = np.concatenate([np.diff(c.offsets[j0: j1 + 1]) for c, j0, j1 in parts])
    offsets = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    return EncodedClip(
        codec=first.codec, extradata=first.extradata, width=first.width, height=first.height,
        pix_fmt=first.pix_fmt, color=first.color, time_base=first.time_base, data=data, offsets=offsets,
        pts=np.concatenate([c.pts[j0: j1] for c, j0, j1 in parts]),
        dts=np.concatenate([c.dts[j0: j1] for c, j0, j1 in parts]),
        key=np.concatenate([c.key[j0: j1] for c, j0, j1 in parts]),
        frame_pts=np.concatenate([clips[i].frame_pts for i in members]),
        frame_indices=np.concatenate([clips[i].frame_indices for i in members]),
        source=first.source, first_packet=first.first_packet,
    )


def merge_clips(clips: Sequence[EncodedClip]) -> list[MergedClip]:
    """The decodes that give every frame of ``clips``: clips of one source whose packet ranges overlap
    or are adjacent (and agree where they overlap) joined into one clip (see the module docstring),
    every other clip alone. In the order of each decode's first member; each clip is in exactly one."""
    runs: list[list[int]] = []  # each run's clips by first packet
    groups: dict[tuple, list[int]] = {}
    for i, c in enumerate(clips):
        if c.source is None or c.num_packets == 0:
            runs.append([i])
        else:
            groups.setdefault(_decoding(c), []).append(i)
    for members in groups.values():
        members = sorted(members, key=lambda i: (clips[i].first_packet, i))
        run = [members[0]]
        # the run's clip whose packets reach furthest: it holds every packet a next clip may share
        furthest = members[0]
        for i in members[1:]:
            c, f = clips[i], clips[furthest]
            if c.first_packet <= f.first_packet + f.num_packets and _packets_agree(f, c):
                run.append(i)
                if c.first_packet + c.num_packets > f.first_packet + f.num_packets:
                    furthest = i
            else:
                runs.append(run)
                run, furthest = [i], i
        runs.append(run)
    out = []
    for run in sorted(runs, key=min):
        members = tuple(sorted(run))
        clip = clips[run[0]] if len(run) == 1 else _join(clips, run, members)
        out.append(MergedClip(clip, members))
    return out
