"""Slow reference implementations that check the library's compiled code on small cases (DESIGN.md: one
implementation of each algorithm runs in src/; its reference lives here)."""
