# cython: language_level=3
# broker._native.produce: Produce v3-12 request decoding and response encoding
# (produce.pyx); no C-level API for other modules.
