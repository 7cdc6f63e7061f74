//! What a guest kernel's panic says about itself, read from its console:
//! the reason and instruction, and whether it is the emulator's known
//! defect rather than a fault of the kernel or of anything the guest ran.
//!
//! The defect (docs/lab.md, "The emulator"): the kernel changes its own
//! code while it runs (static keys, static calls). It first writes a
//! breakpoint (int3, `cc`) over the instruction's first byte, then the
//! rest, then the new first byte, and makes every CPU serialize before it
//! calls the change done; a CPU that meets the breakpoint meanwhile is
//! sent on by the kernel's breakpoint handler. Real CPUs cannot execute
//! the breakpoint after that. QEMU's multi-threaded emulator now and then
//! does, from code it translated while the breakpoint was there: the trap
//! then finds no patch under way, and the kernel dies of "Oops: int3" at
//! the byte after a breakpoint its memory no longer holds.

/// Lines of a long report kept from its start (the reason, the faulting
/// instruction and its code, the registers and the first callers) and
/// from its end (the panic's own line, which follows the call trace).
const REPORT_HEAD_LINES: usize = 30;
const REPORT_TAIL_LINES: usize = 6;

/// Where the report of the failure that panicked the kernel begins in
/// `console`: the last oops (or general protection fault) before the
/// panic's line, from the `BUG:` line that names it if one does; else the
/// last `BUG:`; else the panic's line itself (a panic called directly, as
/// sysrq's). An earlier, survived failure is left out: its lines would
/// push the fatal one into the part a long report leaves out.
fn report_start(console: &[String]) -> Option<usize> {
    let panic = console
        .iter()
        .rposition(|l| l.contains("Kernel panic - not syncing:"))?;
    let before = &console[..panic];
    if let Some(oops) = before
        .iter()
        .rposition(|l| l.contains("Oops: ") || l.contains("general protection fault"))
    {
        let named = oops > 0 && before[oops - 1].contains("BUG: ");
        return Some(if named { oops - 1 } else { oops });
    }
    Some(
        before
            .iter()
            .rposition(|l| l.contains("BUG: "))
            .unwrap_or(panic),
    )
}

/// The guest's report of its panic from `console` (report_start on), its
/// middle (the deeper callers) left out when long; the last lines when
/// the console shows no panic.
pub fn report(console: &[String]) -> String {
    let start = report_start(console).unwrap_or(console.len().saturating_sub(REPORT_HEAD_LINES));
    let lines = &console[start..];
    if lines.len() <= REPORT_HEAD_LINES + REPORT_TAIL_LINES {
        return lines.join("\n");
    }
    let head = &lines[..REPORT_HEAD_LINES];
    let tail = &lines[lines.len() - REPORT_TAIL_LINES..];
    let left_out = lines.len() - head.len() - tail.len();
    format!(
        "{}\n[... {left_out} lines ...]\n{}",
        head.join("\n"),
        tail.join("\n")
    )
}

/// The reason and instruction ("Fatal exception; RIP 0010:...") of the
/// panic whose report (crate::guest_panic::report) is `report`.
pub fn cause(report: &str) -> String {
    let reason =
        after(report, "Kernel panic - not syncing:").unwrap_or_else(|| "no reason given".into());
    match after(report, "RIP:") {
        Some(rip) => format!("{reason}; RIP {rip}"),
        None => reason,
    }
}

/// When the panic whose report (crate::guest_panic::report) is `report`
/// is the emulator's stale breakpoint (see the module's comment), where
/// it struck: the instruction and the code around it. `None` for every
/// other panic, including a real breakpoint: one still in memory shows as
/// `cc` before the faulting byte. Kernels that print their oops without
/// the `Oops: ` prefix are never taken for the emulator's.
pub fn stale_breakpoint(report: &str) -> Option<String> {
    // The fatal oops, and its own RIP and code lines after it.
    let at_oops = report.find("Oops: ")?;
    let from_oops = &report[at_oops..];
    if !from_oops["Oops: ".len()..].starts_with("int3") {
        return None;
    }
    let code = after(from_oops, "Code: ")?;
    let bytes: Vec<&str> = code.split_whitespace().collect();
    // An int3 trap reports the address after the breakpoint, which the
    // kernel prints in <>.
    let at = bytes.iter().position(|b| b.starts_with('<'))?;
    let before = *bytes.get(at.checked_sub(1)?)?;
    if before.eq_ignore_ascii_case("cc") {
        return None;
    }
    let rip = after(from_oops, "RIP:").unwrap_or_else(|| "at an unknown instruction".into());
    let shown = bytes[at - 1..bytes.len().min(at + 4)].join(" ");
    Some(format!("{rip}, code {shown}"))
}

/// The rest of the first line of `text` that contains `key`, after it.
fn after(text: &str, key: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.split_once(key))
        .map(|(_, rest)| rest.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The panic of a 7.2.13 guest under QEMU 7.2 (bench/results/
    /// 2026-11-27-bcfd7fb-soak-qemu7.2-7.2.13.json), shortened: an int3 at sched_clock_cpu+0x8,
    /// where memory holds the first byte of a 2-byte NOP.
    const STALE_INT3: &str = "\
[    2.70] Oops: int3: 0000 [#2] SMP NOPTI
[    2.70] CPU: 1 UID: 0 PID: 0 Comm: swapper/1 Not tainted
[    2.70] RIP: 0010:sched_clock_cpu+0x9/0x230
[    2.70] Code: 90 90 90 f3 0f 1e fa 48 83 ec 18 66 <90> e8 01 c2 ec ff 48 03 05
[    2.70] Kernel panic - not syncing: Fatal exception in interrupt
";

    #[test]
    fn a_guest_panic_is_told_by_its_reason_and_instruction() {
        let tail = "[   16.6] Oops: general protection fault\n\
                    [   16.6] RIP: 0010:pick_task_idle+0xa/0x40\n\
                    [   16.7] Kernel panic - not syncing: Fatal exception\n";
        assert_eq!(
            cause(tail),
            "Fatal exception; RIP 0010:pick_task_idle+0xa/0x40"
        );
        assert_eq!(cause("nothing useful"), "no reason given");
    }

    #[test]
    fn a_report_keeps_its_start_and_its_panic_line_and_drops_what_came_before() {
        let mut console: Vec<String> = vec!["@@vsched BOOTED".into(), "a command's line".into()];
        console.push("[ 2.5] sysrq: Trigger a crash".into());
        console.push("[ 2.5] Kernel panic - not syncing: sysrq triggered crash".into());
        console.extend((0..100).map(|i| format!("[ 2.5]  caller_{i}+0x1/0x2")));
        console.push("[ 2.6] Kernel Offset: 0x9e00000".into());
        let r = report(&console);
        let lines: Vec<&str> = r.lines().collect();
        assert!(
            lines[0].contains("Kernel panic - not syncing: sysrq"),
            "{r}"
        );
        assert!(!r.contains("a command's line"), "{r}");
        assert_eq!(
            lines.len(),
            REPORT_HEAD_LINES + 1 + REPORT_TAIL_LINES,
            "{r}"
        );
        assert!(r.contains("[... 66 lines ...]"), "{r}");
        assert!(lines.last().unwrap().contains("Kernel Offset"), "{r}");
        // Nothing that starts a report: the last lines.
        let quiet: Vec<String> = (0..50).map(|i| format!("line {i}")).collect();
        let r = report(&quiet);
        assert_eq!(r.lines().next(), Some("line 20"));
    }

    #[test]
    fn an_int3_where_memory_holds_no_breakpoint_is_the_emulators() {
        let at = stale_breakpoint(STALE_INT3).expect("a stale breakpoint");
        assert_eq!(at, "0010:sched_clock_cpu+0x9/0x230, code 66 <90> e8 01 c2");
    }

    #[test]
    fn an_int3_at_a_breakpoint_still_in_memory_is_not_the_emulators() {
        // Real breakpoints (a kprobe, padding a stray jump landed in) are
        // still there when the kernel prints its code.
        let real = STALE_INT3.replace("18 66 <90>", "18 cc <90>");
        assert_eq!(stale_breakpoint(&real), None);
    }

    #[test]
    fn other_oopses_at_patched_sites_are_not_the_emulators() {
        // Only the breakpoint's trap is explained by the defect; any other
        // fault, even inside an instruction the kernel patches, fails.
        let gp = STALE_INT3.replace("Oops: int3", "Oops: general protection fault");
        assert_eq!(stale_breakpoint(&gp), None);
        let bug = "[ 3.1] BUG: kernel NULL pointer dereference, address: 0000000000000008\n\
                   [ 3.1] Oops: Oops: 0000 [#1] SMP NOPTI\n\
                   [ 3.1] RIP: 0010:scx_tick+0x1a/0x60\n\
                   [ 3.1] Code: 48 8b 47 08 <48> 8b 00\n\
                   [ 3.1] Kernel panic - not syncing: Fatal exception\n";
        assert_eq!(stale_breakpoint(bug), None);
        let sysrq = "[ 4.0] sysrq: Trigger a crash\n\
                     [ 4.0] Kernel panic - not syncing: sysrq triggered crash\n";
        assert_eq!(stale_breakpoint(sysrq), None);
    }

    #[test]
    fn an_earlier_survived_failure_is_left_out_of_the_report_and_its_code_unread() {
        // A warning the kernel survived, with its own code line whose byte
        // before the fault is not cc; then a real breakpoint kills it.
        let mut console: Vec<String> = vec![
            "[ 1.0] WARNING: CPU: 0 PID: 1 at kernel/x.c:1 f+0x1/0x2".into(),
            "[ 1.0] RIP: 0010:f+0x1/0x2".into(),
            "[ 1.0] Code: 48 89 c7 <0f> 0b 90".into(),
            "[ 1.0] ---[ end trace 0000000000000000 ]---".into(),
        ];
        let real = STALE_INT3.replace("18 66 <90>", "18 cc <90>");
        console.extend(real.lines().map(String::from));
        let r = report(&console);
        assert!(r.starts_with("[    2.70] Oops: int3"), "{r}");
        assert!(!r.contains("WARNING"), "{r}");
        assert_eq!(stale_breakpoint(&r), None);
        assert_eq!(
            cause(&r),
            "Fatal exception in interrupt; RIP 0010:sched_clock_cpu+0x9/0x230"
        );
        // A NULL dereference's report begins at the BUG: line naming it.
        let bug: Vec<String> = [
            "[ 3.0] BUG: kernel NULL pointer dereference, address: 0000000000000008",
            "[ 3.0] Oops: Oops: 0000 [#1] SMP NOPTI",
            "[ 3.0] Kernel panic - not syncing: Fatal exception",
        ]
        .iter()
        .map(|l| l.to_string())
        .collect();
        assert!(report(&bug).starts_with("[ 3.0] BUG: kernel NULL"));
    }

    #[test]
    fn a_console_without_the_code_line_is_not_the_emulators() {
        let cut: String = STALE_INT3
            .lines()
            .filter(|l| !l.contains("Code:"))
            .map(|l| format!("{l}\n"))
            .collect();
        assert_eq!(stale_breakpoint(&cut), None);
    }
}
