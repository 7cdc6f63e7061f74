// The BPF side's counters: one row each, (name, what it counts), in the
// order of their index in the per-CPU `stats` map. The one place a counter
// is declared: build.rs includes this file to write the C enum the BPF
// side counts with (`VS_STAT_<NAME>`, vs_stats.h), stats.rs shows it, and
// a test keeps docs/sched.md's table its copy. Plain data, no `use`:
// build.rs compiles it too.

/// Every counter, (name, what it counts), in index order.
pub const STAT_TABLE: &[(&str, &str)] = &[
    (
        "wake_prev",
        "wake-ups placed on their previous vCPU, idle",
    ),
    (
        "wake_best",
        "wake-ups placed on the strongest idle visible vCPU",
    ),
    (
        "wake_prev_over_stronger",
        "of wake_prev: a stronger vCPU was idle but not by enough to move",
    ),
    (
        "wake_sync",
        "synchronous wake-ups placed on the waker's vCPU (it is about to wait)",
    ),
    (
        "moved_stronger",
        "slice-end moves to a clearly stronger idle vCPU (or off a hidden one)",
    ),
    (
        "kept_running",
        "slice ends where no waiting task was owed the vCPU: the task stays",
    ),
    (
        "slice_renewed",
        "slices renewed at the tick instead of ending (no normal task waited, SCHED_IDLE work that does not starve aside, and no visible vCPU the task may use was idle): it runs on without being queued again",
    ),
    (
        "yields_kept",
        "sched_yield() calls with nothing else to run on the vCPU: the task kept its slice and ran on at once",
    ),
    (
        "queued_normal",
        "normal tasks queued (no visible vCPU idle at once)",
    ),
    (
        "migrated",
        "normal tasks that started running on another vCPU than last time",
    ),
    (
        "queued_idle",
        "SCHED_IDLE tasks queued",
    ),
    (
        "pinned",
        "tasks bound to one vCPU, run there directly",
    ),
    (
        "pinned_over_idle_policy",
        "of pinned: run at once over the SCHED_IDLE work their vCPU was running (pre-empted)",
    ),
    (
        "pinned_queued",
        "tasks bound to one vCPU that normal tasks waited for: placed the usual way (queued by virtual time with them, or kept at a slice end if owed the vCPU) instead of run there directly, which would overtake them",
    ),
    (
        "kicks",
        "idle vCPUs woken for a queued task",
    ),
    (
        "hidden_skips",
        "times a vCPU hidden by RWC (or parked by consolidation) left normal tasks waiting",
    ),
    (
        "queued_stranded",
        "normal tasks queued that only hidden (or parked) vCPUs may run, such as a vCPU's own kernel threads: that vCPU is kicked",
    ),
    (
        "stranded_dispatches",
        "times a hidden (or parked) vCPU ran a normal task of its queue that no visible vCPU may run",
    ),
    (
        "preempted_idle_policy",
        "queued normal tasks (waking, or left waiting at a slice end) that pre-empted a vCPU running only SCHED_IDLE work",
    ),
    (
        "bvs_idle",
        "BVS: latency-sensitive wake-ups placed on an idle low-latency vCPU",
    ),
    (
        "bvs_idle_policy",
        "BVS: ... on a vCPU running only SCHED_IDLE work (pre-empted)",
    ),
    (
        "bvs_behind_short",
        "BVS: ... queued behind a short latency-sensitive task on a low-latency vCPU",
    ),
    (
        "bvs_none",
        "BVS: latency-sensitive wake-ups no low-latency vCPU could take",
    ),
    (
        "bvs_behind_declined",
        "BVS: waits behind a short task declined (another vCPU idle, the short task not the waker); placed the usual way",
    ),
    (
        "ivh_attempted",
        "IVH: moves started (at a heartbeat off a vCPU about to be switched off, or at the tick to a rested vCPU)",
    ),
    (
        "ivh_done",
        "IVH: tasks moved to another vCPU (that had answered, or had rested)",
    ),
    (
        "ivh_abandoned_target",
        "IVH: abandoned, the target answered too late (was switched off)",
    ),
    (
        "ivh_abandoned_source",
        "IVH: abandoned, the source was switched off before letting go",
    ),
    (
        "ivh_rested",
        "IVH: moves started at once at a heartbeat, the target having rested a whole rhythm",
    ),
    (
        "ivh_at_tick",
        "IVH: moves started at the tick, the target having rested one of the source's rhythms by the model",
    ),
    (
        "ivh_over_idle_policy",
        "IVH: of ivh_done, onto a vCPU running only SCHED_IDLE work at the move (pre-empted): a target taken for lack of an idle one, or an idle one that took up the probers' work while answering",
    ),
    (
        "ivh_no_spare",
        "IVH: decisions (a heartbeat predicting a switch-off, or a tick on a vCPU losing time) that sought no move, every visible vCPU having a normal task of its own (running or queued); a rate, not a count of tasks",
    ),
    (
        "beat_gaps",
        "inactive episodes the scheduler's heartbeat saw (all vCPUs)",
    ),
    (
        "idle_starved",
        "SCHED_IDLE tasks run ahead of normal work after waiting 1 s (starvation guard)",
    ),
    (
        "queued_elsewhere",
        "of queued_normal: queued for another vCPU than its own, which fewer normal tasks shared (or its own was hidden)",
    ),
    (
        "stolen",
        "normal tasks a vCPU with an empty queue took from another vCPU's queue (or from a hidden vCPU's)",
    ),
    (
        "parked",
        "consolidation: trials that parked a vCPU (normal tasks kept off it), the active set having idled more than 10% of a period",
    ),
    (
        "trials_widened",
        "consolidation: trials that gave a parked vCPU back, the active set having been saturated (95%) for a period",
    ),
    (
        "trials_undone",
        "consolidation: trials undone, the normal tasks' wake-up rate (their progress) having fallen by more than 5% (narrowing) or not risen by 5% (widening)",
    ),
    (
        "unparked",
        "consolidation: parked vCPUs given back at once, outside trials: a task that runs long per wake-up had to wait (or no active vCPU was left that a task may use)",
    ),
    (
        "chosen_by_episodes",
        "consolidation: vCPUs parked or given back that their inactive episodes chose over capacity alone (and the kernel's preferred-CPU mask, which decides first; of two near equals, the one with the VM's shortest episodes kept, or given back first)",
    ),
    (
        "preference_swaps",
        "consolidation: a parked vCPU the kernel's preferred-CPU mask lists swapped at once for an active one it leaves out (the mask changed under a narrowed set)",
    ),
    (
        "consolidate_periods",
        "consolidation: 100 ms periods the active set was measured over",
    ),
    (
        "active_vcpu_periods",
        "consolidation: the active set's size summed over those periods (this over consolidate_periods: the mean number of active vCPUs)",
    ),
    (
        "active_busy_us",
        "consolidation: microseconds the active set ran normal tasks over those periods (its demand; over active_vcpu_periods x 100,000: its utilisation)",
    ),
    (
        "marked_dispatches",
        "channel: dispatches that ran a task of the queue other than its head, which had marked itself waiting (virtual blocking)",
    ),
    (
        "marked_passed_over",
        "channel: marked waiting tasks those dispatches passed over",
    ),
    (
        "marked_all_waiting",
        "channel: dispatches whose queue held only marked tasks (within the scan): the head ran anyway",
    ),
    (
        "channel_slots_freed",
        "channel: slots freed by the scheduler because their thread exited holding them",
    ),
    (
        "channel_switch_offs_seen",
        "channel: switch-offs of a vCPU the heartbeat saw while a thread holding a slot ran there (published to that thread for I-Spinlock's admission)",
    ),
    (
        "restarts_in_place",
        "running tasks stopped and restarted in place around a change of their scheduling (nice, policy, CPUs; the spin detector's nudge among them): not counted as sleeps, nor charged twice",
    ),
    (
        "spinners_kicked",
        "spinners: threads the spin detector marked spinning whose slice was ended at once (at the detector's nudge) or at the tick, with other work waiting for their vCPU",
    ),
    (
        "spinners_passed_over",
        "spinners: marked spinning threads that dispatches passed over for another task of their queue (counted apart from marked_passed_over)",
    ),
    (
        "spin_marks_served",
        "spinners: spin marks cleared by the scheduler because their thread ran again after another task had run on its vCPU",
    ),

];
