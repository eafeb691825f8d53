"""`python -m segcache`: the version and the build's features, read from the installed module."""

import subprocess
import sys

import segcache
from segcache.__main__ import features


def test_prints_the_version_and_every_feature():
    out = subprocess.run([sys.executable, "-m", "segcache"], check=True, capture_output=True, text=True).stdout
    lines = out.splitlines()
    assert lines[0] == f"segcache {segcache.__version__}"
    for name, on in features().items():
        assert any(line.strip().startswith(f"{name}: {'yes' if on else 'no'} (") for line in lines), (name, out)


def test_features_match_what_the_build_does(tmp_path):
    found = features()
    # Every build has a file-backed heap and sharing across processes: they are Cache's keywords.
    assert found["persistence"] and found["multi-process"]
    path = tmp_path / "probe.cache"
    with segcache.Cache(path=str(path), multi_process=True) as cache:
        cache["k"] = b"v"
    with segcache.Cache(path=str(path)) as cache:
        assert cache["k"] == b"v"
    assert found["free-threading"] == (not getattr(sys, "_is_gil_enabled", lambda: True)())
