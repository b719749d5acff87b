//! Typed gaps: the one closed vocabulary of reasons the system itself gives when it has no
//! current reading for a point (sensor paradigm, "Gaps are typed, not absent").
//!
//! Owns: [`GapReason`], its stable string forms (they are stored in `control_event` payloads,
//! in observation rows' `reason` and in published transitions, so a string never changes once
//! released; a new reason is a new variant), and parsing them back.
//!
//! Who writes which reason:
//! - the watchdog (the core's watchdog part, `parts/watchdog.rs`): [`GapReason::Freshness`] when a point's
//!   freshness deadline passes without a current reading, and [`GapReason::HeartbeatMissed`]
//!   when the point declares a heartbeat (`heartbeat_s`) and it is the heartbeat that was
//!   missed;
//! - the driver library (`sentinel-driver`, `gap_observation`): [`GapReason::SourceDown`]
//!   (the device or upstream API did not answer), [`GapReason::Missing`] (it answered without
//!   a value) and [`GapReason::LateDropped`] (the driver discarded readings, for example its
//!   disk queue dropped them past its bound), each as an observation with quality
//!   `unavailable` and a null value;
//! - derived points (`derived.rs`): [`GapReason::InputNotLive`] when the triggering row
//!   (or a pair op's input) is not `live`, [`GapReason::Missing`] when there is nothing to
//!   fold.
//!
//! A reason a third-party driver writes itself stays free text (the driver is its author); the
//! reasons the core assigns to `bad` rows at stages 6–7 (`out_of_range`, …) are validation
//! failures of a reading that exists, not gaps, and live with stages 6–8 (`decide.rs`).

use std::fmt;

/// Why there is no current reading, when the system says so.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum GapReason {
    /// The source answered, but without a usable value (`missing`).
    Missing,
    /// Readings existed but were discarded before they reached the log: a bounded queue
    /// dropped them, or they arrived too late to keep (`late_dropped`).
    LateDropped,
    /// The source did not answer: device offline, poll timed out, API down (`source_down`).
    SourceDown,
    /// A derived point's input is not `live`, so its value cannot be trusted
    /// (`input_not_live`).
    InputNotLive,
    /// The point's freshness deadline passed with no current reading (`freshness`).
    Freshness,
    /// A report-on-change point's heartbeat deadline passed: it has not said "still the same"
    /// within its declared heartbeat interval (`heartbeat_missed`).
    HeartbeatMissed,
}

impl GapReason {
    /// Every reason, in declaration order.
    pub const ALL: [GapReason; 6] = [
        GapReason::Missing,
        GapReason::LateDropped,
        GapReason::SourceDown,
        GapReason::InputNotLive,
        GapReason::Freshness,
        GapReason::HeartbeatMissed,
    ];

    /// The stable string form.
    pub const fn as_str(self) -> &'static str {
        match self {
            GapReason::Missing => "missing",
            GapReason::LateDropped => "late_dropped",
            GapReason::SourceDown => "source_down",
            GapReason::InputNotLive => "input_not_live",
            GapReason::Freshness => "freshness",
            GapReason::HeartbeatMissed => "heartbeat_missed",
        }
    }

    /// The reason a string form names, if it is one of the vocabulary.
    pub fn parse(text: &str) -> Option<GapReason> {
        GapReason::ALL.into_iter().find(|r| r.as_str() == text)
    }
}

impl fmt::Display for GapReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The string forms are stored; this pins them so a rename cannot slip through.
    #[test]
    fn string_forms_are_stable() {
        let forms: Vec<&str> = GapReason::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(
            forms,
            [
                "missing",
                "late_dropped",
                "source_down",
                "input_not_live",
                "freshness",
                "heartbeat_missed"
            ]
        );
    }

    #[test]
    fn every_reason_parses_back_and_nothing_else_does() {
        for reason in GapReason::ALL {
            assert_eq!(GapReason::parse(reason.as_str()), Some(reason));
            assert_eq!(reason.to_string(), reason.as_str());
        }
        for text in ["", "Missing", "device_offline", "source down", "freshness "] {
            assert_eq!(GapReason::parse(text), None, "{text:?}");
        }
    }
}
