"""The ``--keep-freed-memory`` option of the CPU benchmarks: glibc's malloc keeps what a process frees.

By default glibc serves a large block (over 128 KiB at first) from its own mapping and hands freed
memory back to the operating system, so the next tensor of that size is mapped afresh and every page
of it faults on first touch. A PSA forward makes two such tensors more than SDPA (q̂ and k̂), and
those faults can cost more than the shear itself: at B 4, H 8, T 1024, D 64 in fp32 on one thread, PSA's
forward took 2.1 and 7.3 ms over SDPA's 79 in two default runs (by where glibc's adaptive threshold
stood), 1.8 and 2.2 ms with freed memory kept (docs/kernel.md, the runs of 2026-12-05b). jemalloc and
tcmalloc, which PyTorch's CPU tuning guide recommends, keep freed memory; this option makes glibc do the
same, so that a ratio measures the operators and not the allocator.
"""

from __future__ import annotations

import ctypes
import ctypes.util

#: mallopt's parameters (malloc.h)
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
#: glibc's largest mmap threshold on 64-bit machines (blocks above it are still mapped and unmapped)
MMAP_THRESHOLD_MAX = 32 * 1024 * 1024


def keep_freed_memory() -> None:
    """Serve blocks of up to 32 MiB from the heap and never trim it (glibc only; RuntimeError elsewhere)."""
    name = ctypes.util.find_library("c")
    libc = ctypes.CDLL(name) if name else None
    mallopt = getattr(libc, "mallopt", None)
    if mallopt is None or not (mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_MAX) and mallopt(M_TRIM_THRESHOLD, 2**31 - 1)):
        raise RuntimeError("--keep-freed-memory needs glibc's malloc (Linux); this C library has no mallopt")
