"""The bytes torch's caching allocator counts for each allocation of a history (`maya.api.memory`).

A history's events carry the requested size; `torch.cuda.max_memory_allocated` counts the block given, which can
be larger: the request rounded up to 512 bytes, or the whole free block it was cut from when the rest is too small
to split off (at most 1 MiB in the large pool; under 512 bytes in the small pool and in expandable segments). That
free block is found from addresses: free neighbours always merge, so a free block starting at an allocation's
address reaches the next live block or the end of its segment. The model follows `CUDACachingAllocator.cpp`
(`round_size`, `get_pool`, `should_split`) without `roundup_power2_divisions`; `maya memory` says when its peak
differs from the trace's.
"""

from __future__ import annotations

from bisect import bisect_right, insort

MIN_BLOCK = 512
"""`kMinBlockSize`: the smallest block, and the rounding of every request."""
SMALL_SIZE = 2**20
"""`kSmallSize`: requests up to this many bytes come from the small pool; a larger remainder is split off."""


def round_size(requested: int) -> int:
    """A request rounded up to the allocator's blocks."""
    return max(MIN_BLOCK, -(-requested // MIN_BLOCK) * MIN_BLOCK)


class Blocks:
    """The live blocks and the segments of one device, replayed event by event."""

    def __init__(self, settings: dict | None = None):
        settings = settings or {}
        self.expandable = bool(settings.get("expandable_segments"))
        self.max_split = int(settings.get("max_split_size") or -1)
        self.starts: list[int] = []  # live blocks' addresses, sorted
        self.ends: dict[int, int] = {}
        self.segments: list[list[int]] = []  # [start, end), sorted

    def map(self, addr: int, size: int) -> None:
        """A segment allocated (`cudaMalloc`) or an expandable segment's pages mapped. Blocks never span two
        segments, even adjacent ones; an expandable segment's mapped pages are one."""
        spans = sorted([*self.segments, [addr, addr + size]])
        merged: list[list[int]] = []
        for start, end in spans:
            if merged and (start < merged[-1][1] or (self.expandable and start == merged[-1][1])):
                merged[-1][1] = max(merged[-1][1], end)
            else:
                merged.append([start, end])
        self.segments = merged

    def unmap(self, addr: int, size: int) -> None:
        """A segment freed or pages unmapped."""
        end = addr + size
        kept = []
        for start, stop in self.segments:
            kept += [[s, e] for s, e in ((start, min(stop, addr)), (max(start, end), stop)) if s < e]
        self.segments = kept

    def allocate(self, addr: int, requested: int) -> int:
        """The bytes of the block an allocation at `addr` took."""
        rounded = round_size(requested)
        i = bisect_right(self.segments, [addr, float("inf")]) - 1
        segment_end = self.segments[i][1] if i >= 0 and self.segments[i][0] <= addr < self.segments[i][1] else None
        j = bisect_right(self.starts, addr)
        following = self.starts[j] if j < len(self.starts) else None
        limits = [x for x in (segment_end, following) if x is not None]
        size = rounded
        if limits:
            remaining = min(limits) - addr - rounded
            if rounded <= SMALL_SIZE or self.expandable:
                split = remaining >= MIN_BLOCK
            else:
                split = (self.max_split <= 0 or rounded < self.max_split) and remaining > SMALL_SIZE
            if remaining >= 0 and not split:
                size += remaining
        insort(self.starts, addr)
        self.ends[addr] = addr + size
        return size

    def free(self, addr: int) -> None:
        """A completed free."""
        if self.ends.pop(addr, None) is not None:
            self.starts.pop(bisect_right(self.starts, addr) - 1)
