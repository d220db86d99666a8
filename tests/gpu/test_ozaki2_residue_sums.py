"""A fused level's residues and operand sums (:func:`gpu.ozaki2.fused_level.form_operands`): in one pass where the
backend has it (:mod:`gpu.ozaki2.residue_sums` on the GPU), else the residues, then a sums pass; the bits are the
two passes' either way, on both sides, both layouts, padded shapes, lines past 2**79 and lines that are not
finite."""

from contextlib import contextmanager

import numpy as np
import pytest

from accuracy.generate import phi_matrix
from gpu.backend import get_backend
from gpu.ozaki2 import fused_level, winograd
from gpu.ozaki2.moduli import moduli_table
from gpu.ozaki2.ops import HostOps


def recorder(seen: list):
    @contextmanager
    def phase(name):
        seen.append(name)
        yield
    return phase


def two_passes(family, X, shifts, exps, table, rows_pad, ldk, side, residue_ops):
    """The residues, then each modulus's sums from their blocks (the form the one pass replaces)."""
    res = family.residues(X, shifts, exps, table, rows_pad, ldk)
    sums = [residue_ops.operand_sums(*fused_level.quadrants(res[t], side), m, side)
            for t, m in enumerate(table.moduli)]
    return res, sums


def scaled(family, X, table, raise_by=0):
    stats = family.line_stats(X)
    return family.shifts(stats, table) + (raise_by << 8), stats.e


@pytest.mark.parametrize("side", ["a", "b"])
def test_without_the_one_pass_the_sums_take_a_phase_of_their_own(side):
    be, table = get_backend("numpy"), moduli_table(5)
    family, X = HostOps(be), np.asarray(phi_matrix(60, 100, 1.0, 3))
    shifts, exps = scaled(family, X, table)
    res, sums, seen = np.zeros((5, 64, 128), np.int8), np.zeros((5, 4, 32, 64), np.int8), []
    fused_level.form_operands(be, family, table, 128, ((X, shifts, exps, 64, res, sums, side),), recorder(seen))
    want, want_sums = two_passes(family, X, shifts, exps, table, 64, 128, side, winograd.HostResidueOps())
    assert seen == ["residues", "sums"] and np.array_equal(res, want)
    assert all(np.array_equal(sums[t], np.stack(w)) for t, w in enumerate(want_sums))


def test_b_sides_blocks_are_its_columns_blocks():
    """B's columns are the rows of its residues: B12 (B's top right) is their bottom left block."""
    res = np.arange(16).reshape(4, 4)
    x11, x12, x21, x22 = fused_level.quadrants(res, "b")
    assert np.array_equal(x12, res[2:, :2]) and np.array_equal(x21, res[:2, 2:])
    assert np.array_equal(fused_level.quadrants(res, "a")[1], res[:2, 2:])


def test_the_one_pass_takes_both_and_kept_residues_get_their_sums_again(monkeypatch):
    """Where the backend forms both in one pass, no sums pass runs; a side whose residues a call keeps (X None)
    gets its sums formed again from them, and none of its residues."""
    be, table, calls, seen = get_backend("numpy"), moduli_table(3), [], []
    family = HostOps(be)
    monkeypatch.setattr(HostOps, "residues_and_sums", lambda self, X, *a: calls.append(("one pass", a[-1])) or True)
    monkeypatch.setattr(HostOps, "residues", lambda self, *a, **k: calls.append(("residues",)))
    monkeypatch.setattr(fused_level, "form_sums", lambda be, res, sums, moduli, side: calls.append(("sums", side)))
    X = np.ones((64, 64))
    sides = ((None, None, None, 64, None, "kept", "a"), (X, None, None, 64, None, "sums", "b"))
    fused_level.form_operands(be, family, table, 64, sides, recorder(seen))
    assert calls == [("one pass", "b"), ("sums", "a")] and seen == ["residues", "sums"]


@pytest.mark.parametrize("rows_pad, ldk, fits", [(64, 64, True), (128, 192, True), (96, 64, False),
                                                 (64, 32, False), (0, 64, False), (64, 16, False)])
def test_the_one_pass_takes_blocks_of_whole_tiles(rows_pad, ldk, fits):
    assert fused_level.whole_tiles(rows_pad, ldk) is fits


@pytest.mark.gpu
@pytest.mark.parametrize("count", [14, 16])
@pytest.mark.parametrize("shape, rows_pad, ldk", [((128, 192), 128, 192), ((120, 250), 128, 256),
                                                  ((64, 64), 64, 64)])
@pytest.mark.parametrize("side, order", [("a", "C"), ("b", "C"), ("b", "F"), ("a", "F")])
@pytest.mark.parametrize("raise_by", [0, 60])
def test_on_the_gpu_one_pass_gives_the_two_passes_bits(cupy_backend, count, shape, rows_pad, ldk, side, order,
                                                       raise_by):
    """``raise_by``: shifts raised by 60 take entries past 2**79 (the table path) in most warps. Row 3 holds
    infinity: its residues are those of zeros, as the plan's IEEE repair expects."""
    be, xp, table = cupy_backend, cupy_backend.xp, moduli_table(count)
    family, residue_ops = be.ops("ozaki2"), be.ops(winograd.FAMILY)
    host = np.asarray(phi_matrix(*shape, 2.0, count), order=order)
    host[3, 7] = np.inf
    X = xp.asarray(host, order=order) if side == "a" else xp.asarray(host.T, order=order).T
    shifts, exps = scaled(family, X, table, raise_by)
    res = xp.full((count, rows_pad, ldk), 77, np.int8)
    sums = xp.full((count, 4, rows_pad // 2, ldk // 2), 77, np.int8)
    assert family.residues_and_sums(X, shifts, exps, table, rows_pad, ldk, res, sums, side)
    want, want_sums = two_passes(family, X, shifts, exps, table, rows_pad, ldk, side, residue_ops)
    assert np.array_equal(be.to_numpy(res), be.to_numpy(want))
    for t, w in enumerate(want_sums):
        assert np.array_equal(be.to_numpy(sums[t]), be.to_numpy(xp.stack(w))), t
    host_family = HostOps(get_backend("numpy"))
    h_shifts, h_exps = be.to_numpy(shifts), be.to_numpy(exps)
    assert np.array_equal(be.to_numpy(res), host_family.residues(be.to_numpy(X), h_shifts, h_exps, table, rows_pad,
                                                                 ldk))


@pytest.mark.gpu
def test_on_the_gpu_blocks_of_part_tiles_or_strided_sums_keep_the_two_passes(cupy_backend):
    be, xp, table = cupy_backend, cupy_backend.xp, moduli_table(3)
    family = be.ops("ozaki2")
    X = xp.asarray(phi_matrix(96, 64, 1.0, 2))
    shifts, exps = scaled(family, X, table)
    res = xp.zeros((3, 96, 64), np.int8)
    assert not family.residues_and_sums(X, shifts, exps, table, 96, 64, res, xp.zeros((3, 4, 48, 32), np.int8), "a")
    strided = xp.zeros((3, 4, 32, 64), np.int8)[:, :, :, ::2]
    assert not family.residues_and_sums(X[:64], shifts[:64], exps[:64], table, 64, 64, res[:, :64], strided, "a")
