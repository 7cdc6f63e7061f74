//! docs/spin.md states the detector's defaults as the library has them
//! (vsched_spin::config and detector), so that the docs cannot drift
//! silently: the "Settings and their defaults" table lists every flag with
//! a default, and any "`--flag` ... default VALUE" in the prose agrees.

use vsched_spin::config::{self, FlagDuration};
use vsched_spin::detector;

const DOC: &str = include_str!("../../../docs/spin.md");

/// Every command-line flag with a default, and that default as the command
/// line prints it.
fn library_defaults() -> Vec<(&'static str, String)> {
    let d = |d| FlagDuration(d).to_string();
    vec![
        ("--period", d(config::PERIOD)),
        ("--idle-period", d(config::IDLE_PERIOD)),
        ("--window", detector::WINDOW.to_string()),
        ("--repeats", detector::REPEATS.to_string()),
        ("--pauses", detector::PAUSES.to_string()),
        ("--lease", d(config::LEASE)),
        ("--suspect-period", d(config::SUSPECT_PERIOD)),
        ("--slice", d(config::SLICE)),
        ("--tick", d(config::TICK)),
        ("--watch-period", d(config::WATCH_PERIOD)),
        ("--watched-lease", d(config::WATCHED_LEASE)),
    ]
}

/// A value as the docs write it ("500 µs", "10 ms", "4") spelt as the
/// command line does ("500us").
fn as_flag_value(text: &str) -> String {
    text.trim().replace(' ', "").replace('µ', "u")
}

/// The rows of the table under "## Settings and their defaults":
/// (flag, default).
fn table() -> Vec<(String, String)> {
    let section = DOC
        .split("\n## Settings and their defaults\n")
        .nth(1)
        .expect("docs/spin.md has a section \"## Settings and their defaults\"");
    let section = section.split("\n## ").next().unwrap_or_default();
    section
        .lines()
        .filter_map(|line| {
            let cells: Vec<&str> = line.trim().strip_prefix('|')?.split('|').collect();
            let flag = cells.first()?.trim().strip_prefix('`')?.strip_suffix('`')?;
            let value = cells.get(1)?;
            flag.starts_with("--")
                .then(|| (flag.to_string(), as_flag_value(value)))
        })
        .collect()
}

/// Every "`--flag` ... default VALUE" in the prose: the words after a flag,
/// up to the next backtick, that say "default".
fn prose_defaults() -> Vec<(String, String)> {
    let mut found = vec![];
    for piece in DOC.split("`--").skip(1) {
        let Some((name, after)) = piece.split_once('`') else {
            continue;
        };
        let near: String = after.chars().take_while(|&c| c != '`').take(40).collect();
        let Some(value) = near.split("default ").nth(1) else {
            continue;
        };
        let value = value.split([')', ',', ';']).next().unwrap_or_default();
        found.push((format!("--{name}"), as_flag_value(value)));
    }
    found
}

#[test]
fn the_table_lists_every_default_as_the_library_has_it() {
    let mut expected: Vec<(String, String)> = library_defaults()
        .into_iter()
        .map(|(flag, value)| (flag.to_string(), value))
        .collect();
    let mut documented = table();
    expected.sort();
    documented.sort();
    assert_eq!(
        documented, expected,
        "docs/spin.md's defaults table (left) is not the library's (right)"
    );
}

#[test]
fn the_prose_states_the_same_defaults() {
    let expected = library_defaults();
    let stated = prose_defaults();
    // The prose does state defaults (the check is not vacuous).
    assert!(stated.len() >= 5, "{stated:?}");
    for (flag, value) in stated {
        let (_, want) = expected
            .iter()
            .find(|(f, _)| *f == flag)
            .unwrap_or_else(|| panic!("docs/spin.md states a default for {flag}, which has none"));
        assert_eq!(&value, want, "docs/spin.md: the default of {flag}");
    }
}

#[test]
fn doc_values_are_read_as_the_command_line_spells_them() {
    assert_eq!(as_flag_value(" 500 µs "), "500us");
    assert_eq!(as_flag_value("10 ms"), "10ms");
    assert_eq!(as_flag_value("4"), "4");
}
