//! placeholder, being written
#[derive(Clone, Debug, Default)]
pub struct Metrics;
