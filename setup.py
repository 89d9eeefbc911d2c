"""The compiled host loops (gpu_neighbors/text/_compiled.pyx), built by Cython at install where
a C compiler is found. The extension is optional: without a compiler the install goes on and
the package runs its numpy passes, which give the same answers (`gpu_neighbors.text.compiled`).
Everything else about the package is in pyproject.toml."""
from Cython.Build import cythonize
from setuptools import Extension, setup

# -ffp-contract=off: no fused multiply-adds, so the weights are numpy's bits on every target.
extensions = cythonize([Extension("gpu_neighbors.text._compiled", ["gpu_neighbors/text/_compiled.pyx"],
                                  extra_compile_args=["-O3", "-ffp-contract=off"])],
                       compiler_directives={"language_level": "3"}, quiet=True)
for extension in extensions:
    extension.optional = True  # a failed build warns and leaves the numpy passes (cythonize drops the flag)
setup(ext_modules=extensions)
