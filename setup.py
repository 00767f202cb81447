"""The optional C extensions; everything else about the package is in pyproject.toml. Each is
`optional=True`: on a machine without a C compiler its build fails and pip installs the package
without it (its pure-Python twins serve).

- leaseq.client._wire_arrow_c (client/_wire_arrow_c.c): the Arrow bulk path's wire bytes to and
  from Arrow buffers (client/_wire_arrow.py holds the twins; tests/client/test_wire_arrow.py).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "leaseq.client._wire_arrow_c", sources=["client/_wire_arrow_c.c"], optional=True
        ),
    ]
)
