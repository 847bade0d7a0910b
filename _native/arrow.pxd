# cython: language_level=3
# broker._native.arrow has no C-level API for other modules: its entry point is the
# Python function batches_to_arrow(). This file exists so that every native module
# ships a .pxd (and so that cimport broker._native.arrow fails loudly, not obscurely).
