//! Where an entry trap goes on a wait loop (see `engine::traps`).

/// Where a breakpoint catches a thread entering a wait loop but not one
/// leaving it: the instruction a waiting iteration runs right after the
/// loop's exit branch. A thread entering the wait passes it in its first
/// iteration; a thread resumed inside the loop reaches the exit branch, and
/// leaves, before it (unless it stopped exactly there). `order` is one
/// iteration's addresses in the order run; `branches` its conditional
/// branches with the way not taken. The exit branch is one whose other way
/// leaves the loop, preferably past its end, then before its start (a branch
/// to another part of the loop, e.g. a wider division, also leaves the
/// iteration's addresses but not the loop).
pub(super) fn trap_site(order: &[u64], branches: &[(u64, u64)]) -> u64 {
    if order.is_empty() {
        return 0; // a replay along a known path: its trap site is known too
    }
    let (lo, hi) = (
        order.iter().copied().min().unwrap_or(0),
        order.iter().copied().max().unwrap_or(0),
    );
    // Loops are usually left forwards (falling through the closing branch,
    // or jumping past the loop's end); an inner branch to an out-of-line
    // part of the loop tends to go back.
    let exits = branches.iter().filter(|(_, other)| !order.contains(other));
    let exit = exits
        .clone()
        .find(|&&(_, other)| other > hi)
        .or_else(|| exits.clone().find(|&&(_, other)| other < lo))
        .or_else(|| exits.clone().next());
    let Some(&(branch, _)) = exit else {
        return order.first().copied().unwrap_or(0);
    };
    let i = order.iter().position(|&a| a == branch).unwrap_or(0);
    order[(i + 1) % order.len()]
}

#[cfg(test)]
mod tests {
    use super::trap_site;

    #[test]
    fn the_trap_follows_the_branch_that_leaves_past_the_loop() {
        // One iteration: 0x10 load, 0x12 compare, 0x14 branch back to
        // 0x10, whose way not taken (0x16) is past the loop.
        let order = [0x10, 0x12, 0x14];
        assert_eq!(trap_site(&order, &[(0x14, 0x16)]), 0x10);
        // Sampled mid-loop (iteration order starts at 0x12): the trap still
        // goes on the instruction after the exit branch.
        assert_eq!(trap_site(&[0x12, 0x14, 0x10], &[(0x14, 0x16)]), 0x10);
    }

    #[test]
    fn an_inner_branch_to_an_out_of_line_part_is_not_the_exit() {
        // 0x20 branches back to an out-of-line slow path at 0x00 (not taken
        // this iteration); 0x2c is the closing branch, leaving to 0x2e.
        let order = [0x0e, 0x20, 0x22, 0x2c];
        let branches = [(0x20, 0x00), (0x2c, 0x2e)];
        assert_eq!(trap_site(&order, &branches), 0x0e);
        // With only a backward exit, that one is taken.
        assert_eq!(trap_site(&order, &[(0x20, 0x00)]), 0x22);
    }

    #[test]
    fn without_an_exit_the_trap_goes_on_the_first_instruction() {
        assert_eq!(trap_site(&[0x30, 0x32], &[]), 0x30);
        // A replay along a known path learns no order: no site.
        assert_eq!(trap_site(&[], &[]), 0);
    }
}
