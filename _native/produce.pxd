# cython: language_level=3
# broker._native.produce: Produce request decoding and response encoding (the versions
# of include/kb_messages.h: produce.pyx); no C-level API for other modules.
