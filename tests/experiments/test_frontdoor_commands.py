"""``gemmlab choose``: the front door's choice for a shape and an accuracy, from a device profile's tables."""

import argparse
import json

import pytest

from experiments.cli import main


def run(capsys, *words):
    try:
        code = main(["choose", *words])
    except SystemExit as done:                           # argparse refuses an argument by exiting with 2
        code = done.code
    return code, capsys.readouterr()


def test_the_h200s_bundled_tables_choose_ozaki2_at_dgemm_and_say_why(capsys, tmp_path):
    code, out = run(capsys, "--shape", "16384:16384:16384", "--gpu", "H200", "--json", "--db", str(tmp_path / "d"))
    doc = json.loads(out.out)
    assert code == 0 and doc["winner"] == "ozaki2(level=1, moduli='auto', target='dgemm')"
    assert doc["tables"].endswith("cupy-nvidia-h200.json")
    assert doc["library_seconds"] > 0 and doc["candidates"][0]["seconds"] == doc["library_seconds"] / \
        doc["candidates"][0]["ratio"]
    strassen = [c for c in doc["candidates"] if c["family"] == "strassen"]
    assert strassen and not any(c["keeps"] for c in strassen) and strassen[0]["bound"]["scale"] == "matrix"
    code, out = run(capsys, "--shape", "16384:16384:16384", "--accuracy", "sgemm", "--gpu", "h200",
                    "--db", str(tmp_path / "d"))
    assert code == 0 and "winner: ozaki2" in out.out and "strassen L3:winograd+flat" in out.out


def test_the_h100s_bundled_strassen_tables_come_with_the_predicted_methods(capsys, tmp_path):
    """The H100's bundled profile holds Strassen's tables only; its methods are the transfer model's, fitted on its
    own published runs, so its front door takes Ozaki II and split-K where those runs measured them."""
    code, out = run(capsys, "--shape", "16384:16384:16384", "--gpu", "H100", "--json", "--db", str(tmp_path / "d"))
    doc = json.loads(out.out)
    assert code == 0 and doc["winner"] == "ozaki2(moduli='auto', target='dgemm')"
    assert "cupy-nvidia-h100-80gb-hbm3.json" in doc["tables"] and "predicted by the transfer model" in doc["tables"]
    assert any(c["family"] == "strassen" and c["basis"].startswith("measured") for c in doc["candidates"])
    code, out = run(capsys, "--shape", "16:1048576:16", "--gpu", "H100", "--json", "--db", str(tmp_path / "d"))
    assert code == 0 and json.loads(out.out)["winner"].startswith("splitk")


def test_a_gpu_without_measurements_gets_the_library_gemm(capsys, tmp_path):
    for gpu in ("GB200", "V100"):                      # no hardware row; a row without INT8 tensor cores
        code, out = run(capsys, "--shape", "4096:4096:4096", "--gpu", gpu, "--db", str(tmp_path / "d"))
        assert code == 0 and "nothing measured" in out.out and "winner: gemm (the library GEMM)" in out.out


def test_a_gpu_without_a_bundled_profile_is_ranked_by_the_predicted_tables(capsys, tmp_path):
    code, out = run(capsys, "--shape", "16384:16384:16384", "--gpu", "RTX 4090", "--db", str(tmp_path / "d"))
    first = out.out.splitlines()[0]
    assert code == 0 and "transfer-methods.json" in first and "predicted from its datasheet" in first
    assert "nothing of the RTX 4090 was measured" in first and "winner: ozaki2" in out.out
    assert "predicted (transfer model from H100, H200; square products" in out.out
    code, out = run(capsys, "--shape", "16:1048576:16", "--gpu", "NVIDIA A100-SXM4-80GB", "--json",
                    "--db", str(tmp_path / "d"))
    doc = json.loads(out.out)
    assert code == 0 and doc["winner"].startswith("gemm") and "A100" in doc["tables"]   # sm_80: another kernel
    splitk = [c for c in doc["candidates"] if c["family"] == "splitk"]
    assert len(splitk) == 2 and all(c["basis"].startswith("not measured for this m and n: taken as the library "
                                                          "GEMM's equal") for c in splitk)
    assert all(c["basis"].startswith(("predicted", "not predicted", "the reference")) for c in doc["candidates"]
               if c["family"] != "splitk")


def test_a_shape_may_write_its_dimensions_as_powers():
    from experiments.frontdoor.commands import shape, shapes

    assert shape("16:2^24:16") == (16, 2**24, 16) and shape("4096:65536:4096") == (4096, 65536, 4096)
    assert shapes("16:2^20:16, 64:1048576:64") == [(16, 2**20, 16), (64, 2**20, 64)] and shapes(",") == []
    for bad in ("16:2^24", "16:0:16", "16:2^24:16 8:8:8", "a:b:c"):
        with pytest.raises(argparse.ArgumentTypeError, match="a shape reads M:K:N"):
            shape(bad)


def test_bad_shapes_and_accuracies_are_refused_saying_the_form(capsys, tmp_path):
    code, out = run(capsys, "--shape", "10:10", "--db", str(tmp_path / "d"))
    assert code == 2 and "a shape reads M:K:N" in out.err
    code, out = run(capsys, "--shape", "8:8:8", "--accuracy", "fp64", "--db", str(tmp_path / "d"))
    assert code == 2 and "accuracy must be one of" in out.err
    code, out = run(capsys, "--shape", "64:1048576:64", "--accuracy", "1e-16", "--gpu", "H200",
                    "--db", str(tmp_path / "d"))
    assert code != 0 and "no method keeps accuracy 1e-16" in out.err


def test_a_complex_product_ranks_the_complex_candidates(capsys, tmp_path):
    code, out = run(capsys, "--shape", "16384:16384:16384", "--gpu", "H200", "--complex", "--json",
                    "--db", str(tmp_path / "d"))
    doc = json.loads(out.out)
    assert code == 0 and doc["dtype"] == "complex128" and doc["winner"].startswith("ozaki2c(")
    assert {c["family"] for c in doc["candidates"]} == {"gemm", "ozaki2c"}
    code, out = run(capsys, "--shape", "16384:16384:16384", "--gpu", "H200", "--complex", "--accuracy", "zgemm",
                    "--json", "--db", str(tmp_path / "d"))
    assert code == 0 and json.loads(out.out)["winner"] == "zgemm (the library complex GEMM)"
    code, out = run(capsys, "--shape", "512:512:512", "--complex", "--accuracy", "zgemm", "--backend", "numpy",
                    "--db", str(tmp_path / "d"))
    assert code == 0 and "complex128, accuracy 'zgemm'" in out.out and "coarser than the entry one" in out.out
