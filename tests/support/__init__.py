"""Test support: fixtures that start real local services. Each integration test starts its own."""
