"""Magnetar's transaction-key registry (seed 000; docs/transaction-keys.md)."""
