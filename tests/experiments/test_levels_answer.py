"""``gemmlab predict``'s one answer: speed-ups within their operation-count bound, figures marked where
they extrapolate the calibration, one level with the range of its models (text and JSON), the GPU's
memory, and ``level="auto"`` from the same evidence."""

import pytest

from experiments.cli import main
from experiments.core.database import ResultsDB
from experiments.levels import calibration, models, validation
from experiments.levels.profile import write_profile
from experiments.strassen.bench import point_params
from gpu.backend import get_backend
from gpu.profile import backend_profile
from gpu.strassen import Config, auto_level

# The calibration `make run` stored on a loaded 2-core CPU (s), its two in-context points and its sweep.
CPU = {128: (0.0227, 4.3e-5), 256: (0.0227, 6.4e-5), 384: (0.0347, 7.3e-5), 512: (0.0348, 1.21e-4),
       768: (0.0467, 3.44e-4), 1024: (0.0708, 6.23e-4), 1536: (0.1962, 1.38e-3), 2048: (0.4499, 3.19e-3)}
CONTEXT = {128: (0.02322, 1.4484e-4), 256: (0.02638, 2.5109e-4)}
SWEEP = {192: {1: 7.38, 2: 1.22}, 256: {1: 5.12, 2: 3.66}, 320: {1: 4.92, 2: 1.05}, 384: {1: 2.10, 2: 7.07}}
BOUND = {str(lv): (8 / 7) ** lv for lv in range(5)}


def store_cpu(db, key="cpu", env=None, sweep=SWEEP, cal=CPU, context=CONTEXT):
    """A CPU environment with the calibration, in-context calibration and level sweep given (times over
    the GEMM of each size's group, whose GEMM takes a nominal 1 ms)."""
    run = db.start_run("synthetic", env or {"device": "CPU: Test", "backend": "numpy"}, key)
    for experiment, points in ((calibration.EXPERIMENT, cal), (calibration.CONTEXT_EXPERIMENT, context)):
        for n, (gemm, geam) in points.items():
            for method, t in (("gemm", gemm), ("geam", geam)):
                db.add(run, experiment, method, {"size": n, "dtype": "float64"}, value=t, unit="s", samples=[t] * 5,
                       meta={"stable": True})
    for n, by_level in sweep.items():
        for lv, over in {0: 1.0, **by_level}.items():
            db.add(run, validation.EXPERIMENT, "rum", point_params(n, lv, Config("rum")), value=1e-3 * over,
                   unit="s", meta={"speedup": 1 / over, "gemm_s": 1e-3})
    db.finish_run(run)


@pytest.fixture
def cpu_db(tmp_path):
    path = tmp_path / "cpu.sqlite"
    with ResultsDB(path) as db:
        store_cpu(db)
    return path


def test_predict_beyond_the_calibration_is_bounded_marked_and_answers_what_the_device_supports(run_json, cpu_db,
                                                                                              capsys):
    out = run_json("predict", "--db", cpu_db, "--env", "cpu", "--size", "8192")
    for lv, s in out["speedups"].items():
        assert s <= BOUND[lv] * (1 + 1e-12), out["speedups"]             # L1 read 71.6
    assert out["speedup_one_level"] <= 8 / 7
    assert out["calibrated_range"] == [128, 2048] and out["thesis_extrapolated"] is True
    assert all(out["extrapolated"].values())
    answer = out["answer"]
    assert answer["level"] == 0 and answer["basis"] == "extrapolated"
    models_say = (out["level"], out["level_recursive"])
    assert answer["range"][0] <= min(models_say) <= max(models_say) <= answer["range"][1]
    assert "beyond the largest swept size 384" in answer["reason"]
    assert "not a measurement-backed" in answer["basis_text"]
    assert main(["predict", "--db", str(cpu_db), "--env", "cpu", "--size", "8192"]) == 0
    text = capsys.readouterr().out
    assert "L1 " in text and "* extrapolated: reads the curves beyond the calibrated sizes 128-2048" in text
    assert "answer: level 0 (the models span" in text and "rests on: N = 8192" in text
    inside = run_json("predict", "--db", cpu_db, "--env", "cpu", "--size", "1024")
    assert inside["extrapolated"]["0"] is False and inside["answer"]["basis"] == "calibrated"
    swept = run_json("predict", "--db", cpu_db, "--env", "cpu", "--size", "256")
    assert swept["answer"]["basis"] == "measured" and swept["answer"]["level"] == 0


def test_auto_never_takes_a_level_the_stored_sweep_measured_slower(tmp_path):
    """Curves whose additions cost nothing put level 2+ from 512 on; the device measured levels 1-2 slower at
    512-4096: auto stays at the library GEMM there and beyond."""
    backend = get_backend("numpy")
    cheap = {n: (1e-12 * n**3, 1e-18 * n**2) for n in (256, 512, 1024, 2048, 4096, 8192)}
    with ResultsDB(tmp_path / "s.sqlite") as db:
        store_cpu(db, env={**backend.device_info(), "backend": "numpy"}, cal=cheap, context={},
                  sweep={n: {1: 1.3, 2: 1.7} for n in (512, 1024, 2048, 4096)})
        model, _ = models.stored_predictor(db, "cpu", Config("rum"))
        write_profile(db, "cpu", "test")
    assert model.level(4096, range(4)) > 0
    for n in (256, 512, 1000, 2048, 4096, 16384):
        assert auto_level(n, backend) == 0, n
    assert backend_profile(backend)["level_sweep"]["rum"]["size"][:2] == [512, 512]


def test_predict_for_a_gpu_answers_one_level_with_its_models_range(run_json, capsys):
    """B200 at 16000: the thesis rule says 3, the recursive predictor 2; RTX 4090 at 6000: the ensemble 1-2."""
    out = run_json("predict", "--gpu", "B200", "--size", "16000")
    assert (out["level"], out["level_recursive"]) == (3, 2)
    assert out["answer"]["level"] == 2 and out["answer"]["range"] == [2, 3]
    assert out["answer"]["model"] == "recursive predictor of the pooled transfer fit"
    assert out["answer"]["basis"] == "model" and out["extrapolated"]["1"] is None
    assert out["capped"] == [1] and out["speedups"]["1"] == pytest.approx(8 / 7)   # 1.159 before
    assert out["memory"]["fits"] and out["memory"]["device_bytes"] == 180e9
    assert main(["predict", "--gpu", "B200", "--size", "16000"]) == 0
    text = capsys.readouterr().out
    assert "answer: level 2 (the models span 2-3), by the recursive predictor of the pooled transfer fit" in text
    assert "L1 1.143^" in text and "held to the operation-count bound" in text
    rtx = run_json("predict", "--gpu", "RTX 4090", "--size", "6000")
    assert rtx["level_text"] == "1-2" and rtx["answer"]["range"] == [1, 2]
    assert main(["predict", "--gpu", "RTX 4090", "--size", "6000"]) == 0
    assert "(the models span 1-2)" in capsys.readouterr().out


def test_predict_says_when_the_operands_do_not_fit_the_gpu(run_json, capsys):
    out = run_json("predict", "--gpu", "H200", "--size", "1000000")
    memory = out["memory"]
    assert memory["operands_bytes"] == 24 * 10**12 and not memory["fits"] and memory["device_bytes"] == 141e9
    assert out["answer"]["level"] is None and "does not fit on one H200" in out["answer"]["note"]
    assert main(["predict", "--gpu", "H200", "--size", "1000000"]) == 0
    text = capsys.readouterr().out
    assert "memory: A, B and C need 24 TB (8 TB each) of the H200's 141 GB" in text
    assert "gpu.outofcore.matmul" in text and "answer: none on one GPU" in text
    tight = run_json("predict", "--gpu", "RTX 4090", "--size", "30000")
    assert tight["memory"]["fits"] and tight["memory"]["levels_that_fit"] == [0]
    assert tight["answer"]["level"] == 0 and tight["level_recursive"] > 0


def test_predict_help_says_what_the_gpu_prediction_uses(capsys):
    with pytest.raises(SystemExit):
        main(["predict", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "the transfer model" in text and "median of their measured ones" in text
    assert "analytic model of a GPU from the hardware table" not in text
    assert "transferred for --gpu" in text


def test_a_stored_gpu_prediction_checks_the_memory_cuda_reported(run_json, tmp_path):
    path = tmp_path / "g.sqlite"
    cal = {n: (1e-15 * n**3, 1e-12 * n**2) for n in (1024, 2048, 4096, 8192, 16384)}
    with ResultsDB(path) as db:
        store_cpu(db, "gpu", {"device": "NVIDIA H100 80GB HBM3", "backend": "cupy", "memory_bytes": 85_520_809_984},
                  cal=cal, context={}, sweep={})
    out = run_json("predict", "--db", path, "--env", "gpu", "--size", "55000")
    assert out["memory"]["device_bytes"] == 85_520_809_984 and out["memory"]["source"] == "as CUDA reports it"
    assert out["memory"]["fits"] and out["memory"]["levels_that_fit"] == [0]     # 72.6 GB, 96.8 GB with level 1
    assert not run_json("predict", "--db", path, "--env", "gpu", "--size", "60000")["memory"]["fits"]   # 86.4 GB
