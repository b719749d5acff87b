//! placeholder, being written
pub struct Core;
