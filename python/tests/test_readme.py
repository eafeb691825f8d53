"""The examples in python/README.md run as written (except the persistence one, which would
write a 1 GiB file)."""

import pathlib
import re

import pytest

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


def test_readme_has_examples():
    assert len(BLOCKS) >= 3


@pytest.mark.parametrize("code", [b for b in BLOCKS if "path=" not in b and "Cache(heap_size" in b])
def test_readme_example_runs(code):
    exec(compile(code, str(README), "exec"), {})
