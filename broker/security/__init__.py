"""Security: TLS contexts and principals (tls.py), SASL mechanisms (sasl.py and the
mechanism modules), the ACL authorizer (authorizer.py).

Below the server and the cluster: it imports neither (tests/unit/test_layers.py), so the
broker's listeners, its inter-broker channels and the project's own client share it.
"""
