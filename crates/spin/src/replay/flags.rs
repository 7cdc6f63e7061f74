//! The arithmetic flags a wait loop's branches test, and the instructions
//! that test them (conditional jumps, moves and byte sets).

use super::bits::mask;
use iced_x86::{ConditionCode, Mnemonic};

/// Arithmetic flags the loop's branches can test.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Flags {
    pub(super) cf: bool,
    pub(super) pf: bool,
    pub(super) zf: bool,
    pub(super) sf: bool,
    pub(super) of: bool,
}

/// RFLAGS bit positions (Intel SDM vol. 1, 3.4.3).
const CF_BIT: u32 = 0;
const PF_BIT: u32 = 2;
const ZF_BIT: u32 = 6;
const SF_BIT: u32 = 7;
const OF_BIT: u32 = 11;

impl Flags {
    /// The flags as a sample's RFLAGS register holds them.
    pub(super) fn from_rflags(f: u64) -> Flags {
        let bit = |n: u32| f & (1 << n) != 0;
        Flags {
            cf: bit(CF_BIT),
            pf: bit(PF_BIT),
            zf: bit(ZF_BIT),
            sf: bit(SF_BIT),
            of: bit(OF_BIT),
        }
    }

    /// Whether condition `cc` holds (None: not a flags condition).
    pub(super) fn holds(&self, cc: ConditionCode) -> Option<bool> {
        use ConditionCode as C;
        Some(match cc {
            C::o => self.of,
            C::no => !self.of,
            C::b => self.cf,
            C::ae => !self.cf,
            C::e => self.zf,
            C::ne => !self.zf,
            C::be => self.cf || self.zf,
            C::a => !self.cf && !self.zf,
            C::s => self.sf,
            C::ns => !self.sf,
            C::p => self.pf,
            C::np => !self.pf,
            C::l => self.sf != self.of,
            C::ge => self.sf == self.of,
            C::le => self.zf || self.sf != self.of,
            C::g => !self.zf && self.sf == self.of,
            _ => return None,
        })
    }

    /// ZF, SF and PF of a result of `bits` bits.
    pub(super) fn set_result(&mut self, r: u64, bits: u32) {
        self.zf = r & mask(bits) == 0;
        self.sf = r >> (bits - 1) & 1 != 0;
        // PF: even parity of the low byte only, as the CPU computes it.
        self.pf = (r as u8).count_ones() % 2 == 0;
    }
}

/// Conditional jumps (the branches a wait loop tests its condition with).
pub(super) fn is_jcc(m: Mnemonic) -> bool {
    use Mnemonic as M;
    matches!(
        m,
        M::Jo
            | M::Jno
            | M::Jb
            | M::Jae
            | M::Je
            | M::Jne
            | M::Jbe
            | M::Ja
            | M::Js
            | M::Jns
            | M::Jp
            | M::Jnp
            | M::Jl
            | M::Jge
            | M::Jle
            | M::Jg
    )
}

/// Conditional moves.
pub(super) fn is_cmov(m: Mnemonic) -> bool {
    use Mnemonic as M;
    matches!(
        m,
        M::Cmovo
            | M::Cmovno
            | M::Cmovb
            | M::Cmovae
            | M::Cmove
            | M::Cmovne
            | M::Cmovbe
            | M::Cmova
            | M::Cmovs
            | M::Cmovns
            | M::Cmovp
            | M::Cmovnp
            | M::Cmovl
            | M::Cmovge
            | M::Cmovle
            | M::Cmovg
    )
}

/// Conditional byte sets.
pub(super) fn is_setcc(m: Mnemonic) -> bool {
    use Mnemonic as M;
    matches!(
        m,
        M::Seto
            | M::Setno
            | M::Setb
            | M::Setae
            | M::Sete
            | M::Setne
            | M::Setbe
            | M::Seta
            | M::Sets
            | M::Setns
            | M::Setp
            | M::Setnp
            | M::Setl
            | M::Setge
            | M::Setle
            | M::Setg
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use iced_x86::ConditionCode as C;

    #[test]
    fn rflags_bits_become_flags() {
        let f = Flags::from_rflags((1 << ZF_BIT) | (1 << OF_BIT));
        assert!(f.zf && f.of && !f.cf && !f.sf && !f.pf);
        // The bit every RFLAGS value has set (bit 1) means nothing here.
        let f = Flags::from_rflags(0x202);
        assert!(!(f.cf || f.pf || f.zf || f.sf || f.of));
    }

    #[test]
    fn conditions_follow_the_sdm() {
        // After `cmp 3, 5` (3 - 5): borrow, negative, no overflow.
        let f = Flags {
            cf: true,
            sf: true,
            ..Flags::default()
        };
        assert_eq!(f.holds(C::b), Some(true)); // unsigned below
        assert_eq!(f.holds(C::l), Some(true)); // signed less
        assert_eq!(f.holds(C::ne), Some(true));
        assert_eq!(f.holds(C::a), Some(false));
        assert_eq!(f.holds(C::ge), Some(false));
        assert_eq!(f.holds(C::None), None);
    }

    #[test]
    fn results_set_zero_sign_and_parity_at_their_width() {
        let mut f = Flags::default();
        f.set_result(0x1_0000_0000, 32); // the low 32 bits are zero
        assert!(f.zf && !f.sf && f.pf);
        f.set_result(0x80, 8);
        assert!(!f.zf && f.sf && !f.pf);
    }

    #[test]
    fn mnemonic_classes_do_not_overlap() {
        use Mnemonic as M;
        for m in [M::Jne, M::Jg, M::Jo] {
            assert!(is_jcc(m) && !is_cmov(m) && !is_setcc(m));
        }
        assert!(is_cmov(M::Cmove) && is_setcc(M::Setne));
        assert!(!is_jcc(M::Jmp) && !is_jcc(M::Call));
    }
}
