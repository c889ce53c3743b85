//! The topology of a run: the XML of the SAT report's Figure 11.

#[derive(Debug, thiserror::Error)]
#[error("topology: {0}")]
pub struct TopologyError(pub String);
