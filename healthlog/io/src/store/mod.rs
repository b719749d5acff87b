//! The store: the journal of deliveries and the vitrine of hourly objects, in one SQLite file.
//! `sqlite.rs` is the only file in the project that names the SQL library.

pub mod sqlite;

pub use sqlite::{
    CatalogRow, DeliveryRow, FoldTx, JournalEntry, MigrateReport, NewDelivery, ObjectRow, Store, StoreError,
    StoreOptions,
};
