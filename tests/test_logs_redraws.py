"""Progress bars redrawn in place with ``\\r``: each redraw is read once, on the right axis.

Lightning's tqdm bar carries the step's metrics in its postfix (``..., 5.42it/s, v_num=0,
train_loss=6.009]``): the bar parser reads them at the bar's global step (epoch x batches + n),
and the metric reader must not read them again (it read them at the epoch as its step, a twin of
every point). Keras' Progbar carries the epoch's running means (``- loss: 0.4123``), which the
reader puts on the epoch axis: every redraw of one epoch has the same step, so only the last
redraw of a physical line is read. Lines quoted from real runs (the corpus entries named).
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

from autopsy.parsers.logs import scan_text
from autopsy.run import load_run

CORPUS = Path(__file__).resolve().parent.parent / "fixtures" / "corpus"


def _series(scan, tag):  # type: ignore[no-untyped-def]
    return [(p.step, p.value) for p in scan.series if p.tag == tag]


def _bar(epoch: int, n: int, total: int, post: str) -> str:
    pct = n * 100 // total
    return f"\rEpoch {epoch}:  {pct:2d}%|{'█' * (pct // 10):<10}| {n}/{total} [00:0{n % 10}<00:10,  5.42it/s, {post}]"


def test_lightning_postfix_is_one_point_per_step_at_the_global_step() -> None:
    log = "".join(_bar(1, n, 100, f"v_num=0, train_loss={2.0 - n / 100:.3f}") for n in range(1, 6)) + "\n"
    loss = _series(scan_text(log), "train_loss")
    assert loss == [(101, 1.99), (102, 1.98), (103, 1.97), (104, 1.96), (105, 1.95)]


def test_lightning_epoch_end_bar_adds_the_validation_metrics_it_gained() -> None:
    # Lightning redraws the epoch's last bar after validation with val_loss in the postfix
    log = (_bar(0, 99, 100, "v_num=0, train_loss=1.200") + _bar(0, 100, 100, "v_num=0, train_loss=1.100")
           + "\n" + "\rEpoch 0: 100%|██████████| 100/100 [00:10<00:00,  5.00it/s, v_num=0, train_loss=1.100, "
           "val_loss=1.300]\n")
    scan = scan_text(log)
    assert _series(scan, "train_loss") == [(99, 1.2), (100, 1.1)]
    assert _series(scan, "val_loss") == [(100, 1.3)]


def test_bar_without_global_step_leaves_its_postfix_to_the_reader() -> None:
    # fairseq's "epoch 001" counts epochs of unknown base: no global step, so the metric reader reads
    # the postfix on the epoch axis, as before (corpus entry fairseq_103)
    scan = load_run(CORPUS / "fairseq_103_oom_skipping_batch_continues").logs[0]
    loss = _series(scan, "loss")
    assert loss and all(step == 1 for step, _ in loss)


def test_real_lightning_bar_log_has_no_step_zero_twins() -> None:
    run = load_run(CORPUS / "rvt_40_lightning_max_steps_wandb_retry")
    loss = run.scalars[run.scalars.tag == "loss"]
    assert list(loss.step) == [17671, 25832, 115816]
    assert not Counter(zip(loss.tag, loss.step, strict=True)) - Counter(set(zip(loss.tag, loss.step, strict=True)))


def _keras(n: int, total: int, loss: str) -> str:
    done = n * 30 // total
    return f"\r{n:4d}/{total} [{'=' * done}>{'.' * (29 - done)}] - ETA: 1:0{n % 10} - loss: {loss} - accuracy: 0.5000"


def test_keras_redraws_give_one_point_per_line_the_last() -> None:
    log = ("Epoch 1/3\n" + "".join(_keras(n, 100, f"{2.5 - n / 100:.4f}") for n in range(1, 6)) + "\n"
           "Epoch 2/3\n" + "".join(_keras(n, 100, f"{1.5 - n / 100:.4f}") for n in range(1, 4)) + "\n")
    scan = scan_text(log)
    assert _series(scan, "loss") == [(1, 2.45), (2, 1.47)]
    assert [p.lineno for p in scan.series if p.tag == "loss"] == [2, 4]


def test_keras_nan_in_the_last_redraw_is_read() -> None:
    # the run died mid-epoch: no newline after the last redraw. (A redraw that ends a read block,
    # here the one before the file's unterminated last line, cannot see the next one and is read.)
    log = "Epoch 4/10\n" + _keras(1, 100, "0.3000") + _keras(2, 100, "nan") + _keras(3, 100, "nan")
    loss = _series(scan_text(log), "loss")
    assert 0.3 not in [v for _, v in loss]
    assert loss and all(step == 4 and math.isnan(v) for step, v in loss)


def test_keras_redraw_followed_by_something_else_is_read() -> None:
    # a redraw not followed by another redraw (a message, a new line) is the line's last word
    log = "Epoch 1/2\n" + _keras(1, 100, "2.5000") + _keras(2, 100, "2.4000") + "\r\n" + "Epoch 2/2\n"
    assert _series(scan_text(log), "loss") == [(1, 2.4)]


def test_lightning_redraw_of_a_step_takes_its_later_values_and_reads_nan_0() -> None:
    # Lightning's TQDMProgressBar: update(n) draws the previous step's loss, then set_postfix draws
    # the step's own; NaN is padded to "nan.0" (fixtures/runs/lightning_bar_nan/train.log)
    log = ("\rEpoch 0:  70%|███████   | 7/10 [00:02<00:01,  2.72it/s, v_num=0, train_loss_step=1.32e+28]"
           "\rEpoch 0:  70%|███████   | 7/10 [00:02<00:01,  2.72it/s, v_num=0, train_loss_step=1.17e+34]"
           "\rEpoch 0:  80%|████████  | 8/10 [00:02<00:00,  2.75it/s, v_num=0, train_loss_step=1.17e+34]"
           "\rEpoch 0:  80%|████████  | 8/10 [00:02<00:00,  2.75it/s, v_num=0, train_loss_step=nan.0]   \n")
    loss = _series(scan_text(log), "train_loss_step")
    assert loss[0] == (7, 1.17e34)
    assert loss[1][0] == 8 and math.isnan(loss[1][1]) and len(loss) == 2


def test_plain_tqdm_redraw_of_a_step_keeps_its_first_values() -> None:
    # a loop's set_postfix runs before tqdm counts the iteration (gaussian-splatting: set_postfix then
    # update(10)): the first draw at n holds n's value, the redraw already shows the next one
    log = ("\rTraining progress:  95%|█████████▌| 28560/30000 [13:32<00:40, 35.14it/s, Loss=0.0416210]"
           "\rTraining progress:  95%|█████████▌| 28560/30000 [13:32<00:40, 35.14it/s, Loss=0.0409720]"
           "\rTraining progress:  95%|█████████▌| 28570/30000 [13:33<00:40, 35.03it/s, Loss=0.0409720]\n")
    assert _series(scan_text(log), "Loss") == [(28560, 0.041621), (28570, 0.040972)]


def test_bar_reset_to_zero_records_nothing() -> None:
    # a bar reset for the next epoch (n = 0) still shows the last step's postfix: not a new point
    log = ("\rEpoch 0: 100%|██████████| 10/10 [00:05<00:00,  1.79it/s, v_num=0, train_loss_step=0.500]"
           "\rEpoch 0:   0%|          | 0/10 [00:00<?, ?it/s, v_num=0, train_loss_step=0.500]"
           "\rEpoch 1:   0%|          | 0/10 [00:00<?, ?it/s, v_num=0, train_loss_step=0.500]"
           "\rEpoch 1:  10%|█         | 1/10 [00:00<00:00, 20.17it/s, v_num=0, train_loss_step=0.400]\n")
    assert _series(scan_text(log), "train_loss_step") == [(10, 0.5), (11, 0.4)]


def _keras3(n: int, total: int, loss: str) -> str:
    done = n * 20 // total
    return (f"\r\x1b[1m{n}/{total}\x1b[0m \x1b[32m{'━' * done}\x1b[0m\x1b[37m{'━' * (20 - done)}\x1b[0m "
            f"\x1b[1m9s\x1b[0m 2s/step - loss: {loss} - mae: 24.8975" + "\b" * 70)


def test_keras3_progbar_redraws_give_the_last_one() -> None:
    # Keras 3: ANSI colours, a bar of "━", each redraw erased with backspaces before its "\r"
    # (fixtures/runs/keras_progbar_nan/console.log)
    log = "Epoch 1/4\n" + "".join(_keras3(n, 7, f"{900 + n}.5000") for n in range(1, 5)) + "\n"
    assert _series(scan_text(log), "loss") == [(1, 904.5)]


def test_source_location_of_a_logging_format_is_no_metric() -> None:
    # rich's RichHandler prints the caller's "file.py:line" at the right of every record
    log = ("[11/24/26 10:00:01] INFO     step 10 | loss 2.3456 | lr 3.0e-04                      train.py:42\n"
           "[11/24/26 10:00:02] INFO     step 20 | loss 2.2100 | lr 3.0e-04                      train.py:42\n")
    scan = scan_text(log)
    assert {p.tag for p in scan.series} == {"loss", "lr"}
    assert _series(scan, "loss") == [(10, 2.3456), (20, 2.21)]
