import copy

import pytest
import torch

from psattn.ops.shear import shear
from psattn.ops.shear_state import ShearState


def test_chunks_sheared_against_the_held_raw_value_equal_one_shear_of_the_whole():
    torch.manual_seed(0)
    x = torch.randn(2, 3, 9, 4)
    state = ShearState()
    parts, position = [], 0
    for T in (4, 1, 3, 1):
        parts.append(state.shear("k", x[..., position : position + T, :], 0.7, position))
        position += T
    torch.testing.assert_close(torch.cat(parts, dim=-2), shear(x, 0.7), atol=1e-6, rtol=0)
    assert state.raw_k.values.shape[-2] == 1 and state.raw_q.values is None  # O(1): the last raw key only


@pytest.mark.parametrize("keep_last_call,held", [(False, 3), (True, 6)])
def test_what_is_held_decides_how_far_back_a_crop_goes(keep_last_call, held):
    state = ShearState(max_rollback=2, keep_last_call=keep_last_call)
    state.shear("k", torch.randn(1, 1, 10, 2), 0.5, 0)
    state.shear("k", torch.randn(1, 1, 5, 2), 0.5, 10)
    assert state.raw_k.values.shape[-2] == held  # the last 3, or the last call's 5 and the one before
    deepest = 15 - (held - 1)
    with pytest.raises(ValueError, match=f"max_rollback >= {15 - deepest + 1}"):
        state.crop(deepest - 1, 15)
    assert state.raw_k.values.shape[-2] == held  # a refused crop changes nothing
    state.crop(deepest, 15)
    assert state.raw_k.end == deepest and state.raw_k.values.shape[-2] <= 3


def test_a_refused_crop_after_an_earlier_one_names_the_max_rollback_that_would_have_held_it():
    """max_rollback counts back from the longest the streams have been: after 7 tokens, a crop to 5 and one more
    token, a crop to 4 (2 back) needs max_rollback 3. The refusal said ">= 2" to a state built with 2 (and ">= 1"
    to one built with 1, after two crops of one token)."""
    def state_after(max_rollback: int, steps: list[tuple[str, int]]) -> tuple[ShearState, int]:
        state, length = ShearState(max_rollback), 0
        for op, n in steps:
            if op == "add":
                state.shear("k", torch.randn(1, 1, n, 2), 0.5, length)
                length += n
            else:
                state.crop(n, length)
                length = n
        return state, length

    for max_rollback, steps, target, needed in ((2, [("add", 7), ("crop", 5), ("add", 1)], 4, 3),
                                                (1, [("add", 7), ("crop", 6)], 5, 2)):
        state, now = state_after(max_rollback, steps)
        with pytest.raises(ValueError, match=f"dropped when the streams were 7 tokens long.*max_rollback >= {needed}$"):
            state.crop(target, now)
        state, now = state_after(needed, steps)
        state.crop(target, now)  # the advice holds
    state, now = state_after(2, [("add", 7), ("crop", 0), ("add", 4)])  # a crop to 0 starts the count again
    with pytest.raises(ValueError, match=r"positions >= 1 are\); build the cache with max_rollback >= 3$"):
        state.crop(1, now)


def test_a_chunk_that_does_not_continue_the_held_stream_is_refused():
    state = ShearState()
    state.shear("q", torch.randn(1, 1, 3, 2), 0.5, 0)
    with pytest.raises(RuntimeError, match="ends at 3"):
        state.shear("q", torch.randn(1, 1, 1, 2), 0.5, 5)


def test_gamma_zero_is_its_own_shear_and_holds_nothing():
    state = ShearState()
    x = torch.randn(1, 1, 3, 2)
    assert state.shear("k", x, 0.0, 0) is x and state.extra_state_bytes() == 0


def test_the_rows_held_after_a_long_chunk_own_their_memory():
    # a view of the prompt's last row would keep the whole rotated prompt (as large as its keys) alive
    state = ShearState(max_rollback=1)
    state.shear("k", torch.randn(2, 4, 512, 16), 0.5, 0)
    held = state.raw_k.values
    assert held.shape == (2, 4, 2, 16) and held.untyped_storage().nbytes() == state.extra_state_bytes()
    step = torch.randn(2, 4, 1, 16)
    state.shear("k", step, 0.5, 512)  # a decode step: the window is the last row before it and the row
    assert torch.equal(state.raw_k.values, torch.cat([held[..., 1:, :], step], dim=-2))
    assert state.raw_k.values.untyped_storage().nbytes() <= 2 * state.extra_state_bytes()


def test_a_decoded_row_continues_the_stream_without_copying_the_window():
    state = ShearState()
    state.shear("q", torch.randn(1, 2, 6, 4), 0.5, 0)
    row = torch.randn(1, 2, 1, 4)
    state.shear("q", row, 0.5, 6)
    assert state.raw_q.values.data_ptr() == row.data_ptr() and state.raw_q.start == 6


def test_a_crop_keeps_only_the_rows_it_holds():
    state = ShearState(max_rollback=2, keep_last_call=True)  # as transformers' cache: the whole last call held
    state.shear("k", torch.randn(1, 2, 300, 8), 0.5, 0)
    state.crop(299, 300)
    assert state.raw_k.values.shape[-2] == 3 and state.raw_k.values.untyped_storage().nbytes() == state.extra_state_bytes()


def test_a_stream_other_than_q_or_k_is_refused():
    """Any other name was read as the key stream: a query chunk sheared as 'Q' continued the raw keys."""
    state = ShearState()
    with pytest.raises(ValueError, match="stream must be 'q' or 'k', got 'Q'"):
        state.shear("Q", torch.randn(1, 1, 3, 2), 0.5, 0)
    assert state.raw_k.values is None and state.raw_q.values is None


def test_a_decoded_row_is_held_beside_its_predecessor_without_a_copy():
    # transformers' cache keeps the last call and the row before it: two rows per decode step, joined only when read
    state = ShearState(keep_last_call=True)
    state.shear("k", torch.randn(2, 3, 5, 4), 0.5, 0)
    rows = [torch.randn(2, 3, 1, 4) for _ in range(3)]
    for position, row in enumerate(rows, start=5):
        state.shear("k", row, 0.5, position)
        assert state.raw_k.last().data_ptr() == row.data_ptr()  # the row itself, not a copy of it
    assert state.raw_k.start == 6 and state.extra_state_bytes() == 2 * rows[0].nbytes
    assert torch.equal(state.raw_k.values, torch.cat(rows[1:], dim=-2))
    state.crop(7, 8)  # a crop within the last call reads the joined rows
    assert torch.equal(state.raw_k.last(), rows[1]) and state.raw_k.end == 7


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("gamma", [0.8, -0.3, 1e4])
def test_a_decoded_row_is_sheared_bit_for_bit_as_the_whole_stream(dtype, gamma):
    torch.manual_seed(0)
    x = torch.randn(2, 3, 7, 4).to(dtype)
    state = ShearState()
    parts = [state.shear("q", x[..., :4, :], gamma, 0)]
    parts += [state.shear("q", x[..., t : t + 1, :], gamma, t) for t in range(4, 7)]
    assert torch.equal(torch.cat(parts, dim=-2), shear(x, gamma))


@pytest.mark.parametrize("gamma,error", [(float("nan"), ValueError), (float("inf"), ValueError), (2e4, ValueError),
                                         (True, TypeError), (torch.tensor(0.5, requires_grad=True), TypeError)])
def test_a_decoded_row_with_a_bad_gamma_is_refused_as_any_chunk(gamma, error):
    state = ShearState()
    state.shear("k", torch.randn(1, 2, 3, 4), 0.5, 0)
    with pytest.raises(error, match="gamma"):
        state.shear("k", torch.randn(1, 2, 1, 4), gamma, 3)


def test_a_decoded_row_of_another_batch_or_device_is_refused_not_broadcast():
    state = ShearState()
    state.shear("k", torch.randn(1, 2, 3, 4), 0.5, 0)  # one sequence held
    with pytest.raises(ValueError, match=r"prev must be \(B, H, 1, D\) = \(4, 2, 1, 4\)"):
        state.shear("k", torch.randn(4, 2, 1, 4), 0.5, 3)  # four rows would have broadcast against it
    with pytest.raises(ValueError, match="share a device"):
        state.shear("k", torch.randn(1, 2, 1, 4, device="meta"), 0.5, 3)


def test_a_copy_of_the_state_continues_on_its_own():
    state = ShearState(keep_last_call=True)
    state.shear("k", torch.randn(1, 2, 3, 4), 0.5, 0)
    state.shear("k", torch.randn(1, 2, 1, 4), 0.5, 3)
    twin = copy.copy(state)
    twin.shear("k", torch.randn(1, 2, 1, 4), 0.5, 4)
    assert state.raw_k.end == 4 and twin.raw_k.end == 5


@pytest.mark.parametrize("max_rollback,keep_last_call", [(0, True), (2, False), (2, True)])
def test_an_empty_chunk_leaves_the_last_raw_value_where_the_next_row_reads_it(max_rollback, keep_last_call):
    torch.manual_seed(0)
    x = torch.randn(2, 3, 6, 4)
    state = ShearState(max_rollback, keep_last_call)
    parts = [state.shear("k", x[..., :4, :], 0.7, 0), state.shear("k", x[..., 4:4, :], 0.7, 4)]
    assert torch.equal(state.raw_k.last(), x[..., 3:4, :])  # (B, H, 1, D): the row before the empty chunk
    parts += [state.shear("k", x[..., t : t + 1, :], 0.7, t) for t in (4, 5)]
    assert torch.equal(torch.cat(parts, dim=-2), shear(x, 0.7))
