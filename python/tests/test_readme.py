"""The examples in python/README.md and docs/python.md run as written (except those that write a
file: the persistence one would write a 1 GiB file, the multi-process one forks)."""

import pathlib
import re
import textwrap

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCS = [ROOT / "python" / "README.md", ROOT / "docs" / "python.md"]


def blocks(doc):
    # Blocks inside a list item are indented with it.
    return [textwrap.dedent(b) for b in re.findall(r"```python\n(.*?)```", doc.read_text(), re.S)]


def runnable(doc):
    return [pytest.param(doc, b, id=f"{doc.name}-{i}") for i, b in enumerate(blocks(doc))
            if "path=" not in b and "Cache(heap_size" in b]


def test_docs_have_examples():
    assert len(blocks(DOCS[0])) >= 3
    assert len(runnable(DOCS[1])) >= 3


@pytest.mark.parametrize("doc, code", [p for doc in DOCS for p in runnable(doc)])
def test_doc_example_runs(doc, code):
    exec(compile(code, str(doc), "exec"), {"__name__": "__doc_example__"})
