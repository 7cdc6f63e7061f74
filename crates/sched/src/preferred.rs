//! Linux's preferred-CPU mask: `/sys/devices/system/cpu/preferred`, which
//! kernels with steal-time CPU folding (the "steal governor") write when
//! the host takes too much of some vCPUs. The CPUs it leaves out should
//! be avoided for now; the kernel's own scheduler folds its normal tasks
//! off them, but not the tasks a sched_ext scheduler runs. Both forms of
//! consolidation respect it: the scheduler parks the vCPUs it leaves out
//! first (VcpuModel::preferred), `vsched run --consolidate` lets the
//! preferred ones join its active set first (vsched-consolidate).

use std::path::Path;
use vsched_model::cpulist::parse_cpu_list;

/// Where the kernel publishes the mask (absent on kernels without it).
pub const KERNEL_FILE: &str = "/sys/devices/system/cpu/preferred";

/// The preferred CPUs the running kernel lists ([`read`] of
/// [`KERNEL_FILE`]).
pub fn read_kernels() -> Option<Vec<u32>> {
    read(Path::new(KERNEL_FILE))
}

/// The preferred CPUs listed in `path`; None where the file is absent,
/// unreadable or malformed (no preference is then known), or empty (a
/// mask that prefers nothing gives no order).
pub fn read(path: &Path) -> Option<Vec<u32>> {
    let text = std::fs::read_to_string(path).ok()?;
    parse_cpu_list(&text).ok().filter(|cpus| !cpus.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

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
