//! What a binary says about its debug file: the GNU build id and the
//! `.gnu_debuglink`.
//!
//! In: an [`ElfReader`] (its `.note.gnu.build-id` and `.gnu_debuglink`
//! sections, within the section limit), or a bare note section such as
//! `/sys/kernel/notes`. Out: the build id's bytes; the debug link's file
//! name and CRC32. A damaged or cut note gives None, never a panic.

use super::ElfReader;

impl ElfReader<'_> {
    /// The GNU build id, from the `.note.gnu.build-id` section.
    pub fn build_id(&self) -> Option<Vec<u8>> {
        let (_, note) = self.section_data(".note.gnu.build-id").ok()??;
        gnu_build_id_from_notes(&note)
    }

    /// `.gnu_debuglink`: the debug file's name and its CRC32.
    pub fn debuglink(&self) -> Option<(Vec<u8>, u32)> {
        let (_, data) = self.section_data(".gnu_debuglink").ok()??;
        let len = data.iter().position(|&b| b == 0)?;
        let crc_at = (len + 1).next_multiple_of(4);
        let crc = u32::from_le_bytes(data.get(crc_at..crc_at + 4)?.try_into().ok()?);
        (len > 0).then(|| (data[..len].to_vec(), crc))
    }
}

/// Find the GNU build id (type 3, owner "GNU") in a raw ELF note section.
/// Written here because the notes file is a bare note section, not an ELF
/// file that blazesym's reader accepts.
pub fn gnu_build_id_from_notes(notes: &[u8]) -> Option<Vec<u8>> {
    let mut at = 0usize;
    let word = |i: usize| -> Option<usize> {
        Some(u32::from_ne_bytes(notes.get(i..i + 4)?.try_into().ok()?) as usize)
    };
    let align4 = |x: usize| x.checked_add(3).map(|v| v & !3);
    while at + 12 <= notes.len() {
        let (namesz, descsz, kind) = (word(at)?, word(at + 4)?, word(at + 8)?);
        let name_at = at + 12;
        let desc_at = name_at.checked_add(align4(namesz)?)?;
        let end = desc_at.checked_add(align4(descsz)?)?;
        if end > notes.len() {
            return None;
        }
        if kind == 3 && notes.get(name_at..name_at + namesz)? == b"GNU\0" {
            return Some(notes[desc_at..desc_at + descsz].to_vec());
        }
        at = end;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check that the build id note is found after another note, and that a
    /// truncated note section gives None instead of a panic.
    #[test]
    fn finds_gnu_build_id_in_notes() {
        let mut n = Vec::new();
        let note = |n: &mut Vec<u8>, name: &[u8], kind: u32, desc: &[u8]| {
            n.extend((name.len() as u32).to_ne_bytes());
            n.extend((desc.len() as u32).to_ne_bytes());
            n.extend(kind.to_ne_bytes());
            n.extend(name);
            n.resize(n.len().next_multiple_of(4), 0);
            n.extend(desc);
            n.resize(n.len().next_multiple_of(4), 0);
        };
        note(&mut n, b"Xen\0", 5, &[1, 2, 3]);
        note(&mut n, b"GNU\0", 3, &[0xab; 20]);
        assert_eq!(gnu_build_id_from_notes(&n), Some(vec![0xab; 20]));
        for cut in 0..n.len() {
            let _ = gnu_build_id_from_notes(&n[..cut]);
        }
        assert_eq!(gnu_build_id_from_notes(&n[..n.len() - 4]), None);
    }
}
