//! The in-process transport for deterministic protocol tests.
