"""The optional C extension (native/speedups.c, see native/__init__.py); everything else about the
package is in pyproject.toml. `optional=True`: on a machine without a C compiler the build of the
extension fails and pip installs the package without it (the pure-Python twins serve)."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("leaseq._native.speedups", sources=["native/speedups.c"], optional=True),
    ]
)
