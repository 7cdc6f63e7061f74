//! The cases of `vsched bench sync`: one per argument of the C program.

use serde::Serialize;

#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Case {
    Mutex,
    Barrier,
    CondBroadcast,
    CondSignal,
    Rwlock,
    SpinRing,
    Spinlock,
}

impl Case {
    /// Every case, in the order they run and are reported.
    pub const ALL: [Case; 7] = [
        Case::Mutex,
        Case::Barrier,
        Case::CondBroadcast,
        Case::CondSignal,
        Case::Rwlock,
        Case::SpinRing,
        Case::Spinlock,
    ];

    /// The name the C program, the command line and the output use.
    pub fn name(self) -> &'static str {
        match self {
            Case::Mutex => "mutex",
            Case::Barrier => "barrier",
            Case::CondBroadcast => "cond-broadcast",
            Case::CondSignal => "cond-signal",
            Case::Rwlock => "rwlock",
            Case::SpinRing => "spin-ring",
            Case::Spinlock => "spinlock",
        }
    }

    /// The cases `only` names, in the order of ALL; every case if it names none.
    pub fn selected(only: &[Case]) -> Vec<Case> {
        Case::ALL
            .into_iter()
            .filter(|c| only.is_empty() || only.contains(c))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_the_json() {
        for case in Case::ALL {
            let json = serde_json::to_string(&case).unwrap();
            assert_eq!(json, format!("\"{}\"", case.name()));
        }
    }

    #[test]
    fn selection_keeps_the_reporting_order() {
        assert_eq!(Case::selected(&[]), Case::ALL);
        assert_eq!(
            Case::selected(&[Case::Spinlock, Case::Barrier]),
            [Case::Barrier, Case::Spinlock]
        );
    }
}
