"""Test doubles and helpers shared by several test modules (a test module never imports another)."""
