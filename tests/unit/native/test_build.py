"""Both builds yield the same modules: setup.py (the quick in-place build) and meson (the
real one, installed editable) both read _native/modules.txt."""

import glob
import importlib.machinery
import importlib.util
import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
NATIVE = os.path.join(ROOT, "_native")
EXT_SUFFIXES = tuple(importlib.machinery.EXTENSION_SUFFIXES)


def modules_txt():
    names = []
    with open(os.path.join(NATIVE, "modules.txt")) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                name, *extra = line.split()
                for src in extra:
                    assert os.path.exists(os.path.join(NATIVE, src)), src
                names.append(name)
    assert len(names) == len(set(names))
    return names


def extension_names(directory):
    """Module names of the extension files in `directory`."""
    out = set()
    for path in glob.glob(os.path.join(directory, "*")):
        base = os.path.basename(path)
        for suffix in EXT_SUFFIXES:
            if base.endswith(suffix):
                out.add(base[: -len(suffix)])
                break
    return out


def test_sources_and_module_list_agree():
    listed = set(modules_txt())
    pyx = {os.path.basename(p)[:-4] for p in glob.glob(os.path.join(NATIVE, "*.pyx"))}
    assert listed == pyx
    for name in listed:
        for ext in (".pxd", ".pyi"):
            assert os.path.exists(os.path.join(NATIVE, name + ext)), name + ext


def meson_extension_files():
    """{module name: path} of the extension files the meson build produced."""
    origins = {}
    for name in modules_txt():
        spec = importlib.util.find_spec("broker._native." + name)
        assert spec is not None and spec.origin, name
        assert spec.origin.endswith(EXT_SUFFIXES), spec.origin
        origins[name] = spec.origin
    return origins


def test_meson_build_has_every_module():
    origins = meson_extension_files()
    dirs = {os.path.dirname(p) for p in origins.values()}
    assert len(dirs) == 1
    # nothing more, nothing less in the meson build's output directory
    assert extension_names(dirs.pop()) == set(modules_txt())


SMOKE = textwrap.dedent("""
    import importlib, os, sys
    build_lib, names = sys.argv[1], sys.argv[2].split(",")
    for name in names:
        mod = importlib.import_module("broker._native." + name)
        assert os.path.realpath(mod.__file__).startswith(os.path.realpath(build_lib)), mod.__file__
    from broker._native.crc32c import crc32c
    from broker._native.builder import BatchBuilder
    from broker._native.records import RecordBatch
    from broker._native.buffer import read_varint, write_varint
    assert crc32c(b"123456789") == 0xE3069283
    b = BatchBuilder("gzip", base_offset=7)
    b.append(1, b"k", b"v", [("h", None)])
    b.append(2, None, b"w")
    batch = RecordBatch(b.build())
    batch.validate()
    assert [(r.offset, r.key, r.value, r.headers) for r in batch.records()] == [
        (7, b"k", b"v", [("h", None)]), (8, None, b"w", [])]
    assert read_varint(write_varint(-3)) == (-3, 1)
    print("OK", len(names))
""")


@pytest.mark.slow
def test_setup_py_and_meson_build_the_same_modules(tmp_path):
    build_lib, build_temp = tmp_path / "lib", tmp_path / "temp"
    proc = subprocess.run(
        [
            sys.executable,
            "setup.py",
            "build_ext",
            "--build-lib",
            str(build_lib),
            "--build-temp",
            str(build_temp),
            "--parallel",
            "2",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    pkg = build_lib / "broker" / "_native"
    built = extension_names(str(pkg))
    listed = set(modules_txt())
    pyx = {os.path.basename(p)[:-4] for p in glob.glob(os.path.join(NATIVE, "*.pyx"))}
    meson = set(meson_extension_files())
    assert built == listed == meson == pyx

    # import the setup.py build (not the editable meson one) and use it
    (build_lib / "broker" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    # the editable loader would serve (and rebuild) the meson build: tell it to stand aside
    # for its build directory (the one above .../_native/<mod>.so)
    meson_build_dir = os.path.dirname(os.path.dirname(next(iter(meson_extension_files().values()))))
    env = {
        **os.environ,
        "PYTHONPATH": str(build_lib),
        "MESONPY_EDITABLE_SKIP": os.pathsep.join(
            filter(None, [os.environ.get("MESONPY_EDITABLE_SKIP"), meson_build_dir])
        ),
    }
    script = tmp_path / "smoke.py"
    script.write_text(SMOKE)
    proc = subprocess.run(
        [sys.executable, str(script), str(build_lib), ",".join(sorted(listed))],
        cwd=str(tmp_path),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0 and proc.stdout.strip() == f"OK {len(listed)}", proc.stdout + proc.stderr
