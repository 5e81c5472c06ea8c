"""PSA attention as one Triton kernel: the shear is formed inside a FlashAttention-style loop.

    q̂_t = q_t + gamma_q (q_t - q_{t-1}),  k̂_j = k_j + gamma_k (k_j - k_{j-1}),
    out = softmax(scale * q̂ k̂ᵀ + causal mask) v

Each program owns one tile of query rows of one head. It loads the tile's rows and the row before
each of them, forms q̂ in fp32 and rounds it once for the tensor cores; it then walks the key tiles,
forming k̂ the same way from rows j and j - 1, with the online softmax of FlashAttention (Dao, 2023:
arXiv 2307.08691). No sheared stream is ever written to memory, and the rounding error is that of one
rounding of q̂ and k̂, not of each elementwise operation before SDPA. ``score_products`` can have
the score product take another dtype than the streams' (fp16 operands for bf16 streams keep 3 more
bits, each row scaled into fp16's range by a power of two); forward and backward then compute the
same scores.

The boundary rule is the one of ``psattn.ops.shear``: at a sequence start (t = 0 without ``prev``, and
wherever ``starts`` is set) the predecessor is the row itself (``replicate``: no shear) or zero
(``zero``: (1 + gamma) x); ``prev`` (B, H, 1, D) is the row before position 0 of a chunk that
continues a cached stream.

Backward. Two kernels recompute q̂, k̂ and the probabilities from the saved log-sum-exp (FlashAttention-2's
backward): one walks query tiles for each key tile and accumulates dk̂ and dv over the query heads that
share the key head (GQA), the other walks key tiles for each query tile and accumulates dq̂. The shear
is linear, so dq and dk follow from dq̂ and dk̂ through the transposed filter (``shear_transpose``):

    dx_j = a_j dx̂_j + b_{j+1} dx̂_{j+1},  dprev = b_0 dx̂_0,

where ``x̂_j = a_j x_j + b_j x_{j-1}``: a_j = 1 + gamma, b_j = -gamma inside a sequence, and at a start
a_j = 1 (replicate) or 1 + gamma (zero), b_j = 0. Around the two kernels, FlashAttention-2's row
sums rowsum(dO ∘ O) and the transposed filter each run as one elementwise pass, which writes the
gradients once, in their own dtypes (dv is rounded in the dk/dv kernel).

Triton runs the same kernels on CPU tensors under its interpreter (``TRITON_INTERPRET=1`` set before
this module is imported: the kernels are built for one or the other), which is how the test suite
checks them on a machine without a GPU.
"""

from __future__ import annotations

import contextlib
import functools
import math
import re

import torch
import triton
import triton.language as tl
from torch import Tensor

from psattn.ops.fused_widths import HEAD_DIMS  # head dimensions the kernels are built for (q, k and v share one)

LOG2E = tl.constexpr(1.4426950408889634)  # log2(e): the kernels take exponentials in base 2

#: input dtypes the kernels take
DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
#: programs a CUDA launch grid may have along its second axis, where the kernels put batch x heads
MAX_GRID_Y = 65535


#: whether this module's kernels were built for Triton's interpreter (``TRITON_INTERPRET=1`` when the
#: module was imported): they then run on CPU tensors, and on nothing else
BUILT_FOR_INTERPRETER = bool(triton.knobs.runtime.interpret)


def interpreted() -> bool:
    """Whether the kernels run in Triton's interpreter (on CPU tensors) in this process."""
    return BUILT_FOR_INTERPRETER


def _release(version: str) -> tuple[int, int]:
    """(major, minor) of a version string such as ``"3.6.0"`` or ``"2.5.0rc1"``."""
    major, minor = re.match(r"(\d+)\.(\d+)", version).groups()  # type: ignore[union-attr]
    return int(major), int(minor)


def interpreter_unusable() -> str | None:
    """Why Triton's interpreter cannot run the kernels with the installed packages (None when it can):
    before Triton 3.7 it reads a loop bound computed in a kernel with ``int()`` of a one-element
    array, which NumPy 2.4 refuses ("only 0-dimensional arrays can be converted to Python scalars").
    Compiled kernels on a GPU are not affected."""
    import numpy

    if _release(triton.__version__) < (3, 7) and _release(numpy.__version__) >= (2, 4):
        return (f"Triton {triton.__version__}'s interpreter does not run with NumPy {numpy.__version__} "
                "(Triton 3.7 or newer, or NumPy below 2.4, runs it)")
    return None


@triton.jit
def _bf16_dot_probe(A, OUT, N: tl.constexpr):
    """OUT = A A for one (N, N) bf16 tile, through ``tl.dot`` (``interpreter_bf16_dot_wrong``)."""
    r = tl.arange(0, N)
    a = tl.load(A + r[:, None] * N + r[None, :])
    tl.store(OUT + r[:, None] * N + r[None, :], tl.dot(a, a, out_dtype=tl.float32))


@functools.cache
def interpreter_bf16_dot_wrong() -> bool:
    """Whether Triton's interpreter gets a bf16 ``tl.dot`` wrong: Triton 3.9's multiplies the tiles' raw 16-bit
    patterns as integers (2 I times 2 I gave 16384^2 I, not 4 I), so every bf16 product of the kernels would be
    wrong there. A 16 x 16 product in the interpreter tells (False outside the interpreter)."""
    if not interpreted():
        return False
    a = 2.0 * torch.eye(16, dtype=torch.bfloat16)
    out = torch.empty(16, 16, dtype=torch.float32)
    _bf16_dot_probe[(1,)](a, out, N=16)
    return not torch.equal(out, 4.0 * torch.eye(16))


@triton.jit
def _sheared_rows(base, prev_base, starts_base, rows, cols, T, stride_t, stride_d, stride_pd, stride_st, gamma,
                  SHEAR: tl.constexpr, HAS_PREV: tl.constexpr, HAS_STARTS: tl.constexpr, REPLICATE: tl.constexpr,
                  ACC: tl.constexpr):
    """Rows ``rows`` of one head's stream, sheared, in ``ACC`` (fp32, or fp64 for fp64 input):
    (len(rows), D); rows past T are 0."""
    inside = rows < T
    x = tl.load(base + rows[:, None] * stride_t + cols[None, :] * stride_d, mask=inside[:, None], other=0.0)
    x = x.to(ACC)
    if SHEAR:
        before = tl.load(base + (rows - 1)[:, None] * stride_t + cols[None, :] * stride_d,
                         mask=(inside & (rows > 0))[:, None], other=0.0)
        before = before.to(x.dtype)
        if HAS_PREV:  # the row before position 0: the cached stream's last raw row
            last = tl.load(prev_base + cols * stride_pd).to(x.dtype)
            before = tl.where((rows == 0)[:, None], last[None, :], before)
            start = rows < 0  # none yet
        else:
            start = rows == 0
        if HAS_STARTS:
            start = start | (tl.load(starts_base + rows * stride_st, mask=inside, other=0) != 0)
        if REPLICATE:
            before = tl.where(start[:, None], x, before)
        else:
            before = tl.where(start[:, None], 0.0, before)
        x = x + gamma * (x - before)
    return x


@triton.jit
def _score_operand(x, PROD: tl.constexpr, ROW_SCALE: tl.constexpr):
    """A sheared tile ``x`` (rows, D) as an operand of the score product, rounded to ``PROD`` (the dtype
    of the streams' values unless ``score_products`` chose otherwise), and what undoes its scale on the
    scores: with ``ROW_SCALE`` each row is first multiplied by the power of two 2^k that brings its
    largest entry into [2^14, 2^15), inside a 16-bit dtype's range whatever the row's size, and the
    second value is 2^-k per row (fp32); otherwise it is 1.0. Powers of two: both steps are exact."""
    down = 1.0
    if ROW_SCALE:
        top = tl.max(tl.abs(x), 1).to(tl.float32)  # (rows,)
        exponent = ((top.to(tl.int32, bitcast=True) >> 23) & 0xFF) - 127  # top in [2^e, 2^(e+1)) (-127: zero)
        k = tl.minimum(tl.maximum(14 - exponent, -126), 126)  # both 2^k and 2^-k normal floats
        x = x * ((k + 127) << 23).to(tl.float32, bitcast=True)[:, None].to(x.dtype)  # (rows, D): times 2^k
        down = ((127 - k) << 23).to(tl.float32, bitcast=True)  # (rows,): 2^-k
    return x.to(PROD), down


@triton.jit
def _forward_tiles(q, q_down, acc, l, m, rows, cols, lo, hi, k_base, pk_base, s_base, v_base, Tk, skt, skd, spkd,
                   sst, svt, svd, gamma_k, scale, BLOCK_N: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr,
                   SHEAR_K: tl.constexpr, HAS_PREV_K: tl.constexpr, HAS_STARTS: tl.constexpr,
                   REPLICATE: tl.constexpr, PRECISION: tl.constexpr, ACC: tl.constexpr, PROD: tl.constexpr,
                   ROW_SCALE: tl.constexpr):
    """The online softmax over the key tiles [lo, hi): returns the updated (acc, l, m). ``MASKED``
    tiles may hold keys past Tk or (causal) after a query row; the others are wholly visible. q̂ and
    k̂ enter the score product as ``_score_operand`` makes them (``q_down``: q̂'s undoing)."""
    for start_n in range(lo, hi, BLOCK_N):
        keys = start_n + tl.arange(0, BLOCK_N)
        v = tl.load(v_base + keys[:, None] * svt + cols[None, :] * svd, mask=(keys < Tk)[:, None], other=0.0)
        k = _sheared_rows(k_base, pk_base, s_base, keys, cols, Tk, skt, skd, spkd, sst, gamma_k, SHEAR_K,
                          HAS_PREV_K, HAS_STARTS, REPLICATE, ACC)
        k, k_down = _score_operand(k, PROD, ROW_SCALE)  # (BLOCK_N, D): k̂
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION, out_dtype=ACC) * (scale * LOG2E)  # (BLOCK_M, BLOCK_N)
        if ROW_SCALE:
            s = s * q_down[:, None] * k_down[None, :]
        if MASKED:
            seen = keys[None, :] < Tk
            if CAUSAL:
                seen = seen & (keys[None, :] <= rows[:, None])
            s = tl.where(seen, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 1))
        p = tl.exp2(s - m_new[:, None])
        alpha = tl.exp2(m - m_new)
        l = l * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION, out_dtype=ACC)
        m = m_new
    return acc, l, m


@triton.jit
def _forward_kernel(
    Q, K, V, PQ, PK, S, O, LSE,
    sqb, sqh, sqt, sqd, skb, skh, skt, skd, svb, svh, svt, svd, sob, soh, sot, sod,
    spqb, spqh, spqd, spkb, spkh, spkd, ssb, sst,
    Hq, G, Tq, Tk, gamma_q, gamma_k, scale,
    D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
    SHEAR_Q: tl.constexpr, SHEAR_K: tl.constexpr, HAS_PREV_Q: tl.constexpr, HAS_PREV_K: tl.constexpr,
    HAS_STARTS: tl.constexpr, REPLICATE: tl.constexpr, PRECISION: tl.constexpr, ACC: tl.constexpr,
    PROD: tl.constexpr, ROW_SCALE: tl.constexpr,
):
    pid_m, pid_bh = tl.program_id(0), tl.program_id(1)
    b, h = pid_bh // Hq, pid_bh % Hq
    hk = h // G  # the key/value head this query head reads (GQA)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, D)
    q = _sheared_rows(Q + b * sqb + h * sqh, PQ + b * spqb + h * spqh, S + b * ssb, rows, cols, Tq, sqt, sqd,
                      spqd, sst, gamma_q, SHEAR_Q, HAS_PREV_Q, HAS_STARTS, REPLICATE, ACC)
    q, q_down = _score_operand(q, PROD, ROW_SCALE)  # (BLOCK_M, D): q̂, rounded once to the dtype of the products
    m = tl.full((BLOCK_M,), float("-inf"), ACC)  # running max of the base-2 scores
    l = tl.zeros((BLOCK_M,), ACC)  # running sum of their exponentials
    acc = tl.zeros((BLOCK_M, D), ACC)
    k_base, v_base = K + b * skb + hk * skh, V + b * svb + hk * svh
    pk_base, s_base = PK + b * spkb + hk * spkh, S + b * ssb
    # key tiles wholly visible to every row of this tile (below the diagonal, inside Tk), then the rest
    whole = (Tk // BLOCK_N) * BLOCK_N
    if CAUSAL:  # BLOCK_M is a multiple of BLOCK_N: the tiles before this row tile's first row are whole
        whole = tl.minimum(whole, pid_m * BLOCK_M)
    end = tl.minimum(Tk, (pid_m + 1) * BLOCK_M) if CAUSAL else Tk
    acc, l, m = _forward_tiles(q, q_down, acc, l, m, rows, cols, 0, whole, k_base, pk_base, s_base, v_base, Tk, skt, skd,
                               spkd, sst, svt, svd, gamma_k, scale, BLOCK_N, False, CAUSAL, SHEAR_K, HAS_PREV_K,
                               HAS_STARTS, REPLICATE, PRECISION, ACC, PROD, ROW_SCALE)
    acc, l, m = _forward_tiles(q, q_down, acc, l, m, rows, cols, whole, end, k_base, pk_base, s_base, v_base, Tk, skt, skd,
                               spkd, sst, svt, svd, gamma_k, scale, BLOCK_N, True, CAUSAL, SHEAR_K, HAS_PREV_K,
                               HAS_STARTS, REPLICATE, PRECISION, ACC, PROD, ROW_SCALE)
    out = acc / l[:, None]
    tl.store(O + b * sob + h * soh + rows[:, None] * sot + cols[None, :] * sod, out.to(O.dtype.element_ty),
             mask=(rows < Tq)[:, None])
    tl.store(LSE + pid_bh * Tq + rows, m + tl.log2(l), mask=rows < Tq)


@triton.jit
def _dkdv_tiles(k, k_down, v, dk, dv, keys, cols, lo, hi, q_base, pq_base, s_base, do_base, lse_base, delta_base, Tq, sqt,
                sqd, spqd, sst, sdot, sdod, gamma_q, scale, k_mat, dq_base, Tk, D: tl.constexpr,
                BLOCK_M: tl.constexpr, MASKED: tl.constexpr, SHEAR_Q: tl.constexpr, HAS_PREV_Q: tl.constexpr,
                HAS_STARTS: tl.constexpr, REPLICATE: tl.constexpr, PRECISION: tl.constexpr, ACC: tl.constexpr,
                PROD: tl.constexpr, ROW_SCALE: tl.constexpr, DQ_ATOMIC: tl.constexpr):
    """dk̂ and dv of one key tile from the query tiles [lo, hi) of one query head; ``MASKED``: the
    causal mask applies inside these tiles. ``k`` is the key tile as an operand of the score product
    (``_score_operand``, ``k_down`` its undoing); q̂ enters it the same way, and dk̂'s product in v's
    dtype. With ``DQ_ATOMIC`` (``backward_variant``) each query tile's share of dq̂ from this key tile,
    ds k̂ (``k_mat``: k̂ in v's dtype), is also added to dq̂ (``dq_base``: contiguous rows of D) atomically."""
    for start_m in range(lo, hi, BLOCK_M):
        rows = start_m + tl.arange(0, BLOCK_M)
        q_wide = _sheared_rows(q_base, pq_base, s_base, rows, cols, Tq, sqt, sqd, spqd, sst, gamma_q, SHEAR_Q,
                               HAS_PREV_Q, HAS_STARTS, REPLICATE, ACC)  # (BLOCK_M, D): q̂
        q = q_wide.to(v.dtype)
        q_score, q_down = _score_operand(q_wide, PROD, ROW_SCALE)  # q itself when PROD is v's dtype
        do = tl.load(do_base + rows[:, None] * sdot + cols[None, :] * sdod, mask=(rows < Tq)[:, None], other=0.0)
        lse = tl.load(lse_base + rows, mask=rows < Tq, other=float("inf"))
        delta = tl.load(delta_base + rows, mask=rows < Tq, other=0.0)
        s_t = tl.dot(k, tl.trans(q_score), input_precision=PRECISION, out_dtype=ACC) * (scale * LOG2E)
        if ROW_SCALE:  # (BLOCK_N, BLOCK_M): the forward's scores
            s_t = s_t * k_down[:, None] * q_down[None, :]
        p_t = tl.exp2(s_t - lse[None, :])
        if MASKED:
            p_t = tl.where(keys[:, None] <= rows[None, :], p_t, 0.0)
        if DQ_ATOMIC:  # a key past Tk scores 0, whose exp2(0 - lse) may overflow: inf times its zero k̂ row is NaN
            p_t = tl.where((keys < Tk)[:, None], p_t, 0.0)
        dv += tl.dot(p_t.to(do.dtype), do, input_precision=PRECISION, out_dtype=ACC)
        dp_t = tl.dot(v, tl.trans(do), input_precision=PRECISION, out_dtype=ACC)
        ds_t = p_t * (dp_t - delta[None, :])
        dk += tl.dot(ds_t.to(q.dtype), q, input_precision=PRECISION, out_dtype=ACC)
        if DQ_ATOMIC:
            dq = tl.dot(tl.trans(ds_t.to(k_mat.dtype)), k_mat, input_precision=PRECISION, out_dtype=ACC)  # (BLOCK_M, D)
            tl.atomic_add(dq_base + rows[:, None] * D + cols[None, :], dq * scale,
                          mask=(rows < Tq)[:, None], sem="relaxed")
    return dk, dv


@triton.jit
def _dkdv_kernel(
    Q, K, V, PQ, PK, S, DO, LSE, DELTA, DK, DV, DQ,
    sqb, sqh, sqt, sqd, skb, skh, skt, skd, svb, svh, svt, svd, sdob, sdoh, sdot, sdod,
    spqb, spqh, spqd, spkb, spkh, spkd, ssb, sst,
    Hq, Hkv, G, Tq, Tk, gamma_q, gamma_k, scale,
    D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
    SHEAR_Q: tl.constexpr, SHEAR_K: tl.constexpr, HAS_PREV_Q: tl.constexpr, HAS_PREV_K: tl.constexpr,
    HAS_STARTS: tl.constexpr, REPLICATE: tl.constexpr, PRECISION: tl.constexpr, ACC: tl.constexpr,
    PROD: tl.constexpr, ROW_SCALE: tl.constexpr, DQ_ATOMIC: tl.constexpr = False,
):
    """dk̂ and dv of one key tile of one key head, summed over the query heads that share it; with
    ``DQ_ATOMIC``, also each query head's dq̂ from this key tile, added into DQ (zeros, (B, Hq, Tq, D))."""
    pid_n, pid_bh = tl.program_id(0), tl.program_id(1)
    b, hk = pid_bh // Hkv, pid_bh % Hkv
    keys = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = tl.arange(0, D)
    k_wide = _sheared_rows(K + b * skb + hk * skh, PK + b * spkb + hk * spkh, S + b * ssb, keys, cols, Tk, skt, skd,
                           spkd, sst, gamma_k, SHEAR_K, HAS_PREV_K, HAS_STARTS, REPLICATE, ACC)
    k, k_down = _score_operand(k_wide, PROD, ROW_SCALE)  # (BLOCK_N, D): k̂, in the score product
    v = tl.load(V + b * svb + hk * svh + keys[:, None] * svt + cols[None, :] * svd, mask=(keys < Tk)[:, None],
                other=0.0)
    k_mat = k_wide.to(v.dtype)  # k̂ in v's dtype, for dq̂'s product (DQ_ATOMIC only)
    dk = tl.zeros((BLOCK_N, D), ACC)
    dv = tl.zeros((BLOCK_N, D), ACC)
    # causal: query tiles before the diagonal see none of these keys, those on it some (masked), the
    # later ones all (BLOCK_N is a multiple of BLOCK_M). Keys past Tk and rows past Tq need no mask:
    # their rows of dk̂ and dv are not stored, and a row past Tq has probability 0 (its lse is +inf).
    lo = (pid_n * BLOCK_N // BLOCK_M) * BLOCK_M if CAUSAL else 0
    whole = tl.minimum((pid_n + 1) * BLOCK_N, Tq) if CAUSAL else 0
    for g in range(0, G):
        h = hk * G + g
        q_base, pq_base, s_base = Q + b * sqb + h * sqh, PQ + b * spqb + h * spqh, S + b * ssb
        do_base, stats = DO + b * sdob + h * sdoh, (b * Hq + h) * Tq
        dk, dv = _dkdv_tiles(k, k_down, v, dk, dv, keys, cols, lo, whole, q_base, pq_base, s_base, do_base, LSE + stats,
                             DELTA + stats, Tq, sqt, sqd, spqd, sst, sdot, sdod, gamma_q, scale, k_mat, DQ + stats * D,
                             Tk, D, BLOCK_M, True, SHEAR_Q, HAS_PREV_Q, HAS_STARTS, REPLICATE, PRECISION, ACC, PROD,
                             ROW_SCALE, DQ_ATOMIC)
        dk, dv = _dkdv_tiles(k, k_down, v, dk, dv, keys, cols, whole, Tq, q_base, pq_base, s_base, do_base, LSE + stats,
                             DELTA + stats, Tq, sqt, sqd, spqd, sst, sdot, sdod, gamma_q, scale, k_mat, DQ + stats * D,
                             Tk, D, BLOCK_M, False, SHEAR_Q, HAS_PREV_Q, HAS_STARTS, REPLICATE, PRECISION, ACC, PROD,
                             ROW_SCALE, DQ_ATOMIC)
    out = (pid_bh * Tk + keys)[:, None] * D + cols[None, :]
    tl.store(DK + out, dk * scale, mask=(keys < Tk)[:, None])
    tl.store(DV + out, dv.to(DV.dtype.element_ty), mask=(keys < Tk)[:, None])


@triton.jit
def _dq_tiles(q, q_down, do, lse, delta, dq, rows, cols, lo, hi, k_base, pk_base, s_base, v_base, Tk, skt, skd, spkd, sst,
              svt, svd, gamma_k, scale, BLOCK_N: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr,
              SHEAR_K: tl.constexpr, HAS_PREV_K: tl.constexpr, HAS_STARTS: tl.constexpr, REPLICATE: tl.constexpr,
              PRECISION: tl.constexpr, ACC: tl.constexpr, PROD: tl.constexpr, ROW_SCALE: tl.constexpr):
    """dq̂ of one query tile from the key tiles [lo, hi); ``MASKED`` tiles may hold keys past Tk or
    (causal) after a query row, whose probabilities are set to 0 (a key past Tk scores 0, and
    exp2(0 - lse) overflows for a row whose scores are all very negative: inf times its zero k̂ row was NaN).
    ``q`` is the query tile as an operand of the score product (``_score_operand``, ``q_down`` its
    undoing); k̂ enters it the same way, and dq̂'s product in v's dtype."""
    for start_n in range(lo, hi, BLOCK_N):
        keys = start_n + tl.arange(0, BLOCK_N)
        v = tl.load(v_base + keys[:, None] * svt + cols[None, :] * svd, mask=(keys < Tk)[:, None], other=0.0)
        k_wide = _sheared_rows(k_base, pk_base, s_base, keys, cols, Tk, skt, skd, spkd, sst, gamma_k, SHEAR_K,
                               HAS_PREV_K, HAS_STARTS, REPLICATE, ACC)  # (BLOCK_N, D): k̂
        k = k_wide.to(v.dtype)
        k_score, k_down = _score_operand(k_wide, PROD, ROW_SCALE)  # k itself when PROD is v's dtype
        s = tl.dot(q, tl.trans(k_score), input_precision=PRECISION, out_dtype=ACC) * (scale * LOG2E)
        if ROW_SCALE:  # (BLOCK_M, BLOCK_N): the forward's scores
            s = s * q_down[:, None] * k_down[None, :]
        p = tl.exp2(s - lse[:, None])
        if MASKED:
            seen = keys[None, :] < Tk
            if CAUSAL:
                seen = seen & (keys[None, :] <= rows[:, None])
            p = tl.where(seen, p, 0.0)
        dp = tl.dot(do, tl.trans(v), input_precision=PRECISION, out_dtype=ACC)
        ds = p * (dp - delta[:, None])
        dq += tl.dot(ds.to(k.dtype), k, input_precision=PRECISION, out_dtype=ACC)
    return dq


@triton.jit
def _dq_kernel(
    Q, K, V, PQ, PK, S, DO, LSE, DELTA, DQ,
    sqb, sqh, sqt, sqd, skb, skh, skt, skd, svb, svh, svt, svd, sdob, sdoh, sdot, sdod,
    spqb, spqh, spqd, spkb, spkh, spkd, ssb, sst,
    Hq, G, Tq, Tk, gamma_q, gamma_k, scale,
    D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
    SHEAR_Q: tl.constexpr, SHEAR_K: tl.constexpr, HAS_PREV_Q: tl.constexpr, HAS_PREV_K: tl.constexpr,
    HAS_STARTS: tl.constexpr, REPLICATE: tl.constexpr, PRECISION: tl.constexpr, ACC: tl.constexpr,
    PROD: tl.constexpr, ROW_SCALE: tl.constexpr,
):
    """dq̂ of one query tile of one query head."""
    pid_m, pid_bh = tl.program_id(0), tl.program_id(1)
    b, h = pid_bh // Hq, pid_bh % Hq
    hk = h // G
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, D)
    q = _sheared_rows(Q + b * sqb + h * sqh, PQ + b * spqb + h * spqh, S + b * ssb, rows, cols, Tq, sqt, sqd,
                      spqd, sst, gamma_q, SHEAR_Q, HAS_PREV_Q, HAS_STARTS, REPLICATE, ACC)
    q, q_down = _score_operand(q, PROD, ROW_SCALE)  # (BLOCK_M, D): q̂, only ever in the score product here
    do = tl.load(DO + b * sdob + h * sdoh + rows[:, None] * sdot + cols[None, :] * sdod, mask=(rows < Tq)[:, None],
                 other=0.0)
    lse = tl.load(LSE + pid_bh * Tq + rows, mask=rows < Tq, other=float("inf"))
    delta = tl.load(DELTA + pid_bh * Tq + rows, mask=rows < Tq, other=0.0)
    dq = tl.zeros((BLOCK_M, D), ACC)
    k_base, v_base = K + b * skb + hk * skh, V + b * svb + hk * svh
    pk_base, s_base = PK + b * spkb + hk * spkh, S + b * ssb
    # key tiles wholly visible to every row of this tile (inside Tk and, causal, before its first row:
    # BLOCK_M is a multiple of BLOCK_N), then the rest, masked, as in the forward
    whole = (Tk // BLOCK_N) * BLOCK_N
    if CAUSAL:
        whole = tl.minimum(whole, pid_m * BLOCK_M)
    end = tl.minimum(Tk, (pid_m + 1) * BLOCK_M) if CAUSAL else Tk
    dq = _dq_tiles(q, q_down, do, lse, delta, dq, rows, cols, 0, whole, k_base, pk_base, s_base, v_base, Tk, skt, skd, spkd,
                   sst, svt, svd, gamma_k, scale, BLOCK_N, False, CAUSAL, SHEAR_K, HAS_PREV_K, HAS_STARTS, REPLICATE,
                   PRECISION, ACC, PROD, ROW_SCALE)
    dq = _dq_tiles(q, q_down, do, lse, delta, dq, rows, cols, whole, end, k_base, pk_base, s_base, v_base, Tk, skt, skd, spkd,
                   sst, svt, svd, gamma_k, scale, BLOCK_N, True, CAUSAL, SHEAR_K, HAS_PREV_K, HAS_STARTS, REPLICATE,
                   PRECISION, ACC, PROD, ROW_SCALE)
    tl.store(DQ + (pid_bh * Tq + rows)[:, None] * D + cols[None, :], dq * scale, mask=(rows < Tq)[:, None])


@triton.jit
def _delta_kernel(O, DO, DELTA, sob, soh, sot, sod, sdob, sdoh, sdot, sdod, Hq, Tq,
                  D: tl.constexpr, BLOCK_T: tl.constexpr, ACC: tl.constexpr):
    """rowsum(dO ∘ O) of one tile of rows of one head, in ``ACC`` (FlashAttention-2's preprocessing):
    one read of O and dO in their own dtype."""
    pid_t, pid_bh = tl.program_id(0), tl.program_id(1)
    b, h = pid_bh // Hq, pid_bh % Hq
    rows = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)
    cols = tl.arange(0, D)
    inside = (rows < Tq)[:, None]
    o = tl.load(O + b * sob + h * soh + rows[:, None] * sot + cols[None, :] * sod, mask=inside, other=0.0)
    do = tl.load(DO + b * sdob + h * sdoh + rows[:, None] * sdot + cols[None, :] * sdod, mask=inside, other=0.0)
    tl.store(DELTA + pid_bh * Tq + rows, tl.sum(o.to(ACC) * do.to(ACC), 1), mask=rows < Tq)


@triton.jit
def _shear_transpose_kernel(DXHAT, S, DX, DPREV, ssb, sst, H, T, gamma,
                            D: tl.constexpr, BLOCK_T: tl.constexpr, HAS_PREV: tl.constexpr,
                            HAS_STARTS: tl.constexpr, REPLICATE: tl.constexpr):
    """``shear_transpose`` for one tile of rows of one head: dx_j = a_j dx̂_j + b_{j+1} dx̂_{j+1} from
    dx̂ (DXHAT: contiguous (B, H, T, D) in the accumulation dtype), written once in DX's dtype; the tile
    holding row 0 also writes dprev = b_0 dx̂_0 when the stream continued a ``prev`` row."""
    pid_t, pid_bh = tl.program_id(0), tl.program_id(1)
    b = pid_bh // H
    rows = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)
    after = rows + 1
    cols = tl.arange(0, D)
    head = DXHAT + pid_bh * T * D
    g = tl.load(head + rows[:, None] * D + cols[None, :], mask=(rows < T)[:, None], other=0.0)
    g_after = tl.load(head + after[:, None] * D + cols[None, :], mask=(after < T)[:, None], other=0.0)
    start = rows < 0 if HAS_PREV else rows == 0  # without prev, row 0 starts the stream
    start_after = after < 0  # none yet
    if HAS_STARTS:
        start = start | (tl.load(S + b * ssb + rows * sst, mask=rows < T, other=0) != 0)
        start_after = tl.load(S + b * ssb + after * sst, mask=after < T, other=0) != 0
    if REPLICATE:  # x̂_j's weight on x_j: no shear at a start
        a = 1.0 + gamma * (1.0 - start.to(g.dtype))
    else:  # a zero predecessor: (1 + gamma) x_j at a start too
        a = 1.0 + gamma + tl.zeros((BLOCK_T,), g.dtype)
    b_after = -gamma * (1.0 - start_after.to(g.dtype))  # x̂_{j+1}'s weight on x_j: none across a start
    dx = a[:, None] * g + b_after[:, None] * g_after
    tl.store(DX + pid_bh * T * D + rows[:, None] * D + cols[None, :], dx.to(DX.dtype.element_ty),
             mask=(rows < T)[:, None])
    if HAS_PREV:
        if pid_t == 0:
            d_first = -gamma * tl.load(head + cols)  # x̂_0's weight on prev is -gamma ...
            if HAS_STARTS:  # ... and 0 when row 0 starts a sequence
                d_first = tl.where(tl.load(S + b * ssb) != 0, 0.0, d_first)
            tl.store(DPREV + pid_bh * D + cols, d_first.to(DPREV.dtype.element_ty))


@triton.jit
def _shear_kernel(X, PREV, S, XHAT, sxb, sxh, sxt, sxd, spb, sph, spd, ssb, sst, H, T, gamma,
                  D: tl.constexpr, BLOCK_T: tl.constexpr, HAS_PREV: tl.constexpr, HAS_STARTS: tl.constexpr,
                  REPLICATE: tl.constexpr, ACC: tl.constexpr):
    """x̂ of one tile of rows of one head, formed as the kernels form it (``_sheared_rows``) and rounded
    once to XHAT's dtype (contiguous (B, H, T, D)): the backward's ``presheared`` variant."""
    pid_t, pid_bh = tl.program_id(0), tl.program_id(1)
    b, h = pid_bh // H, pid_bh % H
    rows = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)
    cols = tl.arange(0, D)
    x = _sheared_rows(X + b * sxb + h * sxh, PREV + b * spb + h * sph, S + b * ssb, rows, cols, T, sxt, sxd, spd, sst,
                      gamma, True, HAS_PREV, HAS_STARTS, REPLICATE, ACC)
    tl.store(XHAT + (pid_bh * T + rows)[:, None] * D + cols[None, :], x.to(XHAT.dtype.element_ty),
             mask=(rows < T)[:, None])


def shear_transpose(g: Tensor, gamma: float, starts: Tensor | None, has_prev: bool, replicate: bool
                    ) -> tuple[Tensor, Tensor | None]:
    """The gradient of the shear's input from its output's ``g`` (B, H, T, D): (dx, dprev), dprev
    (B, H, 1, D) when the stream continued a ``prev`` row (None otherwise). The filter written in
    tensor operations; the backward runs it as one kernel pass (``_shear_transpose_kernel``)."""
    B, _, T, _ = g.shape
    start = torch.zeros(B, T, dtype=torch.bool, device=g.device) if starts is None else starts.clone()
    if not has_prev:
        start[:, 0] = True
    start = start[:, None, :, None].to(g.dtype)  # (B, 1, T, 1): 1 at starts
    a = (1.0 + gamma) - (gamma if replicate else 0.0) * start  # x̂_j's weight on x_j
    b = -gamma * (1.0 - start)  # ... on x_{j-1}
    bg = b * g  # (B, H, T, D)
    dx = a * g
    dx[..., :-1, :] += bg[..., 1:, :]
    return dx, (bg[..., :1, :] if has_prev else None)


def _configs(pairs: list[tuple[int, int, int, int]]) -> list[triton.Config]:
    return [triton.Config({"BLOCK_M": m, "BLOCK_N": n}, num_warps=w, num_stages=st) for m, n, w, st in pairs]


#: tile shapes the GPU tries (rows of queries, rows of keys, warps, pipeline stages), tuned once per head
#: dimension and switch set (not per length: a new length reuses the choice); the interpreter takes
#: 16 x 16 tiles, the smallest tl.dot takes. The last shape of each list is small enough for fp32 tiles
#: at D = 128 (the larger ones need more shared memory than a Hopper GPU has, in fp32); the first of
#: each spills none or a few bytes in bf16 at D = 128 (docs/kernel.md). The causal split into whole and masked tiles needs
#: BLOCK_M to be a multiple of BLOCK_N in the forward and dq kernels, and the converse in the dk/dv
#: kernel. ``scripts/compile_kernels.py`` compiles them all and prints what each needs.
_KEY = ["D", "CAUSAL", "SHEAR_Q", "SHEAR_K", "HAS_STARTS", "ACC", "PROD", "ROW_SCALE"]
_TUNED = {
    "forward": triton.autotune(_configs([(128, 64, 8, 3), (128, 64, 4, 3), (64, 64, 4, 3), (128, 32, 4, 4),
                                         (64, 32, 4, 2)]), key=_KEY)(_forward_kernel),
    "dkdv": triton.autotune(_configs([(32, 64, 4, 3), (32, 128, 8, 3), (64, 64, 4, 3), (32, 32, 4, 2)]),
                            key=_KEY)(_dkdv_kernel),
    "dq": triton.autotune(_configs([(128, 32, 8, 3), (64, 64, 4, 3), (64, 32, 4, 3), (32, 32, 4, 2)]),
                          key=_KEY)(_dq_kernel),
}
#: the dk/dv kernel that also adds dq̂ atomically (``backward_variant(atomic_dq=True)``): tuned apart from
#: ``_TUNED``'s, at the same shapes, with its DQ zeroed before each timed try and before the run
_VARIANT_TUNED = {"dkdv_atomic": triton.autotune(_TUNED["dkdv"].configs, key=_KEY, reset_to_zero=["DQ"])(_dkdv_kernel)}
_PLAIN = {"forward": _forward_kernel, "dkdv": _dkdv_kernel, "dq": _dq_kernel, "dkdv_atomic": _dkdv_kernel}


#: one tile shape (rows, rows, warps, stages) for every kernel instead of autotuning; see ``fixed_tiles``
_FIXED: tuple[int, int, int, int] | None = None


@contextlib.contextmanager
def fixed_tiles(block: int = 32, num_warps: int = 4, num_stages: int = 2):
    """Run the kernels with ``block`` x ``block`` tiles inside this context instead of autotuning them.

    One compilation per kernel instead of one per candidate shape: for checks that cover many switch
    sets (each is tuned afresh) and for debugging. Square tiles satisfy every kernel's causal split;
    ``block`` is a power of two of at least 16 (what ``tl.arange`` and ``tl.dot`` take), ``num_warps`` a power of
    two from 1 to 32 and ``num_stages`` a positive integer (what Triton launches): another type than an integer is
    a TypeError, another integer a ValueError."""
    global _FIXED
    takes = {"block": "a power of two of at least 16 rows a tile", "num_warps": "a power of two from 1 to 32 warps",
             "num_stages": "a positive number of pipeline stages"}
    for name, value in (("block", block), ("num_warps", num_warps), ("num_stages", num_stages)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"fixed_tiles takes {takes[name]} ({name}), got {value!r}")
    for name, value, ok in (("block", block, block >= 16 and not block & (block - 1)),
                            ("num_warps", num_warps, num_warps in (1, 2, 4, 8, 16, 32)),
                            ("num_stages", num_stages, num_stages >= 1)):
        if not ok:
            raise ValueError(f"fixed_tiles takes {takes[name]} ({name}), got {value!r}")
    saved, _FIXED = _FIXED, (block, block, num_warps, num_stages)
    try:
        yield
    finally:
        _FIXED = saved


#: how the backward runs (``backward_variant``): q̂ and k̂ formed once before its loops; dq̂ added atomically
_BACKWARD: tuple[bool, bool] = (False, False)


@contextlib.contextmanager
def backward_variant(presheared: bool = False, atomic_dq: bool = False):
    """Run the backward another way inside this context (the backward reads it when it runs), so that a
    GPU can time the variants beside the default, which is neither (``benchmarks/gpu_check.py``'s
    ``fused_kernel``); the gradients are the same function.

    ``presheared``: q̂ and k̂ are formed once, each in one elementwise pass (``_shear_kernel``) rounded
    to v's dtype, and the dk/dv and dq kernels run on them with the shear off, as at gamma = 0: a tile
    of their loops loads one tile of rows, not two, and forms nothing in fp32, for one write and one
    read more of each stream. Where the score product takes another dtype than v's (``score_products``)
    the backward runs as by default. ``atomic_dq``: the dk/dv kernel also adds each query tile's share
    of dq̂ to it with atomic adds (as FlashAttention-2's backward does), and the dq kernel, which computes
    the scores and dP a second time, does not run: 5 tile products for each pair of tiles instead of 7,
    for fp32 atomic adds into a zeroed dq̂ whose order of summation varies from run to run."""
    global _BACKWARD
    saved, _BACKWARD = _BACKWARD, (bool(presheared), bool(atomic_dq))
    try:
        yield
    finally:
        _BACKWARD = saved


def _launch(name: str, rows: int, heads: int, along: str, args: tuple, meta: dict) -> None:
    """Run kernel ``name`` over ``rows`` positions (tiled by ``along``, BLOCK_M or BLOCK_N) of ``heads``
    heads: autotuned on a GPU, with 16 x 16 tiles in the interpreter (or the tiles of ``fixed_tiles``)."""
    if interpreted() or _FIXED is not None:
        m, n, warps, stages = _FIXED or (16, 16, 4, 2)
        extra = {} if interpreted() else {"num_warps": warps, "num_stages": stages}
        _PLAIN[name][(triton.cdiv(rows, m), heads)](*args, BLOCK_M=m, BLOCK_N=n, **meta, **extra)
    else:
        tuned = _TUNED[name] if name in _TUNED else _VARIANT_TUNED[name]
        tuned[lambda tile: (triton.cdiv(rows, tile[along]), heads)](*args, **meta)


#: rows of one program of the elementwise kernels (the backward's dO ∘ O row sums and transposed shear):
#: at D = 128 in fp32, 32 rows keep the transposed shear near 60 registers a thread (64 rows take 111)
ROWS_PER_PROGRAM = 32


def _launch_rows(kernel, rows: int, heads: int, args: tuple, meta: dict) -> None:
    """Run an elementwise ``kernel`` over ``rows`` positions of ``heads`` heads, a tile of rows each."""
    block = 16 if interpreted() else ROWS_PER_PROGRAM
    kernel[(triton.cdiv(rows, block), heads)](*args, BLOCK_T=block, **meta)


def _strides3(x: Tensor | None) -> tuple[int, int, int]:
    """(batch, head, feature) strides of a (B, H, 1, D) prev row; zeros when absent."""
    return (0, 0, 0) if x is None else (x.stride(0), x.stride(1), x.stride(3))


class _FusedPSA(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, prev_q, prev_k, starts, gamma_q, gamma_k, is_causal, scale, replicate):
        B, Hq, Tq, D = q.shape
        Hkv, Tk = k.shape[1], k.shape[2]
        out = torch.empty(B, Hq, Tq, D, device=q.device, dtype=v.dtype)
        lse = torch.empty(B, Hq, Tq, device=q.device, dtype=_work(v))  # base-2 log-sum-exp of each row
        meta = _meta(v, gamma_q, gamma_k, prev_q, prev_k, starts, is_causal, replicate)
        s = starts if starts is not None else q  # any pointer when absent
        pq = prev_q if prev_q is not None else q
        pk = prev_k if prev_k is not None else k
        _launch("forward", Tq, B * Hq, "BLOCK_M", (
            q, k, v, pq, pk, s, out, lse, *q.stride(), *k.stride(), *v.stride(), *out.stride(),
            *_strides3(prev_q), *_strides3(prev_k), *_starts_strides(starts),
            Hq, Hq // Hkv, Tq, Tk, gamma_q, gamma_k, scale), meta)
        ctx.save_for_backward(q, k, v, prev_q, prev_k, starts, out, lse)
        ctx.args = (gamma_q, gamma_k, is_causal, scale, replicate)
        ctx.meta = meta  # the backward recomputes the scores as these switches computed them
        return out

    @staticmethod
    def backward(ctx, d_out):
        q, k, v, prev_q, prev_k, starts, out, lse = ctx.saved_tensors
        gamma_q, gamma_k, is_causal, scale, replicate = ctx.args
        B, Hq, Tq, D = q.shape
        Hkv, Tk = k.shape[1], k.shape[2]
        d_out = d_out.contiguous()
        work = _work(v)
        delta = torch.empty(B, Hq, Tq, device=q.device, dtype=work)  # rowsum(dO ∘ O)
        _launch_rows(_delta_kernel, Tq, B * Hq, (out, d_out, delta, *out.stride(), *d_out.stride(), Hq, Tq),
                     dict(D=D, ACC=_acc(work)))
        meta = ctx.meta  # the forward's switches, score products included, wherever the backward runs
        presheared, atomic_dq = _BACKWARD
        s = starts if starts is not None else q
        pq = prev_q if prev_q is not None else q
        pk = prev_k if prev_k is not None else k
        if presheared and meta["PROD"] == _tl_dtype(v.dtype) and not meta["ROW_SCALE"]:  # q̂ and k̂ once, then no shear
            q_in = _presheared(q, prev_q, starts, gamma_q, replicate, v.dtype, meta["ACC"]) if meta["SHEAR_Q"] else q
            k_in = _presheared(k, prev_k, starts, gamma_k, replicate, v.dtype, meta["ACC"]) if meta["SHEAR_K"] else k
            meta = dict(meta, SHEAR_Q=False, SHEAR_K=False, HAS_PREV_Q=False, HAS_PREV_K=False, HAS_STARTS=False)
        else:
            q_in, k_in = q, k
        common = (*q_in.stride(), *k_in.stride(), *v.stride(), *d_out.stride(), *_strides3(prev_q), *_strides3(prev_k),
                  *_starts_strides(starts))
        dk_hat = torch.empty(B, Hkv, Tk, D, device=q.device, dtype=work)
        dv = torch.empty(B, Hkv, Tk, D, device=q.device, dtype=v.dtype)  # rounded once, in the kernel
        if atomic_dq:  # dq̂ from the dk/dv kernel's tiles, added up in fp32
            dq_hat = torch.zeros(B, Hq, Tq, D, device=q.device, dtype=work)
            _launch("dkdv_atomic", Tk, B * Hkv, "BLOCK_N", (
                q_in, k_in, v, pq, pk, s, d_out, lse, delta, dk_hat, dv, dq_hat, *common,
                Hq, Hkv, Hq // Hkv, Tq, Tk, gamma_q, gamma_k, scale), dict(meta, DQ_ATOMIC=True))
        else:
            _launch("dkdv", Tk, B * Hkv, "BLOCK_N", (
                q_in, k_in, v, pq, pk, s, d_out, lse, delta, dk_hat, dv, dk_hat, *common,  # no dq̂: any pointer
                Hq, Hkv, Hq // Hkv, Tq, Tk, gamma_q, gamma_k, scale), meta)
            dq_hat = torch.empty(B, Hq, Tq, D, device=q.device, dtype=work)
            _launch("dq", Tq, B * Hq, "BLOCK_M", (
                q_in, k_in, v, pq, pk, s, d_out, lse, delta, dq_hat, *common,
                Hq, Hq // Hkv, Tq, Tk, gamma_q, gamma_k, scale), meta)
        dq, dprev_q = _transpose_shear(dq_hat, gamma_q, starts, q, prev_q, replicate)
        dk, dprev_k = _transpose_shear(dk_hat, gamma_k, starts, k, prev_k, replicate)
        grads = [dq, dk, dv, dprev_q, dprev_k]
        if torch.is_grad_enabled():  # create_graph: tie the gradients to what they came from, so that
            # differentiating them raises instead of finding no graph (a second derivative of 0)
            given = [g for g in grads if g is not None]
            tied = iter(_FirstOrderOnly.apply(len(given), *given, q, k, v, prev_q, prev_k, d_out))
            grads = [None if g is None else next(tied) for g in grads]
        return *grads, None, None, None, None, None, None


class _FirstOrderOnly(torch.autograd.Function):
    """``apply(n, *grads, *sources)``: the n gradients unchanged, as outputs of the sources they were
    computed from, whose backward refuses: the kernels have no second derivative."""

    @staticmethod
    def forward(ctx, n, *tensors):
        return tuple(g.view_as(g) for g in tensors[:n])

    @staticmethod
    def backward(ctx, *_):
        raise RuntimeError("the fused PSA kernel has no second derivative (a gradient taken with create_graph=True "
                           "was differentiated again); use psa_attention(..., backend='reference') for that")


def _transpose_shear(g: Tensor, gamma: float, starts: Tensor | None, x: Tensor, prev: Tensor | None,
                     replicate: bool) -> tuple[Tensor, Tensor | None]:
    """``shear_transpose`` of the kernels' dx̂ (B, H, T, D), as one pass that writes dx in x's dtype
    and dprev (B, H, 1, D) in prev's."""
    B, H, T, D = g.shape
    dx = torch.empty(B, H, T, D, device=g.device, dtype=x.dtype)
    dprev = None if prev is None else torch.empty(B, H, 1, D, device=g.device, dtype=prev.dtype)
    _launch_rows(_shear_transpose_kernel, T, B * H, (
        g, starts if starts is not None else g, dx, dprev if dprev is not None else dx, *_starts_strides(starts),
        H, T, gamma), dict(D=D, HAS_PREV=prev is not None, HAS_STARTS=starts is not None, REPLICATE=replicate))
    return dx, dprev


def _presheared(x: Tensor, prev: Tensor | None, starts: Tensor | None, gamma: float, replicate: bool,
                dtype: torch.dtype, acc) -> Tensor:
    """x̂ (B, H, T, D), contiguous, in ``dtype``: x sheared in ``acc`` as the kernels' tiles shear it, in one pass."""
    B, H, T, D = x.shape
    out = torch.empty(B, H, T, D, device=x.device, dtype=dtype)
    _launch_rows(_shear_kernel, T, B * H, (
        x, prev if prev is not None else x, starts if starts is not None else x, out, *x.stride(), *_strides3(prev),
        *_starts_strides(starts), H, T, gamma),
        dict(D=D, HAS_PREV=prev is not None, HAS_STARTS=starts is not None, REPLICATE=replicate, ACC=acc))
    return out


def _starts_strides(starts: Tensor | None) -> tuple[int, int]:
    return (0, 0) if starts is None else (starts.stride(0), starts.stride(1))


#: the dtype ``score_products`` forced on the score product, or None
_PRODUCTS: torch.dtype | None = None
#: the dtypes ``score_products`` takes for the score product's operands
SCORE_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
#: 16-bit dtypes, whose range a score product of another dtype's streams keeps to by scaling each row
HALF_DTYPES = (torch.float16, torch.bfloat16)


def score_products_of(dtype: torch.dtype) -> dict:
    """The kernels' switches for the score product q̂ k̂ᵀ of streams whose values are ``dtype``: the
    dtype its operands are rounded to (``PROD``), and whether each row of q̂ and k̂ is scaled by a power
    of two into a 16-bit dtype's range first (``ROW_SCALE``: for a 16-bit ``PROD`` that is not the
    streams' own dtype). By default the score product takes ``dtype`` itself, as every other product
    does; ``score_products`` chooses otherwise."""
    product = _PRODUCTS if _PRODUCTS is not None else dtype
    return dict(PROD=_tl_dtype(product), ROW_SCALE=product != dtype and product in HALF_DTYPES)


@contextlib.contextmanager
def score_products(dtype: torch.dtype):
    """Inside this context the kernels round q̂ and k̂ to ``dtype`` for the score product, forward and
    backward alike (the backward recomputes the forward's scores), whatever the streams' dtype; the
    P·V product and the gradients' products keep the dtype of v. Into a 16-bit ``dtype`` other than
    the streams', each row of q̂ and k̂ goes scaled by the power of two that brings its largest entry
    to [2^14, 2^15), undone on the scores, so no row leaves the dtype's range.

    For bf16 streams, fp16 operands (``score_products(torch.float16)``) keep 3 more bits at the tensor
    cores' same rate on Hopper GPUs, which by ``benchmarks/bf16_error_budget.py`` would bring PSA's
    bf16 error close to what rounding its output costs. ``benchmarks/gpu_check.py`` measures the
    choice on a GPU."""
    global _PRODUCTS
    if dtype not in SCORE_DTYPES:
        raise ValueError(f"score products in {dtype} are not built; they take {', '.join(map(str, SCORE_DTYPES))}")
    saved, _PRODUCTS = _PRODUCTS, dtype
    try:
        yield
    finally:
        _PRODUCTS = saved


def _tl_dtype(dtype: torch.dtype):
    """Triton's name for a stream dtype."""
    return {torch.float16: tl.float16, torch.bfloat16: tl.bfloat16, torch.float32: tl.float32,
            torch.float64: tl.float64}[dtype]


def _meta(v, gamma_q, gamma_k, prev_q, prev_k, starts, is_causal, replicate) -> dict:
    """The compile-time switches of one call (the tile sizes are the launcher's); the products run in
    the dtype of ``v``, but for the score product under ``score_products``."""
    product = _PRODUCTS if _PRODUCTS is not None else v.dtype
    return dict(
        D=v.shape[-1], CAUSAL=is_causal, SHEAR_Q=gamma_q != 0.0,
        SHEAR_K=gamma_k != 0.0, HAS_PREV_Q=prev_q is not None, HAS_PREV_K=prev_k is not None,
        HAS_STARTS=starts is not None, REPLICATE=replicate,
        PRECISION="ieee" if {v.dtype, product} & {torch.float32, torch.float64} else "tf32",  # fp32 products in fp32
        ACC=_acc(_work(v)), **score_products_of(v.dtype),
    )


def _acc(work: torch.dtype):
    """Triton's name for the accumulation dtype ``work``."""
    return tl.float64 if work == torch.float64 else tl.float32


def _work(v: Tensor) -> torch.dtype:
    """The accumulation dtype: fp64 for fp64 products, fp32 otherwise."""
    return torch.float64 if v.dtype == torch.float64 else torch.float32


def _span(x: Tensor) -> int:
    """How many elements a tensor's offsets reach, from its first in memory to its last: its numel when
    contiguous, more for a slice of a wider tensor (q of a fused q/k/v projection: three times its numel)."""
    return 1 + sum((n - 1) * abs(st) for n, st in zip(x.shape, x.stride(), strict=True)) if x.numel() else 0


def unsupported(q: Tensor, k: Tensor, v: Tensor, attn_mask: Tensor | None, dropout_p: float,
                starts: Tensor | None) -> str | None:
    """Why the fused kernel cannot run this call (None when it can)."""
    if q.device.type != "cuda" and not interpreted():
        return (f"tensors on {q.device.type}, but the kernels were built for a GPU (TRITON_INTERPRET=1 was not set "
                "when psattn.ops.fused_attention was first imported)")
    if q.device.type == "cuda" and interpreted():
        return "tensors on CUDA, but the kernels were built for Triton's interpreter (TRITON_INTERPRET=1)"
    if interpreted() and (reason := interpreter_unusable()) is not None:
        return reason
    if attn_mask is not None:
        return "an explicit attn_mask (the kernel knows the causal mask only)"
    if dropout_p > 0:
        return "attention dropout"
    if any(x.dtype not in DTYPES for x in (q, k, v)):
        return f"dtypes {q.dtype}, {k.dtype}, {v.dtype}"
    if torch.bfloat16 in (v.dtype, _PRODUCTS) and interpreter_bf16_dot_wrong():  # values off by 1e8, not an error
        return (f"bf16 products in Triton {triton.__version__}'s interpreter, whose bf16 tl.dot is wrong "
                "(a GPU runs them; fp16, fp32 and fp64 run in the interpreter)")
    if v.dtype == torch.float64 and q.device.type == "cuda":
        return "fp64 on a GPU (its tiles would not fit in shared memory; the interpreter runs fp64 for tests)"
    if q.shape[-1] not in HEAD_DIMS or v.shape[-1] != q.shape[-1]:
        return f"head dimensions q/k {q.shape[-1]}, v {v.shape[-1]} (the kernel takes one of {HEAD_DIMS} for all three)"
    if k.shape[2] == 0 or q.shape[2] == 0:
        return "an empty sequence"
    if starts is not None and starts.dtype != torch.bool:
        return f"starts of dtype {starts.dtype}"
    if q.shape[0] * q.shape[1] > MAX_GRID_Y:
        return (f"{q.shape[0] * q.shape[1]:,} (batch x query heads) programs along the launch grid's second axis "
                f"(at most {MAX_GRID_Y:,})")
    if max(max(x.numel(), _span(x)) for x in (q, k, v)) >= 2**31:  # the outputs and gradients hold numel
        return "a tensor of 2^31 elements or more, or spanning as many in memory (the kernels' offsets are 32-bit)"
    return None


def fused_psa_attention(q: Tensor, k: Tensor, v: Tensor, *, gamma_q: float, gamma_k: float, is_causal: bool,
                        scale: float | None, starts: Tensor | None, prev_q: Tensor | None, prev_k: Tensor | None,
                        replicate: bool) -> Tensor:
    """The fused kernel on checked arguments (``psattn.ops.attention.psa_attention`` checks them and
    chooses it); q (B, Hq, Tq, D), k and v (B, Hkv, Tk, D) -> (B, Hq, Tq, D) in v's dtype. q and k
    may be wider than v (fp32 streams under bf16 autocast): the shear runs in fp32 either way, and
    q̂ and k̂ are rounded once, to v's dtype, for the products."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    starts = None if starts is None else starts.to(torch.int8).contiguous()  # (B, T): one byte a flag
    return _FusedPSA.apply(q, k, v, prev_q, prev_k, starts, float(gamma_q), float(gamma_k), bool(is_causal), scale,
                           replicate)
