//! Whether the runtime can be preloaded into a program at all: only a
//! program that the dynamic loader starts honours LD_PRELOAD, and a
//! statically linked one names no loader.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// The program's file, looked up in `path_var` (the value of PATH) as
/// execvp does when `program` is a bare name.
pub fn find_program(program: &OsStr, path_var: Option<&OsStr>) -> Option<PathBuf> {
    let p = Path::new(program);
    if p.components().count() > 1 {
        return Some(p.to_path_buf());
    }
    std::env::split_paths(path_var?)
        .map(|dir| dir.join(p))
        .find(|c| is_executable(c))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// True if the file names a program interpreter (the dynamic loader,
/// which is what honours LD_PRELOAD). Scripts, unreadable files and
/// anything but a 64-bit little-endian ELF count as dynamic: their
/// interpreter usually is, and exec decides the rest.
pub fn is_dynamically_linked(path: &Path) -> bool {
    // The program headers sit near the start of the file.
    const HEADERS_WITHIN: u64 = 64 * 1024;
    let mut bytes = Vec::new();
    let read = std::fs::File::open(path).and_then(|f| {
        std::io::Read::read_to_end(&mut std::io::Read::take(f, HEADERS_WITHIN), &mut bytes)
    });
    if read.is_err() {
        return true;
    }
    elf_has_interpreter(&bytes).unwrap_or(true)
}

/// Whether the ELF image's program headers hold a PT_INTERP entry; None
/// if `elf` is not a 64-bit little-endian ELF file.
pub fn elf_has_interpreter(elf: &[u8]) -> Option<bool> {
    // Offsets and values from the ELF-64 specification (elf(5)).
    const PT_INTERP: u32 = 3;
    const ELFCLASS64: u8 = 2;
    const ELFDATA2LSB: u8 = 1;
    const E_PHOFF: usize = 0x20;
    const E_PHENTSIZE: usize = 0x36;
    const E_PHNUM: usize = 0x38;
    if elf.get(0..4)? != b"\x7fELF" || *elf.get(4)? != ELFCLASS64 || *elf.get(5)? != ELFDATA2LSB {
        return None;
    }
    let u16_at = |o: usize| Some(u16::from_le_bytes(elf.get(o..o + 2)?.try_into().ok()?));
    let u32_at = |o: usize| Some(u32::from_le_bytes(elf.get(o..o + 4)?.try_into().ok()?));
    let u64_at = |o: usize| Some(u64::from_le_bytes(elf.get(o..o + 8)?.try_into().ok()?));
    let phoff = u64_at(E_PHOFF)? as usize;
    let phentsize = u16_at(E_PHENTSIZE)? as usize;
    let phnum = u16_at(E_PHNUM)? as usize;
    Some((0..phnum).any(|i| u32_at(phoff + i * phentsize) == Some(PT_INTERP)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_interpreter_of_a_dynamic_program() {
        let sh = std::fs::read("/bin/sh").unwrap();
        assert_eq!(elf_has_interpreter(&sh), Some(true));
        assert_eq!(elf_has_interpreter(b"#!/bin/sh\n"), None);
        assert!(is_dynamically_linked(Path::new("/bin/sh")));
    }

    #[test]
    fn a_static_image_names_no_interpreter() {
        // A minimal ELF-64 header with one PT_LOAD (1) program header.
        let mut elf = vec![0u8; 0x40 + 0x38];
        elf[0..4].copy_from_slice(b"\x7fELF");
        elf[4] = 2;
        elf[5] = 1;
        elf[0x20..0x28].copy_from_slice(&0x40u64.to_le_bytes());
        elf[0x36..0x38].copy_from_slice(&0x38u16.to_le_bytes());
        elf[0x38..0x3a].copy_from_slice(&1u16.to_le_bytes());
        elf[0x40..0x44].copy_from_slice(&1u32.to_le_bytes());
        assert_eq!(elf_has_interpreter(&elf), Some(false));
        elf[0x40..0x44].copy_from_slice(&3u32.to_le_bytes());
        assert_eq!(elf_has_interpreter(&elf), Some(true));
    }

    #[test]
    fn looks_bare_names_up_in_path() {
        let found = find_program(OsStr::new("sh"), Some(OsStr::new("/nonexistent:/bin")));
        assert_eq!(found, Some(PathBuf::from("/bin/sh")));
        assert_eq!(find_program(OsStr::new("sh"), None), None);
        assert_eq!(
            find_program(OsStr::new("./x"), None),
            Some(PathBuf::from("./x"))
        );
    }
}
