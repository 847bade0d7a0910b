"""Settings shared by the whole test suite (keep this minimal and general)."""
import signal

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

# A suite started in the background by a non-interactive shell (`make test &` in a script)
# inherits SIGINT ignored, and so would every process the tests start: a test sending
# Ctrl-C to a command it started would wait for nothing. Python's own handler again (the
# processes the tests start then get SIGINT's default disposition).
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
