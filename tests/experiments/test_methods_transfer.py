"""The methods transfer model on the real training set (the H200's bundled methods section, the H100's published
runs): it reproduces its training data, its held-out predictions are judged over the acceptance grid, and the
bundled ``transfer-methods.json`` is what ``gemmlab profile --transfer-methods`` writes."""

import json

import pytest

from experiments.cli import main
from experiments.frontdoor import transfer
from gpu.profile import BUNDLED_DIR, TRANSFER_METHODS_FILE, TRANSFER_METHODS_FORMAT, load_profile_file
from modeling import hardware
from modeling.methods_transfer import features, reproduction, streams
from modeling.methods_validation import ACCURACIES, GRID, table, worst

#: Stated tolerances of the cost model on its own training times (relative error of a call's or phase's seconds):
#: scheme II over 54 calls and 8 phases on two GPUs, Ozaki I over 31 calls. The H200's
#: calibration (N = 2048 and the rectangles 4096 x 2^16 x 4096, 32768 x 4096 x 32768) moved the fit: the worst
#: rose from at most 12% and 16% to 12.5% (scheme II, the H100 at N = 4096) and 16.5% (Ozaki I, 1024 x 2^18 x 1024).
TOLERANCE = {"ozaki2": (0.05, 0.13), "ozaki": (0.08, 0.17)}      # (rms, worst)


@pytest.fixture(scope="module")
def observations():
    return transfer.training()


def test_the_training_set_is_the_h200_section_and_the_h100_runs(observations):
    by = {(o.gpu, o.timed.method) for o in observations}
    assert by == {(g, m) for g in ("H100", "H200") for m in ("ozaki2", "ozaki", "splitk")}
    h200 = [o for o in observations if o.gpu == "H200"]
    sources = {o.source.partition(" ")[0] for o in h200}
    assert "gemmlab" in sources and any(s.startswith("h200-splitk-as-called") for s in sources), sources
    assert {o.phase for o in observations if o.gpu == "H100" and o.timed.method == "ozaki2"} == \
        {"total", "gemm", "passes"}
    assert all(o.ratio and o.ratio > 0 for o in observations if o.phase == "total")


def test_the_cost_model_reproduces_its_training_data_within_the_stated_tolerance(observations):
    model = transfer.trained()
    errors = reproduction(model, observations)
    streamed = [o for o in observations if o.timed.method != "splitk" or streams(o.shape, hardware.GPUS[o.gpu])]
    assert len(errors) == len(streamed) < len(observations), "split-K's calls the host times are not modelled"
    for method, (rms, most) in TOLERANCE.items():
        e = [abs(x) for o, x in errors if o.timed.method == method]
        assert (sum(x * x for x in e) / len(e)) ** 0.5 <= rms and max(e) <= most, method
    assert max(abs(x) for o, x in errors if o.timed.method == "splitk") < 1e-9, "each GPU's own ratio"
    # the phases pin the products' share of fast-15 at N = 16384 on the H100 (93.7 of 113.5 ms: 83%)
    f = next(f for f in model.fits if f.timed.method == "ozaki2")
    h100, shape = hardware.GPUS["H100"], (16384,) * 3
    share = features("ozaki2", h100, shape, 15)[0] / f.eta / f.seconds(h100, shape)
    phases = {o.phase: o.seconds for o in observations if o.shape == shape and o.phase != "total"
              and o.source.endswith("h100-ozaki2.csv")}
    assert share == pytest.approx(phases["gemm"] / (phases["gemm"] + phases["passes"]), abs=0.03)


def test_the_h200s_section_predicted_from_the_h100_alone_over_the_grid(capsys):
    model = transfer.trained(["H100"])
    assert model.trained_on == ("H100",), "the held-out GPU's measurements are never read"
    judged = transfer.held_out("H200")
    assert len(judged) == len(GRID) * len(ACCURACIES)
    print("\nH200 predicted from the H100 alone:\n" + table(judged) + f"\nworst time lost: {worst(judged):.1%}")
    for j in judged:
        if j.lost is not None and not j.same:
            assert j.lost == pytest.approx(j.measured_ratio / j.predicted_measured - 1)
        m, k, n = j.shape
        if m == k == n >= 8192:                                         # scheme II transfers on large squares,
            assert j.measured.startswith("ozaki2") and j.predicted.startswith("ozaki2"), j
            # without the fused Winograd levels the H100 never ran: where the H200 takes one (level 1 measured at
            # 28672 and below, 1.812x as called at 28672 against level 0's 1.718x; level 2 at 32768, 1.976x against
            # level 0's 1.695x of an earlier run), the prediction loses the level's gain, and no more
            gain = 0.17 if "level=2" in j.measured else 0.12
            assert j.same or ("level=" in j.measured and 0 < j.lost <= gain), j
        if (m, k, n) in ((4096, 2**16, 4096), (32768, 4096, 32768)):   # and on rectangles the H100 never measured
            assert j.same and j.measured.startswith("ozaki2") and j.predicted_ratio > 1.02, j
    # split-K carries from the H100 (one kernel on sm_90) wherever a call streams long enough for the device to
    # set its time: the H200's measured choice at every tiny output, or one within issue 39's 3%, except at 1e-10 on
    # 64 x 2^24 x 64, where no bound proven from 132 SMs without the kernels' split is tight enough and Ozaki II
    # keeps the accuracy (on the device the front door proves it from the split:
    # experiments.frontdoor.hidden.hidden_choice). Since the H200's split-K entries come from the tensor-map
    # kernel's shapes of 6db514a, 16 x 2^24 x 16 ties the library GEMM there (1.006x atomic), so the H100's 1.013x
    # makes the same choice; at 64 x 2^24 x 64 at dgemm and sgemm the prediction takes the atomic mode, which the
    # H200 measured 1.5% behind the deterministic one
    for j in judged:
        exempt = j.accuracy == 1e-10 and j.shape == (64, 2**24, 64)
        assert exempt or j.predicted_measured is None or j.predicted_measured >= 0.98, j   # never a slowdown
        if j.shape[0] > 64:
            continue
        if exempt:
            assert j.predicted.startswith("ozaki2"), j
        else:
            assert j.same or 0 < j.lost <= 0.03, j
        if j.shape[1] == 2**16:
            assert j.predicted.startswith("gemm"), j


def test_the_h100_predicted_from_the_h200_where_its_data_allow(capsys):
    judged = transfer.held_out("H100")
    print("\nH100 predicted from the H200 alone:\n" + table(judged))
    measured = {tuple(p["shape"]) for p in transfer.measured("H100")["points"]}
    squares = [j for j in judged if j.shape[0] == j.shape[1] == j.shape[2] and j.shape in measured]
    assert squares and all(j.same for j in squares), [j for j in squares if not j.same]
    h200_ks = {p["shape"][1] for p in transfer.measured("H200")["points"] if p["shape"][0] <= 64}
    for j in judged:
        if j.lost and j.shape[0] <= 64 and j.shape[1] < min(h200_ks):
            assert "outside its training data" in j.note, j      # the H200 never timed split-K below k = 2^20


def test_the_configurations_ride_along_unchanged():
    """With the H200's Strassen configurations on both sides, a choice that differs from the methods-only one
    moves to Strassen only where the predicted scheme II ratio falls below Strassen's measured one."""
    plain = {(j.shape, j.accuracy): j for j in transfer.held_out("H200")}
    for j in transfer.held_out("H200", configurations=True):
        if j.predicted.startswith("strassen") and not plain[j.shape, j.accuracy].predicted.startswith("strassen"):
            assert plain[j.shape, j.accuracy].predicted_ratio < j.predicted_ratio, j


def test_the_bundled_file_is_what_the_command_writes_and_reads_back(tmp_path, capsys):
    out = tmp_path / "profiles"
    for name in ("cupy-nvidia-h100-80gb-hbm3.json", "cupy-nvidia-h200.json"):
        (out / name).parent.mkdir(exist_ok=True)
        (out / name).write_text((BUNDLED_DIR / name).read_text())
    assert main(["profile", "--transfer-methods", "--out", str(out), "--json", "--db", str(tmp_path / "d")]) == 0
    path = json.loads(capsys.readouterr().out)["path"]
    doc = load_profile_file(out / TRANSFER_METHODS_FILE, TRANSFER_METHODS_FORMAT)
    assert path == str(out / TRANSFER_METHODS_FILE) and doc["trained_on"] == ["H100", "H200"]
    names = [g["name"] for g in doc["gpus"]]
    # the H200's bundled profile has a measured methods section; the H100's holds Strassen's tables only
    assert names == [g.name for g in hardware.GPUS.values() if g.name != "H200"]
    for gpu in doc["gpus"]:
        assert gpu["pattern"] == hardware.GPUS[gpu["name"]].pattern
        assert all(p["basis"] == "predicted (transfer model from H100, H200)" for p in gpu["methods"]["points"])
    a100 = next(g for g in doc["gpus"] if g["name"] == "A100")["methods"]
    assert {e["method"] for p in a100["points"] for e in p["timed"]} == {"ozaki2", "ozaki"}  # sm_80: other kernels
    pcie = next(g for g in doc["gpus"] if g["name"] == "H100-PCIe")["methods"]
    assert any(e["method"] == "splitk" for p in pcie["points"] for e in p["timed"]), "sm_90: the H100's kernels"
    assert doc["model"]["cost"] and doc["model"]["splitk"]
    bundled = load_profile_file(BUNDLED_DIR / TRANSFER_METHODS_FILE, TRANSFER_METHODS_FORMAT)

    def ratios(d):
        return {(g["name"], tuple(p["shape"]), e["method"], json.dumps(e["config"], sort_keys=True)): e["ratio"]
                for g in d["gpus"] for p in g["methods"]["points"] for e in p["timed"]}

    fresh, shipped = ratios(doc), ratios(bundled)
    assert fresh.keys() == shipped.keys(), "gpu/profiles/transfer-methods.json is stale: rewrite it"
    assert all(fresh[key] == pytest.approx(shipped[key], rel=1e-3) for key in fresh)
