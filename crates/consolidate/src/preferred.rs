//! The kernel's preferred-CPU mask (read by vsched-sched's `preferred`,
//! where the scheduler uses it too) as consolidation's join order: the
//! preferred vCPUs join the active set first, the others only when the
//! program needs more vCPUs than the kernel prefers.

pub use vsched_sched::preferred::{read, KERNEL_FILE};

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
}
