"""Build fastop's Cython extensions.

Every ``.pyx`` under ``src/fastop`` becomes an extension module of the same dotted
name; extra C sources are declared in the .pyx itself (``# distutils: sources = ...``).
Compiler directives are set once, here.

Environment switches:
  FASTOP_DEBUG=1     bounds/wraparound/initializedcheck on, -O0 -g: a debug build.
  FASTOP_ONLY=a,b    build only the extensions whose dotted names contain one of these
                     substrings (used while developing one module).
  FASTOP_CFLAGS=...  extra compiler flags (e.g. ``-march=native``).
"""
import os
import sys
from pathlib import Path

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).parent
SRC = ROOT / "src"
DEBUG = os.environ.get("FASTOP_DEBUG") == "1"

COMPILER_DIRECTIVES = {
    "language_level": 3,
    "boundscheck": DEBUG,
    "wraparound": DEBUG,
    "initializedcheck": DEBUG,
    "cdivision": not DEBUG,
    "nonecheck": DEBUG,
    "embedsignature": True,
    "freethreading_compatible": False,
}

if DEBUG:
    CFLAGS = ["-O0", "-g", "-pthread", "-UNDEBUG"]
else:
    CFLAGS = ["-O3", "-pthread", "-fno-math-errno", "-fno-trapping-math"]
CFLAGS += ["-Wno-unused-function", "-Wno-unreachable-code"]
CFLAGS += os.environ.get("FASTOP_CFLAGS", "").split()
LDFLAGS = ["-pthread"]     # fastop's thread pool (parallel_impl.c); there is no OpenMP


def find_extensions() -> list[Extension]:
    only = [s for s in os.environ.get("FASTOP_ONLY", "").split(",") if s]
    exts = []
    for pyx in sorted(SRC.rglob("*.pyx")):
        rel = pyx.relative_to(SRC).with_suffix("")
        name = ".".join(rel.parts)
        if only and not any(s in name for s in only):
            continue
        exts.append(
            Extension(
                name,
                [str(pyx.relative_to(ROOT))],
                include_dirs=[str(pyx.parent), str(SRC / "fastop" / "_core"),
                              numpy.get_include()],
                define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
                extra_compile_args=CFLAGS,
                extra_link_args=LDFLAGS,
                libraries=["m"],
                # numpy's npymath (float16 conversions), for the modules that link it
                library_dirs=[str(Path(numpy.get_include()).parent / "lib")],
            )
        )
    return exts


class ParallelBuildExt(build_ext):
    """Compile extension modules in parallel (one job per core)."""

    def finalize_options(self):
        super().finalize_options()
        if self.parallel is None:
            self.parallel = os.cpu_count() or 1


setup(
    ext_modules=cythonize(
        find_extensions(),
        compiler_directives=COMPILER_DIRECTIVES,
        nthreads=0 if sys.platform == "win32" else (os.cpu_count() or 1),
        annotate=False,
    ),
    cmdclass={"build_ext": ParallelBuildExt},
    zip_safe=False,
)
