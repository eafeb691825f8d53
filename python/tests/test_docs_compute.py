"""The compute and removal listener example of docs/python.md runs as written."""

import pathlib
import re

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "python.md"


def test_the_compute_example_runs():
    blocks = [b for b in re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S) if "eviction_listener=" in b]
    assert len(blocks) == 1
    code = "\n".join(line[2:] if line.startswith("  ") else line for line in blocks[0].splitlines())
    exec(compile(code, str(DOC), "exec"), {})
