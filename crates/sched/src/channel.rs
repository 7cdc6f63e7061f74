//! The channel's pin: while a scheduler runs, its channel map (intf.h,
//! struct vs_channel) is pinned at vsched_os::channel::PIN, where
//! vsched's runtime finds it without configuration. The pin goes when the
//! scheduler is detached; one a killed loader left behind is replaced at
//! the next load (its map says it is not live: the kernel ran the
//! scheduler's exit, which clears that).

use std::path::Path;

/// A pinned channel; unpinned on drop.
#[derive(Debug)]
pub struct ChannelPin {
    _private: (),
}

/// Pins `map` (the skeleton's `channel`). Err says why the runtime will
/// not find it (no bpffs at /sys/fs/bpf, most often); the scheduler runs
/// without the channel then, as with `--no-channel`.
pub fn pin(map: &mut libbpf_rs::MapMut<'_>) -> Result<ChannelPin, String> {
    let path = Path::new(vsched_os::channel::PIN);
    let dir = path.parent().expect("the pin has a directory");
    std::fs::create_dir_all(dir).map_err(|e| {
        format!(
            "creating {} (is bpffs mounted on /sys/fs/bpf?): {e}",
            dir.display()
        )
    })?;
    // A pin left by a loader that was killed: its scheduler is gone.
    let _ = std::fs::remove_file(path);
    // Root's only (bpffs's pin mode, 0600): any writer can name any pid
    // in a slot, and a mark costs the task it names priority for up to
    // VS_MARK_SKIP_NS at a time, so other users must not write it.
    map.pin(path)
        .map_err(|e| format!("pinning the channel at {}: {e}", path.display()))?;
    Ok(ChannelPin { _private: () })
}

impl Drop for ChannelPin {
    fn drop(&mut self) {
        let path = Path::new(vsched_os::channel::PIN);
        let _ = std::fs::remove_file(path);
        if let Some(dir) = path.parent() {
            // Only if empty: nothing else of vsched's is pinned there.
            let _ = std::fs::remove_dir(dir);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::bpf_intf as c;
    use std::mem::{align_of, offset_of, size_of};
    use vsched_os::channel as rust;

    /// The runtime reads and writes the channel through vsched-os's
    /// mirror; the scheduler through intf.h. Both must agree to the byte.
    #[test]
    fn the_runtimes_mirror_of_the_channel_matches_intf_h() {
        assert_eq!(c::vs_channel_consts_VS_CHANNEL_MAGIC, rust::MAGIC);
        assert_eq!(c::vs_channel_consts_VS_CHANNEL_VERSION, rust::VERSION);
        assert_eq!(c::vs_channel_consts_VS_CHANNEL_SLOTS as usize, rust::SLOTS);
        assert_eq!(size_of::<c::vs_channel>(), rust::SIZE);
        assert_eq!(size_of::<c::vs_channel_header>(), size_of::<rust::Header>());
        assert_eq!(size_of::<c::vs_channel_slot>(), size_of::<rust::Slot>());
        assert_eq!(align_of::<c::vs_channel>(), align_of::<rust::Channel>());
        assert_eq!(
            align_of::<c::vs_channel_header>(),
            align_of::<rust::Header>()
        );
        assert_eq!(align_of::<c::vs_channel_slot>(), align_of::<rust::Slot>());
        assert_eq!(
            offset_of!(c::vs_channel, slots),
            offset_of!(rust::Channel, slots)
        );
        assert_eq!(
            offset_of!(c::vs_channel_header, magic),
            offset_of!(rust::Header, magic)
        );
        assert_eq!(
            offset_of!(c::vs_channel_header, version),
            offset_of!(rust::Header, version)
        );
        assert_eq!(
            offset_of!(c::vs_channel_header, slots),
            offset_of!(rust::Header, slots)
        );
        assert_eq!(
            offset_of!(c::vs_channel_header, live),
            offset_of!(rust::Header, live)
        );
        assert_eq!(
            offset_of!(c::vs_channel_header, marked),
            offset_of!(rust::Header, marked)
        );
        assert_eq!(
            offset_of!(c::vs_channel_slot, tid),
            offset_of!(rust::Slot, tid)
        );
        assert_eq!(
            offset_of!(c::vs_channel_slot, waiting),
            offset_of!(rust::Slot, waiting)
        );
        assert_eq!(
            offset_of!(c::vs_channel_slot, on_cpu),
            offset_of!(rust::Slot, on_cpu)
        );
        assert_eq!(
            offset_of!(c::vs_channel_slot, switch_offs),
            offset_of!(rust::Slot, switch_offs)
        );
        assert_eq!(
            offset_of!(c::vs_channel_slot, slice_end_ns),
            offset_of!(rust::Slot, slice_end_ns)
        );
        assert_eq!(
            offset_of!(c::vs_channel_slot, switch_off_ns),
            offset_of!(rust::Slot, switch_off_ns)
        );
        assert_eq!(
            offset_of!(c::vs_channel_slot, wants_run),
            offset_of!(rust::Slot, wants_run)
        );
        assert_eq!(
            offset_of!(c::vs_channel_slot, spinning),
            offset_of!(rust::Slot, spinning)
        );
    }
}
