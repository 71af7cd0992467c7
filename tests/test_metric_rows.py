"""run_frames.positions_by_value selects what a comparison over the whole column selects."""

from __future__ import annotations

import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from autopsy.run_frames import positions_by_value

VALUES = st.sampled_from(["loss", "lr", "grad_norm", "eval_loss", None])


@settings(max_examples=100, deadline=None)
@given(values=st.lists(VALUES, max_size=60), start=st.integers(min_value=0, max_value=5))
def test_positions_select_the_rows_a_mask_selects(values: list[str | None], start: int) -> None:
    index = range(start, start + len(values))  # labels are not positions: iloc must keep them
    df = pd.DataFrame({"metric": pd.Series(values, dtype="str", index=index), "value": range(len(values))},
                      index=index)
    pos = positions_by_value(df["metric"])
    for metric in ("loss", "lr", "grad_norm", "eval_loss", "absent"):
        want = df[df["metric"] == metric]
        got = df.iloc[pos[metric]] if metric in pos else df.iloc[:0]
        pd.testing.assert_frame_equal(got, want)
    assert set(pos) == {v for v in values if v is not None}
