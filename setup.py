"""The optional C extensions; everything else about the package is in pyproject.toml. Each is
`optional=True`: on a machine without a C compiler its build fails and pip installs the package
without it (its pure-Python twins serve).

- leaseq.client._wire_arrow_c (client/_wire_arrow_c.c): the Arrow bulk path's wire bytes to and
  from Arrow buffers (client/_wire_arrow.py holds the twins; tests/client/test_wire_arrow.py).
- leaseq._native.speedups (native/speedups.c): the server's per-message loops (received messages
  as wire bytes, receipts, plain sends; the twins are in server/convert.py and server/receipts.py;
  tests/service/test_native_encoding.py). See native/__init__.py.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("leaseq.client._wire_arrow_c", sources=["client/_wire_arrow_c.c"], optional=True),
        Extension("leaseq._native.speedups", sources=["native/speedups.c"], optional=True),
    ]
)
