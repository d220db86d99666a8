"""Provenance: the commit a stored result names."""

from experiments.core.environment import git_state


def test_a_named_commit_wins_over_the_trees_own_git(monkeypatch):
    monkeypatch.setenv("GEMMLAB_GIT_COMMIT", "0123abc")
    assert git_state() == {"git_commit": "0123abc", "git_dirty": None}


def test_without_a_named_commit_the_tree_says_its_own(monkeypatch):
    monkeypatch.delenv("GEMMLAB_GIT_COMMIT", raising=False)
    state = git_state()
    assert state["git_commit"] != "0123abc" and set(state) == {"git_commit", "git_dirty"}
