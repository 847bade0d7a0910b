"""Settings shared by the whole test suite (keep this minimal and general)."""
from hypothesis import HealthCheck, settings

# No timing assertions anywhere: hypothesis' per-example deadline is one, so it is off.
# Speed is measured by the benchmarks, not by the tests.
settings.register_profile(
    "kbroker",
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("kbroker")
