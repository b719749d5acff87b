//! Store adapters: PostgreSQL and the in-memory reference model.
