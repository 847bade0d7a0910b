#!/usr/bin/env python3
"""Can this machine use kernel TLS (kTLS) for a zero-copy TLS fetch path? Prints one line
per condition and exits 0 if all hold, 1 otherwise:

    .venv/bin/python bench/tls/ktls_probe.py

- the kernel offers the `tls` upper-layer protocol (TCP_ULP "tls" on a connected socket);
- Python's ssl exposes OP_ENABLE_KTLS (Python 3.12+), so OpenSSL is asked to hand the
  session keys to the kernel after the handshake;
- OpenSSL is 3.0 or newer (built with kTLS support on Linux distributions).
"""

from __future__ import annotations

import socket
import ssl
import sys

TCP_ULP = 31


def kernel_tls() -> tuple[bool, str]:
    try:
        with open("/proc/sys/net/ipv4/tcp_available_ulp") as f:
            ulps = f.read().split()
    except OSError:
        ulps = []
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    client = socket.create_connection(server.getsockname())
    try:
        client.setsockopt(socket.SOL_TCP, TCP_ULP, b"tls")
        return True, f"kernel: TCP_ULP tls accepted (available ULPs: {' '.join(ulps) or '?'})"
    except OSError as exc:
        return False, f"kernel: TCP_ULP tls refused ({exc.strerror}); available ULPs: {' '.join(ulps) or 'none'}"
    finally:
        client.close()
        server.close()


def main() -> int:
    ok_kernel, kernel_line = kernel_tls()
    ok_python = hasattr(ssl, "OP_ENABLE_KTLS")
    ok_openssl = ssl.OPENSSL_VERSION_INFO >= (3, 0)
    print(kernel_line)
    print(f"python {sys.version.split()[0]}: ssl.OP_ENABLE_KTLS {'present' if ok_python else 'absent (3.12+)'}")
    print(f"openssl: {ssl.OPENSSL_VERSION}{'' if ok_openssl else ' (kTLS needs 3.0+)'}")
    usable = ok_kernel and ok_python and ok_openssl
    print(f"kTLS usable: {'yes' if usable else 'no'}")
    return 0 if usable else 1


if __name__ == "__main__":
    sys.exit(main())
