"""trajstore/hub.py: loading models and tokenizers quietly."""

from __future__ import annotations

import pytest


# new-user walkthrough: a finding (a slip in what a command prints)
def test_quiet_loading_silences_transformers_bars_and_future_warnings(capsys: pytest.CaptureFixture[str]) -> None:
    import sys
    import warnings

    pytest.importorskip("transformers")
    from transformers.utils import logging as hf_logging

    from trajstore.hub import quiet_loading

    hf_logging.enable_progress_bar()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with quiet_loading():
            for _ in hf_logging.tqdm(range(3), desc="Loading weights", file=sys.stderr):
                pass
            gguf = sys.modules.get("transformers.modeling_gguf_pytorch_utils")
            if gguf is not None:  # the GGUF reader's own tqdm obeys the switch while loading
                assert gguf.tqdm is hf_logging.tqdm
            warnings.warn("`rope_scaling` is deprecated", FutureWarning, stacklevel=2)
        warnings.warn("ours", UserWarning, stacklevel=2)
    assert "Loading weights" not in capsys.readouterr().err
    assert [str(w.message) for w in seen] == ["ours"]
    assert hf_logging.is_progress_bar_enabled()  # restored after the load
    if gguf is not None:
        assert gguf.tqdm is not hf_logging.tqdm
