from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from scipy.special import expit, logit

from calimon.calibration import fit_on_split
from calimon.errors import InputError
from calimon.plotting.reliability import plot_reliability

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _data(n=2000, seed=0):
    rng = np.random.default_rng(seed)
    true_p = rng.uniform(0.02, 0.98, size=n)
    y = (rng.uniform(size=n) < true_p).astype(int)
    return expit(3 * logit(true_p)), y


def test_writes_a_png_with_raw_and_calibrated_curves(tmp_path):
    import matplotlib
    import matplotlib.image

    backend = matplotlib.get_backend()
    p, y = _data()
    after = {m: fit_on_split(m, p[:1000], y[:1000], p)[1] for m in ("platt", "isotonic")}
    out = plot_reliability(tmp_path / "sub" / "rel.png", p, after, y, n_bins=10, title="t")
    assert out == tmp_path / "sub" / "rel.png"
    assert out.read_bytes()[:8] == PNG_SIGNATURE
    img = matplotlib.image.imread(out)
    assert img.shape[0] > 500 and img.shape[1] > 500
    assert img[..., :3].std() > 0.05  # something was drawn
    assert matplotlib.get_backend() == backend  # no global backend switch


def test_empty_method_dict_and_quantile_bins(tmp_path):
    p, y = _data(300, seed=1)
    out = plot_reliability(tmp_path / "raw.png", p, {}, y, strategy="quantile")
    assert out.stat().st_size > 1000


def test_importing_calimon_does_not_import_pyplot():
    code = ("import sys, calimon, calimon.plotting.reliability, calimon.calibration; "
            "assert 'matplotlib.pyplot' not in sys.modules; "
            "assert 'matplotlib' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_validation_names_the_series(tmp_path):
    p, y = _data(100)
    with pytest.raises(InputError, match=r"p_after_by_method\['platt'\]"):
        plot_reliability(tmp_path / "x.png", p, {"platt": p[:50]}, y)
    with pytest.raises(InputError, match="p_before"):
        plot_reliability(tmp_path / "x.png", p + 1, {}, y)
    with pytest.raises(InputError, match="p_after_by_method"):
        plot_reliability(tmp_path / "x.png", p, [p], y)
    assert not (tmp_path / "x.png").exists()
