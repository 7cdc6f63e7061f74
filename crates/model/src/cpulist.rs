//! CPU list syntax as the kernel writes it (`0-3,8,10-11`), parsed and printed.

/// Why a CPU list could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed CPU list {input:?}: {reason} (expected e.g. \"0-3,6\")")]
pub struct CpuListError {
    pub input: String,
    pub reason: String,
}

/// Largest CPU id accepted; Linux's NR_CPUS tops out at 8192.
const MAX_CPU_ID: u32 = 8191;

/// Parses a kernel-style CPU list into a sorted, de-duplicated vector.
/// An empty string (as in an empty `/sys/.../offline` file) yields no CPUs.
pub fn parse_cpu_list(input: &str) -> Result<Vec<u32>, CpuListError> {
    let err = |reason: String| CpuListError {
        input: input.to_string(),
        reason,
    };
    let mut cpus = Vec::new();
    let trimmed = input.trim();
    if trimmed.is_empty() {
        return Ok(cpus);
    }
    for part in trimmed.split(',') {
        let part = part.trim();
        if part.is_empty() {
            return Err(err("empty element".into()));
        }
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (parse_id(a).map_err(&err)?, parse_id(b).map_err(&err)?),
            None => {
                let id = parse_id(part).map_err(&err)?;
                (id, id)
            }
        };
        if lo > hi {
            return Err(err(format!("range {part:?} runs backwards")));
        }
        cpus.extend(lo..=hi);
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

fn parse_id(s: &str) -> Result<u32, String> {
    let s = s.trim();
    let id: u32 = s
        .parse()
        .map_err(|_| format!("{s:?} is not a CPU number"))?;
    if id > MAX_CPU_ID {
        return Err(format!(
            "CPU {id} is beyond the largest possible id {MAX_CPU_ID}"
        ));
    }
    Ok(id)
}

/// Formats CPUs in the compact kernel syntax (`0-3,6`).
pub fn format_cpu_list(cpus: &[u32]) -> String {
    let mut sorted = cpus.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut out = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let start = sorted[i];
        let mut end = start;
        while i + 1 < sorted.len() && sorted[i + 1] == end + 1 {
            i += 1;
            end = sorted[i];
        }
        out.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        i += 1;
    }
    out.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ranges_and_singles() {
        assert_eq!(parse_cpu_list("0-3,6").unwrap(), vec![0, 1, 2, 3, 6]);
        assert_eq!(parse_cpu_list(" 5 , 1-2 ,1").unwrap(), vec![1, 2, 5]);
        assert_eq!(parse_cpu_list("").unwrap(), Vec::<u32>::new());
        assert_eq!(parse_cpu_list("7\n").unwrap(), vec![7]);
    }

    #[test]
    fn rejects_malformed() {
        for bad in ["a", "1,,2", "3-1", "-1", "1-", "0-99999", "1.5", ","] {
            let e = parse_cpu_list(bad).unwrap_err();
            assert!(e.to_string().contains("malformed CPU list"), "{bad}: {e}");
        }
    }

    #[test]
    fn round_trips() {
        for s in ["0-3,6", "1", "0,2,4", "0-1,3-5,9"] {
            assert_eq!(format_cpu_list(&parse_cpu_list(s).unwrap()), s);
        }
    }
}
