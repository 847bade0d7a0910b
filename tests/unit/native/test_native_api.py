"""broker.native as a public face: its names, what importing it loads, and the runnable
examples of docs/native.md."""

import os
import re
import subprocess
import sys
import tempfile
import textwrap

import broker.native

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
DOC = os.path.join(ROOT, "docs", "native.md")

# what a project importing only broker.native must not pay for
HEAVY = ("asyncio", "broker.server", "broker.cluster", "kazoo", "pyspark", "pyarrow", "zstandard", "lz4", "cramjam")


def test_every_exported_name_exists():
    assert len(broker.native.__all__) == len(set(broker.native.__all__))
    for name in broker.native.__all__:
        assert hasattr(broker.native, name), name
        assert getattr(broker.native, name) is not None, name
    assert issubclass(broker.native.CorruptRecordError, ValueError)
    assert issubclass(broker.native.CorruptIndexError, ValueError)


def test_public_names_come_from_the_native_modules():
    public = {n for n in vars(broker.native) if not n.startswith("_")}
    assert set(broker.native.__all__) <= public
    for name in broker.native.__all__:
        obj = getattr(broker.native, name)
        module = getattr(obj, "__module__", None)
        if module is not None:
            assert module.startswith("broker._native."), (name, module)


def run_python(code):
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tempfile.gettempdir(),
    )


def test_import_is_light_and_pyarrow_loads_lazily():
    proc = run_python(f"""
        import sys
        import broker.native as native
        heavy = {HEAVY!r}
        loaded = sorted(m for m in sys.modules if m in heavy or m.split(".")[0] in heavy)
        print("after import:", loaded)
        assert not loaded, loaded

        # records, indexes and CRCs need none of them either
        b = native.BatchBuilder()
        b.append(1, b"k", b"v")
        data = b.build()
        native.RecordBatch(data).validate()
        assert native.crc32c(data) >= 0
        assert "pyarrow" not in sys.modules

        # a codec loads on first use, and only that one
        z = native.BatchBuilder("zstd")
        z.append(1, b"k", b"v")
        native.RecordBatch(z.build()).records()
        assert "zstandard" in sys.modules
        assert "lz4" not in sys.modules and "cramjam" not in sys.modules

        native.arrow_schema()
        assert "pyarrow" in sys.modules
        print("OK")
    """)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("OK"), proc.stdout + proc.stderr


def test_batches_to_arrow_loads_pyarrow_itself():
    proc = run_python("""
        import sys
        from broker.native import BatchBuilder, batches_to_arrow
        assert "pyarrow" not in sys.modules
        b = BatchBuilder()
        b.append(1, b"k", b"v")
        assert batches_to_arrow(b.build()).num_rows == 1
        assert "pyarrow" in sys.modules
        print("OK")
    """)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("OK"), proc.stdout + proc.stderr


def python_blocks(text):
    """[(line number, code)] of every ```python block."""
    blocks = []
    for m in re.finditer(r"^```python[ \t]*\n(.*?)^```[ \t]*$", text, re.S | re.M):
        line = text.count("\n", 0, m.start(1)) + 1
        blocks.append((line, m.group(1)))
    return blocks


def test_docs_examples_run(tmp_path, monkeypatch):
    """Every ```python block of docs/native.md, executed in order in one namespace, in a
    temporary working directory."""
    assert os.path.exists(DOC), "docs/native.md is missing: the native core's documentation"
    with open(DOC, encoding="utf-8") as f:
        text = f.read()
    blocks = python_blocks(text)
    assert blocks, "docs/native.md has no ```python examples"
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "__docs__"}
    for line, code in blocks:
        # pad with newlines so that tracebacks show the line numbers of the .md file
        compiled = compile("\n" * (line - 1) + code, DOC, "exec")
        exec(compiled, namespace)
