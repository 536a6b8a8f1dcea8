//! The run-time switches read from the environment (own binary: the
//! environment is read once per process).

#![cfg(not(loom))]

use lockmeter_locks::config;
use std::time::Duration;

#[test]
fn environment_switches_spinning_off_and_sets_the_handoff_bound() {
    std::env::set_var("LOCKMETER_SPIN", "0");
    std::env::set_var("LOCKMETER_HANDOFF_US", "250");
    assert!(!config::spinning_enabled(), "LOCKMETER_SPIN=0 turns spinning off");
    assert_eq!(config::handoff_bound(), Duration::from_micros(250));
    // The API overrides the environment at run time.
    config::set_spinning(true);
    assert!(config::spinning_enabled());
    config::set_handoff_bound(Duration::from_millis(3));
    assert_eq!(config::handoff_bound(), Duration::from_millis(3));
    // A bound past u64 nanoseconds (about 584 years) saturates; it must
    // not wrap to a short one.
    config::set_handoff_bound(Duration::from_micros(18_446_744_073_709_552));
    assert!(config::handoff_bound() > Duration::from_secs(500 * 365 * 24 * 3600), "{:?}", config::handoff_bound());
    // Read from a lookup of the caller's (the preload's, past a program's
    // own getenv): the same meanings, and unset means the defaults.
    config::read_environment_from(|name| match name {
        "LOCKMETER_SPIN" => Some("off".to_string()),
        "LOCKMETER_HANDOFF_US" => Some(" 40 ".to_string()),
        _ => None,
    });
    assert!(!config::spinning_enabled());
    assert_eq!(config::handoff_bound(), Duration::from_micros(40));
    // What the lookup does not have stays as it was.
    config::read_environment_from(|name| (name == "LOCKMETER_SPIN").then(|| "1".to_string()));
    assert!(config::spinning_enabled());
    assert_eq!(config::handoff_bound(), Duration::from_micros(40));
}
