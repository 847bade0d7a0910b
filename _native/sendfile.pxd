# cython: language_level=3
"""sendfile(2) for the fetch path: file range -> non-blocking socket, no copy through Python."""

cdef Py_ssize_t c_sendfile(int out_fd, int in_fd, Py_ssize_t offset, Py_ssize_t count) except -1
