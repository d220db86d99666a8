"""Judging a predicted ``methods`` section by the front door's choices (:mod:`modeling.methods_validation`): the time
lost is priced with the measured section's numbers, "not judged" where it has none, 0 where the choices agree."""

import pytest

from modeling.methods_validation import ACCURACIES, GRID, SQUARES, judge, table, worst

OZAKI2 = {"moduli": "auto", "target": "dgemm"}


def section(*points, basis=None):
    out = []
    for shape, entries in points:
        timed = [{"method": m, "config": c, "ratio": r, "waits": m != "splitk"} for m, c, r in entries]
        out.append({"shape": list(shape), "timed": timed, **({"basis": basis} if basis else {})})
    return {"points": out}


MEASURED = section(((16, 2**20, 16), [("splitk", {"deterministic": False}, 0.90),
                                      ("splitk", {"deterministic": True}, 1.10)]),
                   ((8192,) * 3, [("ozaki2", OZAKI2, 1.30)]))


def test_the_grid_is_the_acceptance_grid():
    assert SQUARES == (512, 1024, 2048, 4096, 6144, 8192, 12288, 16384, 24576, 32768, 49152)
    assert len(GRID) == 11 + 6 + 2 and (64, 2**24, 64) in GRID and (32768, 4096, 32768) in GRID
    assert ACCURACIES == ("dgemm", 1e-10, "sgemm")


def test_a_section_judged_against_itself_loses_nothing():
    judged = judge(MEASURED, MEASURED)
    assert len(judged) == len(GRID) * len(ACCURACIES)
    assert all(j.same and j.lost in (0.0, None) for j in judged)
    assert worst(judged) == 0.0


def test_a_wrong_choice_costs_the_measured_best_over_the_measured_ratio_of_what_was_chosen():
    predicted = section(((16, 2**20, 16), [("splitk", {"deterministic": False}, 1.30),
                                           ("splitk", {"deterministic": True}, 1.05)]),
                        ((8192,) * 3, [("ozaki2", OZAKI2, 1.01)]), basis="predicted (transfer model from X)")
    judged = {(j.shape, j.accuracy): j for j in judge(MEASURED, predicted, [(16, 2**20, 16), (8192,) * 3],
                                                      ["dgemm"])}
    tiny = judged[(16, 2**20, 16), "dgemm"]
    assert tiny.measured == "splitk(deterministic=True)" and tiny.predicted == "splitk(deterministic=False)"
    assert tiny.predicted_ratio == pytest.approx(1.30) and tiny.predicted_measured == pytest.approx(0.90)
    assert tiny.lost == pytest.approx(1.10 / 0.90 - 1)
    square = judged[(8192,) * 3, "dgemm"]
    assert square.predicted == "gemm (the library GEMM)" and square.lost == pytest.approx(0.30)
    assert worst(judged.values()) == pytest.approx(0.30)
    text = table(judged.values())
    assert "| 16 x 1048576 x 16 | dgemm | splitk(deterministic=True) | 1.100 | splitk(deterministic=False) |" in text
    assert "30.0%" in text


def test_a_choice_the_measured_section_cannot_price_is_not_judged():
    predicted = section(((16, 2**16, 16), [("splitk", {"deterministic": False}, 1.6)]))
    (j,) = judge(MEASURED, predicted, [(16, 2**16, 16)], ["dgemm"])
    assert j.measured == "gemm (the library GEMM)" and j.predicted == "splitk(deterministic=False)"
    assert j.lost is None and "not judged" in j.note and "not judged" in table([j])
    assert worst([j]) is None


def test_a_measured_choice_the_prediction_never_saw_is_a_loss_outside_its_training_data():
    (j,) = judge(MEASURED, section(), [(8192,) * 3], ["dgemm"])
    assert j.predicted == "gemm (the library GEMM)" and j.lost == pytest.approx(0.30)
    assert "outside its training data" in j.note
