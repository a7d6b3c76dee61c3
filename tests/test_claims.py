"""A notebook's claim fails the notebook at the tiny scale and is reported at small/full (b2t_lib.claims)."""

import pytest

from b2t_lib.claims import ClaimFailed, claim, claims


def test_a_failing_claim_fails_at_tiny_and_names_what_was_measured(monkeypatch, capsys):
    monkeypatch.setenv("B2T_SCALE", "tiny")
    assert claim(1 < 2, "one is less than two") is True
    with pytest.raises(ClaimFailed, match=r"Post-LN stalls \(measured: completed\)"):
        claim(False, "Post-LN stalls", "completed")
    assert capsys.readouterr().out == ""  # nothing printed at tiny: notebook outputs unchanged
    assert [c.statement for c in claims()[-2:]] == ["one is less than two", "Post-LN stalls"]


def test_at_small_and_full_a_claim_is_a_finding_printed_not_a_crash(monkeypatch, capsys):
    monkeypatch.setenv("B2T_SCALE", "full")
    monkeypatch.setenv("B2T_REHEARSAL", "1")
    assert claim(False, "Post-LN stalls", "completed") is False
    assert claim(True, "B2T trains") is True
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("does NOT hold at this scale: Post-LN stalls (measured: completed)")
    assert "rehearsal" in out[0] and out[1] == "holds: B2T trains"
    assert not claims()[-2].holds and claims()[-2].scale == "full"
