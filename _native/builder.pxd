# cython: language_level=3
"""The batch builder (builder.pyx); its state is private: use the Python API
(BatchBuilder)."""
