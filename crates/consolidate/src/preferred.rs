//! Linux's preferred-CPU mask: `/sys/devices/system/cpu/preferred`, which
//! kernels with steal-time CPU folding (the "steal governor") write when
//! the host takes too much of some vCPUs. The CPUs it leaves out should
//! be avoided for now; the kernel's own scheduler folds its normal tasks
//! off them. Consolidation respects it by the order in which vCPUs join
//! the active set: the preferred ones first, the others only when the
//! program needs more vCPUs than the kernel prefers.

use std::path::Path;
use vsched_model::cpulist::parse_cpu_list;

/// Where the kernel publishes the mask (absent on kernels without it).
pub const KERNEL_FILE: &str = "/sys/devices/system/cpu/preferred";

/// The preferred CPUs listed in `path`; None where the file is absent,
/// unreadable or malformed (no preference is then known), or empty (a
/// mask that prefers nothing gives no order).
pub fn read(path: &Path) -> Option<Vec<u32>> {
    let text = std::fs::read_to_string(path).ok()?;
    parse_cpu_list(&text).ok().filter(|cpus| !cpus.is_empty())
}

/// `cpus` in the order they join the active set: those in `preferred`
/// first, then the rest, each part in numeric order. Without a
/// preference, numeric order.
pub fn join_order(cpus: &[u32], preferred: Option<&[u32]>) -> Vec<u32> {
    let mut sorted = cpus.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let Some(preferred) = preferred else {
        return sorted;
    };
    let (mut order, rest): (Vec<u32>, Vec<u32>) =
        sorted.into_iter().partition(|c| preferred.contains(c));
    order.extend(rest);
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preferred_vcpus_join_first_each_part_in_numeric_order() {
        assert_eq!(join_order(&[3, 0, 2, 1], Some(&[1, 3])), [1, 3, 0, 2]);
        assert_eq!(join_order(&[3, 0, 2, 1], None), [0, 1, 2, 3]);
        // A preference that names none of vsched's CPUs changes nothing.
        assert_eq!(join_order(&[0, 1], Some(&[5])), [0, 1]);
    }

    #[test]
    fn the_file_is_read_when_present_and_ignored_when_absent_empty_or_malformed() {
        let dir = std::env::temp_dir().join(format!("vsched-preferred-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("preferred");
        assert_eq!(read(&file), None, "absent");
        std::fs::write(&file, "0-1,3\n").unwrap();
        assert_eq!(read(&file), Some(vec![0, 1, 3]));
        std::fs::write(&file, "\n").unwrap();
        assert_eq!(read(&file), None, "empty");
        std::fs::write(&file, "0-x\n").unwrap();
        assert_eq!(read(&file), None, "malformed");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
