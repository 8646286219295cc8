"""Build arrayport's one compiled extension, arrayport._core (Cython)."""

from Cython.Build import cythonize
from setuptools import Extension, setup

core = Extension(
    "arrayport._core",
    sources=["src/arrayport/_core.pyx"],
    include_dirs=["src/arrayport/include", "src/arrayport"],
    extra_compile_args=["-O2", "-std=c11"],
)

setup(ext_modules=cythonize([core], compiler_directives={"language_level": "3"}))
