"""The compiled host loops (gpu_neighbors/text/_compiled.pyx and gpu_neighbors/core/_compiled.pyx),
built by Cython at install where a C compiler is found. The extensions are optional: without a
compiler the install goes on and the package runs its numpy and torch passes, which give the same
answers (`gpu_neighbors.text.compiled`, `gpu_neighbors.core.compiled`).
Everything else about the package is in pyproject.toml."""
from Cython.Build import cythonize
from setuptools import Extension, setup

# -ffp-contract=off: no fused multiply-adds, so the weights are numpy's bits on every target.
extensions = cythonize([Extension(f"gpu_neighbors.{layer}._compiled", [f"gpu_neighbors/{layer}/_compiled.pyx"],
                                  extra_compile_args=["-O3", "-ffp-contract=off"]) for layer in ("text", "core")],
                       compiler_directives={"language_level": "3"}, quiet=True)
for extension in extensions:
    extension.optional = True  # a failed build warns and leaves the numpy passes (cythonize drops the flag)
setup(ext_modules=extensions)
