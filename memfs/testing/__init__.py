"""Test harness modules (moving to tests/support/)."""
