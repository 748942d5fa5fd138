"""Shared fixtures for tether's own tests."""
