//! The libfabric transport.
