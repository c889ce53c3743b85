//! observe
