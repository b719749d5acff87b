//! The store: the journal of deliveries and the vitrine of hourly objects and entities, in one
//! SQLite file.
//! The `sqlite/` folder is the only place in healthlog that names the SQL library.

pub mod sqlite;

pub use sqlite::{
    AutomationRow, CatalogRow, DeliveryRow, EntityRow, FoldRecord, FoldTx, HaeHeaders, JournalEntry,
    MigrateReport, NewDelivery, NewestRow, ObjectCoordinates, ObjectRow, ObjectStamp, Store, StoreError,
    StoreOptions,
};
