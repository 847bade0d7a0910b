"""Test support: real processes (broker, ZooKeeper) started by the tests themselves,
free loopback ports, and the CI rule that a missing dependency fails instead of skipping."""
