//! Opening, loading and attaching the BPF scheduler; writing the model into
//! it; reading its counters and why the kernel ejected it, if it did.
//!
//! Detaching is dropping the [`Scheduler`] (its struct_ops link). If the
//! process dies first, the kernel drops the link itself and switches every
//! task back to its default scheduler: there is nothing to restore.

use crate::bpf_intf::{vcpu_live, vcpu_model};
use crate::bpf_skel::{BpfSkel, BpfSkelBuilder, OpenBpfSkel};
use crate::error::SchedError;
use crate::model::VcpuModel;
use crate::stats::{Stats, NR_STATS};
use crate::tunables::Tunables;
use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::{Link, MapCore, MapFlags, OpenObject, PrintLevel};
use std::collections::VecDeque;
use std::mem::MaybeUninit;
use std::os::fd::AsFd;
use std::sync::Mutex;

pub use libbpf_rs::OpenObject as BpfObject;

/// vCPUs the BPF side handles (intf.h's VS_MAX_CPUS).
pub const MAX_CPUS: usize = crate::bpf_intf::vs_consts_VS_MAX_CPUS as usize;

/// Command names `--latency-sensitive` may declare (the BPF hash map's size).
pub const MAX_LATENCY_COMMS: usize = 64;

/// Reloads after hotplug ejections in one run of a loader. A resize takes
/// vCPUs offline or online one at a time, each an ejection; 64 covers
/// resizing a large VM several times while bounding a kernel that keeps
/// asking.
pub const MAX_HOTPLUG_RELOADS: u32 = 64;

/// Why the kernel stopped the scheduler (sched_ext's exit info).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ExitInfo {
    /// `enum scx_exit_kind`: 0 none, 1 done, 2-3 unregistered, 4 sysrq,
    /// 1024+ errors (1024 runtime error, 1025 BPF error, 1026 stall).
    pub kind: i32,
    pub exit_code: i64,
    pub reason: String,
    pub message: String,
    /// The kernel's dump of its scheduling state at an error exit (each
    /// CPU's current task and queued tasks, and the stalled task's state;
    /// sched_ext's `scx_dump_state`); empty otherwise.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub dump: String,
}

impl ExitInfo {
    /// Whether the kernel ejected the scheduler for an error.
    pub fn is_error(&self) -> bool {
        self.kind >= 1024
    }

    /// The kernel's dump for a person, each line indented under a heading
    /// (None without one): where a stalled task sat, what each CPU ran.
    pub fn dump_report(&self) -> Option<String> {
        if self.dump.trim().is_empty() {
            return None;
        }
        let mut out = String::from("the kernel's scheduling state at the ejection:");
        for line in self.dump.lines() {
            out.push_str("\n  | ");
            out.push_str(line);
        }
        Some(out)
    }

    /// Whether the kernel asks the loader to load the scheduler again: it
    /// ejects every scheduler when a CPU goes offline or comes online
    /// unless the scheduler handles hotplug itself, and says so with
    /// `SCX_ECODE_ACT_RESTART` (bits 48-63 of the exit code hold the action,
    /// 1 is restart; the kernel's `enum scx_exit_code`).
    pub fn asks_restart(&self) -> bool {
        const ACT_SHIFT: u32 = 48;
        const ACT_RESTART: u64 = 1;
        (self.exit_code as u64) >> ACT_SHIFT == ACT_RESTART
    }
}

/// Bytes of the kernel's exit dump kept (the BPF side's `uei_dump`): the
/// kernel's default dump size (SCX_EXIT_DUMP_DFL_LEN), enough for a few
/// dozen CPUs' current and queued tasks.
const EXIT_DUMP_LEN: u32 = 32768;

/// Lines libbpf printed lately (the verifier's log on a failed load).
static LIBBPF_LOG: Mutex<VecDeque<String>> = Mutex::new(VecDeque::new());
/// Lines kept: enough for the verifier's verdict and the instructions
/// leading to it, few enough to read in a terminal.
const LOG_LINES_KEPT: usize = 30;

fn remember_libbpf_line(level: PrintLevel, line: String) {
    if level == PrintLevel::Debug {
        return;
    }
    let mut log = LIBBPF_LOG.lock().unwrap_or_else(|e| e.into_inner());
    for l in line.lines() {
        if log.len() == LOG_LINES_KEPT {
            log.pop_front();
        }
        log.push_back(l.to_string());
    }
}

fn bpf_error(what: &'static str, source: libbpf_rs::Error) -> SchedError {
    let log = LIBBPF_LOG
        .lock()
        .map(|l| l.iter().cloned().collect())
        .unwrap_or_default();
    SchedError::Bpf { what, source, log }
}

/// The BPF map's value for `m`: intf.h's struct vcpu_model, as bindgen
/// generated it, as the bytes the map stores. A field added to intf.h
/// stops the build here until it is filled.
fn model_value(m: &VcpuModel) -> [u8; std::mem::size_of::<vcpu_model>()] {
    let value = vcpu_model {
        capacity: m.capacity,
        hidden: crate::model::hidden_bits(&m.visibility),
        episode_mean_us: m.episode_mean_us,
        available_permille: m.available_permille,
        flags: m.flag_bits(),
        stack_mates_lo: m.stack_mates as u32,
        stack_mates_hi: (m.stack_mates >> 32) as u32,
    };
    let () = VCPU_MODEL_HAS_NO_PADDING;
    // SAFETY: vcpu_model is #[repr(C)] and Copy, and has no padding
    // (VCPU_MODEL_HAS_NO_PADDING), so every one of its bytes is an
    // initialised byte of a field; the slice borrows `value` and is copied
    // out at once.
    let bytes = unsafe {
        std::slice::from_raw_parts(
            (&value as *const vcpu_model).cast::<u8>(),
            std::mem::size_of::<vcpu_model>(),
        )
    };
    let mut out = [0u8; std::mem::size_of::<vcpu_model>()];
    out.copy_from_slice(bytes);
    out
}

/// model_value's soundness: struct vcpu_model is its seven u32 fields and
/// nothing else, no padding among them (intf.h keeps it so). A field added
/// there fails this until it is counted, and a field other than u32 until
/// padding is thought through.
const VCPU_MODEL_HAS_NO_PADDING: () =
    assert!(std::mem::size_of::<vcpu_model>() == 7 * std::mem::size_of::<u32>());

/// A command name as the kernel keeps it (`comm`): at most 15 bytes and a
/// NUL, zero-padded to 16, the BPF map's key.
pub fn comm_key(name: &str) -> [u8; 16] {
    let mut key = [0u8; 16];
    let bytes = name.as_bytes();
    let n = bytes.len().min(15);
    key[..n].copy_from_slice(&bytes[..n]);
    key
}

/// A loaded and attached scheduler. Dropping it detaches it.
pub struct Scheduler<'obj> {
    skel: BpfSkel<'obj>,
    link: Option<Link>,
    nr_cpus: usize,
    /// The channel's pin (None with --no-channel), or why it failed.
    channel: Option<Result<crate::channel::ChannelPin, String>>,
}

impl<'obj> Scheduler<'obj> {
    /// Opens, configures, loads and attaches the scheduler. `object` is
    /// storage libbpf's object lives in; it must outlive the scheduler.
    /// Run [`crate::preflight::check`] first for clear refusals.
    pub fn attach(
        object: &'obj mut MaybeUninit<OpenObject>,
        tunables: Tunables,
        nr_cpus: usize,
        latency_comms: &[String],
    ) -> Result<Scheduler<'obj>, SchedError> {
        if nr_cpus > MAX_CPUS {
            return Err(SchedError::TooManyCpus {
                count: nr_cpus,
                max: MAX_CPUS,
            });
        }
        if latency_comms.len() > MAX_LATENCY_COMMS {
            return Err(SchedError::TooManyLatencyComms {
                count: latency_comms.len(),
                max: MAX_LATENCY_COMMS,
            });
        }
        libbpf_rs::set_print(Some((PrintLevel::Info, remember_libbpf_line)));
        let mut open: OpenBpfSkel = BpfSkelBuilder::default()
            .open(object)
            .map_err(|e| bpf_error("opening the BPF object", e))?;
        {
            let rodata = open
                .maps
                .rodata_data
                .as_deref_mut()
                .expect("the BPF object has read-only data (its tunables)");
            tunables.write_to(rodata);
            rodata.nr_cpus = nr_cpus as u32;
            rodata.nr_latency_comms = latency_comms.len() as u32;
            rodata.uei_dump_len = EXIT_DUMP_LEN;
        }
        // The dump's buffer is a one-byte array in its own data section
        // (RESIZABLE_ARRAY), grown here to what UEI_RECORD may copy.
        open.maps
            .data_uei_dump
            .set_value_size(EXIT_DUMP_LEN)
            .map_err(|e| bpf_error("sizing the exit dump's buffer", e))?;
        // sched_ext ejects a scheduler loaded against a CPU set that changed
        // (hot-plug) meanwhile when it knows the sequence it was loaded at.
        if let Ok(seq) = std::fs::read_to_string("/sys/kernel/sched_ext/hotplug_seq") {
            if let Ok(seq) = seq.trim().parse() {
                open.struct_ops.vsched_ops_mut().hotplug_seq = seq;
            }
        }
        let mut skel = open
            .load()
            .map_err(|e| bpf_error("loading the BPF scheduler (verifier)", e))?;
        for name in latency_comms {
            skel.maps
                .latency_comms
                .update(&comm_key(name), &[1u8], MapFlags::ANY)
                .map_err(|e| bpf_error("writing the latency-sensitive names", e))?;
        }
        let link = skel
            .maps
            .vsched_ops
            .attach_struct_ops()
            .map_err(|e| bpf_error("attaching the scheduler (struct_ops)", e))?;
        let channel = tunables
            .channel
            .then(|| crate::channel::pin(&mut skel.maps.channel));
        Ok(Scheduler {
            skel,
            link: Some(link),
            nr_cpus,
            channel,
        })
    }

    /// Instructions the kernel's verifier went through to accept the
    /// scheduler's programs (`verified_insns`, summed; None if the kernel
    /// does not say). Most of a load's time under emulation is this.
    pub fn verified_instructions(&self) -> Option<u64> {
        let ids: Vec<u32> = self
            .skel
            .object()
            .progs()
            .filter_map(|prog| libbpf_rs::Program::id_from_fd(prog.as_fd()).ok())
            .collect();
        let total = libbpf_rs::query::ProgInfoIter::default()
            .filter(|info| ids.contains(&info.id))
            .map(|info| u64::from(info.verified_insns))
            .sum();
        (!ids.is_empty()).then_some(total)
    }

    /// Writes the model of each vCPU into the BPF side's map.
    pub fn update_model(&self, models: &[VcpuModel]) -> Result<(), SchedError> {
        for m in models.iter().filter(|m| (m.cpu as usize) < self.nr_cpus) {
            self.skel
                .maps
                .vcpu_models
                .update(&m.cpu.to_ne_bytes(), &model_value(m), MapFlags::ANY)
                .map_err(|e| bpf_error("writing the vCPU model", e))?;
        }
        Ok(())
    }

    /// The vCPUs consolidation has parked now (no normal task is placed
    /// there), ascending; empty without `--consolidate`.
    pub fn parked(&self) -> Result<Vec<u32>, SchedError> {
        let at = std::mem::offset_of!(vcpu_live, parked);
        let mut parked = Vec::new();
        for cpu in 0..self.nr_cpus as u32 {
            let value = self
                .skel
                .maps
                .vcpu_lives
                .lookup(&cpu.to_ne_bytes(), MapFlags::ANY)
                .map_err(|e| bpf_error("reading the vCPUs' live state", e))?;
            let field = value
                .as_deref()
                .and_then(|v| v.get(at..at + 4))
                .and_then(|b| <[u8; 4]>::try_from(b).ok());
            if field.is_some_and(|b| u32::from_ne_bytes(b) != 0) {
                parked.push(cpu);
            }
        }
        Ok(parked)
    }

    /// The counters so far, summed over CPUs.
    pub fn stats(&self) -> Result<Stats, SchedError> {
        let mut totals = vec![0u64; NR_STATS as usize];
        for (i, total) in totals.iter_mut().enumerate() {
            let per_cpu = self
                .skel
                .maps
                .stats
                .lookup_percpu(&(i as u32).to_ne_bytes(), MapFlags::ANY)
                .map_err(|e| bpf_error("reading the counters", e))?;
            for v in per_cpu.into_iter().flatten() {
                let bytes: [u8; 8] = v.get(..8).and_then(|b| b.try_into().ok()).unwrap_or([0; 8]);
                *total += u64::from_ne_bytes(bytes);
            }
        }
        Ok(Stats::from_totals(&totals))
    }

    /// Why the kernel stopped the scheduler, once it has (None while it runs).
    pub fn exit_info(&self) -> Option<ExitInfo> {
        let data = self.skel.maps.data_data.as_deref()?;
        let uei = &data.uei;
        (uei.kind != 0).then(|| ExitInfo {
            kind: uei.kind,
            exit_code: uei.exit_code,
            reason: c_chars(&uei.reason),
            message: c_chars(&uei.msg),
            dump: self.exit_dump(),
        })
    }

    /// The kernel's exit dump as UEI_RECORD copied it (empty if none). Read
    /// through the map, not the skeleton's pointer, which names the
    /// section's size before it was grown.
    fn exit_dump(&self) -> String {
        self.skel
            .maps
            .data_uei_dump
            .lookup(&0u32.to_ne_bytes(), MapFlags::ANY)
            .ok()
            .flatten()
            .map(|bytes| {
                let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
                String::from_utf8_lossy(&bytes[..end]).into_owned()
            })
            .unwrap_or_default()
    }

    /// Where the runtime finds the channel: Ok(path) once pinned, Err(why
    /// not) (`--no-channel`, or no bpffs).
    pub fn channel(&self) -> Result<&'static str, String> {
        match &self.channel {
            None => Err("off (--no-channel)".into()),
            Some(Ok(_)) => Ok(vsched_os::channel::PIN),
            Some(Err(why)) => Err(why.clone()),
        }
    }

    /// Detaches now (also done on drop) and says why the kernel recorded
    /// the exit, if it did.
    pub fn detach(mut self) -> Option<ExitInfo> {
        self.link.take();
        self.channel.take();
        self.exit_info()
    }
}

/// A NUL-terminated C char array as a String.
fn c_chars(chars: &[std::os::raw::c_char]) -> String {
    let bytes: Vec<u8> = chars
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_model_value_puts_each_field_at_its_offset() {
        let m = VcpuModel {
            cpu: 3,
            capacity: 700,
            visibility: crate::model::Visibility::default(),
            episode_mean_us: 1500,
            available_permille: 640,
            low_latency: false,
            preferred: true,
            stack_mates: (1 << 33) | 1,
        };
        let bytes = model_value(&m);
        let word = |i: usize| u32::from_ne_bytes(bytes[i * 4..i * 4 + 4].try_into().unwrap());
        assert_eq!(
            [word(0), word(2), word(3), word(4), word(5), word(6)],
            [
                700,
                1500,
                640,
                crate::bpf_intf::vs_vcpu_flags_VS_VCPU_PREFERRED,
                1,
                2
            ]
        );
    }

    #[test]
    fn a_hotplug_ejection_asks_for_a_restart_and_an_error_does_not() {
        let exit = |kind, exit_code| ExitInfo {
            kind,
            exit_code,
            reason: String::new(),
            message: String::new(),
            dump: String::new(),
        };
        // SCX_EXIT_UNREG_KERN with SCX_ECODE_RSN_HOTPLUG | SCX_ECODE_ACT_RESTART,
        // as "cpu 2 going offline" ejects a scheduler.
        assert!(exit(66, (1 << 32) | (1 << 48)).asks_restart());
        assert!(!exit(1024, 0).asks_restart());
        assert!(!exit(65, 0).asks_restart());
    }

    #[test]
    fn the_kernels_dump_is_shown_indented_under_a_heading_when_there_is_one() {
        let mut e = ExitInfo {
            kind: 1026,
            exit_code: 0,
            reason: "runnable task stall".into(),
            message: String::new(),
            dump: "CPU 2   : nr_run=3\n  curr=swapper/2".into(),
        };
        assert_eq!(
            e.dump_report().unwrap(),
            "the kernel's scheduling state at the ejection:\n  | CPU 2   : nr_run=3\n  |   curr=swapper/2"
        );
        e.dump = " \n".into();
        assert_eq!(e.dump_report(), None);
    }

    #[test]
    fn a_command_name_is_the_kernels_comm_zero_padded() {
        assert_eq!(&comm_key("nginx")[..6], b"nginx\0");
        assert!(comm_key("nginx")[5..].iter().all(|&b| b == 0));
        // The kernel keeps 15 bytes and a NUL.
        let long = comm_key("a-very-long-command-name");
        assert_eq!(&long[..15], b"a-very-long-com");
        assert_eq!(long[15], 0);
    }
}
