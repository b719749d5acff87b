//! The parse status of a delivery and the one predicate that says which failures leave it
//! pending (spec: "Учёт частично разобранной доставки").
//!
//! ```text
//! pending  not yet looked at by this parser, or looked at but the work was not done
//! parsed   everything in the body was parsed
//! partial  the covered sections were parsed; uncovered sections remain
//! failed   parsing or writing failed; no points of it were written
//! ```
//! The uncovered list is the source of truth; the status derives from it and from failure,
//! in the order failed → partial → parsed.

use std::fmt;
use std::str::FromStr;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ParseStatus {
    Pending,
    Parsed,
    Partial,
    Failed,
}

impl ParseStatus {
    pub const ALL: [ParseStatus; 4] = [Self::Pending, Self::Parsed, Self::Partial, Self::Failed];

    /// The status of a finished fold: failure first, then a non-empty uncovered list.
    pub fn derive(failed: bool, uncovered_is_empty: bool) -> Self {
        if failed {
            Self::Failed
        } else if !uncovered_is_empty {
            Self::Partial
        } else {
            Self::Parsed
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Parsed => "parsed",
            Self::Partial => "partial",
            Self::Failed => "failed",
        }
    }
}

impl fmt::Display for ParseStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A status name that is not one of the four.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown parse status (expected pending, parsed, partial or failed)")]
pub struct UnknownStatus;

impl FromStr for ParseStatus {
    type Err = UnknownStatus;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or(UnknownStatus)
    }
}

/// How a fold attempt ended when it did not succeed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureClass {
    /// Circumstances: the database stayed busy past the retries, or the work was cancelled
    /// from outside. Not done, not impossible: the delivery stays pending.
    Circumstance,
    /// The body or its writing failed; the delivery becomes failed.
    Failure,
}

impl FailureClass {
    /// The one predicate both the outcome writer and the counters ask.
    pub fn leaves_pending(self) -> bool {
        matches!(self, Self::Circumstance)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failure_beats_partial_beats_parsed() {
        assert_eq!(ParseStatus::derive(true, false), ParseStatus::Failed);
        assert_eq!(ParseStatus::derive(false, false), ParseStatus::Partial);
        assert_eq!(ParseStatus::derive(false, true), ParseStatus::Parsed);
        for s in ParseStatus::ALL {
            assert_eq!(s.as_str().parse::<ParseStatus>(), Ok(s));
        }
        assert!(FailureClass::Circumstance.leaves_pending());
        assert!(!FailureClass::Failure.leaves_pending());
    }
}
