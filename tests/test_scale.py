"""The scale switch refuses what it cannot run, with a message that says what to do (moved here from chapter 00)."""

import pytest
import torch

from b2t_lib import SCALES, ScaleError, get_scale
from b2t_lib.scale import main as scale_main


def test_default_and_valid_values(monkeypatch):
    monkeypatch.delenv("B2T_SCALE", raising=False)
    assert get_scale() == "tiny"
    for value, expected in (("tiny", "tiny"), (" Tiny ", "tiny"), ("", "tiny")):
        monkeypatch.setenv("B2T_SCALE", value)
        assert get_scale() == expected
    assert SCALES == ("tiny", "small", "full")


def test_an_unknown_scale_lists_the_valid_ones(monkeypatch):
    monkeypatch.setenv("B2T_SCALE", "huge")
    with pytest.raises(ScaleError, match=r"B2T_SCALE='huge' is not a scale; valid values are: tiny, small, full"):
        get_scale()
    with pytest.raises(ScaleError, match="valid values"):
        get_scale(require_hardware=False)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without a GPU")
@pytest.mark.parametrize("scale", ["small", "full"])
def test_gpu_scales_need_a_gpu_and_say_how_to_fall_back(monkeypatch, scale):
    monkeypatch.setenv("B2T_SCALE", scale)
    with pytest.raises(ScaleError, match="needs a CUDA GPU") as error:
        get_scale()
    assert "set it to 'tiny'" in str(error.value)
    assert get_scale(require_hardware=False) == scale  # reading the value alone is allowed


def test_make_course_scale_is_tiny_unless_asked(monkeypatch, capsys):
    """`make course` asks `python -m b2t_lib.scale`: tiny by default even on a GPU machine (a course must not
    start days of GPU work unasked); an explicit B2T_SCALE is used, or refused with exit code 2."""
    monkeypatch.delenv("B2T_SCALE", raising=False)
    assert scale_main() == 0 and capsys.readouterr().out.strip() == "tiny"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("B2T_SCALE", "small")
    assert scale_main() == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert scale_main() == 0 and capsys.readouterr().out.strip() == "small"
