"""broker.addresses.parse_bootstrap: the one set of bootstrap rules the client, the Spark
source's options and the log handler check a server list by."""

import pytest

from broker.addresses import parse_bootstrap


@pytest.mark.parametrize(
    "text, parsed",
    [
        ("127.0.0.1:9092", [("127.0.0.1", 9092)]),
        (" a:1 , b:2 ", [("a", 1), ("b", 2)]),
        ("[::1]:9092", [("::1", 9092)]),
        ("h:1,,", [("h", 1)]),
    ],
)
def test_lists(text, parsed):
    assert parse_bootstrap(text) == parsed


@pytest.mark.parametrize(
    "text, message",
    [
        ("127.0.0.1", "bootstrap server '127.0.0.1' is not HOST:PORT"),
        (":9092", "bootstrap server ':9092' is not HOST:PORT"),
        ("a:1,h:x", "bootstrap server 'h:x' is not HOST:PORT"),
        ("", "no bootstrap server given"),
        (" , ", "no bootstrap server given"),
    ],
)
def test_refused_with_the_entry_named(text, message):
    with pytest.raises(ValueError) as e:
        parse_bootstrap(text)
    assert str(e.value) == message


def test_the_client_and_the_spark_options_use_it():
    import broker.client
    from broker.spark import options

    assert broker.client.parse_bootstrap is parse_bootstrap
    assert options.parse_bootstrap is parse_bootstrap
