//! Bit widths of x86 operands, shared by the interpreter and its flags.

/// The low `bits` bits set.
pub(super) fn mask(bits: u32) -> u64 {
    if bits >= 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    }
}
