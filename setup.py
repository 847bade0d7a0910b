"""Thin in-place developer build of the native core: `python setup.py build_ext --inplace`.

The real build is meson (meson.build, pyproject.toml); this script exists for quick
iteration and reads the same module list, _native/modules.txt, so there is one source of
truth. It takes no environment variables; debug builds are a meson option
(meson.options: native_debug).
"""

import os
import shutil
import tempfile

from Cython.Build import cythonize
from setuptools import Extension, setup

ROOT = os.path.dirname(os.path.abspath(__file__))
NATIVE = os.path.join(ROOT, "_native")


def native_modules():
    """[(name, [extra C sources])] from _native/modules.txt."""
    out = []
    with open(os.path.join(NATIVE, "modules.txt")) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                name, *extra = line.split()
                out.append((name, extra))
    return out


def pxd_include_tree():
    """A directory laying the .pxd files out as broker/_native/<mod>.pxd, so that
    `cimport broker._native.<mod>` resolves (meson does the same in its build dir)."""
    root = tempfile.mkdtemp(prefix="kbroker-pxd-")
    pkg = os.path.join(root, "broker", "_native")
    os.makedirs(pkg)
    for name, _ in native_modules():
        shutil.copy(os.path.join(NATIVE, name + ".pxd"), pkg)
    return root


extensions = [
    Extension(
        "broker._native." + name,
        [os.path.join("_native", name + ".pyx")] + [os.path.join("_native", e) for e in extra],
        include_dirs=[os.path.join("_native", "include")],
        extra_compile_args=["-O3", "-Wno-unused-function", "-Wno-unreachable-code", "-Wno-maybe-uninitialized"],
    )
    for name, extra in native_modules()
]

setup(
    name="kbroker",
    packages=[],
    ext_modules=cythonize(
        extensions,
        include_path=[pxd_include_tree()],
        language_level=3,
        compiler_directives={
            "boundscheck": False,
            "wraparound": False,
            "cdivision": True,
            "initializedcheck": False,
            "embedsignature": True,
        },
        build_dir=os.path.join("build", "setup-cython"),
    ),
)
