# cython: language_level=3
"""Zero-copy file -> socket transfer with sendfile(2).

`sendfile(out_fd, in_fd, offset, count)` sends as much of [offset, offset + count) as the
socket takes without blocking and returns the number of bytes sent: `count` when done,
fewer (possibly 0) when the socket's buffer filled up (EAGAIN). The caller then waits
for the socket to become writable (asyncio: loop.add_writer) and calls again with the
remaining range. Interrupted calls (EINTR) are retried. Other errors raise OSError.
A file shorter than the range raises EOFError (the segment was truncated under us).

The GIL is released during each sendfile(2) call.
"""
from libc.errno cimport errno, EINTR, EAGAIN

cdef extern from "errno.h":
    int EWOULDBLOCK
from libc.string cimport strerror

cdef extern from "sys/sendfile.h" nogil:
    ssize_t c_sendfile_sys "sendfile" (int out_fd, int in_fd, long *offset, size_t count)


cdef Py_ssize_t c_sendfile(int out_fd, int in_fd, Py_ssize_t offset, Py_ssize_t count) except -1:
    cdef long off = offset
    cdef Py_ssize_t sent = 0
    cdef ssize_t n
    cdef int err
    if offset < 0 or count < 0:
        raise ValueError("negative offset or count")
    while sent < count:
        with nogil:
            n = c_sendfile_sys(out_fd, in_fd, &off, <size_t>(count - sent))
            err = errno
        if n > 0:
            sent += n
            continue
        if n == 0:
            raise EOFError(f"file ends before offset {off} (wanted {count - sent} more bytes)")
        if err == EINTR:
            continue
        if err == EAGAIN or err == EWOULDBLOCK:
            break
        raise OSError(err, strerror(err).decode())
    return sent


def sendfile(int out_fd, int in_fd, Py_ssize_t offset, Py_ssize_t count):
    """Sends file bytes [offset, offset + count) to out_fd without blocking; returns how
    many were sent (fewer than count when the socket would block)."""
    return c_sendfile(out_fd, in_fd, offset, count)
