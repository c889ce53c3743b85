//! Raw bindings to the system libfabric (filled in by the bindgen build).
