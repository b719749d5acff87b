//! healthlog's edge (HEALTHLOG.md "Layout"): the SQLite store ([`store::sqlite`], the only folder
//! naming the SQL library), the content-addressed [`archive`], taking deliveries into the
//! [`journal`], the [`fold`] worker, the HTTP receiver ([`serve`], with its [`intake`] spool),
//! `healthlog status` ([`status`]), and the pieces of the `healthlog` binary ([`cli`]).

pub mod archive;
pub mod cli;
pub mod fold;
pub mod intake;
pub mod journal;
pub mod serve;
pub mod status;
pub mod store;
