//! Creating a private PostgreSQL database per test (placeholder, being written).
