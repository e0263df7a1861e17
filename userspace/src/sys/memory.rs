//! Reading another process's memory: `process_vm_readv`, which neither
//! stops the process nor attaches to it (the kernel checks the same access
//! as ptrace's read mode, which root has). In: a pid and an address (or
//! many: one word at each). Out: the bytes, or the error (the process gone,
//! the page not mapped).

/// Fill `buf` from `pid`'s memory at `addr`: Ok only when every byte was read.
pub fn read_process(pid: u32, addr: u64, buf: &mut [u8]) -> std::io::Result<()> {
    if buf.is_empty() {
        return Ok(());
    }
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr() as *mut libc::c_void,
        iov_len: buf.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // SAFETY: one local iovec over `buf`, which we own mutably; the remote
    // one is only an address for the kernel to check.
    let n = unsafe { libc::process_vm_readv(pid as libc::pid_t, &local, 1, &remote, 1, 0) };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    if n as usize != buf.len() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "a partial read",
        ));
    }
    Ok(())
}

/// Addresses one `process_vm_readv` takes (the kernel's IOV_MAX).
const WORDS_PER_CALL: usize = 1024;
/// Calls one [`read_process_words`] makes at most.
const MAX_WORD_CALLS: usize = 16;

/// The 8-byte word at each of `addrs` in `pid`'s memory, into `out` (one
/// entry per address: None where it was not read), in one
/// `process_vm_readv` per 1,024 addresses. The kernel stops a call at the
/// first address it cannot read; the next call starts after that one, up to
/// [`MAX_WORD_CALLS`] calls: past them (addresses that are mostly
/// unreadable) the rest are not read.
pub fn read_process_words(pid: u32, addrs: &[u64], out: &mut Vec<Option<u64>>) {
    out.clear();
    out.resize(addrs.len(), None);
    let mut words = vec![0u64; WORDS_PER_CALL.min(addrs.len())];
    let mut local = Vec::with_capacity(words.len());
    let mut remote = Vec::with_capacity(words.len());
    let mut from = 0;
    for _ in 0..MAX_WORD_CALLS {
        if from >= addrs.len() {
            break;
        }
        let batch = &addrs[from..(from + WORDS_PER_CALL).min(addrs.len())];
        local.clear();
        local.extend(words[..batch.len()].iter_mut().map(|w| libc::iovec {
            iov_base: w as *mut u64 as *mut libc::c_void,
            iov_len: 8,
        }));
        remote.clear();
        remote.extend(batch.iter().map(|&a| libc::iovec {
            iov_base: a as *mut libc::c_void,
            iov_len: 8,
        }));
        // SAFETY: each local iovec covers one word of `words`, which we own
        // mutably and which outlives the call; the remote ones are only
        // addresses for the kernel to check.
        let n = unsafe {
            libc::process_vm_readv(
                pid as libc::pid_t,
                local.as_ptr(),
                local.len() as libc::c_ulong,
                remote.as_ptr(),
                remote.len() as libc::c_ulong,
                0,
            )
        };
        let whole = if n > 0 { n as usize / 8 } else { 0 };
        for i in 0..whole {
            out[from + i] = Some(words[i]);
        }
        // The one it stopped at is unreadable (or the process is gone:
        // then every call fails at once, and the calls run out).
        from += whole + usize::from(whole < batch.len());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_read_at_many_addresses_and_unreadable_ones_told() {
        let values: Vec<u64> = (0..2000u64).map(|i| i * 3 + 1).collect();
        let me = std::process::id();
        let mut addrs: Vec<u64> = values.iter().map(|v| v as *const u64 as u64).collect();
        let mut out = Vec::new();
        read_process_words(me, &addrs, &mut out);
        assert_eq!(out, values.iter().map(|&v| Some(v)).collect::<Vec<_>>());
        // Unmapped: not read, and the ones after it still are.
        addrs[5] = 8;
        addrs[1500] = 16;
        read_process_words(me, &addrs, &mut out);
        for (i, w) in out.iter().enumerate() {
            let unmapped = i == 5 || i == 1500;
            assert_eq!(*w, (!unmapped).then_some(values[i]), "word {i}");
        }
        // Mostly unreadable: the calls run out, nothing wrong is read.
        let bad = vec![8u64; 100];
        read_process_words(me, &bad, &mut out);
        assert_eq!(out.len(), 100);
        assert!(out.iter().all(Option::is_none));
        read_process_words(me, &[], &mut out);
        assert!(out.is_empty());
    }
}
