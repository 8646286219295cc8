"""Build arrayport's one compiled extension, arrayport._core (Cython)."""

from glob import glob

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup

core = Extension(
    "arrayport._core",
    sources=["src/arrayport/_core.pyx"],
    # NumPy's headers: the ndarray fast paths (_csrc/numpy_arrays.h) use NumPy's C API,
    # loaded at run time only when arrayport meets NumPy. Built against NumPy 2, the
    # extension runs on NumPy >= 1.26 as well.
    include_dirs=["src/arrayport/include", "src/arrayport", numpy.get_include()],
    extra_compile_args=["-O2", "-std=c11"],
    # The C the core includes (its own, the public headers, the device kernels' parameter
    # structs its planner fills): a change to any of them recompiles the core (setuptools
    # otherwise only compares _core.c's date with the object's).
    depends=sorted(glob("src/arrayport/_csrc/*.h") + glob("src/arrayport/include/arrayport/*.h")
                   + glob("src/arrayport/gpu/kernels/*.h")),
)

setup(ext_modules=cythonize([core], compiler_directives={"language_level": "3"}))
