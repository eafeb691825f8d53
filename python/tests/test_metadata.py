"""The installed distribution's metadata, as pip and PyPI read it: the version the module reports,
the license, the classifiers, and the typed marker (PEP 561) shipped beside the package."""

from importlib import metadata
from pathlib import Path

import segcache


def test_metadata_names_the_version_license_and_classifiers():
    meta = metadata.metadata("segcache")
    assert meta["Name"] == "segcache"
    assert meta["Version"] == segcache.__version__
    license_fields = " ".join(filter(None, [meta.get("License"), meta.get("License-Expression")]))
    assert "Apache-2.0" in license_fields, dict(meta)
    classifiers = set(meta.get_all("Classifier") or [])
    assert {"Typing :: Typed", "Programming Language :: Python :: 3 :: Only"} <= classifiers, classifiers
    assert meta["Requires-Python"] == ">=3.10"


def test_the_typed_marker_and_stub_are_installed():
    package = Path(segcache.__file__).parent
    assert (package / "py.typed").is_file()
    assert (package / "_segcache.pyi").is_file()
    files = {str(f) for f in metadata.files("segcache") or []}
    assert "segcache/py.typed" in files, sorted(files)
