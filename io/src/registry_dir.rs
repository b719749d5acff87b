//! Reading a registry folder from disk (placeholder, being written).
