"""Shared pytest configuration."""

from hypothesis import HealthCheck, settings

settings.register_profile("ci", deadline=None, suppress_health_check=[HealthCheck.too_slow], max_examples=100)
settings.load_profile("ci")
