import pytest

from tests.support.certs import make_certs


@pytest.fixture(scope="session")
def certs(tmp_path_factory):
    """A CA, a broker certificate and client certificates (made once per session)."""
    return make_certs(tmp_path_factory.mktemp("certs"))
